// bestofn compare end to end: two runs' results written by the test (eval's results rows), their
// pass@k against the estimator's definition, the paired verdicts, --fail-if-worse, and its errors.
#include "test_cli_util.h"

namespace {

// C(n, r) for the small n here, exactly.
double choose(int n, int r) {
  if (r < 0 || r > n) return 0;
  double c = 1;
  for (int i = 1; i <= r; ++i) c = c * (n - r + i) / i;
  return c;
}

// pass@k by its definition, 1 - C(n-c, k) / C(n, k).
double definition(int n, int c, int k) { return 1 - choose(n - c, k) / choose(n, k); }

struct Problem {
  int id, n, c, plus_c = -1;  // plus_c < 0: no plus verdicts
};

// results.jsonl as eval writes it: n rows per problem, the first c passing the base tests and the
// first plus_c of those the plus tests too; with ks, a summary.json holding them.
fs::path write_run(const fs::path& dir, const std::vector<Problem>& problems, const std::vector<int>& ks = {}) {
  fs::create_directories(dir);
  std::string rows;
  for (const Problem& p : problems)
    for (int i = 0; i < p.n; ++i) {
      json r = {{"task_id", "HumanEval/" + std::to_string(p.id)}, {"completion", "    return 1\n"}, {"index", i},
                {"result", i < p.c ? "passed" : "failed: AssertionError"}, {"passed", i < p.c}};
      if (p.plus_c >= 0) {
        r["plus_result"] = i < p.plus_c ? "passed" : "failed: plus input 3";
        r["plus_passed"] = i < p.plus_c;
      }
      rows += r.dump() + "\n";
    }
  bestofn::test::write_text(dir / "results.jsonl", rows);
  if (!ks.empty()) bestofn::test::write_text(dir / "summary.json", json{{"k", ks}}.dump());
  return dir;
}

// Problems 0..count-1 with n samples and c = f(i) passes.
std::vector<Problem> problems(int count, int n, const std::function<int(int)>& c) {
  std::vector<Problem> out;
  for (int i = 0; i < count; ++i) out.push_back({i, n, c(i)});
  return out;
}

json compare_json(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"compare"};
  full.insert(full.end(), args.begin(), args.end());
  full.push_back("--json");
  const auto r = run_cli(full);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

}  // namespace

TEST(CliCompare, IdenticalRunsAreWithinNoise) {
  bestofn::test::TempDir tmp;
  const auto ps = problems(40, 5, [](int i) { return i % 6 == 5 ? 5 : i % 4; });
  const fs::path a = write_run(tmp / "a", ps), b = write_run(tmp / "b", ps);
  const json j = compare_json({a.string(), b.string(), "--k", "1,2,5"});
  EXPECT_EQ(j["shared_problems"], 40);
  EXPECT_EQ(j["only_in_a"], 0);
  EXPECT_EQ(j["interval"]["resamples"], 2000);
  EXPECT_EQ(j["interval"]["seed"], 47);
  for (const int k : {1, 2, 5}) {
    const json& r = j["pass_at_k"][std::to_string(k)];
    double want = 0;
    for (const Problem& p : ps) want += definition(p.n, p.c, k);
    want /= static_cast<double>(ps.size());
    EXPECT_NEAR(r["a"].get<double>(), want, 1e-12) << k;
    EXPECT_NEAR(r["b"].get<double>(), want, 1e-12) << k;
    EXPECT_EQ(r["difference"], 0.0);
    EXPECT_EQ(r["interval"], json::array({0.0, 0.0})) << k;
    EXPECT_EQ(r["verdict"], "within noise");
    EXPECT_FALSE(r.contains("direction"));
    EXPECT_EQ(r["problems"], 40);
    // Each run's own interval over the same problems holds its pass@k.
    EXPECT_LT(r["a_interval"][0].get<double>(), want);
    EXPECT_GT(r["a_interval"][1].get<double>(), want);
  }
  EXPECT_FALSE(j.contains("plus_pass_at_k"));
  // Text: one line per k; --fail-if-worse has nothing to fail on.
  const auto t = run_cli({"compare", a.string(), b.string(), "--k", "1", "--fail-if-worse"});  // 0.39: python3, mean of c / 5
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("paired over the 40 problems both ran (0 only in A, 0 only in B)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("pass@1: A 0.3900, B 0.3900, B-A +0.0000 (95% CI +0.0000 to +0.0000) over 40 problems: within noise"),
            std::string::npos)
      << t.out;
}

