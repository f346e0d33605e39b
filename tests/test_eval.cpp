// bestofn eval end to end on the CPU: a synthetic tiny model with the real Llama 3 tokenizer
// (garbage completions, real plumbing), resume after SIGKILL, the summary/report/plot, and the
// pass-counting path with known samples.
// Over 500 lines on purpose: one command end to end, its cases sharing the model and run helpers.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "bestofn/eval/eval_summary.h"
#include "bestofn/eval/run_eval.h"
#include "bestofn/eval/run_merge.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/text_file.h"
#include "test_util.h"

using namespace bestofn::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// One tiny model for every test in this process.
const fs::path& tiny_model() {
  static const fs::path model = tiny_synthetic_model(5);
  return model;
}

std::size_t count_lines(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

std::vector<std::string> eval_args(const fs::path& out, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"eval", "--model", tiny_model().string(), "--dataset", "humaneval", "--data-dir",
                                shared_path("data").string(), "--out-dir", out.string(), "--device", "cpu", "--temperature", "0.9",
                                "--seed", "11"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// XML well-formedness by Python's own parser (an independent reference).
bool well_formed_svg(const fs::path& p) {
  const std::string cmd = "python3 -c \"import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
                          "sys.exit(0 if r.tag.endswith('svg') else 1)\" '" + p.string() + "'";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

TEST(Eval, RowsSummaryReportAndPlotAreWellFormed) {
  TempDir tmp;
  const fs::path out = tmp / "run";
  // (--out-dir given relative to the working directory: the summary names the plot absolutely)
  const auto r = run_cli(eval_args(fs::relative(out), {"-n", "5", "--limit", "4", "--k", "1,2,10", "--max-new-tokens", "24", "--batch", "3",
                                                       "--reference", "GPT-4o=0.902", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto samples = read_jsonl(out / "samples.jsonl"), results = read_jsonl(out / "results.jsonl");
  EXPECT_EQ(samples.size(), 20u);
  EXPECT_EQ(results.size(), 20u);
  EXPECT_EQ(rows_by_key(samples).size(), 20u) << "duplicate (task_id, index) rows";
  EXPECT_EQ(rows_by_key(results).size(), 20u);
  for (const auto& s : samples) {
    for (const char* f : {"task_id", "completion", "index", "finish_reason", "num_tokens", "logprob"}) EXPECT_TRUE(s.contains(f)) << f;
    EXPECT_LE(s["num_tokens"].get<int>(), 24);
  }
  for (const auto& x : results) {
    EXPECT_TRUE(x["result"].is_string());
    EXPECT_EQ(x["passed"].get<bool>(), x["result"] == "passed");
  }
  // --json prints the summary, the same as summary.json.
  const json printed = json::parse(r.out);
  const json summary = json::parse(read_text(out / "summary.json"));
  EXPECT_EQ(printed, summary);
  EXPECT_EQ(summary["n"], 5);
  EXPECT_EQ(summary["samples"], 20);
  EXPECT_EQ(summary["dataset"]["problems"], 4);
  EXPECT_TRUE(summary["pass_at_k"]["1"].is_number());
  EXPECT_TRUE(summary["pass_at_k"]["10"].is_null()) << "k > n must be reported as not computable";
  EXPECT_EQ(summary["problems_skipped"]["10"], 4);
  // Each pass@k's interval over the 4 problems (none for k > n), and how it was made (issue 47).
  ASSERT_TRUE(summary["pass_at_k_interval"]["1"].is_array()) << summary.dump();
  EXPECT_LE(summary["pass_at_k_interval"]["1"][0].get<double>(), summary["pass_at_k"]["1"].get<double>());
  EXPECT_GE(summary["pass_at_k_interval"]["1"][1].get<double>(), summary["pass_at_k"]["1"].get<double>());
  EXPECT_TRUE(summary["pass_at_k_interval"]["10"].is_null());
  EXPECT_EQ(summary["interval"]["resamples"], 2000);
  EXPECT_EQ(summary["interval"]["level"], 0.95);
  EXPECT_EQ(summary["references"]["GPT-4o"], 0.902);
  EXPECT_TRUE(fs::path(summary["plot"].get<std::string>()).is_absolute()) << summary["plot"];
  EXPECT_EQ(fs::canonical(summary["plot"].get<std::string>()), fs::canonical(out / "fail_at_k.svg"));
  EXPECT_GT(summary["tokens"].get<int>(), 0);
  const json& t = summary["time"];
  EXPECT_GE(t["wall_s"].get<double>(), t["generation_s"].get<double>());
  EXPECT_LE(t["overlap_s"].get<double>(), t["wall_s"].get<double>() + 1e-9);
  EXPECT_LE(t["overlap_s"].get<double>(), t["verification_s"].get<double>() + 1e-9);
  // Selection without the hidden tests (issue 46): the default strategies, each with selected@1
  // between 0 and pass@n, over the problems run.
  const json& sel = summary["selection"];
  EXPECT_EQ(sel["problems"], 4);
  for (const char* name : {"logprob", "public", "cluster", "public,cluster,logprob"}) {
    ASSERT_TRUE(sel["strategies"].contains(name)) << sel.dump();
    EXPECT_GE(sel["strategies"][name]["selected_at_1"].get<double>(), 0.0);
    EXPECT_LE(sel["strategies"][name]["selected_at_1"].get<double>(), sel["pass_at_n"].get<double>());
    EXPECT_TRUE(sel["strategies"][name]["selected_at_1_interval"].is_array()) << name;
  }
  const std::string report = read_text(out / "report.md");
  EXPECT_NE(report.find("pass@1"), std::string::npos);
  EXPECT_NE(report.find("## Selection without the hidden tests"), std::string::npos);
  EXPECT_NE(report.find("| public,cluster,logprob |"), std::string::npos);
  EXPECT_NE(report.find("fail_at_k.svg"), std::string::npos);
  EXPECT_TRUE(well_formed_svg(out / "fail_at_k.svg"));
  EXPECT_NE(read_text(out / "fail_at_k.svg").find("class=\"band base\""), std::string::npos);  // pass@k's intervals, shaded
  EXPECT_NE(report.find("CI: 95% interval over problems"), std::string::npos);
  EXPECT_NE(read_text(out / "fail_at_k.svg").find("GPT-4o"), std::string::npos);
  EXPECT_NE(read_text(out / "fail_at_k.svg").find("public,cluster,logprob selected@1 = "), std::string::npos);  // its diamond's label
  // The run's directory is not overwritten by accident.
  const auto again = run_cli(eval_args(out, {"-n", "5", "--limit", "4"}));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("--resume"), std::string::npos) << again.err;
}

TEST(Eval, ResumeAfterSigkillEqualsAnUninterruptedRun) {
  TempDir tmp;
  const std::vector<std::string> common = {"-n", "8", "--limit", "4", "--k", "1,5", "--max-new-tokens", "32", "--batch", "4", "--workers", "1"};
  const fs::path whole = tmp / "whole", cut = tmp / "cut";
  const auto full = run_cli(eval_args(whole, common));
  ASSERT_EQ(full.exit_code, 0) << full.err;

  const pid_t pid = start_cli(eval_args(cut, common), tmp / "out.txt", tmp / "err.txt");
  // Kill it once some samples are written and verified (so that the resume finds some done: the
  // verifier can lag the engine on a loaded machine) and before it is done.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((count_lines(cut / "samples.jsonl") < 10 || count_lines(cut / "results.jsonl") < 1) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "the run finished before it could be killed";
  const std::size_t before = count_lines(cut / "samples.jsonl");
  EXPECT_LT(before, 32u);
  EXPECT_FALSE(fs::exists(cut / "summary.json"));

  // Resumed through another spelling of the model's path (a symlink, a trailing slash): run.json
  // records canonical paths, so it is the same run.
  fs::create_directory_symlink(tiny_model(), tmp / "model-link");
  const auto resumed = run_cli([&] {
    auto a = eval_args(cut, common);
    const auto model = std::find(a.begin(), a.end(), "--model") + 1;
    *model = (tmp / "model-link").string() + "/";
    a.push_back("--resume");
    return a;
  }());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto a = rows_by_key(read_jsonl(whole / "samples.jsonl")), b = rows_by_key(read_jsonl(cut / "samples.jsonl"));
  EXPECT_EQ(read_jsonl(cut / "samples.jsonl").size(), 32u) << "no duplicates, no losses";
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, row] : a) {
    ASSERT_TRUE(b.count(key)) << key.first << " " << key.second;
    EXPECT_EQ(row["completion"], b.at(key)["completion"]) << key.first << " " << key.second;
    EXPECT_EQ(row["finish_reason"], b.at(key)["finish_reason"]);
    EXPECT_EQ(row["num_tokens"], b.at(key)["num_tokens"]);
  }
  const auto ra = rows_by_key(read_jsonl(whole / "results.jsonl")), rb = rows_by_key(read_jsonl(cut / "results.jsonl"));
  EXPECT_EQ(read_jsonl(cut / "results.jsonl").size(), 32u);
  for (const auto& [key, row] : ra) EXPECT_EQ(row["result"], rb.at(key)["result"]) << key.first << " " << key.second;
  const json sa = json::parse(read_text(whole / "summary.json")), sb = json::parse(read_text(cut / "summary.json"));
  EXPECT_EQ(sa["pass_at_k"], sb["pass_at_k"]);
  EXPECT_EQ(sa["verdicts"], sb["verdicts"]);
  EXPECT_GT(sb["resumed_samples"].get<int>(), 0);
  EXPECT_EQ(sa["tokens"], sb["tokens"]) << "the run's tokens, not only the resumed call's";
  // A --resume with nothing left to do keeps the run's summary (its times and tokens are not
  // replaced by the no-op call's zeros) and report.
  const std::string summary_before = read_text(cut / "summary.json"), report_before = read_text(cut / "report.md");
  auto again_args = eval_args(cut, common);
  again_args.insert(again_args.end(), {"--resume", "--json"});
  const auto again = run_cli(again_args);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(read_text(cut / "summary.json"), summary_before);
  EXPECT_EQ(read_text(cut / "report.md"), report_before);
  EXPECT_EQ(json::parse(again.out), json::parse(summary_before));

  // Resuming with other settings is refused, naming the setting.
  const auto other = run_cli(eval_args(cut, {"-n", "8", "--limit", "4", "--max-new-tokens", "33", "--resume"}));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("max_new_tokens"), std::string::npos) << other.err;
}

TEST(Eval, KnownSamplesCountExactly) {
  // The pass-counting path of eval with known samples: a run's samples are replaced by the
  // canonical solutions (problems 0 and 2) and wrong ones (problem 1), and --resume verifies them.
  TempDir tmp;
  const fs::path out = tmp / "run";
  const std::vector<std::string> common = {"-n", "4", "--limit", "3", "--k", "1,2,4", "--max-new-tokens", "4"};
  ASSERT_EQ(run_cli(eval_args(out, common)).exit_code, 0);
  std::map<std::string, std::string> canonical;
  {
    const std::string cmd = "python3 -c \"import gzip, json, sys; [print(json.dumps(json.loads(l))) for l in gzip.open(sys.argv[1], 'rt')]\" '" +
                            shared_path("data/humaneval/HumanEval.jsonl.gz").string() + "'";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[1 << 16];
    std::string all;
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) all.append(buf, n);
    pclose(p);
    std::istringstream lines(all);
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      canonical[j["task_id"]] = j["canonical_solution"];
    }
  }
  // Problem 0: 4 of 4 pass; problem 1: 1 of 4 (three wrong); problem 2: 0 of 4.
  std::ofstream s(out / "samples.jsonl", std::ios::trunc);
  for (int i = 0; i < 4; ++i) {
    s << json{{"task_id", "HumanEval/0"}, {"completion", canonical["HumanEval/0"]}, {"index", i}}.dump() << "\n";
    s << json{{"task_id", "HumanEval/1"}, {"completion", i == 2 ? canonical["HumanEval/1"] : "    return []\n"}, {"index", i}}.dump() << "\n";
    s << json{{"task_id", "HumanEval/2"}, {"completion", "    return -1.0\n"}, {"index", i}}.dump() << "\n";
  }
  s.close();
  fs::remove(out / "results.jsonl");
  auto args = eval_args(out, common);
  args.push_back("--resume");
  args.push_back("--json");
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json summary = json::parse(r.out);
  // The unbiased estimator by its definition, 1 - C(n-c, k) / C(n, k), averaged over problems.
  auto binom = [](int n, int k) { return k > n ? 0.0 : std::tgamma(n + 1.0) / (std::tgamma(k + 1.0) * std::tgamma(n - k + 1.0)); };
  auto pass = [&](int n, int c, int k) { return 1.0 - binom(n - c, k) / binom(n, k); };
  for (int k : {1, 2, 4}) {
    const double expected = (pass(4, 4, k) + pass(4, 1, k) + pass(4, 0, k)) / 3.0;
    EXPECT_NEAR(summary["pass_at_k"][std::to_string(k)].get<double>(), expected, 1e-12) << "k=" << k;
  }
  EXPECT_EQ(summary["verdicts"]["passed"], 5);
  EXPECT_EQ(summary["verdicts"]["failed"], 7);
  EXPECT_EQ(summary["samples"], 12);
  // --fail-under: exit 3 below the threshold, 0 at or above it.
  auto strict = eval_args(out, common);
  for (const char* a : {"--resume", "--fail-under", "pass@1=0.5"}) strict.push_back(a);
  const auto below = run_cli(strict);
  EXPECT_EQ(below.exit_code, 3) << below.err;
  EXPECT_NE(below.err.find("pass@1"), std::string::npos);
  strict.back() = "pass@4=0.6";
  EXPECT_EQ(run_cli(strict).exit_code, 0);
}

