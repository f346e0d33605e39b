// bestofn make-synthetic: the weights it writes, the tokenizer it copies, shards, and nothing left
// behind by an error or a signal.
#include "test_cli_util.h"

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

TEST(CliErrors, NoPartialModelIsLeftBehind) {
  bestofn::test::TempDir dir;
  // A config that fails validation after the output directory was planned.
  bestofn::test::write_text(dir / "cfg.json", R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":100})");
  expect_failure({"make-synthetic", "--shape", (dir / "cfg.json").string(), "--out", (dir / "out").string()}, 1,
                 {"cfg.json", "num_key_value_heads"});
  for (const auto& e : fs::directory_iterator(dir.path())) EXPECT_EQ(e.path().filename(), "cfg.json") << e.path();
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