TEST(CliCompare, ARunThatPassesEverythingDiffersFromOneThatPassesNothing) {
  bestofn::test::TempDir tmp;
  const fs::path all = write_run(tmp / "all", problems(30, 4, [](int) { return 4; }));
  const fs::path none = write_run(tmp / "none", problems(30, 4, [](int) { return 0; }));
  const json j = compare_json({all.string(), none.string(), "--k", "1,4"});
  for (const char* k : {"1", "4"}) {
    const json& r = j["pass_at_k"][k];
    EXPECT_EQ(r["a"], 1.0);
    EXPECT_EQ(r["b"], 0.0);
    EXPECT_EQ(r["interval"], json::array({-1.0, -1.0}));
    EXPECT_EQ(r["verdict"], "differ");
    EXPECT_EQ(r["direction"], "B worse");
  }
  // In CI: B (the candidate) worse than A (the baseline) fails with --fail-if-worse only, exit 3.
  const auto worse = run_cli({"compare", all.string(), none.string(), "--k", "1", "--fail-if-worse"});
  EXPECT_EQ(worse.exit_code, 3) << worse.err;
  EXPECT_NE(worse.out.find("differ, B worse"), std::string::npos) << worse.out;
  EXPECT_NE(worse.err.find("pass@1: B is worse than A beyond noise"), std::string::npos) << worse.err;
  EXPECT_EQ(run_cli({"compare", all.string(), none.string(), "--k", "1"}).exit_code, 0);
  const auto better = run_cli({"compare", none.string(), all.string(), "--k", "1", "--fail-if-worse"});
  EXPECT_EQ(better.exit_code, 0) << better.err;
  EXPECT_NE(better.out.find("differ, B better"), std::string::npos) << better.out;
}