// --speculate: the summary says what the drafts gave (the samples are plain decoding's:
// tests/test_speculate.cpp).
TEST(Eval, SpeculationIsInTheSummary) {
  TempDir tmp;
  // Greedy, one candidate at a time: the second and third draft from the first's text.
  auto args = eval_args(tmp / "a", {"-n", "3", "--limit", "1", "--max-new-tokens", "12", "--speculate", "4", "--batch", "1", "--json"});
  *(std::find(args.begin(), args.end(), "--temperature") + 1) = "0";
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json s = json::parse(r.out)["speculation"];
  ASSERT_TRUE(s.is_object()) << r.out;
  EXPECT_GT(s["acceptance_rate"].get<double>(), 0.5);
  EXPECT_GT(s["drafted_tokens"].get<int>(), 0);
  EXPECT_LE(s["accepted_tokens"].get<int>(), s["drafted_tokens"].get<int>());
  EXPECT_GE(s["tokens_per_candidate_step"].get<double>(), 1.0);
  for (const char* part : {"prefill_s", "decode_s", "draft_s", "sample_s"}) EXPECT_TRUE(s["time"][part].is_number()) << part;
}

TEST(Eval, StopOnPassAndUsageErrors) {
  TempDir tmp;
  const auto r = run_cli(eval_args(tmp / "a", {"-n", "3", "--limit", "2", "--max-new-tokens", "4", "--stop-on-pass", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json summary = json::parse(r.out);
  EXPECT_FALSE(summary.contains("pass_at_k"));
  EXPECT_TRUE(summary["pass_at_k_note"].is_string());
  EXPECT_EQ(summary["solved"], 0);
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--fail-under", "pass@3=0.5", "--k", "1"},
                                                               {"--fail-under", "pass@1=1.5"},
                                                               {"--reference", "GPT-4o"},
                                                               {"--limit", "2", "--tasks", "HumanEval/0"},
                                                               {"--stop-on-pass", "--fail-under", "pass@1=0.5"},
                                                               {"--system", "Be terse."},
                                                               {"--stop-on-pass", "--plot", "p.svg"},
                                                               {"-n", "2", "--k", "1,5", "--fail-under", "pass@5=0.1"},
                                                               {"--fail-under", "1=0.5"},
                                                               {"--fail-under", "xyz1=0.5"},
                                                               {"--fail-under", "plus_pass@1=0.5"},  // humaneval: no plus tests
                                                               {"-n", "4", "--k", "1,4", "--shard", "0/2", "--fail-under", "pass@4=0.1"}}) {
    const auto e = run_cli(eval_args(tmp / "b", bad));
    EXPECT_EQ(e.exit_code, 2) << bad[0] << ": " << e.err;
  }
  // A gate on pass@k with fewer than k samples per problem could never pass.
  EXPECT_NE(run_cli(eval_args(tmp / "b", {"-n", "2", "--k", "1,5", "--fail-under", "pass@5=0.1"})).err.find("-n is 2"), std::string::npos);
  // ... nor one on a shard that holds fewer than k samples of each problem (every N-th candidate).
  EXPECT_NE(run_cli(eval_args(tmp / "b", {"-n", "4", "--k", "1,4", "--shard", "0/2", "--fail-under", "pass@4=0.1"}))
                .err.find("shard 0/2 holds at most 2"),
            std::string::npos);
  // plus_pass@K gates HumanEval+'s plus tests: the tiny model passes none.
  auto plus = eval_args(tmp / "p", {"-n", "1", "--limit", "1", "--k", "1", "--max-new-tokens", "2", "--fail-under", "plus_pass@1=0.5"});
  *std::find(plus.begin(), plus.end(), std::string("humaneval")) = "humaneval+";
  const auto gated = run_cli(plus);
  EXPECT_EQ(gated.exit_code, 3) << gated.err;
  EXPECT_NE(gated.err.find("plus_pass@1 = 0"), std::string::npos) << gated.err;
  const auto unknown = run_cli(eval_args(tmp / "c", {"--tasks", "HumanEval/9999"}));
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("HumanEval/9999"), std::string::npos);
  EXPECT_NE(unknown.err.find("its ids are like 'HumanEval/0'"), std::string::npos) << unknown.err;
  // An empty --tasks (or an empty id in it) is no selection, not "every task".
  for (const char* tasks : {"", ",", "HumanEval/0,", "HumanEval/0,,HumanEval/1", "HumanEval/0, ,HumanEval/1"}) {
    const auto e = run_cli(eval_args(tmp / "d", {"--tasks", tasks}));
    EXPECT_EQ(e.exit_code, 2) << "'" << tasks << "': " << e.err;
    EXPECT_NE(e.err.find("--tasks"), std::string::npos) << e.err;
  }
  // Blanks around an id (as a shell user types a list) are not part of it.
  const auto spaced = run_cli(eval_args(tmp / "f", {"-n", "1", "--max-new-tokens", "4", "--tasks", "HumanEval/1 , HumanEval/0", "--json"}));
  ASSERT_EQ(spaced.exit_code, 0) << spaced.err;
  EXPECT_EQ(json::parse(spaced.out)["dataset"]["problems"], 2) << spaced.out;
  // A --plot that cannot be written fails before the run, leaving no run directory.
  write_text(tmp / "file", "x");
  for (const auto& [plot, why] : std::vector<std::pair<fs::path, std::string>>{{tmp / "nodir" / "p.svg", "does not exist"},
                                                                                {tmp.path(), "is a directory"}}) {
    const auto e = run_cli(eval_args(tmp / "e", {"-n", "1", "--limit", "1", "--plot", plot.string()}));
    EXPECT_EQ(e.exit_code, 1) << e.err;
    EXPECT_NE(e.err.find(plot.string()), std::string::npos) << e.err;
    EXPECT_NE(e.err.find(why), std::string::npos) << e.err;
    EXPECT_FALSE(fs::exists(tmp / "e"));
  }
}

