// The safetensors reader: real files (llama-260k, a file written by HF safetensors) against HF's
// own reading of them, the streaming writer, sharded indexes, and every malformed-file case.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "bestofn/model/safetensors.h"
#include "bestofn/model/safetensors_writer.h"
#include "bestofn/model/weights.h"
#include "test_util.h"

using namespace bestofn;
namespace fs = std::filesystem;

namespace {

// A safetensors image: 8-byte length, the header text as given, then `data_size` bytes.
std::vector<std::uint8_t> image(const std::string& header, std::size_t data_size, std::uint64_t len_override = 0) {
  std::vector<std::uint8_t> b(8 + header.size() + data_size, 0x5a);
  const std::uint64_t n = len_override ? len_override : header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

// Expects parse_safetensors to throw an Error whose message contains every one of `parts`.
void expect_rejected(const std::vector<std::uint8_t>& bytes, std::initializer_list<std::string> parts) {
  try {
    parse_safetensors(bytes.data(), bytes.size(), "bad.safetensors");
    ADD_FAILURE() << "accepted a malformed file";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

const std::string kTwo =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";

}  // namespace

TEST(Safetensors, ReadsLlama260kLikeHfSafetensors) {
  const auto path = test::require_shared("models/llama-260k/model.safetensors");
  const auto golden = nlohmann::json::parse(test::read_text(test::source_path("tests/data/llama260k_tensors.json")));
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), golden.size());
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  for (auto& [name, g] : golden.items()) {
    const TensorInfo* t = f.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, DType::F32) << name;
    EXPECT_EQ(t->shape, g["shape"].get<std::vector<std::int64_t>>()) << name;
    std::vector<float> v(static_cast<std::size_t>(t->numel()));
    std::memcpy(v.data(), f.data(*t), t->nbytes);
    double sum = 0;
    for (float x : v) sum += x;
    EXPECT_NEAR(sum, g["sum"].get<double>(), 1e-9 * std::max(1.0, std::fabs(sum))) << name;
    for (std::size_t i = 0; i < g["first"].size(); ++i) EXPECT_EQ(v[i], g["first"][i].get<float>()) << name;
    EXPECT_EQ(v.back(), g["last"].get<float>()) << name;
  }
}

TEST(Safetensors, ReadsAFileWrittenByHfSafetensors) {
  const auto golden = nlohmann::json::parse(test::read_text(test::source_path("tests/data/hf_writer.json")));
  SafetensorsFile f(test::source_path("tests/data/hf_writer.safetensors"));
  EXPECT_EQ(f.header().metadata.at("note"), "fixture");
  ASSERT_EQ(f.tensors().size(), golden.size());
  for (auto& [name, g] : golden.items()) {
    const TensorInfo* t = f.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, g["shape"].get<std::vector<std::int64_t>>()) << name;
    Tensor view{name, t->dtype, t->shape, f.data(*t), t->nbytes};
    for (std::size_t i = 0; i < g["values"].size(); ++i) {
      const double want = g["values"][i].get<double>();
      const double got = t->dtype == DType::I64 ? [&] { std::int64_t v; std::memcpy(&v, f.data(*t) + 8 * i, 8); return static_cast<double>(v); }()
                                                 : static_cast<double>(view.at(static_cast<std::int64_t>(i)));
      EXPECT_EQ(got, want) << name << "[" << i << "]";
    }
  }
}

