// bestofn bench: one JSON line per configuration, and the context limit.
#include "test_cli_util.h"

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
  // --speculate 3: steps of 4 positions per candidate (the cost of verifying 3 drafts).
  const auto sp = run_cli({"bench", "--synthetic", "tiny", "--n", "2", "--prompt-len", "8", "--steps", "2", "--json", "--speculate", "3"});
  ASSERT_EQ(sp.exit_code, 0) << sp.err;
  EXPECT_EQ(jsonl(sp.out).at(0)["positions_per_candidate"], 4);
  EXPECT_EQ(rows[0]["positions_per_candidate"], 1);
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

// --small-m-linear's knobs change its path only: without it each is a usage error (exit 2) naming
// the flag it needs, not a silent no-op; on the CPU engine every CUDA path flag is refused.
TEST(CliBench, SmallMKnobsWithoutSmallMLinearAreUsageErrors) {
  for (const std::vector<std::string>& knob : {std::vector<std::string>{"--small-m-split"}, {"--small-m-pdl"}, {"--small-m-blocks-per-sm", "2"}}) {
    std::vector<std::string> args = {"bench", "--synthetic", "tiny", "--device", "cuda", "--n", "1", "--steps", "2"};
    args.insert(args.end(), knob.begin(), knob.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << knob[0] << ": " << r.err;
    EXPECT_NE(r.err.find("add --small-m-linear"), std::string::npos) << r.err;
    args[4] = "cpu";
    args.push_back("--small-m-linear");
    const auto c = run_cli(args);
    EXPECT_EQ(c.exit_code, 2) << knob[0] << " on the CPU: " << c.err;
    EXPECT_NE(c.err.find("--device is cpu"), std::string::npos) << c.err;
  }
  const auto r = run_cli({"bench", "--synthetic", "tiny", "--device", "cuda", "--n", "1", "--small-m-linear", "--small-m-blocks-per-sm", "33"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}