namespace {

// Prompt rows whose verdicts the tests know in advance: the completion lands inside a raw string,
// so a candidate of "mixed" passes exactly when its text holds an "e", and one of "never" never
// passes; with `untested`, a row without tests too.
void write_tested_prompts(const fs::path& path, bool untested) {
  std::ofstream f(path);
  f << json{{"id", "mixed"}, {"prompt", "def f():\n    return 1\nx = r'''"}, {"test", " '''\ndef check(candidate):\n    assert 'e' in x\n"},
            {"entry_point", "f"}}.dump() << "\n";
  f << json{{"id", "never"}, {"prompt", "def g():\n    return 1\nx = r'''"}, {"test", " '''\ndef check(candidate):\n    assert candidate() == 2\n"},
            {"entry_point", "g"}}.dump() << "\n";
  if (untested) f << json{{"id", "untested"}, {"prompt", "def h():"}}.dump() << "\n";
}

}  // namespace

TEST(VerifiedGenerate, PassedAndBestPerPromptAndLogprobRanking) {
  // The completion lands inside a raw string, so the candidate passes exactly when its text holds
  // an "e": the test knows each verdict in advance, independently of the verifier.
  TempDir tmp;
  const fs::path prompts = tmp / "p.jsonl";
  write_tested_prompts(prompts, true);
  const std::vector<std::string> base = {"generate", "--model", tiny_model().string(), "--prompts", prompts.string(), "-n", "8",
                                         "--max-new-tokens", "6", "--temperature", "1.0", "--seed", "4", "--device", "cpu"};
  auto args = base;
  for (const char* a : {"--verify", "--select", "logprob"}) args.push_back(a);
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::vector<json>> by_id;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    by_id[j["id"].get<std::string>()].push_back(j);
  }
  ASSERT_EQ(by_id.size(), 3u);
  int mixed_pass = 0;
  for (const auto& [id, rs] : by_id) {
    ASSERT_EQ(rs.size(), 8u) << id;
    int best = 0;
    std::set<int> ranks;
    for (const auto& row : rs) {
      const double mean = row["cumulative_logprob"].get<double>() / row["num_tokens"].get<int>();
      EXPECT_NEAR(row["mean_logprob"].get<double>(), mean, 1e-12);
      ranks.insert(row["rank"].get<int>());
      best += row["best"].get<bool>();
      if (id == "mixed") {
        const bool expect = row["text"].get<std::string>().find('e') != std::string::npos;
        EXPECT_EQ(row["passed"].get<bool>(), expect) << row["text"] << " " << row["result"];
        mixed_pass += expect;
      } else if (id == "never") {
        EXPECT_FALSE(row["passed"].get<bool>());
      } else {
        EXPECT_TRUE(row["passed"].is_null());
      }
    }
    EXPECT_EQ(ranks.size(), 8u);
    EXPECT_EQ(*ranks.begin(), 1);
    // Rank 1 has the highest mean logprob.
    for (const auto& a : rs)
      for (const auto& b : rs)
        if (a["rank"] < b["rank"]) {
          EXPECT_GE(a["mean_logprob"].get<double>(), b["mean_logprob"].get<double>());
        }
    EXPECT_EQ(best, id == "never" ? 0 : 1) << id;
  }
  ASSERT_GT(mixed_pass, 0) << "the seed gives no passing candidate: pick another";
  ASSERT_LT(mixed_pass, 8) << "the seed gives no failing candidate: pick another";
  // best on "mixed": the passing candidate with the highest mean logprob.
  double best_mean = -1e300;
  for (const auto& row : by_id["mixed"])
    if (row["passed"].get<bool>()) best_mean = std::max(best_mean, row["mean_logprob"].get<double>());
  for (const auto& row : by_id["mixed"])
    if (row["best"].get<bool>()) {
      EXPECT_EQ(row["mean_logprob"].get<double>(), best_mean);
    }
  // --best-only writes just those rows.
  args.push_back("--best-only");
  const auto only = run_cli(args);
  ASSERT_EQ(only.exit_code, 0) << only.err;
  EXPECT_EQ(std::count(only.out.begin(), only.out.end(), '\n'), 2);
  // Usage errors: --best-only alone, --verify with --prompt.
  auto alone = base;
  alone.push_back("--best-only");
  EXPECT_EQ(run_cli(alone).exit_code, 2);
  EXPECT_EQ(run_cli({"generate", "--model", tiny_model().string(), "--prompt", "x", "--verify"}).exit_code, 2);
}