TEST(CliCompare, PairedOverSharedProblemsWithPlusAndTheRunsOwnK) {
  bestofn::test::TempDir tmp;
  // A: problems 0..59, n = 4; B: 20..79, n = 8, better on the shared problems divisible by 3 and not
  // by 5 (11 of the 40), equal on the others.
  std::vector<Problem> pa, pb;
  for (int i = 0; i < 60; ++i) pa.push_back({i, 4, i % 5 == 0 ? 0 : i % 3 == 0 ? 1 : 3, i % 5 == 0 ? 0 : 1});
  for (int i = 20; i < 80; ++i) pb.push_back({i, 8, i % 5 == 0 ? 0 : i % 3 == 0 ? 7 : 6, i % 5 == 0 ? 0 : 2});
  const fs::path a = write_run(tmp / "a", pa, {1, 4}), b = write_run(tmp / "b", pb, {1, 8});
  const json j = compare_json({a.string(), b.string()});
  EXPECT_EQ(j["shared_problems"], 40);
  EXPECT_EQ(j["only_in_a"], 20);
  EXPECT_EQ(j["only_in_b"], 20);
  EXPECT_EQ(j["a"]["problems"], 60);
  EXPECT_EQ(j["b"]["samples"], 480);
  // The k of both summaries; pass@8 needs 8 samples, which A's problems do not have.
  std::vector<std::string> ks;
  for (const auto& [k, v] : j["pass_at_k"].items()) ks.push_back(k);
  EXPECT_EQ(ks, (std::vector<std::string>{"1", "4", "8"}));
  EXPECT_EQ(j["pass_at_k"]["8"]["verdict"], "not computable");
  EXPECT_EQ(j["pass_at_k"]["8"]["problems"], 0);
  EXPECT_TRUE(j["pass_at_k"]["8"]["interval"].is_null());
  for (const int k : {1, 4}) {
    double want_a = 0, want_b = 0;
    for (int i = 20; i < 60; ++i) want_a += definition(4, pa[static_cast<std::size_t>(i)].c, k), want_b += definition(8, pb[static_cast<std::size_t>(i - 20)].c, k);
    const json& r = j["pass_at_k"][std::to_string(k)];
    EXPECT_NEAR(r["a"].get<double>(), want_a / 40, 1e-12) << k;
    EXPECT_NEAR(r["b"].get<double>(), want_b / 40, 1e-12) << k;
    EXPECT_EQ(r["problems"], 40);
  }
  // pass@1: B better by 7/8 - 1/4 on 11 of 40 problems, equal on the rest: beyond noise.
  EXPECT_EQ(j["pass_at_k"]["1"]["verdict"], "differ");
  EXPECT_EQ(j["pass_at_k"]["1"]["direction"], "B better");
  EXPECT_GT(j["pass_at_k"]["1"]["interval"][0].get<double>(), 0.0);
  // The plus tests: both runs have them.
  ASSERT_TRUE(j.contains("plus_pass_at_k"));
  EXPECT_NEAR(j["plus_pass_at_k"]["1"]["a"].get<double>(), 32.0 / 40 * 0.25, 1e-12);
  EXPECT_NEAR(j["plus_pass_at_k"]["1"]["b"].get<double>(), 32.0 / 40 * 0.25, 1e-12);
  EXPECT_EQ(j["plus_pass_at_k"]["1"]["verdict"], "within noise");
  // B without plus verdicts: base only, and the text says so.
  for (Problem& p : pb) p.plus_c = -1;
  write_run(tmp / "b", pb);
  EXPECT_FALSE(compare_json({a.string(), b.string()}).contains("plus_pass_at_k"));
  const auto t = run_cli({"compare", a.string(), (b / "results.jsonl").string(), "--k", "1"});
  EXPECT_NE(t.out.find("plus tests: only A has plus verdicts"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("(20 only in A, 20 only in B)"), std::string::npos) << t.out;
}

TEST(CliCompare, TheSeedMakesTheIntervalsReproducible) {
  bestofn::test::TempDir tmp;
  const fs::path a = write_run(tmp / "a", problems(50, 4, [](int i) { return i % 5; }));
  const fs::path b = write_run(tmp / "b", problems(50, 4, [](int i) { return (i * 7) % 5; }));
  const json one = compare_json({a.string(), b.string(), "--k", "1"}), again = compare_json({a.string(), b.string(), "--k", "1"});
  EXPECT_EQ(one, again);
  const json other = compare_json({a.string(), b.string(), "--k", "1", "--seed", "48", "--resamples", "3000"});
  EXPECT_EQ(other["interval"]["seed"], 48);
  EXPECT_EQ(other["interval"]["resamples"], 3000);
  EXPECT_EQ(other["pass_at_k"]["1"]["difference"], one["pass_at_k"]["1"]["difference"]);
  EXPECT_NE(other["pass_at_k"]["1"]["interval"], one["pass_at_k"]["1"]["interval"]);
}

TEST(CliCompare, BadInputsAndUsage) {
  bestofn::test::TempDir tmp;
  const fs::path a = write_run(tmp / "a", problems(5, 2, [](int) { return 1; }));
  const fs::path other = write_run(tmp / "other", {{100, 2, 1}, {101, 2, 0}});
  // Disjoint problem sets name both files.
  expect_failure({"compare", a.string(), other.string()}, 1,
                 {(a / "results.jsonl").string(), (other / "results.jsonl").string(), "share no problem", "HumanEval/100"});
  // A row without its verdict, a line that is not JSON, an empty file, a missing one.
  bestofn::test::write_text(tmp / "samples.jsonl", "{\"task_id\": \"HumanEval/0\", \"passed\": true}\n{\"task_id\": \"HumanEval/1\", \"completion\": \"x\"}\n");
  expect_failure({"compare", a.string(), (tmp / "samples.jsonl").string()}, 1, {"samples.jsonl:2", "\"passed\""});
  bestofn::test::write_text(tmp / "broken.jsonl", "{\"task_id\": \"HumanEval/0\", \"passed\": tru\n");
  expect_failure({"compare", (tmp / "broken.jsonl").string(), a.string()}, 1, {"broken.jsonl:1", "not valid JSON"});
  bestofn::test::write_text(tmp / "empty.jsonl", "\n");
  expect_failure({"compare", a.string(), (tmp / "empty.jsonl").string()}, 1, {"empty.jsonl", "no results rows"});
  expect_failure({"compare", a.string(), (tmp / "nope").string()}, 1, {(tmp / "nope").string(), "no such file"});
  fs::create_directories(tmp / "not_a_run");
  expect_failure({"compare", (tmp / "not_a_run").string(), a.string()}, 1, {"not_a_run/results.jsonl", "not an eval output directory"});
  // An --until-pass run's pass@k is biased: refused, naming its run.json.
  const fs::path early = write_run(tmp / "early", problems(5, 2, [](int) { return 1; }));
  bestofn::test::write_text(early / "run.json", R"({"until_pass": 1, "stop_on_pass": false})");
  expect_failure({"compare", a.string(), early.string()}, 1, {"early/run.json", "--until-pass", "biased"});
  // Usage errors: exit 2.
  expect_failure({"compare", a.string()}, 2, {"B"});
  expect_failure({"compare", a.string(), a.string(), "--k", "0"}, 2, {"--k"});
  expect_failure({"compare", a.string(), a.string(), "--resamples", "10"}, 2, {"--resamples"});
  expect_failure({"compare", a.string(), a.string(), "--seed", "-1"}, 2, {"--seed"});
}
