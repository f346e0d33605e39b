// Weights: llama-260k (values against HF safetensors' reading), synthetic round trips in every
// dtype, online FP8 quantization, and the model-level malformed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "bestofn/model/safetensors.h"
#include "bestofn/model/run_make_synthetic.h"
#include "bestofn/model/safetensors_writer.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/model/weights.h"
#include "test_util.h"

using namespace bestofn;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path synth(const test::TempDir& dir, const std::string& name, const std::string& dtype, std::uint64_t seed = 1,
               const std::string& scheme = "channel") {
  SyntheticOptions o;
  o.shape = "tiny";
  o.dtype = dtype;
  o.seed = seed;
  o.fp8_scheme = scheme;
  o.out = dir / name;
  make_synthetic(o);
  return o.out;
}

// Runs f and expects an Error containing every part.
template <typename F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

// Dequantized value of element (r, c) of a linear layer.
float dequant(const Linear& l, std::int64_t r, std::int64_t c) {
  const float v = l.weight.at(r * l.in_features() + c);
  if (!l.is_fp8()) return v;
  return v * l.weight_scale[l.weight_scale.size() == 1 ? 0 : static_cast<std::size_t>(r)];
}

void expect_config_shapes(const Weights& w) {
  const ModelConfig& c = w.config;
  ASSERT_EQ(w.layers.size(), static_cast<std::size_t>(c.n_layers));
  for (const auto& l : w.layers) {
    EXPECT_EQ(l.wq.weight.shape, (std::vector<std::int64_t>{c.q_dim(), c.dim}));
    EXPECT_EQ(l.wk.weight.shape, (std::vector<std::int64_t>{c.kv_dim(), c.dim}));
    EXPECT_EQ(l.wo.weight.shape, (std::vector<std::int64_t>{c.dim, c.q_dim()}));
    EXPECT_EQ(l.w_down.weight.shape, (std::vector<std::int64_t>{c.dim, c.hidden_dim}));
  }
  EXPECT_EQ(w.lm_head.weight.shape, (std::vector<std::int64_t>{c.vocab_size, c.dim}));
}

}  // namespace

TEST(Weights, Llama260kLoadsWithTiedLmHead) {
  const Weights w = load_model(test::require_shared("models/llama-260k"));
  const auto golden = json::parse(test::read_text(test::source_path("tests/data/llama260k_tensors.json")));
  expect_config_shapes(w);
  EXPECT_EQ(w.quantization, "none");
  EXPECT_EQ(w.lm_head.weight.data, w.token_embedding.data);  // tied: the embedding's bytes
  EXPECT_TRUE(w.unused_tensors.empty());                       // lm_head.weight is benign when tied
  const auto& g = golden["model.layers.3.mlp.up_proj.weight"]["first"];
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.layers[3].w_up.weight.at(i), g[i].get<float>());
  // 260K: llama2.c's 264,128 floats less the 4,096 of its freq_cis tables (shared README).
  EXPECT_EQ(w.parameter_count(), 260032);
  EXPECT_EQ(w.kv_bytes_per_token(), 2u * 5 * 4 * 8 * 2);
}