TEST(SafetensorsWriter, RoundTripsChunkedWritesAndRemovesUnfinishedFiles) {
  test::TempDir dir;
  const auto a = test::random_floats(1000, 3);
  std::vector<std::uint8_t> b(7);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 37);
  {
    SafetensorsWriter w(dir / "x.safetensors", {{"a", DType::F32, {10, 100}}, {"empty", DType::F32, {0}}, {"b", DType::U8, {7}}},
                        {{"k", "v"}});
    w.write(a.data(), 1000);  // bytes, in two chunks
    w.write(reinterpret_cast<const std::uint8_t*>(a.data()) + 1000, 3000);
    w.write(b.data(), b.size());
    w.finish();
  }
  SafetensorsFile f(dir / "x.safetensors");
  EXPECT_EQ(f.header().header_len % 8, 0u);
  EXPECT_EQ(f.header().metadata.at("k"), "v");
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_EQ(std::memcmp(f.data(*f.find("a")), a.data(), 4000), 0);
  EXPECT_EQ(std::memcmp(f.data(*f.find("b")), b.data(), 7), 0);
  EXPECT_EQ(f.find("empty")->nbytes, 0u);
  {
    SafetensorsWriter w(dir / "y.safetensors", {{"a", DType::F32, {4}}});
    w.write(a.data(), 4);
    EXPECT_THROW(w.write(a.data(), 16), Error);  // more than the tensor holds
    EXPECT_THROW(w.finish(), Error);              // not written in full
  }
  EXPECT_FALSE(fs::exists(dir / "y.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "y.safetensors.partial"));
}

TEST(SafetensorsMalformed, RejectsTooShortAndAbsurdHeaderLengths) {
  expect_rejected({1, 2, 3}, {"too short"});
  expect_rejected(image(kTwo, 16, 1ull << 60), {"absurd header length"});
  expect_rejected(image(kTwo, 16, kTwo.size() + 100), {"exceeds the file size"});
  expect_rejected(image("", 0), {"does not start with '{'"});
}

TEST(SafetensorsMalformed, RejectsTruncatedData) {
  auto b = image(kTwo, 16);
  b.resize(b.size() - 3);
  expect_rejected(b, {"tensor 'b'", "outside the data section", "truncated"});
}

TEST(SafetensorsMalformed, RejectsBadJsonAndWrongTypes) {
  expect_rejected(image("{\"a\": {\"dtype\": \"F32\",", 0), {"not valid JSON"});
  expect_rejected(image("[1,2]", 0), {"does not start with '{'"});
  expect_rejected(image(R"({"a": 1})", 0), {"tensor 'a'", "must be an object"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), {"tensor 'a'", "non-negative"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), {"tensor 'a'", "data_offsets"});
  expect_rejected(image(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8), {"tensor 'a'", "missing \"shape\""});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"x":1}})", 8), {"__metadata__"});
}

TEST(SafetensorsMalformed, RejectsUnknownDtype) {
  expect_rejected(image(R"({"w":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", 8), {"tensor 'w'", "unknown dtype 'F12'"});
}

TEST(SafetensorsMalformed, RejectsSizeMismatch) {
  expect_rejected(image(R"({"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})", 8),
                  {"tensor 'w'", "[3, 2] x BF16 = 12 bytes", "span 8"});
}

TEST(SafetensorsMalformed, RejectsOverlapsGapsAndOutOfRangeOffsets) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                  {"tensor 'b'", "overlapping tensor 'a'"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), {"tensor 'a'", "gap"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12), {"cover 8"});
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 12), {"tensor 'a'", "end before begin"});
  expect_rejected(image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551612,18446744073709551616]}})", 4),
                  {"tensor 'a'"});
}

TEST(SafetensorsMalformed, RejectsDuplicateNames) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                  {"tensor 'a' appears twice"});
}

TEST(SafetensorsMalformed, RejectsHugeShapesWithoutOverflow) {
  expect_rejected(image(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8), {"tensor 'a'", "too large"});
}

TEST(ModelFiles, ReadsShardedIndexAndRejectsBrokenOnes) {
  test::TempDir dir;
  const auto a = test::random_floats(8, 5);
  for (const char* name : {"s1.safetensors", "s2.safetensors"}) {
    SafetensorsWriter w(dir / name, {{std::string(name) + ".t", DType::F32, {8}}});
    w.write(a.data(), 32);
    w.finish();
  }
  auto index = [&](const std::string& map) { test::write_text(dir / "model.safetensors.index.json", R"({"metadata":{},"weight_map":)" + map + "}"); };
  index(R"({"s1.safetensors.t":"s1.safetensors","s2.safetensors.t":"s2.safetensors"})");
  ModelFiles files(dir.path());
  EXPECT_EQ(files.shards().size(), 2u);
  EXPECT_EQ(files.tensor_count(), 2u);
  ASSERT_NE(files.find("s2.safetensors.t").info, nullptr);
  EXPECT_EQ(std::memcmp(files.find("s2.safetensors.t").data, a.data(), 32), 0);

  auto rejected = [&](const std::string& part) {
    try {
      ModelFiles bad(dir.path());
      ADD_FAILURE() << "accepted a broken index (" << part << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  index(R"({"x":"s3.safetensors"})");
  rejected("missing shard 's3.safetensors'");
  index(R"({"nope":"s1.safetensors"})");
  rejected("tensor 'nope'");
  index(R"({"x":"../s1.safetensors"})");
  rejected("plain file name");
  index(R"({"s1.safetensors.t":"s1.safetensors","s2.safetensors.t":"s2.safetensors","extra":"s1.safetensors"})");
  rejected("tensor 'extra'");
  test::write_text(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  rejected("model.safetensors.index.json: not valid JSON");
}

TEST(ModelFiles, NamesTheDirectoryWhenThereIsNoCheckpoint) {
  test::TempDir dir;
  try {
    ModelFiles f(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos);
  }
  EXPECT_THROW(ModelFiles(dir / "does-not-exist"), Error);
}
