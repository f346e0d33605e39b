// The bestofn binary end to end: inspect, make-synthetic, exit codes and one-line errors.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "bestofn/util/numeric.h"
#include "bestofn/model/safetensors.h"
#include "bestofn/util/text_file.h"
#include "bestofn/util/utf8.h"
#include "test_util.h"

namespace fs = std::filesystem;
using bestofn::test::run_cli;
using nlohmann::json;

namespace {

// An error run: the expected exit code, and one line on stderr containing every part.
void expect_failure(const std::vector<std::string>& args, int code, std::initializer_list<std::string> parts) {
  const auto r = run_cli(args);
  std::string cmd;
  for (const auto& a : args) cmd += a + " ";
  EXPECT_EQ(r.exit_code, code) << cmd << "\nstderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << cmd << "\nstdout: " << r.out;
  ASSERT_FALSE(r.err.empty()) << cmd;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << cmd << ": not one line: " << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << cmd << ": '" << p << "' not in: " << r.err;
}

std::string synth(const bestofn::test::TempDir& dir, const std::string& name, const std::string& dtype) {
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

}  // namespace

TEST(CliInspect, Llama260kJson) {
  const auto dir = bestofn::test::require_shared("models/llama-260k");
  const auto r = run_cli({"inspect", dir.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  // The shared README's description of the model.
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["num_layers"], 5);
  EXPECT_EQ(j["num_heads"], 8);
  EXPECT_EQ(j["num_kv_heads"], 4);
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["vocab_size"], 512);
  EXPECT_EQ(j["context_length"], 512);
  EXPECT_EQ(j["quantization"], "none");
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["rope"]["theta"], 10000.0);
  EXPECT_EQ(j["tensor_count"], 48);
  // weight_bytes = the data section: file size - 8 - header length (read here from the raw file).
  const auto bytes = bestofn::test::read_bytes(dir / "model.safetensors");
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | bytes[static_cast<std::size_t>(i)];
  EXPECT_EQ(j["weight_bytes"].get<std::uint64_t>(), bytes.size() - 8 - header);
  EXPECT_EQ(j["bytes_by_dtype"]["F32"], j["weight_bytes"]);
  // One decode step reads all but the token embedding, which is read as the tied lm_head: all
  // 260,032 parameters except the duplicate lm_head tensor, in F32.
  EXPECT_EQ(j["decode_bytes_per_step"], 260032 * 4);
  EXPECT_EQ(j["kv_bytes_per_token"], 2 * 5 * 4 * 8 * 2);
}