TEST(Weights, SyntheticModelsRoundTripInEveryDtype) {
  test::TempDir dir;
  const Weights f32 = load_model(synth(dir, "f32", "f32"));
  const Weights bf16 = load_model(synth(dir, "bf16", "bf16"));
  const Weights fp8c = load_model(synth(dir, "fp8c", "fp8"));
  const Weights fp8t = load_model(synth(dir, "fp8t", "fp8", 1, "tensor"));
  for (const Weights* w : {&f32, &bf16, &fp8c, &fp8t}) {
    expect_config_shapes(*w);
    EXPECT_TRUE(w->unused_tensors.empty());
    EXPECT_EQ(w->config.rope_scaling.type, RopeScalingType::Llama3);
    EXPECT_LT(w->config.n_kv_heads, w->config.n_heads);  // GQA
  }
  EXPECT_EQ(f32.token_embedding.dtype, DType::F32);
  EXPECT_EQ(bf16.layers[0].wq.weight.dtype, DType::BF16);
  EXPECT_EQ(fp8c.quantization, "fp8-compressed-tensors");
  EXPECT_EQ(fp8c.layers[0].wq.weight.dtype, DType::F8_E4M3);
  EXPECT_EQ(fp8c.layers[0].wq.weight_scale.size(), static_cast<std::size_t>(fp8c.config.q_dim()));
  EXPECT_FALSE(fp8c.layers[0].wq.input_scale);
  EXPECT_EQ(fp8c.lm_head.weight.dtype, DType::BF16);  // ignored: ["lm_head"]
  EXPECT_EQ(fp8t.layers[0].wq.weight_scale.size(), 1u);
  ASSERT_TRUE(fp8t.layers[2].w_down.input_scale);
  EXPECT_FLOAT_EQ(*fp8t.layers[2].w_down.input_scale, 8.0f / 448.0f);

  // The same seed gives the same weights in every dtype, up to each dtype's rounding.
  const auto& a = f32.layers[1].w_gate;
  for (std::int64_t r = 0; r < a.out_features(); r += 7) {
    for (std::int64_t c = 0; c < a.in_features(); c += 5) {
      const float x = dequant(a, r, c);
      EXPECT_EQ(dequant(bf16.layers[1].w_gate, r, c), bf16_to_float(bf16_from_float(x)));
      EXPECT_NEAR(dequant(fp8c.layers[1].w_gate, r, c), x, std::fabs(x) / 16 + 1e-4f);
      EXPECT_NEAR(dequant(fp8t.layers[1].w_gate, r, c), x, std::fabs(x) / 16 + 1e-3f);
    }
  }
  // Realistic scale: std ~ 1/sqrt(in_features).
  double ss = 0;
  for (std::int64_t i = 0; i < a.weight.numel(); ++i) ss += a.weight.at(i) * a.weight.at(i);
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(a.weight.numel())), 1.0 / std::sqrt(a.in_features()), 0.01);
}

TEST(Weights, SyntheticIsDeterministicPerSeed) {
  test::TempDir dir;
  const auto a = test::read_bytes(synth(dir, "a", "fp8", 7) / "model.safetensors");
  const auto b = test::read_bytes(synth(dir, "b", "fp8", 7) / "model.safetensors");
  const auto c = test::read_bytes(synth(dir, "c", "fp8", 8) / "model.safetensors");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Weights, OnlineFp8QuantizationIsPerChannelAmaxOver448) {
  test::TempDir dir;
  const fs::path p = synth(dir, "bf16", "bf16", 3);
  const Weights ref = load_model(p);
  LoadOptions o;
  o.quantize_fp8 = true;
  const Weights q = load_model(p, o);
  EXPECT_EQ(q.quantization, "fp8-online");
  EXPECT_EQ(q.lm_head.weight.dtype, DType::BF16);  // lm_head stays as it is
  const Linear& src = ref.layers[2].wo;
  const Linear& dst = q.layers[2].wo;
  ASSERT_TRUE(dst.is_fp8());
  ASSERT_EQ(dst.weight_scale.size(), static_cast<std::size_t>(src.out_features()));
  EXPECT_FALSE(dst.input_scale);
  for (std::int64_t r = 0; r < src.out_features(); ++r) {
    float amax = 0;
    for (std::int64_t c = 0; c < src.in_features(); ++c) amax = std::max(amax, std::fabs(src.weight.at(r * src.in_features() + c)));
    ASSERT_EQ(dst.weight_scale[static_cast<std::size_t>(r)], amax / 448.0f) << "row " << r;
    for (std::int64_t c = 0; c < src.in_features(); ++c) {
      const float x = src.weight.at(r * src.in_features() + c);
      ASSERT_EQ(dst.weight.data[r * src.in_features() + c], fp8_e4m3_from_float(x / (amax / 448.0f))) << r << "," << c;
    }
  }
  EXPECT_LT(q.decode_bytes_per_step(), ref.decode_bytes_per_step());
}

