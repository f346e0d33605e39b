#pragma once
// What the CLI tests (tests/test_cli_<command>.cpp) share: running the built bestofn and checking
// its one-line errors, small synthetic models, and edits of their files.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "bestofn/model/safetensors.h"
#include "bestofn/util/numeric.h"
#include "bestofn/util/text_file.h"
#include "bestofn/util/utf8.h"
#include "test_util.h"

namespace fs = std::filesystem;
using bestofn::test::run_cli;
using nlohmann::json;

// An error run: the expected exit code, and one line on stderr containing every part.
inline void expect_failure(const std::vector<std::string>& args, int code, std::initializer_list<std::string> parts) {
  const auto r = run_cli(args);
  std::string cmd;
  for (const auto& a : args) cmd += a + " ";
  EXPECT_EQ(r.exit_code, code) << cmd << "\nstderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << cmd << "\nstdout: " << r.out;
  ASSERT_FALSE(r.err.empty()) << cmd;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << cmd << ": not one line: " << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << cmd << ": '" << p << "' not in: " << r.err;
}

inline std::string synth(const bestofn::test::TempDir& dir, const std::string& name, const std::string& dtype) {
  const std::string out = (dir / name).string();
  const auto r = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", dtype, "--seed", "3", "--out", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// Rewrites the JSON header of a safetensors file through `edit`, keeping the data section.
template <typename Edit>
void rewrite_header(const fs::path& file, Edit edit) {
  auto bytes = bestofn::test::read_bytes(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  edit(h);
  const std::string text = h.dump();
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  out.append(reinterpret_cast<const char*>(bytes.data()) + 8 + n, bytes.size() - 8 - n);
  bestofn::test::write_text(file, out);
}

inline std::string synth_with_tokenizer(const bestofn::test::TempDir& dir) {
  const std::string out = (dir / "m").string();
  const auto r = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", "fp8", "--seed", "1", "--out", out, "--tokenizer",
                          bestofn::test::require_shared("tokenizers/llama3").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

inline std::vector<json> jsonl(const std::string& text) {
  std::vector<json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

// Fills tensor `name` of a safetensors file with NaN (F32 or BF16), the header unchanged.
inline void poison_tensor(const fs::path& file, const std::string& name) {
  auto bytes = bestofn::test::read_bytes(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  const json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  const auto off = h.at(name).at("data_offsets").get<std::vector<std::uint64_t>>();
  const std::string dtype = h.at(name).at("dtype").get<std::string>();
  ASSERT_TRUE(dtype == "F32" || dtype == "BF16") << dtype;
  const std::vector<std::uint8_t> nan = dtype == "F32" ? std::vector<std::uint8_t>{0x00, 0x00, 0xc0, 0x7f}
                                                       : std::vector<std::uint8_t>{0xc0, 0x7f};
  for (std::uint64_t b = off[0]; b < off[1]; ++b) bytes[8 + n + b] = nan[(b - off[0]) % nan.size()];
  bestofn::test::write_bytes(file, bytes);
}

// The files in dir whose names start with prefix.
inline std::vector<std::string> files_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Waits (up to a minute) until a partial file, or a partial directory with a file in it, whose
// name starts with prefix is in dir.
inline bool wait_for_partial(const fs::path& dir, const std::string& prefix) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& name : files_starting(dir, prefix)) {
      std::error_code ec;
      const fs::path p = dir / name;
      if (name.find(".partial") != std::string::npos && (!fs::is_directory(p, ec) || !fs::is_empty(p, ec))) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// A samples file with the given completion for every problem of a dataset (`field` of the raw
// record, or a fixed text).
inline std::string samples_file(const bestofn::test::TempDir& dir, const std::string& name, const std::vector<json>& records,
                                const std::function<json(const json&)>& make) {
  std::string text;
  for (const auto& r : records) text += make(r).dump() + "\n";
  bestofn::test::write_text(dir / name, text);
  return (dir / name).string();
}

inline std::vector<json> humaneval_records() {
  std::vector<json> v;
  std::istringstream in(bestofn::read_text_file(bestofn::test::require_shared("data/humaneval/HumanEval.jsonl.gz")));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}