TEST(CliInspect, TextOutput) {
  const auto r = run_cli({"inspect", bestofn::test::require_shared("models/llama-260k").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("hidden size              64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("heads / kv heads         8 / 4"), std::string::npos) << r.out;
}

TEST(CliInspect, SyntheticFp8AndOnlineQuantization) {
  bestofn::test::TempDir dir;
  const json fp8 = json::parse(run_cli({"inspect", synth(dir, "fp8", "fp8"), "--json"}).out);
  EXPECT_EQ(fp8["quantization"], "fp8-compressed-tensors");
  EXPECT_EQ(fp8["weight_scales"], "per-channel");
  EXPECT_TRUE(fp8["bytes_by_dtype"].contains("F8_E4M3"));
  const std::string bf16 = synth(dir, "bf16", "bf16");
  const json plain = json::parse(run_cli({"inspect", bf16, "--json"}).out);
  const json online = json::parse(run_cli({"inspect", bf16, "--json", "--quantize", "fp8"}).out);
  EXPECT_EQ(online["quantization"], "fp8-online");
  EXPECT_LT(online["decode_bytes_per_step"], plain["decode_bytes_per_step"]);
  EXPECT_EQ(online["weight_bytes"], plain["weight_bytes"]);  // the checkpoint is unchanged
}

// --dtype f16: the f32 model's weights rounded to F16 (numeric.h's rounding, checked against
// numpy in test_numeric), tensor by tensor, and a model the engine runs.
TEST(CliMakeSynthetic, F16IsTheF32WeightsRoundedToF16) {
  bestofn::test::TempDir dir;
  const std::string tok = bestofn::test::require_shared("tokenizers/llama3").string();
  const std::string f16 = (dir / "f16").string(), f32 = (dir / "f32").string();
  for (const auto& [out, dtype] : {std::pair{f16, "f16"}, std::pair{f32, "f32"}}) {
    const auto made = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", dtype, "--seed", "3", "--out", out, "--tokenizer", tok});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  const bestofn::SafetensorsFile a(fs::path(f16) / "model.safetensors"), b(fs::path(f32) / "model.safetensors");
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& t : b.tensors()) {
    const bestofn::TensorInfo* h = a.find(t.name);
    ASSERT_NE(h, nullptr) << t.name;
    ASSERT_EQ(h->dtype, bestofn::DType::F16) << t.name;
    ASSERT_EQ(h->shape, t.shape) << t.name;
    const auto n = static_cast<std::size_t>(t.numel());
    std::vector<float> want(n);
    std::vector<std::uint16_t> got(n);
    std::memcpy(want.data(), b.data(t), n * 4);
    std::memcpy(got.data(), a.data(*h), n * 2);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], bestofn::f16_from_float(want[i])) << t.name << "[" << i << "]";
  }
  EXPECT_EQ(json::parse(bestofn::test::read_text(fs::path(f16) / "config.json"))["torch_dtype"], "float16");
  const auto r = run_cli({"generate", "--model", f16, "--prompt", "def f(x):", "-n", "2", "--max-new-tokens", "4", "--temperature", "0.8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

TEST(CliMakeSynthetic, CopiesTheTokenizerAndTakesItsVocabulary) {
  bestofn::test::TempDir dir;
  const auto tok = bestofn::test::require_shared("tokenizers/llama3/tokenizer.json");
  const std::string out = (dir / "m").string();
  const auto r = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", "bf16", "--out", out, "--tokenizer", tok.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir / "m" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "m" / "tokenizer_config.json"));
  const json j = json::parse(run_cli({"inspect", out, "--json"}).out);
  EXPECT_EQ(j["vocab_size"], 128256);  // 128,000 BPE tokens + 256 special (shared README)
  EXPECT_EQ(j["bos_token_id"], 128000);
  const auto eos = j["eos_token_ids"].get<std::vector<int>>();
  EXPECT_NE(std::find(eos.begin(), eos.end(), 128009), eos.end());  // <|eot_id|>

  // A tokenizer file of another name is copied as tokenizer.json (generate reads that name); one
  // that does not load is an error, and no model directory is left.
  const fs::path renamed = dir / "mistral-tok.json";
  fs::copy_file(bestofn::test::require_shared("tokenizers/mistral/tokenizer.json"), renamed);
  const std::string out2 = (dir / "m2").string();
  const auto r2 = run_cli({"make-synthetic", "--shape", "tiny", "--out", out2, "--tokenizer", renamed.string()});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_TRUE(fs::exists(dir / "m2" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(dir / "m2" / "mistral-tok.json"));
  const auto g = run_cli({"generate", "--model", out2, "--prompt", "def f(x):", "-n", "1", "--max-new-tokens", "2"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  json broken = json::parse(bestofn::test::read_text(renamed));
  broken["pre_tokenizer"] = {{"type", "Whitespace"}};
  bestofn::test::write_text(dir / "broken.json", broken.dump());
  const auto r3 = run_cli({"make-synthetic", "--shape", "tiny", "--out", (dir / "m3").string(), "--tokenizer", (dir / "broken.json").string()});
  EXPECT_EQ(r3.exit_code, 1) << r3.err;
  EXPECT_NE(r3.err.find((dir / "broken.json").string() + ": unsupported pre_tokenizer 'Whitespace'"), std::string::npos) << r3.err;
  EXPECT_FALSE(fs::exists(dir / "m3"));
}

TEST(CliMakeSynthetic, ShardsWithAnIndex) {
  bestofn::test::TempDir dir;
  const std::string out = (dir / "m").string();
  ASSERT_EQ(run_cli({"make-synthetic", "--shape", "tiny", "--dtype", "f32", "--out", out, "--max-shard-size", "200kB"}).exit_code, 0);
  EXPECT_TRUE(fs::exists(dir / "m" / "model.safetensors.index.json"));
  const json j = json::parse(run_cli({"inspect", out, "--json"}).out);
  EXPECT_GT(j["shards"].get<int>(), 1);
  EXPECT_EQ(j["hidden_size"], 64);
}

TEST(CliErrors, UsageErrorsExit2) {
  expect_failure({}, 2, {"usage error"});
  expect_failure({"inspect"}, 2, {"MODEL_DIR"});
  expect_failure({"inspect", "x", "--frobnicate"}, 2, {"--frobnicate"});
  expect_failure({"make-synthetic", "--shape", "tiny", "--dtype", "f64", "--out", "/tmp/x"}, 2, {"--dtype", "f64"});
  expect_failure({"make-synthetic", "--dtype", "f32", "--out", "/tmp/x"}, 2, {"--shape"});
  expect_failure({"frob"}, 2, {"unknown command 'frob'", "inspect"});
  // Flag values are checked before anything is read or written: a usage error, naming the flag.
  for (const char* size : {"5XB", "-5", "-1GB", " 5", "99999999999999999999GB", "18446744073709551615GB"})
    expect_failure({"make-synthetic", "--shape", "tiny", "--out", "/tmp/x", "--max-shard-size", size}, 2, {"--max-shard-size", size});
  for (const char* seed : {"-1", "99999999999999999999999", "18446744073709551616", "1.5", "0x10", ""})
    expect_failure({"make-synthetic", "--shape", "tiny", "--out", "/tmp/x", "--seed", seed}, 2, {"--seed"});
  for (const char* n : {"0", "", "1,,2", "a", "4097", "1,"})
    expect_failure({"bench", "--synthetic", "tiny", "--n", n}, 2, {"--n"});
  // Numbers are decimal, and a value no double holds is refused, not rounded: 1e-400 read as 0
  // was greedy decoding.
  for (const char* t : {"1e-400", "0x10", "1e999", "1,"})
    expect_failure({"generate", "--model", "/nonexistent", "--prompt", "x", "--temperature", t}, 2, {"--temperature", t});
  for (const char* p : {"1e-400", "0x1"})
    expect_failure({"generate", "--model", "/nonexistent", "--prompt", "x", "--top-p", p}, 2, {"--top-p", p});
  expect_failure({"score", "/nonexistent.jsonl", "--k", "1,"}, 2, {"--k", "ends in a comma"});
  expect_failure({"bench", "--synthetic", "nope"}, 2, {"--synthetic", "unknown preset 'nope'"});
  expect_failure({"bench", "--synthetic", "tiny", "--threads", "1", "--threads", "2"}, 2, {"--threads: given 2 times; give it once"});
  EXPECT_FALSE(fs::exists("/tmp/x/config.json"));
}

TEST(CliErrors, HelpTeaches) {
  const auto r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("inspect"), std::string::npos);
  EXPECT_NE(r.out.find("make-synthetic"), std::string::npos);
  const auto s = run_cli({"make-synthetic", "--help"});
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_NE(s.out.find("llama-3.1-8b"), std::string::npos);
  EXPECT_NE(s.out.find("Examples"), std::string::npos);
}

TEST(CliErrors, BadInputExits1WithOneLineNamingTheFile) {
  bestofn::test::TempDir dir;
  expect_failure({"inspect", (dir / "nope").string()}, 1, {(dir / "nope").string(), "no such model directory"});
  expect_failure({"make-synthetic", "--shape", "huge", "--out", (dir / "x").string()}, 2, {"unknown preset 'huge'", "tiny"});
  bestofn::test::write_text(dir / "file.txt", "x");
  expect_failure({"make-synthetic", "--shape", "tiny", "--out", dir.path().string()}, 1, {"not an empty directory"});

  const std::string m = synth(dir, "m", "bf16");
  std::string config = bestofn::test::read_text(fs::path(m) / "config.json");
  config.insert(config.find('{') + 1, "\"hidden_size\": 32,");  // and its own later: which one?
  bestofn::test::write_text(fs::path(m) / "config.json", config);
  expect_failure({"inspect", m}, 1, {"config.json", "key \"hidden_size\" appears twice in one object"});
  bestofn::test::write_text(fs::path(m) / "config.json", "{\"hidden_size\": 64,");
  expect_failure({"inspect", m}, 1, {"config.json", "not valid JSON"});
  const std::string g = synth(dir, "g", "bf16");
  bestofn::test::write_text(fs::path(g) / "generation_config.json", "{\"do_sample\": true, \"temperature\": 1e-400}");
  expect_failure({"inspect", g}, 1, {"generation_config.json", "the number 1e-400 is beyond what a double holds"});

  const std::string t = synth(dir, "t", "bf16");
  fs::resize_file(fs::path(t) / "model.safetensors", 1000);
  expect_failure({"inspect", t}, 1, {"model.safetensors", "truncated"});

  const std::string a = synth(dir, "a", "bf16");
  {
    auto bytes = bestofn::test::read_bytes(fs::path(a) / "model.safetensors");
    bytes[5] = 0x7f;  // header length ~ 2^46
    bestofn::test::write_bytes(fs::path(a) / "model.safetensors", bytes);
  }
  expect_failure({"inspect", a}, 1, {"model.safetensors", "absurd header length"});

  const std::string s = synth(dir, "s", "bf16");
  bestofn::test::write_text(fs::path(s) / "model.safetensors.index.json", R"({"weight_map":{"model.norm.weight":"model-00002-of-00002.safetensors"}})");
  expect_failure({"inspect", s}, 1, {"model.safetensors.index.json", "missing shard 'model-00002-of-00002.safetensors'"});
}

TEST(CliErrors, MalformedCheckpointsExit1NamingTensorAndProblem) {
  bestofn::test::TempDir dir;
  const std::string norm = "model.layers.1.input_layernorm.weight";
  auto fresh = [&](const std::string& name) { return fs::path(synth(dir, name, "bf16")); };

  const fs::path a = fresh("dtype");
  rewrite_header(a / "model.safetensors", [&](json& h) { h[norm]["dtype"] = "Q4_K"; });
  expect_failure({"inspect", a.string()}, 1, {"model.safetensors", "tensor '" + norm + "'", "unknown dtype 'Q4_K'"});

  const fs::path b = fresh("overlap");
  rewrite_header(b / "model.safetensors", [&](json& h) {
    auto off = h[norm]["data_offsets"].get<std::vector<std::uint64_t>>();
    h[norm]["data_offsets"] = {off[0] - 2, off[1] - 2};
  });
  expect_failure({"inspect", b.string()}, 1, {"model.safetensors", "overlapping"});

  const fs::path c = fresh("range");
  rewrite_header(c / "model.safetensors", [&](json& h) { h[norm]["data_offsets"][1] = 1ull << 40; });
  expect_failure({"inspect", c.string()}, 1, {"model.safetensors", "tensor '" + norm + "'", "outside the data section"});

  const fs::path d = fresh("shape");
  json cfg = json::parse(bestofn::test::read_text(d / "config.json"));
  cfg["hidden_size"] = 96;
  bestofn::test::write_text(d / "config.json", cfg.dump());
  expect_failure({"inspect", d.string()}, 1, {"tensor 'model.embed_tokens.weight'", "expected shape [512, 96]", "found [512, 64]"});

  const fs::path f = fresh("missing");
  cfg = json::parse(bestofn::test::read_text(f / "config.json"));
  cfg["num_hidden_layers"] = 5;
  bestofn::test::write_text(f / "config.json", cfg.dump());
  expect_failure({"inspect", f.string()}, 1, {"missing tensor 'model.layers.3.input_layernorm.weight'"});

  const fs::path g = fresh("genconfig");
  bestofn::test::write_text(g / "generation_config.json", "{\"eos_token_id\": [1,");
  expect_failure({"inspect", g.string()}, 1, {"generation_config.json", "not valid JSON"});
}

TEST(CliErrors, NoPartialModelIsLeftBehind) {
  bestofn::test::TempDir dir;
  // A config that fails validation after the output directory was planned.
  bestofn::test::write_text(dir / "cfg.json", R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":100})");
  expect_failure({"make-synthetic", "--shape", (dir / "cfg.json").string(), "--out", (dir / "out").string()}, 1,
                 {"cfg.json", "num_key_value_heads"});
  for (const auto& e : fs::directory_iterator(dir.path())) EXPECT_EQ(e.path().filename(), "cfg.json") << e.path();
}

TEST(CliTokenize, RoundTripsExactlyThroughStdinAndFiles) {
  bestofn::test::TempDir dir;
  const std::string tok = bestofn::test::require_shared("tokenizers/llama3").string();
  const std::string text = "def add(a, b):\n    return a + b  # ünïcode ✓\n";
  bestofn::test::write_text(dir / "in.txt", text);
  const auto r = run_cli({"tokenize", "--tokenizer", tok, (dir / "in.txt").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json ids = json::parse(r.out);
  EXPECT_EQ(ids[0], 755);  // "def" (HF tokenizers)
  bestofn::test::write_text(dir / "ids.json", r.out);
  const auto back = run_cli({"detokenize", "--tokenizer", tok, (dir / "ids.json").string()});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, text);
  const auto bos = run_cli({"tokenize", "--tokenizer", tok, "--bos", (dir / "in.txt").string()});
  EXPECT_EQ(json::parse(bos.out)[0], 128000);
  EXPECT_EQ(json::parse(bos.out).size(), ids.size() + 1);
  const auto chat = run_cli({"tokenize", "--tokenizer", tok, "--chat", "--system", "Be terse.", (dir / "in.txt").string()});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(json::parse(chat.out)[0], 128000);
  EXPECT_EQ(json::parse(chat.out).back(), 271);  // "\n\n" after the assistant header
}

TEST(CliTokenize, BadInputs) {
  bestofn::test::TempDir dir;
  const std::string tok = bestofn::test::require_shared("tokenizers/llama3").string();
  bestofn::test::write_text(dir / "bad.txt", "ok \xff\xfe bytes");
  expect_failure({"tokenize", "--tokenizer", tok, (dir / "bad.txt").string()}, 1, {"bad.txt", "not valid UTF-8 at byte 3"});
  bestofn::test::write_text(dir / "ids.json", "[1, 2, 999999]");
  expect_failure({"detokenize", "--tokenizer", tok, (dir / "ids.json").string()}, 1, {"ids.json", "id 999999"});
  bestofn::test::write_text(dir / "ids2.json", "[1, 2");
  expect_failure({"detokenize", "--tokenizer", tok, (dir / "ids2.json").string()}, 1, {"ids2.json", "not a JSON array"});
  expect_failure({"tokenize", "--tokenizer", (dir / "none").string(), "-"}, 1, {"none"});
  bestofn::test::write_text(dir / "tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_failure({"tokenize", "--tokenizer", (dir / "tokenizer.json").string()}, 1, {"tokenizer.json", "unsupported model type 'WordPiece'"});
  expect_failure({"tokenize", "--tokenizer", tok, "--chat-format", "chatml"}, 2, {"--chat-format"});
  expect_failure({"tokenize"}, 2, {"--tokenizer"});
  expect_failure({"tokenize", "--tokenizer", bestofn::test::require_shared("tokenizers/mistral").string(), "--chat", (dir / "ids.json").string()},
                 1, {"tokenizer_config.json", "no chat_template", "--chat-format"});
  // A chat format whose markers this tokenizer lacks would encode them as plain text: refused.
  const std::string mistral = bestofn::test::require_shared("tokenizers/mistral").string();
  expect_failure({"tokenize", "--tokenizer", tok, "--chat", "--chat-format", "llama2", (dir / "ids.json").string()}, 1,
                 {"llama2 chat format", "<s>", "plain text"});
  expect_failure({"tokenize", "--tokenizer", mistral, "--chat", "--chat-format", "llama3", (dir / "ids.json").string()}, 1,
                 {"llama3 chat format", "<|begin_of_text|>", "plain text"});
  for (const auto& [t, format] : {std::pair{tok, "llama3"}, std::pair{mistral, "llama2"}}) {
    const auto ok = run_cli({"tokenize", "--tokenizer", t, "--chat", "--chat-format", format, (dir / "ids.json").string()});
    EXPECT_EQ(ok.exit_code, 0) << format << ": " << ok.err;
  }
}

namespace {
std::string synth_with_tokenizer(const bestofn::test::TempDir& dir) {
  const std::string out = (dir / "m").string();
  const auto r = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", "fp8", "--seed", "1", "--out", out, "--tokenizer",
                          bestofn::test::require_shared("tokenizers/llama3").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

std::vector<json> jsonl(const std::string& text) {
  std::vector<json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}
}  // namespace

TEST(CliGenerate, DoneWhenCommandIsReproducibleWhateverBatchAndThreads) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::vector<std::string> base = {"generate", "--model", m, "--prompt", "def fib(n):", "-n", "8", "--temperature", "0.8",
                                         "--seed", "1", "--max-new-tokens", "16", "--ids"};
  const auto a = run_cli(base);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto rows = jsonl(a.out);
  ASSERT_EQ(rows.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(rows[static_cast<std::size_t>(i)]["index"], i);
    for (const char* key : {"id", "text", "finish_reason", "stop", "num_tokens", "cumulative_logprob", "token_ids"})
      EXPECT_TRUE(rows[static_cast<std::size_t>(i)].contains(key)) << key;
  }
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args).out;
  };
  EXPECT_EQ(with({"--batch", "1", "--threads", "1"}), a.out);
  EXPECT_EQ(with({"--batch", "3", "--threads", "2"}), a.out);
  EXPECT_NE(with({"--seed", "2"}), a.out);
  // An FP8 KV cache: the same reproducibility whatever --batch and --threads.
  const std::string fp8 = with({"--kv-cache", "fp8"});
  EXPECT_EQ(jsonl(fp8).size(), 8u);
  EXPECT_EQ(with({"--kv-cache", "fp8", "--batch", "3", "--threads", "1"}), fp8);
}

TEST(CliGenerate, PromptFilesRowsInOrderAndAtomicOutput) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  bestofn::test::write_text(dir / "p.jsonl", "{\"id\": \"a\", \"prompt\": \"def f():\", \"n\": 3}\n\n{\"prompt\": \"x = \", \"stop\": \"\\n\"}\n");
  const std::string out = (dir / "out.jsonl").string();
  const auto r = run_cli({"generate", "--model", m, "--prompts", (dir / "p.jsonl").string(), "-n", "2", "--max-new-tokens", "8", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  const auto rows = jsonl(bestofn::test::read_text(out));
  ASSERT_EQ(rows.size(), 5u);  // n from the line (3), then the default -n (2)
  EXPECT_EQ(rows[0]["id"], "a");
  EXPECT_EQ(rows[2]["index"], 2);
  EXPECT_EQ(rows[3]["id"], 1);  // no id: the prompt's line index among prompts
  for (const auto& row : rows) EXPECT_LE(row["num_tokens"].get<int>(), 8);

  // The same rows from stdin (--prompts -) and from a .json array of the same objects.
  // (--out -: stdout, as by default, and no file named "-".)
  const auto from_stdin =
      run_cli({"generate", "--model", m, "--prompts", "-", "-n", "2", "--max-new-tokens", "8", "--out", "-"}, dir / "p.jsonl");
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  EXPECT_EQ(jsonl(from_stdin.out), rows);
  EXPECT_FALSE(fs::exists("-"));
  bestofn::test::write_text(dir / "p.json", "[{\"id\": \"a\", \"prompt\": \"def f():\", \"n\": 3},\n {\"prompt\": \"x = \", \"stop\": \"\\n\"}]\n");
  const auto from_array = run_cli({"generate", "--model", m, "--prompts", (dir / "p.json").string(), "-n", "2", "--max-new-tokens", "8"});
  ASSERT_EQ(from_array.exit_code, 0) << from_array.err;
  EXPECT_EQ(jsonl(from_array.out), rows);
  bestofn::test::write_text(dir / "bad_stdin.jsonl", "{\"prompt\": \"ok\"}\n[]\n");
  const auto bad_stdin = run_cli({"generate", "--model", m, "--prompts", "-"}, dir / "bad_stdin.jsonl");
  EXPECT_EQ(bad_stdin.exit_code, 1);
  EXPECT_NE(bad_stdin.err.find("<stdin>:2"), std::string::npos) << bad_stdin.err;
  // A .json file that is not an array, or an element that is not a row, names the file.
  bestofn::test::write_text(dir / "obj.json", "{\"prompt\": \"x\"}");
  expect_failure({"generate", "--model", m, "--prompts", (dir / "obj.json").string()}, 1, {"obj.json", "JSON array"});
  bestofn::test::write_text(dir / "elem.json", "[{\"prompt\": \"x\"}, \"y\"]");
  expect_failure({"generate", "--model", m, "--prompts", (dir / "elem.json").string()}, 1, {"elem.json", "element 1", "\"prompt\""});
  // Two prompts with one id (given, or a row's position) would give rows no reader can attribute;
  // an entry_point is a Python identifier, as in the datasets.
  bestofn::test::write_text(dir / "dup.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"id\": 0}\n");
  expect_failure({"generate", "--model", m, "--prompts", (dir / "dup.jsonl").string()}, 1, {"dup.jsonl", "prompts 0 and 1", "same id 0"});
  bestofn::test::write_text(dir / "ep.jsonl", "{\"prompt\": \"a\", \"test\": \"def check(c): pass\", \"entry_point\": \"f()\"}\n");
  expect_failure({"generate", "--model", m, "--prompts", (dir / "ep.jsonl").string(), "--verify"}, 1, {"ep.jsonl:1", "Python identifier"});
  // An empty plain-text prompt file is a mistake, not an empty prompt.
  bestofn::test::write_text(dir / "empty.txt", "");
  expect_failure({"generate", "--model", m, "--prompts", (dir / "empty.txt").string()}, 1, {"empty.txt", "is empty"});

  bestofn::test::write_text(dir / "plain.txt", "a whole file\nis one prompt\n");
  const auto p = run_cli({"generate", "--model", m, "--prompts", (dir / "plain.txt").string(), "--max-new-tokens", "4"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(jsonl(p.out).size(), 1u);

  // A bad line: exit 1 naming file:line, and no output file (nor a partial one) is left.
  bestofn::test::write_text(dir / "bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": 3}\n");
  const std::string out2 = (dir / "out2.jsonl").string();
  expect_failure({"generate", "--model", m, "--prompts", (dir / "bad.jsonl").string(), "--out", out2}, 1, {"bad.jsonl:2", "\"prompt\""});
  EXPECT_FALSE(fs::exists(out2));
  EXPECT_TRUE(bestofn::test::partial_files(out2).empty());
}

TEST(CliGenerate, BadInvocations) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  expect_failure({"generate", "--model", m}, 2, {"--prompt"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--prompts", "y"}, 2, {"--prompt"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--temperature", "-1"}, 2, {"--temperature"});
  // NaN passes every comparison of a range check; an out-of-range seed would wrap or clamp, and
  // two different seeds give the same candidates.
  for (const char* flag : {"--temperature", "--top-p", "--min-p", "--timeout"})
    for (const char* v : {"nan", "NaN", "inf", "1e400", "0.5x"})
      expect_failure({"generate", "--model", m, "--prompt", "x", flag, v}, 2, {flag, v});
  for (const char* seed : {"-1", "18446744073709551616", "99999999999999999999999"})
    expect_failure({"generate", "--model", m, "--prompt", "x", "--seed", seed}, 2, {"--seed", seed});
  // A leading zero is decimal (CLI11 alone reads "010" as octal 8).
  auto with_seed = [&](const char* seed) {
    const auto r = run_cli({"generate", "--model", m, "--prompt", "x", "--max-new-tokens", "4", "--seed", seed});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(with_seed("010"), with_seed("10"));
  EXPECT_NE(with_seed("010"), with_seed("8"));
  // A temperature so small that 1 / T times a logit overflows is refused; 1e-20 still samples.
  expect_failure({"generate", "--model", m, "--prompt", "x", "--temperature", "1e-21"}, 2, {"--temperature", "1e-20"});
  const auto tiny_t = run_cli({"generate", "--model", m, "--prompt", "x", "--max-new-tokens", "4", "--temperature", "1e-20"});
  EXPECT_EQ(tiny_t.exit_code, 0) << tiny_t.err;
  expect_failure({"generate", "--model", m, "--prompt", "x", "-n", "0"}, 2, {"-n"});
  // A flag that only modifies another one is a usage error without it, not silently ignored.
  expect_failure({"generate", "--model", m, "--prompt", "x", "--system", "Be terse."}, 2, {"--system", "--chat"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--chat-format", "llama3"}, 2, {"--chat-format", "--chat"});
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--timeout", "5"}, {"--workers", "2"}, {"--no-zygote"}}) {
    std::vector<std::string> args = {"generate", "--model", m, "--prompt", "x"};
    args.insert(args.end(), flag.begin(), flag.end());
    expect_failure(args, 2, {flag[0], "--verify"});
  }
  // The CUDA engine's flags change nothing on the CPU engine.
  for (const char* flag : {"--cuda-graphs", "--paged-kv", "--fused-qkv", "--device-sampling"})
    expect_failure({"generate", "--model", m, "--prompt", "x", "--device", "cpu", flag}, 2, {flag, "--device is cpu"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--kv-blocks", "5"}, 2, {"--kv-blocks", "--paged-kv"});
  expect_failure({"bench", "--model", m, "--cuda-graphs"}, 2, {"--cuda-graphs", "--device is cpu"});  // bench's default device
  expect_failure({"bench", "--model", m, "--dtype", "bf16"}, 2, {"--dtype", "--synthetic"});
  expect_failure({"bench", "--model", m, "--keep-model", (dir / "km").string()}, 2, {"--keep-model", "--synthetic"});
  expect_failure({"make-synthetic", "--shape", "tiny", "--dtype", "f32", "--fp8-scheme", "tensor", "--out", (dir / "ms").string()}, 2,
                 {"--fp8-scheme", "--dtype fp8"});
  EXPECT_FALSE(fs::exists(dir / "ms"));
  // A path flag given as "" names the flag (not ": no such file"), and is never stdout or "." by accident.
  expect_failure({"generate", "--model", m, "--prompt", "x", "--out", ""}, 2, {"--out", "is empty"});
  expect_failure({"generate", "--model", "", "--prompt", "x"}, 2, {"--model", "is empty"});
  expect_failure({"tokenize", "--tokenizer", ""}, 2, {"--tokenizer", "is empty"});
  expect_failure({"eval", "--model", m, "--out-dir", ""}, 2, {"--out-dir", "is empty"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--device", "tpu"}, 2, {"--device"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--device", "cuda"}, 1, {"--device cuda"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--kv-cache", "int4"}, 2, {"--kv-cache"});
  expect_failure({"generate", "--model", m, "--prompts", (dir / "none.jsonl").string()}, 1, {"none.jsonl"});
  expect_failure({"generate", "--model", bestofn::test::require_shared("models/llama-260k").string(), "--prompt", "x"}, 1,
                 {"tokenizer.json"});
  const std::string long_prompt(40000, 'a');  // far more tokens than the 2048-token context
  bestofn::test::write_text(dir / "long.txt", long_prompt + " " + long_prompt);
  expect_failure({"generate", "--model", m, "--prompts", (dir / "long.txt").string()}, 1, {(dir / "long.txt").string(), "context is 2048"});
}

// Fills tensor `name` of a safetensors file with NaN (F32 or BF16), the header unchanged.
void poison_tensor(const fs::path& file, const std::string& name) {
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

TEST(CliGenerate, NonFiniteLogitsAreAnErrorNotACrash) {
  // A checkpoint whose header is valid but whose final norm is NaN: every logit is NaN. Sampled
  // and greedy, generate stops with one line naming the problem and writes no output.
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  poison_tensor(fs::path(m) / "model.safetensors", "model.norm.weight");
  for (const char* t : {"0.8", "0"}) {
    const std::string out = (dir / (std::string("o") + t + ".jsonl")).string();
    expect_failure({"generate", "--model", m, "--prompt", "x", "-n", "2", "--max-new-tokens", "3", "--temperature", t, "--top-p",
                    "0.9", "--out", out},
                   1, {"logits are not finite", "candidate 0 of prompt 0"});
    EXPECT_FALSE(fs::exists(out)) << out;
    EXPECT_TRUE(bestofn::test::partial_files(out).empty()) << out;
  }
}

// The files in dir whose names start with prefix.
std::vector<std::string> files_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Waits (up to a minute) until a partial file, or a partial directory with a file in it, whose
// name starts with prefix is in dir.
bool wait_for_partial(const fs::path& dir, const std::string& prefix) {
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

TEST(CliGenerate, TwoRunsOnOneOutAndASignalLeaveOneWholeFile) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const fs::path out = dir / "out.jsonl";
  for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGALRM, SIGUSR1}) {
    fs::remove(out);
    // A long run writes its partial file; a short run on the same --out finishes meanwhile.
    const int slow = bestofn::test::start_cli({"generate", "--model", m, "--prompt", "a", "-n", "64", "--max-new-tokens", "2000",
                                               "--temperature", "1", "--out", out.string()},
                                              dir / "slow.out", dir / "slow.err");
    ASSERT_TRUE(wait_for_partial(dir.path(), "out.jsonl")) << "signal " << sig;
    const auto fast = run_cli({"generate", "--model", m, "--prompt", "b", "-n", "2", "--max-new-tokens", "4", "--out", out.string()});
    ASSERT_EQ(fast.exit_code, 0) << fast.err;
    EXPECT_EQ(bestofn::test::read_jsonl(out).size(), 2u) << "signal " << sig;
    // The signal ends the long run as it would have; its partial file goes with it.
    kill(slow, sig);
    int st = 0;
    waitpid(slow, &st, 0);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == sig) << "signal " << sig << ", wait status " << st;
    EXPECT_EQ(files_starting(dir.path(), "out.jsonl"), std::vector<std::string>{"out.jsonl"}) << "signal " << sig;
    EXPECT_EQ(bestofn::test::read_jsonl(out).size(), 2u);
    // The output has a new file's mode (0666 less the umask), not mkstemp's 0600.
    const mode_t mask = umask(0);
    umask(mask);
    EXPECT_EQ(static_cast<mode_t>(fs::status(out).permissions()), 0666 & ~mask);
  }
}

TEST(CliMakeSynthetic, ASignalLeavesNoStagingDirectory) {
  bestofn::test::TempDir dir;
  // bench-100m in f32: 400 MB, long enough to be stopped while it writes. A run that finishes
  // before the signal is tried again.
  bool stopped = false;
  for (int attempt = 0; attempt < 3 && !stopped; ++attempt) {
    fs::remove_all(dir / "big");
    const int pid = bestofn::test::start_cli({"make-synthetic", "--shape", "bench-100m", "--dtype", "f32", "--out", (dir / "big").string()},
                                             dir / "ms.out", dir / "ms.err");
    ASSERT_TRUE(wait_for_partial(dir.path(), "big"));
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;  // it was done
    stopped = true;
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) << st;
    EXPECT_TRUE(files_starting(dir.path(), "big").empty());
  }
  EXPECT_TRUE(stopped) << "make-synthetic finished before every signal";
}

TEST(CliBench, PrintsOneJsonLinePerConfiguration) {
  const auto r = run_cli({"bench", "--synthetic", "tiny", "--n", "1,3", "--prompt-len", "8", "--steps", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = jsonl(r.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["n"], 3);
  for (const char* key : {"ms_per_step", "tok_per_s", "prefill_ms", "bytes_per_step", "gb_per_s", "machine", "commit", "command", "kv_cache",
                          "host_sample_ms_per_step", "tok_per_s_with_host_sampling", "core_round_trip_ns", "cpu_kernels"})
    EXPECT_TRUE(rows[0].contains(key)) << key;
  // Which GEMM kernels ran: one of the named paths of each kind, never empty.
  const std::set<std::string> fp8_paths = {"avx512_bf16", "avx512_fma", "avx2", "avx2_f16c", "generic"};
  const std::set<std::string> wide_paths = {"avx512", "avx2", "portable"};
  EXPECT_TRUE(fp8_paths.count(rows[0]["cpu_kernels"]["fp8"].get<std::string>())) << rows[0]["cpu_kernels"];
  EXPECT_TRUE(wide_paths.count(rows[0]["cpu_kernels"]["bf16"].get<std::string>())) << rows[0]["cpu_kernels"];
  // The host's sampling is timed apart from the step: counting it can only lower tok/s.
  for (const auto& row : rows) {
    EXPECT_GT(row["host_sample_ms_per_step"].get<double>(), 0.0);
    EXPECT_LT(row["tok_per_s_with_host_sampling"].get<double>(), row["tok_per_s"].get<double>());
  }
  // --kv-cache fp8: a byte per value and a scale per KV head, not BF16's two bytes per value.
  const auto f = run_cli({"bench", "--synthetic", "tiny", "--n", "1", "--prompt-len", "8", "--steps", "2", "--json", "--kv-cache", "fp8"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const auto frow = jsonl(f.out);
  ASSERT_EQ(frow.size(), 1u);
  EXPECT_EQ(frow[0]["kv_cache"], "fp8");
  EXPECT_LT(frow[0]["bytes_per_step"].get<double>(), rows[0]["bytes_per_step"].get<double>());
  EXPECT_NE(rows[0]["command"].get<std::string>().find("--n 1,3"), std::string::npos);
  expect_failure({"bench", "--synthetic", "tiny", "--n", "1,x"}, 2, {"--n", "'x'"});
  expect_failure({"bench", "--n", "1"}, 2, {"--model"});
  // --keep-model: made once, reused for the same --synthetic and --dtype, refused for others
  // (never a silent measurement of the wrong model), and never taken over from a user's directory.
  bestofn::test::TempDir dir;
  const std::string kept = (dir / "kept").string();
  const std::vector<std::string> small = {"bench", "--synthetic", "tiny", "--n", "1", "--prompt-len", "4", "--steps", "1", "--json",
                                          "--keep-model", kept};
  ASSERT_EQ(run_cli(small).exit_code, 0);
  ASSERT_TRUE(fs::exists(fs::path(kept) / "config.json"));
  const auto again = run_cli(small);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  auto other = small;
  other.insert(other.end(), {"--dtype", "bf16"});
  expect_failure(other, 1, {kept, "--dtype fp8", "--dtype bf16"});
  const std::string user = synth(dir, "user", "bf16");
  auto theirs = small;
  theirs.back() = user;
  expect_failure(theirs, 1, {user, "not a model that bench made"});
}

namespace {
// A samples file with the given completion for every problem of a dataset (`field` of the raw
// record, or a fixed text).
std::string samples_file(const bestofn::test::TempDir& dir, const std::string& name, const std::vector<json>& records,
                         const std::function<json(const json&)>& make) {
  std::string text;
  for (const auto& r : records) text += make(r).dump() + "\n";
  bestofn::test::write_text(dir / name, text);
  return (dir / name).string();
}

std::vector<json> humaneval_records() {
  std::vector<json> v;
  std::istringstream in(bestofn::read_text_file(bestofn::test::require_shared("data/humaneval/HumanEval.jsonl.gz")));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}
}  // namespace

TEST(CliScore, AllHumanEvalCanonicalSolutionsPassAndWrongOnesFail) {
  bestofn::test::TempDir dir;
  const std::string data = bestofn::test::shared_path("data").string();
  const auto he = humaneval_records();
  ASSERT_EQ(he.size(), 164u);
  const std::string good = samples_file(dir, "good.jsonl", he, [](const json& r) {
    return json{{"task_id", r["task_id"]}, {"completion", r["canonical_solution"]}, {"extra", 7}};
  });
  const auto r = run_cli({"score", good, "--data-dir", data, "--k", "1", "--json", "--out", (dir / "res.jsonl").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json s = json::parse(r.out);
  EXPECT_EQ(s["verdicts"]["passed"], 164) << r.out;
  EXPECT_EQ(s["pass_at_k"]["1"], 1.0);
  const auto rows = jsonl(bestofn::test::read_text(dir / "res.jsonl"));
  ASSERT_EQ(rows.size(), 164u);
  EXPECT_EQ(rows[0]["extra"], 7);  // every input field is kept
  EXPECT_EQ(rows[0]["result"], "passed");
  EXPECT_EQ(rows[0]["passed"], true);

  // Two wrong completions per problem: none passes; pass@10 is not computable with n = 2.
  std::vector<json> twice;
  for (const auto& x : he) twice.push_back(x), twice.push_back(x);
  int i = 0;
  const std::string bad = samples_file(dir, "bad.jsonl", twice, [&](const json& x) {
    return json{{"task_id", x["task_id"]}, {"completion", ++i % 2 ? "    return None\n" : "    raise ValueError('no')\n"}};
  });
  // Read from stdin (which needs --out); a k given twice (and blanks around one) counts once.
  expect_failure({"score", "-", "--data-dir", data}, 1, {"<stdin>", "--out"});
  expect_failure({"score", "-", "--data-dir", data, "--out", "-"}, 2, {"--out", "stdout carries score's report"});
  bestofn::test::write_text(dir / "typed.jsonl", "{\"task_id\": 5, \"completion\": \"x\"}\n");
  expect_failure({"score", (dir / "typed.jsonl").string(), "--data-dir", data}, 1,
                 {"typed.jsonl:1", "the field \"task_id\" must be a string, got number 5"});
  bestofn::test::write_text(dir / "twice.jsonl", "{\"task_id\": \"HumanEval/0\", \"task_id\": \"HumanEval/1\", \"completion\": \"x\"}\n");
  expect_failure({"score", (dir / "twice.jsonl").string(), "--data-dir", data}, 1, {"twice.jsonl:1", "key \"task_id\" appears twice"});
  // --plus-timeout on a dataset without plus tests is said to change nothing.
  const auto b = run_cli(
      {"score", "-", "--data-dir", data, "--k", "1, 10,1", "--json", "--out", (dir / "bad_res.jsonl").string(), "--plus-timeout", "5"}, bad);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("--plus-timeout: humaneval has no HumanEval+ plus tests"), std::string::npos) << b.err;
  EXPECT_EQ(jsonl(bestofn::test::read_text(dir / "bad_res.jsonl")).size(), 328u);
  const json t = json::parse(b.out);
  EXPECT_EQ(t["pass_at_k"].size(), 2u) << b.out;
  EXPECT_EQ(t["pass_at_k"]["1"], 0.0);
  EXPECT_TRUE(t["pass_at_k"]["10"].is_null());
  EXPECT_EQ(t["problems_skipped"]["10"], 164);
  EXPECT_FALSE(t["problems_skipped"].contains("1"));  // eval's summary.json schema: only the ks that skipped any
  EXPECT_EQ(t["verdicts"]["passed"], 0);
  EXPECT_EQ(t["verdicts"]["failed"], 328);
}

TEST(CliScore, HumanEvalPlusCanonicalSolutionsPassBaseAndPlusTests) {
  bestofn::test::TempDir dir;
  const std::string data = bestofn::test::shared_path("data").string();
  std::vector<json> plus;
  std::istringstream in(bestofn::read_text_file(bestofn::test::require_shared("data/humanevalplus/HumanEvalPlus.jsonl.gz")));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) plus.push_back(json::parse(line));
  ASSERT_EQ(plus.size(), 164u);
  const std::string good = samples_file(dir, "plus.jsonl", plus, [](const json& r) {
    return json{{"task_id", r["task_id"]}, {"completion", r["canonical_solution"]}};
  });
  const auto r = run_cli({"score", good, "--dataset", "humaneval+", "--data-dir", data, "--k", "1", "--json", "--out", (dir / "res.jsonl").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json s = json::parse(r.out);
  EXPECT_EQ(s["pass_at_k"]["1"], 1.0) << r.out;
  EXPECT_EQ(s["plus_pass_at_k"]["1"], 1.0) << r.out;
  const auto rows = jsonl(bestofn::test::read_text(dir / "res.jsonl"));
  EXPECT_EQ(rows[0]["plus_result"], "passed");

  // The differential test catches what the base tests miss: HumanEval's original solution for
  // HumanEval/22 lets bools through filter_integers (EvalPlus fixed its canonical solution).
  const auto he = humaneval_records();
  const std::string orig = samples_file(dir, "orig.jsonl", {he[22]}, [](const json& x) {
    return json{{"task_id", x["task_id"]}, {"completion", x["canonical_solution"]}};
  });
  const auto o = run_cli({"score", orig, "--dataset", "humaneval+", "--data-dir", data, "--k", "1", "--out", (dir / "o.jsonl").string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto orow = jsonl(bestofn::test::read_text(dir / "o.jsonl"));
  EXPECT_EQ(orow[0]["passed"], true);
  EXPECT_EQ(orow[0]["plus_passed"], false);
  EXPECT_NE(orow[0]["plus_result"].get<std::string>().find("plus input"), std::string::npos) << orow[0]["plus_result"];
}

TEST(CliScore, MbppCanonicalSolutionsPass) {
  bestofn::test::TempDir dir;
  const std::string data = bestofn::test::shared_path("data").string();
  const json mbpp = json::parse(bestofn::test::read_text(bestofn::test::require_shared("data/mbpp/sanitized-mbpp.json")));
  std::vector<json> recs(mbpp.begin(), mbpp.end());
  const std::string m = samples_file(dir, "mbpp.jsonl", recs, [](const json& r) {
    return json{{"task_id", "Mbpp/" + std::to_string(r["task_id"].get<int>())}, {"completion", r["code"]}};
  });
  const auto mr = run_cli({"score", m, "--dataset", "mbpp", "--data-dir", data, "--k", "1", "--json", "--timeout", "10"});
  ASSERT_EQ(mr.exit_code, 0) << mr.err;
  EXPECT_EQ(json::parse(mr.out)["pass_at_k"]["1"], 1.0) << mr.out;
}

TEST(CliErrors, FifosDevicesAndDirectoriesAreNotReadForever) {
  // A FIFO with no writer in place of a model file, a device as a prompt file, a directory as a
  // config: a one-line error naming the file, within seconds (each run is killed after 30 s).
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  auto bounded = [&](const std::vector<std::string>& args) {
    const int pid = bestofn::test::start_cli(args, dir / "b.out", dir / "b.err");
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        ADD_FAILURE() << args[0] << " " << args[1] << ": still running after 30 s";
        return std::string();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << args[0] << ": wait status " << st;
    const std::string err = bestofn::test::read_text(dir / "b.err");
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
    return err;
  };
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json"}) {
    const fs::path copy = dir / (std::string("fifo-") + name);
    fs::copy(m, copy, fs::copy_options::recursive);
    fs::remove(copy / name);
    ASSERT_EQ(mkfifo((copy / name).c_str(), 0600), 0);
    const std::string err = bounded({"generate", "--model", copy.string(), "--prompt", "x", "--max-new-tokens", "1"});
    EXPECT_NE(err.find((copy / name).string()), std::string::npos) << err;
  }
  ASSERT_EQ(mkfifo((dir / "samples.fifo").c_str(), 0600), 0);
  EXPECT_NE(bounded({"score", (dir / "samples.fifo").string(), "--data-dir", bestofn::test::require_shared("data").string()})
                .find("samples.fifo"),
            std::string::npos);
  EXPECT_NE(bounded({"generate", "--model", m, "--prompts", "/dev/zero"}).find("/dev/zero: is not a regular file"), std::string::npos);
  EXPECT_NE(bounded({"make-synthetic", "--shape", dir.path().string(), "--out", (dir / "x").string()}).find("is a directory"),
            std::string::npos);
}

TEST(CliScore, AnOutThatIsTheInputIsRefused) {
  // score's --out (any path to the same file) and generate's --out = --prompts would replace the
  // input with the output: refused before anything is written, the input intact.
  bestofn::test::TempDir dir;
  const std::string samples = "{\"task_id\": \"HumanEval/0\", \"completion\": \"    return None\\n\"}\n";
  bestofn::test::write_text(dir / "s.jsonl", samples);
  fs::create_directory(dir / "sub");
  for (const fs::path& out : {dir / "s.jsonl", dir / "sub" / ".." / "s.jsonl"}) {
    expect_failure({"score", (dir / "s.jsonl").string(), "--data-dir", bestofn::test::require_shared("data").string(), "--out", out.string()},
                   1, {out.string(), "which this run reads"});
    EXPECT_EQ(bestofn::test::read_text(dir / "s.jsonl"), samples);
  }
  const std::string m = synth_with_tokenizer(dir);
  bestofn::test::write_text(dir / "p.jsonl", "{\"prompt\": \"a\"}\n");
  expect_failure({"generate", "--model", m, "--prompts", (dir / "p.jsonl").string(), "--out", (dir / "p.jsonl").string()}, 1,
                 {"which this run reads"});
  EXPECT_EQ(bestofn::test::read_text(dir / "p.jsonl"), "{\"prompt\": \"a\"}\n");
}

TEST(CliScore, BadSamplesExit1WithTheLineAndWriteNothing) {
  bestofn::test::TempDir dir;
  const std::string data = bestofn::test::shared_path("data").string();
  const std::string res = (dir / "res.jsonl").string();
  auto bad = [&](const std::string& content, std::initializer_list<std::string> parts) {
    bestofn::test::write_text(dir / "s.jsonl", content);
    expect_failure({"score", (dir / "s.jsonl").string(), "--data-dir", data, "--out", res}, 1, parts);
    EXPECT_FALSE(fs::exists(res));
    EXPECT_TRUE(bestofn::test::partial_files(res).empty());
  };
  const std::string ok = R"({"task_id": "HumanEval/0", "completion": "    return True\n"})";
  bad(ok + "\n{not json\n", {"s.jsonl:2", "not valid JSON"});
  bad(ok + "\n{\"task_id\": \"HumanEval/999\", \"completion\": \"\"}\n", {"s.jsonl:2", "unknown task_id", "HumanEval/999"});
  bad("{\"task_id\": \"HumanEval/1\"}\n", {"s.jsonl:1", "\"completion\""});
  bad("", {"no samples"});
  expect_failure({"score", (dir / "s.jsonl").string(), "--data-dir", (dir / "nodata").string()}, 1, {"HumanEval.jsonl", "BESTOFN_DATA"});
  expect_failure({"score", (dir / "s.jsonl").string(), "--k", "0"}, 2, {"--k"});
  expect_failure({"score"}, 2, {"SAMPLES"});
}

TEST(CliOutput, AFifoOrASymlinkIsWrittenThroughNotReplaced) {
  // --out names an existing file that is no regular file (here a FIFO; /dev/null is the common
  // case): it is written in place and stays what it was (a rename over it made /dev/null a
  // regular file). A symlink stays a link and its target gets the rows, keeping its mode.
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::vector<std::string> gen = {"generate", "--model", m, "--prompt", "def f():", "-n", "3", "--max-new-tokens", "4", "--out"};
  const fs::path fifo = dir / "rows.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = bestofn::test::read_text(fifo); });  // blocks until bestofn opens it
  auto args = gen;
  args.push_back(fifo.string());
  const auto r = run_cli(args);
  // A bestofn that never opened the FIFO (a regression) leaves the reader blocked in open: a
  // writer of our own releases it (EOF, and the check below fails) instead of a hung test.
  if (const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK); fd >= 0) close(fd);
  reader.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jsonl(got).size(), 3u) << got;
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_TRUE(bestofn::test::partial_files(fifo).empty());

  bestofn::test::write_text(dir / "real.jsonl", "old\n");
  ASSERT_EQ(chmod((dir / "real.jsonl").c_str(), 0640), 0);
  fs::create_symlink("real.jsonl", dir / "link.jsonl");
  args = gen;
  args.push_back((dir / "link.jsonl").string());
  const auto s = run_cli(args);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_TRUE(fs::is_symlink(dir / "link.jsonl")) << "the link was replaced";
  EXPECT_EQ(jsonl(bestofn::test::read_text(dir / "real.jsonl")).size(), 3u);
  ASSERT_EQ(stat((dir / "real.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u) << "the replaced file's mode was not kept";
  EXPECT_TRUE(bestofn::test::partial_files(dir / "real.jsonl").empty());

  // /dev/stdout on a pipe: a "magic" link whose text ("pipe:[N]") names no file; written in place.
  const std::string piped = (dir / "piped.jsonl").string();
  std::string cmd = "'" + bestofn::test::bestofn_binary() + "'";
  for (const auto& a : gen) cmd += " '" + a + "'";
  cmd += " /dev/stdout | cat > '" + piped + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(jsonl(bestofn::test::read_text(piped)).size(), 3u);

  // A directory: refused before the run, naming it.
  args = gen;
  args.push_back(dir.path().string());
  expect_failure(args, 1, {dir.path().string(), "is a directory"});
}

TEST(CliOutput, AStdoutThatCannotBeWrittenFailsTheRun) {
  // stdout on a full device: exit 1 and one line naming <stdout>, not exit 0 with lost output.
  // generate checks each row as it goes; tokenize and --help are checked at exit.
  struct stat full;
  if (stat("/dev/full", &full) != 0 || !S_ISCHR(full.st_mode)) GTEST_SKIP() << "no /dev/full device here";
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"generate", "--model", m, "--prompt", "x", "-n", "2", "--max-new-tokens", "4"},
           {"tokenize", "--tokenizer", (fs::path(m) / "tokenizer.json").string()},  // stdin: /dev/null, prints []
           {"--help"}}) {
    const int pid = bestofn::test::start_cli(args, "/dev/full", dir / "err");
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << args[0] << ": wait status " << st;
    const std::string err = bestofn::test::read_text(dir / "err");
    EXPECT_NE(err.find("<stdout>: write failed"), std::string::npos) << args[0] << ": " << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << args[0] << ": not one line: " << err;
  }
}

TEST(CliOutput, ScoreNeedsOutForSamplesFromADevice) {
  // The default results file is SAMPLES_results.jsonl: for /dev/stdin that would be a new file in
  // /dev. Refused before anything is read.
  expect_failure({"score", "/dev/stdin", "--data-dir", bestofn::test::require_shared("data").string()}, 1, {"/dev/stdin", "--out"});
  EXPECT_FALSE(fs::exists("/dev/stdin_results.jsonl"));
}

// --stop and --system must be UTF-8: a usage error that names the flag and the byte, before any
// model is loaded (a stop string with a stray byte could never match the decoded text; a bad
// system message was blamed on the prompt it had been rendered into, at a byte of the template).
TEST(CliErrors, StopAndSystemMustBeUtf8) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::string bad = "ok\xff";  // byte 2 breaks
  const std::vector<std::string> gen = {"generate", "--model", m, "--prompt", "def f():", "-n", "1", "--max-new-tokens", "2"};
  auto with = [](std::vector<std::string> a, std::initializer_list<std::string> more) {
    a.insert(a.end(), more);
    return a;
  };
  expect_failure(with(gen, {"--stop", "\n", "--stop", bad}), 2, {"--stop", "not valid UTF-8 at byte 2"});
  expect_failure(with(gen, {"--chat", "--system", bad}), 2, {"--system", "not valid UTF-8 at byte 2"});
  expect_failure({"tokenize", "--tokenizer", bestofn::test::require_shared("tokenizers/llama3").string(), "--chat", "--system", bad,
                  "/dev/null"},
                 2, {"--system", "not valid UTF-8 at byte 2"});
  // Valid UTF-8 beyond ASCII is taken as it is.
  const auto r = run_cli(with(gen, {"--stop", "\u00e9\u2192", "--chat", "--system", "Tu es \u00e9l\u00e8ve."}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// --device auto (the default) without a CUDA device runs the CPU engine; CUDA-only paths asked
// for are then named in a warning by default (--device cpu refuses them: a usage error).
TEST(CliErrors, AutoOnTheCpuNamesTheCudaFlagsItIgnores) {
  const auto version = run_cli({"--version"});
  if (version.out.find("devices:") != std::string::npos) GTEST_SKIP() << "a CUDA device is visible: auto runs the CUDA engine";
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const auto r = run_cli({"generate", "--model", m, "--prompt", "x", "-n", "1", "--max-new-tokens", "1", "--paged-kv", "--cuda-graphs"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: --device auto is running the CPU engine, which ignores --paged-kv, --cuda-graphs"), std::string::npos)
      << r.err;
  expect_failure({"generate", "--model", m, "--prompt", "x", "--device", "cpu", "--paged-kv"}, 2, {"--paged-kv", "--device is cpu"});
}

// On a terminal (a pty from util-linux `script`), the progress line goes to stderr, unless the
// rows go to that terminal too: they would land on the progress line.
TEST(CliGenerate, ProgressOnlyWhenTheRowsDoNotShareTheTerminal) {
  if (std::system("script --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no util-linux script to make a pty";
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  auto on_pty = [&](const std::string& extra) {
    const std::string cmd = "'" + bestofn::test::bestofn_binary() + "' generate --model '" + m + "' --prompt x -n 2 --max-new-tokens 3" + extra;
    const std::string shell = "script -qec \"" + cmd + "\" /dev/null > '" + (dir / "pty.txt").string() + "' 2>&1 < /dev/null";
    EXPECT_EQ(std::system(shell.c_str()), 0) << shell;
    return bestofn::test::read_text(dir / "pty.txt");
  };
  const std::string shared = on_pty("");
  EXPECT_NE(shared.find("\"finish_reason\""), std::string::npos) << shared;
  EXPECT_EQ(shared.find("candidates,"), std::string::npos) << shared;
  const std::string apart = on_pty(" --out '" + (dir / "rows.jsonl").string() + "'");
  EXPECT_NE(apart.find("2/2 candidates,"), std::string::npos) << apart;
  EXPECT_EQ(bestofn::test::read_jsonl(dir / "rows.jsonl").size(), 2u);
}

// Prompt files are read by their names' extension in any case (.jsonl, .ndjson, .json, .gz), and
// nothing of a prompt file is lost or altered without a word: JSONL rows under another name are
// not one plain-text prompt, an empty prompt is refused, an id comes back as it was given or is
// refused (an integer beyond 64 bits was written back rounded), and a parse error in a 5 MB line
// is one short line of UTF-8.
TEST(CliErrors, PromptFilesLoseNothingSilently) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::string rows = "{\"id\": \"a\", \"prompt\": \"def f(\"}\n{\"id\": \"b\", \"prompt\": \"x = \"}\n";
  auto gen = [&](const fs::path& prompts) {
    return std::vector<std::string>{"generate", "--model", m, "--prompts", prompts.string(), "-n", "1", "--max-new-tokens", "1"};
  };
  for (const char* name : {"p.JSONL", "p.ndjson", "p.NdJson"}) {
    bestofn::test::write_text(dir / name, rows);
    const auto r = run_cli(gen(dir / name));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << name << ": " << r.out;
    EXPECT_NE(r.out.find("\"id\":\"b\""), std::string::npos) << r.out;
  }
  bestofn::test::write_text(dir / "rows.txt", "\n" + rows);
  expect_failure(gen(dir / "rows.txt"), 1, {(dir / "rows.txt").string(), "holds JSON prompt rows", "*.jsonl"});
  bestofn::test::write_text(dir / "text.txt", "{ braces open a plain prompt too\n");
  EXPECT_EQ(run_cli(gen(dir / "text.txt")).exit_code, 0);

  bestofn::test::write_text(dir / "empty.jsonl", "{\"prompt\": \"x\"}\n{\"prompt\": \"\"}\n");
  expect_failure(gen(dir / "empty.jsonl"), 1, {"empty.jsonl:2", "\"prompt\" is empty"});
  expect_failure({"generate", "--model", m, "--prompt", ""}, 2, {"--prompt", "is empty"});

  bestofn::test::write_text(dir / "ids.jsonl", "{\"id\": 18446744073709551615, \"prompt\": \"x\"}\n{\"id\": -7, \"prompt\": \"y\"}\n");
  const auto ids = run_cli(gen(dir / "ids.jsonl"));
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_NE(ids.out.find("\"id\":18446744073709551615,"), std::string::npos) << ids.out;
  EXPECT_NE(ids.out.find("\"id\":-7,"), std::string::npos) << ids.out;
  bestofn::test::write_text(dir / "bigid.jsonl", "{\"id\": 123456789012345678901234567890, \"prompt\": \"x\"}\n");
  expect_failure(gen(dir / "bigid.jsonl"), 1, {"bigid.jsonl:1", "\"id\" must be a string or a whole number within 64 bits"});
  bestofn::test::write_text(dir / "twice.jsonl", "{\"id\": \"a\", \"prompt\": \"x\", \"prompt\": \"y\"}\n");
  expect_failure(gen(dir / "twice.jsonl"), 1, {"twice.jsonl:1", "key \"prompt\" appears twice in one object"});
  bestofn::test::write_text(dir / "twice.json", "[{\"prompt\": \"x\", \"n\": 1, \"n\": 3}]");
  expect_failure(gen(dir / "twice.json"), 1, {"twice.json", "key \"n\" appears twice"});
  bestofn::test::write_text(dir / "objid.jsonl", "{\"id\": {\"k\": 1}, \"prompt\": \"x\"}\n");
  expect_failure(gen(dir / "objid.jsonl"), 1, {"objid.jsonl:1", "\"id\" must be"});

  bestofn::test::write_text(dir / "long.jsonl", "{\"prompt\": \"" + std::string(2000000, 'x') + "\xff\"}\n");
  const auto r = run_cli(gen(dir / "long.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.err.starts_with("bestofn: error: " + (dir / "long.jsonl").string() + ":1: not valid JSON")) << r.err.substr(0, 300);
  EXPECT_LT(r.err.size(), 1200u);
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1);
  EXPECT_FALSE(bestofn::utf8::first_invalid(r.err)) << r.err;
  EXPECT_NE(r.err.find("bytes cut"), std::string::npos) << r.err;
}

// BESTOFN_FP8_PATH picks the FP8 GEMM kernel (src/cpu/ops.cpp): every path this CPU runs gives
// the candidates of the path the engine picks by itself, token for token and logprob for logprob
// (the kernels' shared order, gemm_fp8.h); a name that is no path, or a path this CPU lacks, is a
// one-line error that names the variable.
TEST(CliErrors, EveryFp8PathGivesTheSameCandidates) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::vector<std::string> gen = {"generate", "--model", m, "--prompt", "def f():", "-n", "4", "--max-new-tokens", "12",
                                        "--temperature", "0.8", "--seed", "9", "--ids"};
  unsetenv("BESTOFN_FP8_PATH");
  const auto base = run_cli(gen);
  ASSERT_EQ(base.exit_code, 0) << base.err;
  ASSERT_EQ(jsonl(base.out).size(), 4u);
  int ran = 0;
  for (const char* path : {"generic", "avx2", "avx2_f16c", "avx512_bf16", "avx512_fma"}) {
    ASSERT_EQ(setenv("BESTOFN_FP8_PATH", path, 1), 0);
    const auto r = run_cli(gen);
    if (r.exit_code == 1 && r.err.find("this CPU does not run that path") != std::string::npos) {
      std::cout << "[ note     ] this CPU has no FP8 path " << path << "\n";
      continue;
    }
    ++ran;
    ASSERT_EQ(r.exit_code, 0) << path << ": " << r.err;
    EXPECT_EQ(r.out, base.out) << path;
  }
  EXPECT_GE(ran, 1);  // the generic path runs everywhere
  ASSERT_EQ(setenv("BESTOFN_FP8_PATH", "avx1024", 1), 0);
  expect_failure(gen, 1, {"BESTOFN_FP8_PATH=avx1024", "not a path"});
  unsetenv("BESTOFN_FP8_PATH");
}

TEST(CliErrors, ThreadsFromTheEnvironmentAreCheckedAndCappedAtTheCpus) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::vector<std::string> gen = {"generate", "--model", m, "--prompt", "def f():", "-n", "3", "--max-new-tokens", "6",
                                        "--temperature", "0.8", "--seed", "5"};
  for (const char* bad : {"abc", "-3", "0", "100000", "2x"}) {
    ASSERT_EQ(setenv("BESTOFN_THREADS", bad, 1), 0);
    expect_failure(gen, 2, {"$BESTOFN_THREADS", bad});
  }
  unsetenv("BESTOFN_THREADS");
  // More threads than CPUs: a warning, the CPUs' count used, the same candidates as one thread.
  auto with = [&](const char* threads) {
    auto a = gen;
    a.insert(a.end(), {"--threads", threads});
    return run_cli(a);
  };
  const auto one = with("1"), many = with("1024");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(many.exit_code, 0) << many.err;
  EXPECT_EQ(many.out, one.out);
  EXPECT_NE(many.err.find("1024 CPU threads asked for"), std::string::npos) << many.err;
}

TEST(CliGenerate, AModelVocabularyPaddedPastTheTokenizersIsNeverSampledThere) {
  // A model with more logit rows than the tokenizer has ids (here the Llama 3 sized tiny model,
  // 128256 rows, with Mistral's tokenizer of 32000 ids; real checkpoints pad too): the extra ids
  // have no text, so they are never drawn (they failed the run when the draw hit one).
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const std::string mistral = bestofn::test::require_shared("tokenizers/mistral/tokenizer.json").string();
  const auto r = run_cli({"generate", "--model", m, "--tokenizer", mistral, "--prompt", "def f():", "-n", "8", "--max-new-tokens", "24",
                          "--temperature", "1", "--seed", "3", "--ids"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = jsonl(r.out);
  ASSERT_EQ(rows.size(), 8u);
  int drawn = 0;
  for (const auto& row : rows)
    for (const auto& id : row["token_ids"]) {
      EXPECT_LT(id.get<int>(), 32000);
      ++drawn;
    }
  EXPECT_GT(drawn, 8 * 8) << "too few draws to have met an id past 32000 by chance";
}

TEST(CliBench, APromptThatFillsTheContextExactlyRunsAndOneMoreIsRefusedWithTheLargest) {
  // bench's positions: the prompt, 2 warm-up steps, --steps, and 4 profiling steps (CUDA). The
  // check was off by one (>=) and did not say what would fit.
  bestofn::test::TempDir dir;
  const std::string m = synth(dir, "m", "bf16");
  const int ctx = json::parse(bestofn::test::read_text(fs::path(m) / "config.json"))["max_position_embeddings"].get<int>();
  const int largest = ctx - (1 + 2 + 4);
  const auto ok = run_cli({"bench", "--model", m, "--n", "1", "--steps", "1", "--prompt-len", std::to_string(largest), "--json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  expect_failure({"bench", "--model", m, "--n", "1", "--steps", "1", "--prompt-len", std::to_string(largest + 1)}, 1,
                 {"--prompt-len " + std::to_string(largest + 1), "the largest --prompt-len with these --steps is " + std::to_string(largest)});
}