// --quantize-lm-head: the lm_head alone (an FP8 checkpoint's BF16 one; a tied one, whose
// embedding keeps its F32 bytes), per output channel as above; the bytes a step reads drop by
// the lm_head's BF16 (or F32) minus FP8 size, the scales included.
TEST(Weights, LmHeadQuantizationIsPerChannelAndLeavesTheEmbedding) {
  test::TempDir dir;
  const fs::path p = synth(dir, "fp8", "fp8", 4);
  LoadOptions o;
  o.quantize_lm_head_fp8 = true;
  const Weights ref = load_model(p), q = load_model(p, o);
  EXPECT_EQ(q.quantization, ref.quantization + "+fp8-lm-head");
  const Linear& src = ref.lm_head;
  const Linear& dst = q.lm_head;
  ASSERT_EQ(src.weight.dtype, DType::BF16);
  ASSERT_TRUE(dst.is_fp8());
  ASSERT_EQ(dst.weight_scale.size(), static_cast<std::size_t>(src.out_features()));
  EXPECT_FALSE(dst.input_scale);
  const std::int64_t in = src.in_features();
  for (std::int64_t r = 0; r < src.out_features(); r += 37) {
    float amax = 0;
    for (std::int64_t c = 0; c < in; ++c) amax = std::max(amax, std::fabs(src.weight.at(r * in + c)));
    ASSERT_EQ(dst.weight_scale[static_cast<std::size_t>(r)], amax / 448.0f) << "row " << r;
    for (std::int64_t c = 0; c < in; ++c)
      ASSERT_EQ(dst.weight.data[r * in + c], fp8_e4m3_from_float(src.weight.at(r * in + c) / (amax / 448.0f))) << r << "," << c;
  }
  const auto n = static_cast<std::size_t>(src.out_features() * in);
  EXPECT_EQ(ref.decode_bytes_per_step() - q.decode_bytes_per_step(), 2 * n - (n + 4 * static_cast<std::size_t>(src.out_features())));
  EXPECT_TRUE(q.layers[1].wq.is_fp8());

  // Tied (llama-260k, F32): the embedding keeps its bytes, the lm_head gets its own.
  const Weights tied = load_model(test::require_shared("models/llama-260k"), o);
  ASSERT_TRUE(tied.config.tie_word_embeddings);
  EXPECT_EQ(tied.token_embedding.dtype, DType::F32);
  ASSERT_TRUE(tied.lm_head.is_fp8());
  EXPECT_NE(tied.lm_head.weight.data, tied.token_embedding.data);
  EXPECT_EQ(tied.lm_head.weight_scale.size(), static_cast<std::size_t>(tied.config.vocab_size));
}

TEST(Weights, MisalignedTensorsAreCopiedAndReadCorrectly) {
  // A 3-byte tensor first shifts every later tensor off its natural alignment.
  test::TempDir dir;
  const fs::path good = synth(dir, "good", "f32", 5);
  const fs::path bad = dir / "shifted";
  fs::create_directory(bad);
  fs::copy_file(good / "config.json", bad / "config.json");
  {
    SafetensorsFile src(good / "model.safetensors");
    std::vector<TensorSpec> specs = {{"aaa.pad", DType::U8, {3}}};
    for (const auto& t : src.tensors()) specs.push_back({t.name, t.dtype, t.shape});
    SafetensorsWriter w(bad / "model.safetensors", specs);
    const std::uint8_t pad[3] = {1, 2, 3};
    w.write(pad, 3);
    for (const auto& t : src.tensors()) w.write(src.data(t), t.nbytes);
    w.finish();
  }
  const Weights a = load_model(good), b = load_model(bad);
  EXPECT_EQ(b.unused_tensors, std::vector<std::string>{"aaa.pad"});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.layers[0].wq.weight.data) % 4, 0u);
  EXPECT_EQ(std::memcmp(a.layers[0].wq.weight.data, b.layers[0].wq.weight.data, a.layers[0].wq.weight.nbytes), 0);
}

TEST(WeightsMalformed, ShapeContradictingTheConfigNamesTensorAndShapes) {
  test::TempDir dir;
  const fs::path p = synth(dir, "m", "bf16");
  json cfg = json::parse(test::read_text(p / "config.json"));
  cfg["intermediate_size"] = 160;
  test::write_text(p / "config.json", cfg.dump());
  expect_error([&] { load_model(p); },
               {"model.safetensors", "tensor 'model.layers.0.mlp.gate_proj.weight'", "expected shape [160, 64]", "found [176, 64]"});
}

TEST(WeightsMalformed, MissingTensorIsNamed) {
  test::TempDir dir;
  const fs::path p = synth(dir, "m", "bf16");
  json cfg = json::parse(test::read_text(p / "config.json"));
  cfg["num_hidden_layers"] = 4;
  test::write_text(p / "config.json", cfg.dump());
  expect_error([&] { load_model(p); }, {"missing tensor 'model.layers.3.input_layernorm.weight'", "expected shape [64]"});
}

