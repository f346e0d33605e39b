// bestofn generate end to end: reproducible candidates, prompt files, atomic output under signals,
// the FP8 paths, and its errors.
#include "test_cli_util.h"

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
  EXPECT_EQ(with({"--batch", "3", "--speculate", "4"}), a.out);  // drafts verified, the same rows
  EXPECT_NE(with({"--seed", "2"}), a.out);
  // An FP8 KV cache: the same reproducibility whatever --batch and --threads.
  const std::string fp8 = with({"--kv-cache", "fp8"});
  EXPECT_EQ(jsonl(fp8).size(), 8u);
  EXPECT_EQ(with({"--kv-cache", "fp8", "--batch", "3", "--threads", "1"}), fp8);
}

// --prefill-tokens packs prompts into shared prefill passes (or, at 1, one row a pass): the same
// JSONL, byte for byte, on four prompts of different lengths and two candidates in flight.
TEST(CliGenerate, PrefillTokensDoNotChangeTheRows) {
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  bestofn::test::write_text(dir / "p.jsonl",
                            "{\"prompt\": \"def f():\", \"n\": 3}\n{\"prompt\": \"x\"}\n{\"prompt\": \"import os\\nimport sys\\n\"}\n"
                            "{\"prompt\": \"class A:\\n    def g(self):\"}\n");
  auto with = [&](const std::string& tokens) {
    const auto r = run_cli({"generate", "--model", m, "--prompts", (dir / "p.jsonl").string(), "-n", "2", "--max-new-tokens", "6",
                            "--temperature", "0.8", "--batch", "2", "--ids", "--prefill-tokens", tokens});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string all = with("8192");
  EXPECT_EQ(jsonl(all).size(), 9u);
  EXPECT_EQ(with("1"), all);
  EXPECT_EQ(with("7"), all);
  expect_failure({"generate", "--model", m, "--prompt", "x", "--prefill-tokens", "0"}, 2, {"--prefill-tokens"});
  expect_failure({"generate", "--model", m, "--prompt", "x", "--speculate", "-1"}, 2, {"--speculate"});
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
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--timeout", "5"}, {"--workers", "2"}, {"--no-zygote"}, {"--allow-processes"}}) {
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