// --verify on rows without hidden tests (issue 46): best comes from selection.h, by default
// public,cluster,logprob. The prompt defines the function and ends in a comment, so a candidate
// passes its public test exactly when its text leaves the program valid Python (checked here by
// python3's own compile(), which runs nothing); the best is then the most confident of those.
TEST(VerifiedGenerate, RowsWithoutHiddenTestsPickByTheirOwnExamples) {
  TempDir tmp;
  const fs::path prompts = tmp / "p.jsonl";
  const std::string prompt = "def f(x):\n    return x + 1\n# ";
  {
    std::ofstream f(prompts);
    f << json{{"id", "own"}, {"prompt", prompt}, {"entry_point", "f"}, {"public_tests", {"assert f(1) == 2", "assert f(-1) == 0"}}}.dump() << "\n";
  }
  const auto r = run_cli({"generate", "--model", tiny_model().string(), "--prompts", prompts.string(), "-n", "8", "--max-new-tokens", "24",
                          "--temperature", "1.0", "--seed", "3", "--device", "cpu", "--verify"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<json> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 8u);
  int passing = 0, best = 0;
  double best_mean = -1e300;
  for (const json& row : rows) {
    const fs::path src = tmp / "src.py";
    std::ofstream(src) << prompt << row["text"].get<std::string>();
    const bool compiles = std::system(("python3 -c \"compile(open('" + src.string() + "').read(), 'x', 'exec')\" 2>/dev/null").c_str()) == 0;
    EXPECT_EQ(row["public_passed"], compiles) << row["text"];
    EXPECT_TRUE(row["passed"].is_null());
    passing += compiles;
    if (compiles) best_mean = std::max(best_mean, row["mean_logprob"].get<double>());
    best += row["best"].get<bool>();
  }
  ASSERT_GT(passing, 0) << "the seed gives no valid candidate: pick another";
  ASSERT_LT(passing, 8) << "the seed gives no invalid candidate: pick another";
  EXPECT_EQ(best, 1);
  for (const json& row : rows)
    if (row["best"].get<bool>()) {
      EXPECT_TRUE(row["public_passed"].get<bool>());
      EXPECT_EQ(row["mean_logprob"].get<double>(), best_mean);
    }
  // A malformed public_tests field names the row; public and cluster need --verify.
  bestofn::test::write_text(tmp / "bad.jsonl", "{\"prompt\": \"x\", \"entry_point\": \"f\", \"public_tests\": [\"f(1) == 2\"]}\n");
  const auto bad = run_cli({"generate", "--model", tiny_model().string(), "--prompts", (tmp / "bad.jsonl").string(), "--verify"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("bad.jsonl:1"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("public_tests"), std::string::npos) << bad.err;
  const auto unverified = run_cli({"generate", "--model", tiny_model().string(), "--prompts", prompts.string(), "--select", "public"});
  EXPECT_EQ(unverified.exit_code, 2);
  EXPECT_NE(unverified.err.find("need --verify"), std::string::npos) << unverified.err;
}

// generate --verify --until-pass (issue 46): a prompt stops once K candidates pass; what is
// written is a subset of the full run's rows, equal row for row, the same prompts solved, and a
// prompt that never passes gets all its candidates.
TEST(VerifiedGenerate, UntilPassWritesASubsetOfTheFullRunWithTheSameSolvedPrompts) {
  TempDir tmp;
  const fs::path prompts = tmp / "p.jsonl";
  write_tested_prompts(prompts, false);
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate", "--model", tiny_model().string(), "--prompts", prompts.string(), "-n", "16",
                                  "--max-new-tokens", "12", "--temperature", "1.0", "--seed", "4", "--device", "cpu", "--batch", "2",
                                  "--verify", "--workers", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_cli(a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::pair<std::string, int>, json> rows;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      rows[{j["id"].get<std::string>(), j["index"].get<int>()}] = j;
    }
    return rows;
  };
  const auto full = run({});
  const auto until = run({"--until-pass", "1"});
  ASSERT_EQ(full.size(), 32u);
  std::set<std::string> solved_full, solved;
  for (const auto& [key, row] : full)
    if (row["passed"].get<bool>()) solved_full.insert(key.first);
  for (const auto& [key, row] : until) {
    ASSERT_TRUE(full.count(key)) << key.first << " " << key.second;
    EXPECT_EQ(row["text"], full.at(key)["text"]);
    EXPECT_EQ(row["passed"], full.at(key)["passed"]);
    if (row["passed"].get<bool>()) solved.insert(key.first);
  }
  EXPECT_EQ(solved, solved_full);
  ASSERT_EQ(solved_full, std::set<std::string>{"mixed"}) << "the seed must solve one prompt and not the other";
  int never = 0;
  for (const auto& [key, row] : until) never += key.first == "never";
  EXPECT_EQ(never, 16);
  // --until-pass needs --verify.
  EXPECT_EQ(run_cli({"generate", "--model", tiny_model().string(), "--prompts", prompts.string(), "--until-pass", "1"}).exit_code, 2);
}

TEST(EvalFaults, SigtermLeavesACleanStateThatResumeCompletes) {
  TempDir tmp;
  const fs::path out = tmp / "run";
  const std::vector<std::string> common = {"-n", "8", "--limit", "4", "--max-new-tokens", "32", "--batch", "4", "--workers", "1"};
  for (int sig : {SIGTERM, SIGINT}) {
    fs::remove_all(out);
    const pid_t pid = start_cli(eval_args(out, common), tmp / "out.txt", tmp / "err.txt");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (count_lines(out / "samples.jsonl") < 6 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    kill(pid, sig);
    int st = 0;
    waitpid(pid, &st, 0);
    ASSERT_TRUE(WIFEXITED(st)) << "signal " << sig << " killed the run instead of stopping it";
    EXPECT_EQ(WEXITSTATUS(st), 130);
    const std::string err = read_text(tmp / "err.txt");
    EXPECT_NE(err.find("--resume"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out / "summary.json"));
    // Every row that is there is whole (read_jsonl() throws on a torn line), with no duplicates.
    const auto samples = read_jsonl(out / "samples.jsonl"), results = read_jsonl(out / "results.jsonl");
    EXPECT_EQ(rows_by_key(samples).size(), samples.size());
    EXPECT_LE(results.size(), samples.size());
    auto args = eval_args(out, common);
    args.push_back("--resume");
    const auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(rows_by_key(read_jsonl(out / "samples.jsonl")).size(), 32u);
    EXPECT_EQ(read_jsonl(out / "results.jsonl").size(), 32u);
  }
}

TEST(EvalFaults, OneWriterPerRunDirectory) {
  // A second eval (or --resume) on a directory that a running eval writes is refused, naming it:
  // both would append the same samples. Once the first ends, --resume completes the run exactly.
  TempDir tmp;
  const fs::path out = tmp / "run";
  // Four rounds of two candidates of up to 256 tokens: after the first row, the rest takes far
  // longer than the 5 ms poll, and the first eval is frozen (SIGSTOP) there, holding the directory
  // for as long as the two refused runs take, however slow they are (a sanitizer build).
  const std::vector<std::string> common = {"-n", "4", "--limit", "2", "--max-new-tokens", "256", "--batch", "2", "--workers", "1"};
  const pid_t pid = start_cli(eval_args(out, common), tmp / "out.txt", tmp / "err.txt");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_lines(out / "samples.jsonl") < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGSTOP);
  int status = 0;
  if (count_lines(out / "samples.jsonl") < 1 || waitpid(pid, &status, WNOHANG) != 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the first eval wrote no row in 60 s, or ended before the second started: " << read_text(tmp / "err.txt");
  }
  for (bool resume : {true, false}) {
    auto args = eval_args(out, common);
    if (resume) args.push_back("--resume");
    const auto second = run_cli(args);
    EXPECT_EQ(second.exit_code, 1) << second.err;
    EXPECT_NE(second.err.find("another bestofn is writing this run directory"), std::string::npos) << second.err;
    EXPECT_NE(second.err.find(out.string()), std::string::npos) << second.err;
  }
  kill(pid, SIGTERM);  // delivered once it runs again
  kill(pid, SIGCONT);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  auto args = eval_args(out, common);
  args.push_back("--resume");
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(rows_by_key(read_jsonl(out / "samples.jsonl")).size(), 8u);
  EXPECT_EQ(read_jsonl(out / "samples.jsonl").size(), 8u);  // no row twice
}

TEST(EvalFaults, AFullDiskFailsClearlyAndTheRunResumesElsewhere) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  TempDir tmp;
  const fs::path small = tmp / "small";
  fs::create_directories(small);
  if (std::system(("mount -t tmpfs -o size=12k tmpfs '" + small.string() + "' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  const std::vector<std::string> common = {"-n", "8", "--limit", "4", "--max-new-tokens", "32"};
  const auto r = run_cli(eval_args(small / "run", common));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(".jsonl"), std::string::npos) << r.err;  // names the file
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Move the partial run to a disk with room; --resume completes it.
  const fs::path moved = tmp / "moved";
  fs::copy(small / "run", moved, fs::copy_options::recursive);
  EXPECT_EQ(std::system(("umount '" + small.string() + "'").c_str()), 0);
  auto args = eval_args(moved, common);
  args.push_back("--resume");
  const auto resumed = run_cli(args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(rows_by_key(read_jsonl(moved / "samples.jsonl")).size(), 32u);
  EXPECT_EQ(read_jsonl(moved / "results.jsonl").size(), 32u);
}

// An output path that names one of the run's inputs is refused before the run writes anything: the
// dataset (eval --plot, score --out), a file of the run directory (eval --resume --plot), a file
// of the model directory (generate --out). A --plot inside the --out-dir that the run makes is
// fine, and so are paths that are not UTF-8 (the JSON files hold U+FFFD for such bytes, and
// --resume still matches the run).
TEST(EvalOutputs, AnOutputThatIsAnInputIsRefusedAndOddPathsWork) {
  TempDir tmp;
  const fs::path dataset = tmp / "he.jsonl";
  {
    std::istringstream in(bestofn::read_text_file(require_shared("data/humaneval/HumanEval.jsonl.gz")));
    std::string line, two;
    for (int i = 0; i < 2 && std::getline(in, line); ++i) two += line + "\n";
    write_text(dataset, two);
  }
  const std::string data_before = read_text(dataset);
  std::vector<std::string> args = eval_args(tmp / "a", {"-n", "1", "--max-new-tokens", "4", "--plot", dataset.string()});
  *std::find(args.begin(), args.end(), std::string("humaneval")) = dataset.string();
  const auto a = run_cli(args);
  EXPECT_EQ(a.exit_code, 1) << a.err;
  EXPECT_NE(a.err.find("--plot: is " + dataset.string() + ", which this run reads"), std::string::npos) << a.err;
  EXPECT_EQ(read_text(dataset), data_before);
  EXPECT_FALSE(fs::exists(tmp / "a"));

  // The plot in the new run directory; then, resumed, a --plot that is the run's samples.
  const auto b = run_cli(eval_args(tmp / "b", {"-n", "1", "--limit", "2", "--max-new-tokens", "4", "--plot", (tmp / "b" / "c.svg").string()}));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(well_formed_svg(tmp / "b" / "c.svg"));
  const std::string samples_before = read_text(tmp / "b" / "samples.jsonl");
  const auto c = run_cli(eval_args(tmp / "b", {"-n", "1", "--limit", "2", "--max-new-tokens", "4", "--resume", "--plot",
                                               (tmp / "b" / "samples.jsonl").string()}));
  EXPECT_EQ(c.exit_code, 1) << c.err;
  EXPECT_NE(c.err.find("samples.jsonl, which this run reads"), std::string::npos) << c.err;
  EXPECT_EQ(read_text(tmp / "b" / "samples.jsonl"), samples_before);
  // The plot an earlier run wrote there is an output, replaced; summary.json is not a plot's place.
  const auto d = run_cli(eval_args(tmp / "b", {"-n", "1", "--limit", "2", "--max-new-tokens", "4", "--resume", "--plot",
                                               (tmp / "b" / "c.svg").string()}));
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_TRUE(well_formed_svg(tmp / "b" / "c.svg"));
  const auto d2 = run_cli(eval_args(tmp / "b", {"-n", "1", "--limit", "2", "--max-new-tokens", "4", "--resume", "--plot",
                                                (tmp / "b" / "summary.json").string()}));
  EXPECT_EQ(d2.exit_code, 1) << d2.err;
  EXPECT_NE(d2.err.find("summary.json, which this run reads"), std::string::npos) << d2.err;

  // score --out over the dataset; generate --out over the model's tokenizer.
  write_text(tmp / "s.jsonl", json{{"task_id", "HumanEval/0"}, {"completion", "    return 1\n"}}.dump() + "\n");
  const auto e = run_cli({"score", (tmp / "s.jsonl").string(), "--dataset", dataset.string(), "--out", dataset.string()});
  EXPECT_EQ(e.exit_code, 1) << e.err;
  EXPECT_NE(e.err.find("--out: is "), std::string::npos) << e.err;
  EXPECT_EQ(read_text(dataset), data_before);
  const fs::path model = tmp / "model\xff";  // not UTF-8
  fs::copy(tiny_model(), model, fs::copy_options::recursive);
  const std::string tok_before = read_text(model / "tokenizer.json");
  const auto f = run_cli({"generate", "--model", model.string(), "--prompt", "x", "--max-new-tokens", "2", "--out", (model / "tokenizer.json").string()});
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_NE(f.err.find("tokenizer.json, which this run reads"), std::string::npos) << f.err;
  EXPECT_EQ(read_text(model / "tokenizer.json"), tok_before);

  // That model directory's path in inspect --json, eval's run.json and summary, and a --resume.
  const auto g = run_cli({"inspect", model.string(), "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(json::parse(g.out)["model_dir"], model.parent_path().string() + "/model\xef\xbf\xbd") << g.out;
  std::vector<std::string> h = eval_args(tmp / "h", {"-n", "1", "--limit", "1", "--max-new-tokens", "4", "--json", "--reference", "R\xff=0.5"});
  *(std::find(h.begin(), h.end(), std::string("--model")) + 1) = model.string();
  const auto h1 = run_cli(h);
  ASSERT_EQ(h1.exit_code, 0) << h1.err;
  EXPECT_TRUE(json::parse(h1.out).is_object());
  h.push_back("--resume");
  const auto h2 = run_cli(h);
  EXPECT_EQ(h2.exit_code, 0) << h2.err;
}

// A new run writes report.md, summary.json, ... into its --out-dir: a directory that holds other
// files and no run (someone's notes, a model directory) is refused before anything is written; an
// empty one is used.
TEST(EvalOutputs, ANewRunNeedsANewOrEmptyDirectory) {
  TempDir tmp;
  const fs::path mine = tmp / "mine";
  fs::create_directories(mine);
  write_text(mine / "report.md", "# my notes\n");
  const std::vector<std::string> small = {"-n", "1", "--limit", "1", "--max-new-tokens", "2", "--k", "1"};
  const auto a = run_cli(eval_args(mine, small));
  EXPECT_EQ(a.exit_code, 1) << a.err;
  EXPECT_NE(a.err.find(mine.string() + ": is not empty and holds no run (no run.json)"), std::string::npos) << a.err;
  EXPECT_EQ(read_text(mine / "report.md"), "# my notes\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(mine), fs::directory_iterator()), 1);
  const auto model_files = std::distance(fs::directory_iterator(tiny_model()), fs::directory_iterator());
  const auto b = run_cli(eval_args(tiny_model(), small));
  EXPECT_EQ(b.exit_code, 1) << b.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(tiny_model()), fs::directory_iterator()), model_files);
  fs::create_directories(tmp / "empty");
  write_text(tmp / "empty" / "run.json.partial-00ab121", "{\"mod");  // a SIGKILL's leftover is no one's file
  const auto c = run_cli(eval_args(tmp / "empty", small));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(fs::exists(tmp / "empty" / "run.json"));
}

// The layer's calls without the binary: run_eval makes two shards and a whole run in this process,
// and run_merge of the shards gives the whole run's rows and pass@k, and refuses to merge twice.
TEST(EvalLayer, RunMergeOfTwoShardsEqualsTheWholeRun) {
  TempDir tmp;
  bestofn::EvalOptions o;
  o.m.model = tiny_model().string();
  o.m.device = "cpu";
  o.m.max_new_tokens = 8;
  o.m.temperature = 0.9f;
  o.m.seed = 11;
  o.data_dir = shared_path("data").string();
  o.limit = 2;
  o.n = 4;
  o.k = "1,2";
  o.out_dir = (tmp / "whole").string();
  testing::internal::CaptureStdout();
  ASSERT_EQ(bestofn::run_eval(o, "eval whole"), bestofn::kExitOk);
  bestofn::MergeOptions m{(tmp / "merged").string(), {}, {}, "", "", true};
  for (const char* shard : {"0/2", "1/2"}) {
    o.shard = shard;
    o.out_dir = (tmp / ("shard" + std::string(1, shard[0]))).string();
    ASSERT_EQ(bestofn::run_eval(o, "eval shard"), bestofn::kExitOk);
    m.shards.push_back(o.out_dir);
  }
  testing::internal::GetCapturedStdout();
  testing::internal::CaptureStdout();
  ASSERT_EQ(bestofn::run_merge(m, "merge"), bestofn::kExitOk);
  const json printed = json::parse(testing::internal::GetCapturedStdout());
  EXPECT_EQ(printed, json::parse(read_text(tmp / "merged" / "summary.json")));
  EXPECT_EQ(printed["command"], "merge");
  EXPECT_EQ(printed["shards"], 2);
  const json whole = json::parse(read_text(tmp / "whole" / "summary.json"));
  EXPECT_EQ(printed["pass_at_k"], whole["pass_at_k"]);
  EXPECT_EQ(printed["samples"], 8);
  EXPECT_EQ(rows_by_key(read_jsonl(tmp / "merged" / "results.jsonl")).size(), 8u);
  const auto whole_samples = rows_by_key(read_jsonl(tmp / "whole" / "samples.jsonl"));
  const auto merged_samples = rows_by_key(read_jsonl(tmp / "merged" / "samples.jsonl"));
  ASSERT_EQ(merged_samples.size(), whole_samples.size());
  for (const auto& [key, row] : whole_samples) EXPECT_EQ(merged_samples.at(key)["completion"], row["completion"]);
  EXPECT_THROW(bestofn::run_merge(m, "merge"), bestofn::Error);  // OUT_DIR holds a run now
}

// The flag parsers the CLI runs as usage checks: their bestofn::Error names the flag, and its text
// is the usage error's (src/cli's usage_checked).
TEST(EvalLayer, GatesReferencesAndTaskIdsParseOrNameTheirFlag) {
  const bestofn::Gate g = bestofn::parse_gate("plus_pass@10=0.25");
  EXPECT_TRUE(g.plus);
  EXPECT_EQ(g.k, 10);
  EXPECT_EQ(g.threshold, 0.25);
  EXPECT_EQ(g.name(), "plus_pass@10");
  EXPECT_EQ(bestofn::parse_gate("pass@1=1").name(), "pass@1");
  EXPECT_EQ(bestofn::name_value("GPT-4o=0.902", "--reference"), std::make_pair(std::string("GPT-4o"), 0.902));
  auto message = [](auto&& parse) {
    try {
      parse();
    } catch (const bestofn::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { bestofn::parse_gate("pass@0=0.5"); }),
            "--fail-under: 'pass@0=0.5': expected pass@K=X or plus_pass@K=X (HumanEval+'s plus tests), K a --k value");
  EXPECT_EQ(message([] { bestofn::parse_gate("pass@1=1.5"); }), "--fail-under: 'pass@1=1.5' must be NAME=VALUE with VALUE in [0, 1]");
  EXPECT_EQ(message([] { bestofn::name_value("x", "--reference"); }), "--reference: 'x' must be NAME=VALUE with VALUE in [0, 1]");
  EXPECT_EQ(bestofn::task_ids("HumanEval/0, HumanEval/7"), (std::vector<std::string>{"HumanEval/0", "HumanEval/7"}));
  for (const char* bad : {",", "a,,b", "a,"}) EXPECT_EQ(message([&] { bestofn::task_ids(bad); }), "--tasks: '" + std::string(bad) + "' has an empty task id");
}

// --until-pass (issue 46): a problem stops being sampled once K of its samples pass, and the
// problems solved are exactly those of the run of all n. A dataset whose tests judge the generated
// text itself (the prompt opens a string that the test closes, so each candidate passes or not by
// the length of what the tiny model wrote; two problems never pass), run in full and with
// --until-pass 1 and 2.
TEST(Eval, UntilPassSolvesWhatTheFullRunSolves) {
  TempDir tmp;
  const fs::path data = tmp / "text_tests.jsonl";
  {
    std::ofstream f(data);
    for (int i = 0; i < 8; ++i) {
      const json row = {{"task_id", "T/" + std::to_string(i)},
                        {"prompt", "def f():\n    return 1\nS = r'''"},
                        {"entry_point", "f"},
                        {"canonical_solution", ""},
                        {"test", i % 4 == 3 ? std::string("'''\ndef check(c):\n    assert S == 'never'\n")
                                            : "'''\ndef check(c):\n    assert len(S) % " + std::to_string(2 + i % 4 * 3) +
                                                  " == 0 and \"'''\" not in S\n"}};
      f << row.dump() << "\n";
    }
  }
  auto args = [&](const fs::path& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {"eval", "--model", tiny_model().string(), "--dataset", data.string(), "--out-dir", out.string(),
                                  "--device", "cpu", "--temperature", "1.0", "--seed", "3", "-n", "12", "--max-new-tokens", "6",
                                  "--batch", "2", "--workers", "1", "--select", "none", "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const auto full = run_cli(args(tmp / "full", {"--k", "1"}));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  std::set<std::string> solved_full;
  for (const json& r : read_jsonl(tmp / "full" / "results.jsonl"))
    if (r["passed"].get<bool>()) solved_full.insert(r["task_id"].get<std::string>());
  ASSERT_GT(solved_full.size(), 0u);
  ASSERT_LT(solved_full.size(), 8u);  // T/3 and T/7 never pass
  for (const char* k : {"1", "2"}) {
    SCOPED_TRACE(k);
    const fs::path out = tmp / (std::string("until") + k);
    const auto r = run_cli(args(out, {"--until-pass", k}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json s = json::parse(r.out);
    EXPECT_EQ(s["until_pass"], std::stoi(k));
    EXPECT_FALSE(s.contains("pass_at_k"));
    EXPECT_GT(s["candidates_dropped"].get<int>(), 0) << "nothing was dropped: the test tests nothing";
    std::set<std::string> solved;
    std::map<std::string, int> passes;
    const auto rows = read_jsonl(out / "results.jsonl");
    for (const json& x : rows)
      if (x["passed"].get<bool>()) solved.insert(x["task_id"].get<std::string>()), ++passes[x["task_id"].get<std::string>()];
    EXPECT_EQ(solved, solved_full);
    EXPECT_EQ(s["solved"], solved.size());
    EXPECT_LE(rows.size(), 8u * 12);
    // Every row is one the full run has too, with the same verdict (the draws do not depend on
    // the early stop).
    std::map<std::pair<std::string, int>, bool> full_verdict;
    for (const json& x : read_jsonl(tmp / "full" / "results.jsonl")) full_verdict[{x["task_id"], x["index"]}] = x["passed"];
    for (const json& x : rows) EXPECT_EQ(full_verdict.at({x["task_id"], x["index"]}), x["passed"].get<bool>()) << x.dump();
  }
  // Bad input: pass@k with an early stop, or K < 1, is a usage error.
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--until-pass", "1", "--k", "1"}, {"--until-pass", "0"},
                                              {"--until-pass", "1", "--fail-under", "pass@1=0.5"}, {"--until-pass", "1", "--stop-on-pass"}}) {
    const auto r = run_cli(args(tmp / "bad", bad));
    EXPECT_EQ(r.exit_code, 2) << bad[0] << " " << bad[1] << ": " << r.err;
    EXPECT_NE(r.err.find("--until-pass"), std::string::npos) << r.err;
  }
}