TEST(WeightsMalformed, Fp8WithoutQuantizationConfigOrScales) {
  test::TempDir dir;
  const fs::path p = synth(dir, "m", "fp8");
  json cfg = json::parse(test::read_text(p / "config.json"));
  json no_quant = cfg;
  no_quant.erase("quantization_config");
  test::write_text(p / "config.json", no_quant.dump());
  expect_error([&] { load_model(p); }, {"q_proj.weight'", "dtype F8_E4M3 is not supported here"});
  // Per-tensor declared, per-channel stored.
  cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  test::write_text(p / "config.json", cfg.dump());
  expect_error([&] { load_model(p); }, {"q_proj.weight_scale'", "a single scale", "found [64, 1]"});
  // Static activations declared, no input_scale stored.
  cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false}};
  test::write_text(p / "config.json", cfg.dump());
  expect_error([&] { load_model(p); }, {"missing tensor 'model.layers.0.self_attn.q_proj.input_scale'"});
}

TEST(WeightsMalformed, TruncatedShardIsNamed) {
  test::TempDir dir;
  const fs::path p = synth(dir, "m", "f32");
  fs::resize_file(p / "model.safetensors", fs::file_size(p / "model.safetensors") - 100);
  expect_error([&] { load_model(p); }, {"model.safetensors", "truncated"});
}

