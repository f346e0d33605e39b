// What every command shares: usage errors (exit 2), --help, one-line errors naming the file (exit 1),
// inputs that are FIFOs, devices or directories, output through FIFOs and symlinks, the device and
// thread settings.
#include "test_cli_util.h"

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