namespace {
// The bytes of tensor `name` in a single-file safetensors checkpoint, read and written in place
// (the format: an 8-byte little-endian header length, the JSON header, then the data).
struct TensorBytes {
  std::size_t begin = 0, end = 0;
};
TensorBytes tensor_bytes(const fs::path& file, const std::string& name) {
  const std::string all = test::read_text(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(all[static_cast<std::size_t>(i)]);
  const json h = json::parse(all.substr(8, n));
  const auto off = h.at(name).at("data_offsets");
  return {8 + n + off[0].get<std::size_t>(), 8 + n + off[1].get<std::size_t>()};
}
void write_bytes(const fs::path& file, std::size_t at, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
}  // namespace

// E4M3FN's NaN codes (0x7f, 0xff; it has no infinities) would be read as finite weights by the
// GEMMs: a checkpoint holding one is refused, naming the tensor and the element. Every finite code
// (the largest, +-448 = 0x7e / 0xfe, among them) loads.
TEST(WeightsMalformed, Fp8NanCodesAreRefusedAndEveryFiniteCodeLoads) {
  test::TempDir dir;
  const fs::path p = synth(dir, "m", "fp8");
  const fs::path file = p / "model.safetensors";
  const std::string down = "model.layers.1.mlp.down_proj.weight", q = "model.layers.0.self_attn.q_proj.weight";
  const TensorBytes d = tensor_bytes(file, down), qb = tensor_bytes(file, q);
  std::string finite;
  for (std::size_t i = 0; i < d.end - d.begin; ++i) {
    const auto c = static_cast<unsigned char>(i % 256);
    finite += static_cast<char>((c & 0x7f) == 0x7f ? c - 1 : c);
  }
  write_bytes(file, d.begin, finite);
  EXPECT_NO_THROW(load_model(p));
  write_bytes(file, d.begin + 77, std::string(1, '\xff'));
  expect_error([&] { load_model(p); }, {"model.safetensors", down, "element 77", "NaN (code 0xff)"});
  write_bytes(file, d.begin + 77, std::string(1, '\x7e'));
  write_bytes(file, qb.end - 1, std::string(1, '\x7f'));  // the last element
  expect_error([&] { load_model(p); }, {q, "element " + std::to_string(qb.end - qb.begin - 1), "NaN (code 0x7f)"});
}

// make-synthetic's --max-shard-size: bytes, or powers of 1000 as huggingface_hub's max_shard_size;
// what is not a positive size within 64 bits is an Error naming the flag.
TEST(Weights, MaxShardSizeIsBytesOrPowersOf1000) {
  EXPECT_EQ(parse_size("1000000"), 1000000u);
  EXPECT_EQ(parse_size("64kB"), 64000u);
  EXPECT_EQ(parse_size("64KB"), 64000u);
  EXPECT_EQ(parse_size("500MB"), 500000000u);
  EXPECT_EQ(parse_size("5GB"), 5000000000u);
  EXPECT_EQ(parse_size("7B"), 7u);
  for (const char* bad : {"", "-5", " 5", "5TB", "0", "GB", "99999999999999999999GB"}) {
    try {
      parse_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--max-shard-size: ", 0), 0u) << e.what();
    }
  }
}

namespace {

// A copy of the model directory src (config.json and one model.safetensors) with its tensors
// passed through edit first: each a spec and its bytes, to drop, rename, reshape or retype.
struct EditTensor {
  TensorSpec spec;
  std::vector<std::uint8_t> bytes;
};
fs::path edited_copy(const fs::path& src, const fs::path& out, const std::function<void(std::vector<EditTensor>&)>& edit) {
  fs::create_directories(out);
  fs::copy_file(src / "config.json", out / "config.json");
  const ModelFiles files(src);
  std::vector<EditTensor> tensors;
  for (const TensorView& v : files.all())
    tensors.push_back({{v.info->name, v.info->dtype, v.info->shape}, std::vector<std::uint8_t>(v.data, v.data + v.info->nbytes)});
  edit(tensors);
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back(t.spec);
  SafetensorsWriter w(out / "model.safetensors", specs);
  for (const auto& t : tensors) w.write(t.bytes.data(), t.bytes.size());
  w.finish();
  return out;
}

EditTensor* find_tensor(std::vector<EditTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.spec.name == name) return &t;
  ADD_FAILURE() << name << " not in the checkpoint";
  return nullptr;
}

fs::path engine_model(const std::string& name) { return test::source_path("tests/data/engine/" + name); }

}  // namespace

TEST(Weights, Qwen2BiasesAndQwen3NormsAreLoaded) {
  const Weights q2 = load_model(engine_model("tiny-qwen2"));
  const ModelFiles f2(engine_model("tiny-qwen2"));
  for (const auto& [linear, name] : {std::pair{&q2.layers[1].wq, "q_proj"}, {&q2.layers[1].wk, "k_proj"}, {&q2.layers[1].wv, "v_proj"}}) {
    const TensorView b = f2.find(std::string("model.layers.1.self_attn.") + name + ".bias");
    ASSERT_NE(b.info, nullptr);
    ASSERT_EQ(linear->bias.size(), static_cast<std::size_t>(b.info->numel()));
    for (std::size_t i = 0; i < linear->bias.size(); ++i) {
      float v;
      std::memcpy(&v, b.data + 4 * i, 4);
      EXPECT_EQ(linear->bias[i], v) << name << " " << i;
    }
  }
  EXPECT_TRUE(q2.layers[0].wo.bias.empty());
  EXPECT_TRUE(q2.layers[0].w_gate.bias.empty());
  EXPECT_EQ(q2.layers[0].q_norm.data, nullptr);
  EXPECT_TRUE(q2.unused_tensors.empty());
  // BF16 biases widen exactly; online FP8 keeps them in fp32.
  const Weights bf = load_model(engine_model("tiny-qwen2-bf16"));
  for (std::size_t i = 0; i < bf.layers[0].wk.bias.size(); ++i)
    EXPECT_EQ(bf.layers[0].wk.bias[i], bf16_to_float(bf16_from_float(q2.layers[0].wk.bias[i])));
  LoadOptions fp8;
  fp8.quantize_fp8 = true;
  EXPECT_EQ(load_model(engine_model("tiny-qwen2"), fp8).layers[0].wv.bias, q2.layers[0].wv.bias);

  const Weights q3 = load_model(engine_model("tiny-qwen3"));
  EXPECT_EQ(q3.layers[1].q_norm.shape, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(q3.layers[1].k_norm.name, "model.layers.1.self_attn.k_norm.weight");
  EXPECT_TRUE(q3.layers[0].wq.bias.empty());
  EXPECT_TRUE(q3.unused_tensors.empty());
}

// Tied with the matrix only as lm_head.weight: that tensor is both (as transformers loads it);
// with both names present, model.embed_tokens.weight is both and lm_head.weight goes unused (as before).
TEST(Weights, TiedMatrixStoredUnderEitherName) {
  const Weights w = load_model(engine_model("tiny-tied-as-lm-head"));
  EXPECT_EQ(w.token_embedding.name, "lm_head.weight");
  EXPECT_EQ(w.lm_head.weight.data, w.token_embedding.data);
  EXPECT_TRUE(w.unused_tensors.empty());
  test::TempDir dir;
  const fs::path both = edited_copy(engine_model("tiny-tied-as-lm-head"), dir / "both", [](std::vector<EditTensor>& ts) {
    EditTensor copy = *find_tensor(ts, "lm_head.weight");
    copy.spec.name = "model.embed_tokens.weight";
    ts.push_back(copy);
    std::fill(find_tensor(ts, "lm_head.weight")->bytes.begin(), find_tensor(ts, "lm_head.weight")->bytes.end(), 0);
  });
  const Weights b = load_model(both);
  EXPECT_EQ(b.token_embedding.name, "model.embed_tokens.weight");
  EXPECT_EQ(b.lm_head.weight.data, b.token_embedding.data);
  EXPECT_EQ(b.token_embedding.at(5), w.token_embedding.at(5));
  EXPECT_TRUE(b.unused_tensors.empty());
  // Not tied: lm_head.weight alone is no embedding.
  json cfg = json::parse(test::read_text(engine_model("tiny-tied-as-lm-head") / "config.json"));
  cfg["tie_word_embeddings"] = false;
  fs::create_directories(dir / "untied");
  test::write_text(dir / "untied" / "config.json", cfg.dump());
  fs::copy_file(engine_model("tiny-tied-as-lm-head") / "model.safetensors", dir / "untied" / "model.safetensors");
  expect_error([&] { load_model(dir / "untied"); }, {"missing tensor 'model.embed_tokens.weight'"});
}

TEST(WeightsMalformed, BiasAndNormTensorsNameTheFileAndTheTensor) {
  test::TempDir dir;
  int n = 0;
  auto expect_refused = [&](const std::string& model, const std::function<void(std::vector<EditTensor>&)>& edit,
                            std::initializer_list<std::string> parts) {
    const fs::path p = edited_copy(engine_model(model), dir / std::to_string(n++), edit);
    expect_error([&] { load_model(p); }, parts);
  };
  const std::string qb = "model.layers.1.self_attn.q_proj.bias", kn = "model.layers.0.self_attn.k_norm.weight";
  expect_refused("tiny-qwen2", [&](auto& ts) { std::erase_if(ts, [&](const EditTensor& t) { return t.spec.name == qb; }); },
                 {"missing tensor '" + qb + "' (expected shape [32])"});
  expect_refused("tiny-qwen2", [&](auto& ts) { find_tensor(ts, qb)->spec.shape = {16, 2}; },
                 {"model.safetensors", "tensor '" + qb + "': expected shape [32] from config.json, found [16, 2]"});
  expect_refused("tiny-qwen2",
                 [&](auto& ts) {
                   EditTensor* t = find_tensor(ts, qb);
                   t->spec.dtype = DType::I32;
                 },
                 {"model.safetensors", "tensor '" + qb + "': dtype I32 is not supported here; expected F32/BF16/F16"});
  expect_refused("tiny-qwen2",
                 [&](auto& ts) {
                   const float inf = INFINITY;
                   std::memcpy(find_tensor(ts, qb)->bytes.data() + 12, &inf, 4);
                 },
                 {"model.safetensors", "tensor '" + qb + "': element 3 is not finite"});
  expect_refused("tiny-qwen3", [&](auto& ts) { std::erase_if(ts, [&](const EditTensor& t) { return t.spec.name == kn; }); },
                 {"missing tensor '" + kn + "' (expected shape [16])"});
  expect_refused("tiny-qwen3",
                 [&](auto& ts) {
                   EditTensor* t = find_tensor(ts, kn);
                   t->spec.shape = {8};
                   t->bytes.resize(32);
                 },
                 {"model.safetensors", "tensor '" + kn + "': expected shape [16] from config.json, found [8]"});
}

// make-synthetic with a Qwen config.json as the shape: biases and q/k norms written (BF16 beside
// the FP8 weights of a compressed-tensors checkpoint), and loaded back.
TEST(Weights, SyntheticQwenCheckpointsCarryBiasesAndNorms) {
  test::TempDir dir;
  for (const char* model : {"tiny-qwen2", "tiny-qwen3"}) {
    SyntheticOptions o;
    o.shape = (engine_model(model) / "config.json").string();
    o.dtype = "fp8";
    o.seed = 3;
    o.out = dir / model;
    make_synthetic(o);
    const Weights w = load_model(o.out);
    EXPECT_EQ(w.quantization, "fp8-compressed-tensors");
    EXPECT_TRUE(w.layers[1].wk.is_fp8());
    EXPECT_TRUE(w.unused_tensors.empty()) << model;
    if (w.config.qkv_bias) {
      EXPECT_EQ(w.config.architecture, "Qwen2ForCausalLM");
      ASSERT_EQ(w.layers[1].wk.bias.size(), static_cast<std::size_t>(w.config.kv_dim()));
      EXPECT_NE(w.layers[1].wk.bias[0], 0.0f);
    } else {
      EXPECT_EQ(w.config.architecture, "Qwen3ForCausalLM");
      EXPECT_EQ(w.layers[1].q_norm.dtype, DType::BF16);
      EXPECT_EQ(w.layers[1].q_norm.shape, (std::vector<std::int64_t>{16}));
    }
  }
}
