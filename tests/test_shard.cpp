// Scale-out: --shard I/N on eval and generate, and `bestofn merge` (data-parallel generation over
// several engines: test_devices.cpp). Shards together must make exactly the unsharded run's
// samples (the draws are keyed by seed, problem position and candidate index), and merge must
// give the same pass@k.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bestofn/backends/backends.h"
#include "bestofn/eval/datasets.h"
#include "bestofn/generate/devices.h"
#include "bestofn/util/error.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/generate/shard.h"
#include "test_util.h"

using namespace bestofn::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path& tiny_model() {
  static const fs::path model = tiny_synthetic_model(3);
  return model;
}

using Key = std::pair<std::string, int>;

// An eval command line; a flag in `extra` that the defaults have replaces the default's value.
std::vector<std::string> eval_args(const fs::path& model, const fs::path& out, const std::vector<std::string>& extra) {
  std::vector<std::pair<std::string, std::string>> flags = {
      {"--model", model.string()}, {"--dataset", "humaneval"}, {"--data-dir", shared_path("data").string()}, {"--out-dir", out.string()},
      {"--device", "cpu"}, {"--temperature", "0.9"}, {"--seed", "11"}, {"--k", "1,2,4"}, {"--max-new-tokens", "24"}, {"--batch", "5"},
      {"-n", "6"}, {"--limit", "4"}};
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < extra.size(); ++i) {
    auto it = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == extra[i]; });
    if (it != flags.end() && i + 1 < extra.size()) it->second = extra[++i];
    else rest.push_back(extra[i]);
  }
  std::vector<std::string> a = {"eval"};
  for (const auto& [f, v] : flags) a.insert(a.end(), {f, v});
  a.insert(a.end(), rest.begin(), rest.end());
  return a;
}

void expect_same_samples(const fs::path& a, const fs::path& b) {
  const auto x = rows_by_key(read_jsonl(a)), y = rows_by_key(read_jsonl(b));
  ASSERT_EQ(x.size(), y.size());
  for (const auto& [k, row] : x) {
    ASSERT_TRUE(y.count(k)) << k.first << " " << k.second;
    for (const char* f : {"completion", "finish_reason", "num_tokens", "logprob"}) EXPECT_EQ(row[f], y.at(k)[f]) << k.first << " " << k.second << " " << f;
  }
}

// Replaces every sample's completion with a known one (HumanEval/0: canonical for even indices,
// HumanEval/2: canonical for index 1 only, the rest wrong) and drops the results, so that
// --resume verifies them: pass@k is then known and not zero.
void plant_known_samples(const fs::path& dir) {
  static const std::vector<bestofn::Problem> problems = bestofn::load_dataset("humaneval", shared_path("data"));
  auto rs = read_jsonl(dir / "samples.jsonl");
  std::ofstream out(dir / "samples.jsonl", std::ios::trunc);
  for (auto& r : rs) {
    const std::string t = r["task_id"];
    const int i = r["index"];
    const bool pass = (t == "HumanEval/0" && i % 2 == 0) || (t == "HumanEval/2" && i == 1);
    const auto& p = *std::find_if(problems.begin(), problems.end(), [&](const auto& q) { return q.task_id == t; });
    r["completion"] = pass ? p.canonical_solution : "    return None\n";
    out << r.dump() << "\n";
  }
  out.close();
  fs::remove(dir / "results.jsonl");
}

}  // namespace

TEST(Shard, PairsAreDealtRoundRobinAndCoverEachPairOnce) {
  using bestofn::Shard;
  EXPECT_EQ((Shard{1, 3}.candidates(6, 6)), (std::vector<int>{1, 4}));  // pairs 7 and 10 of problem 1 (n = 6)
  EXPECT_EQ((Shard{0, 4}.candidates(2, 3)), (std::vector<int>{2}));
  std::map<std::pair<int, int>, int> owner;
  for (int s = 0; s < 5; ++s)
    for (int p = 0; p < 7; ++p)
      for (int c : Shard{s, 5}.candidates(static_cast<std::uint64_t>(p) * 3, 3)) EXPECT_TRUE(owner.emplace(std::make_pair(p, c), s).second);
  EXPECT_EQ(owner.size(), 21u);
  EXPECT_EQ(bestofn::parse_shard("2/4", "--shard").index, 2);
  for (const char* bad : {"4/4", "-1/4", "1/0", "1", "a/b", "1/4x", ""}) EXPECT_THROW(bestofn::parse_shard(bad, "--shard"), bestofn::Error) << bad;
}

TEST(Shard, EvalShardsMergedEqualAnUnshardedRun) {
  TempDir tmp;
  const std::vector<std::string> common = {"-n", "6", "--limit", "4"};
  const auto whole = run_cli(eval_args(tiny_model(), tmp / "whole", common));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  std::vector<std::string> merge = {"merge", (tmp / "merged").string()};
  for (int i = 0; i < 3; ++i) {
    const fs::path dir = tmp / ("shard" + std::to_string(i));
    auto args = eval_args(tiny_model(), dir, common);
    args.insert(args.end(), {"--shard", std::to_string(i) + "/3", "--json"});
    const auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json run = json::parse(read_text(dir / "run.json"));
    EXPECT_EQ(run["shard"], (json{{"index", i}, {"count", 3}}));
    // The shard's own samples: pair p*6+c with (p*6+c) mod 3 == i, 8 of the 24.
    const json summary = json::parse(r.out);
    EXPECT_EQ(summary["samples"], 8);
    EXPECT_EQ(summary["shard"], run["shard"]);
    for (const auto& [k, row] : rows_by_key(read_jsonl(dir / "samples.jsonl"))) {
      const int p = std::stoi(k.first.substr(k.first.find('/') + 1));
      EXPECT_EQ((p * 6 + k.second) % 3, i) << k.first << " " << k.second;
    }
    merge.push_back(dir.string());
  }
  merge.push_back("--json");
  // A --plot into a missing directory fails before anything is merged.
  auto bad_plot = merge;
  bad_plot.insert(bad_plot.end(), {"--plot", (tmp / "nodir" / "p.svg").string()});
  const auto bp = run_cli(bad_plot);
  EXPECT_EQ(bp.exit_code, 1) << bp.err;
  EXPECT_NE(bp.err.find("nodir"), std::string::npos) << bp.err;
  EXPECT_FALSE(fs::exists(tmp / "merged"));
  const auto m = run_cli(merge);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  expect_same_samples(tmp / "whole" / "samples.jsonl", tmp / "merged" / "samples.jsonl");
  const auto ra = rows_by_key(read_jsonl(tmp / "whole" / "results.jsonl")), rb = rows_by_key(read_jsonl(tmp / "merged" / "results.jsonl"));
  ASSERT_EQ(ra.size(), 24u);
  ASSERT_EQ(rb.size(), 24u);
  for (const auto& [k, row] : ra) EXPECT_EQ(row["result"], rb.at(k)["result"]) << k.first << " " << k.second;
  const json sa = json::parse(read_text(tmp / "whole" / "summary.json")), sb = json::parse(read_text(tmp / "merged" / "summary.json"));
  EXPECT_EQ(json::parse(m.out), sb);
  EXPECT_EQ(sa["pass_at_k"], sb["pass_at_k"]);
  EXPECT_EQ(sa["pass_at_k_interval"], sb["pass_at_k_interval"]);  // seeded, over the same problems in the same order
  EXPECT_EQ(sa["tokens"], sb["tokens"]);
  EXPECT_EQ(sb["samples"], 24);
  EXPECT_FALSE(sb.contains("shard"));
  // The unsharded run's summary fields, all there (workers aside: each shard had its own;
  // selection aside: merge runs nothing, and score --select on the merged samples gives it).
  EXPECT_FALSE(sb.contains("selection"));
  for (const auto& [key, value] : sa.items()) {
    if (key == "workers" || key == "selection") continue;
    EXPECT_TRUE(sb.contains(key)) << key;
    if (value.is_object() && (key == "time" || key == "throughput")) {
      for (const auto& [sub, v] : value.items()) EXPECT_TRUE(sb[key].contains(sub)) << key << "." << sub;
    }
  }
  EXPECT_TRUE(fs::exists(tmp / "merged" / "fail_at_k.svg"));
  EXPECT_NE(read_text(tmp / "merged" / "report.md").find("pass@"), std::string::npos);

  // Known verdicts: the same planted samples in the whole run and in the shards; merge's pass@k
  // equals the unsharded run's, and the estimator's values.
  for (const char* d : {"whole", "shard0", "shard1", "shard2"}) {
    plant_known_samples(tmp / d);
    auto args = eval_args(tiny_model(), tmp / d, common);
    args.push_back("--resume");
    if (std::string(d) != "whole") args.insert(args.end(), {"--shard", std::string(1, d[5]) + "/3"});
    const auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << d << ": " << r.err;
  }
  const auto m2 = run_cli({"merge", (tmp / "merged2").string(), (tmp / "shard2").string(), (tmp / "shard0").string(), (tmp / "shard1").string(), "--json"});
  ASSERT_EQ(m2.exit_code, 0) << m2.err;
  const json known_whole = json::parse(read_text(tmp / "whole" / "summary.json")), known_merged = json::parse(m2.out);
  EXPECT_EQ(known_whole["pass_at_k"], known_merged["pass_at_k"]);
  EXPECT_EQ(known_merged["verdicts"]["passed"], 4);
  // HumanEval/0: 3 of 6 pass, HumanEval/2: 1 of 6; pass@1 = (3/6 + 1/6) / 4.
  EXPECT_NEAR(known_merged["pass_at_k"]["1"].get<double>(), (0.5 + 1.0 / 6) / 4, 1e-12);
  EXPECT_NEAR(known_merged["pass_at_k"]["2"].get<double>(), ((1.0 - 3.0 / 15) + (1.0 - 10.0 / 15)) / 4, 1e-12);
  // The merged directory is a whole run: resuming it has nothing left to do, and keeps the merged
  // summary (its shards, merged_from and summed times).
  const std::string merged_summary = read_text(tmp / "merged2" / "summary.json");
  auto resume = eval_args(tiny_model(), tmp / "merged2", common);
  resume.insert(resume.end(), {"--resume", "--json"});
  const auto again = run_cli(resume);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(json::parse(again.out)["pass_at_k"], known_whole["pass_at_k"]);
  EXPECT_EQ(json::parse(again.out)["shards"], 3);
  EXPECT_EQ(read_text(tmp / "merged2" / "summary.json"), merged_summary);
}

TEST(Shard, MergeRefusesMismatchedOverlappingMissingAndIncompleteShards) {
  TempDir tmp;
  const std::vector<std::string> common = {"-n", "2", "--limit", "2", "--max-new-tokens", "4"};
  auto shard = [&](const std::string& name, const std::string& which, std::vector<std::string> extra, const fs::path& model) {
    extra.insert(extra.end(), {"--shard", which});
    extra.insert(extra.begin(), common.begin(), common.end());
    const auto args = eval_args(model, tmp / name, extra);
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    return (tmp / name).string();
  };
  // Another model directory: the same files under another path.
  fs::copy(tiny_model(), tmp / "other-model", fs::copy_options::recursive);
  const std::string a0 = shard("a0", "0/2", {}, tiny_model()), a1 = shard("a1", "1/2", {}, tiny_model());
  const std::string b3 = shard("b3", "1/3", {}, tiny_model());
  struct Case {
    std::vector<std::string> dirs;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{a0, shard("seed", "1/2", {"--seed", "12"}, tiny_model())}, "seed = 12"},
      {{a0, shard("model", "1/2", {}, tmp / "other-model")}, "model = "},
      {{a0, shard("temp", "1/2", {"--temperature", "0.5"}, tiny_model())}, "temperature = 0.5"},
      {{a0, shard("topp", "1/2", {"--top-p", "0.9"}, tiny_model())}, "top_p = 0.9"},
      {{a0, shard("n", "1/2", {"-n", "3"}, tiny_model())}, "n = 3"},
      {{a0, shard("tasks", "1/2", {"--limit", "3"}, tiny_model())}, "tasks"},
      {{a0, shard("plus", "1/2", {"--dataset", "humaneval+"}, tiny_model())}, "dataset = \"humaneval+\""},
      {{a0, a0 + "/."}, "both shard 0/2"},
      {{a0, a1, b3}, "different N"},
      {{a1}, "missing shard(s) 0/2"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"merge", (tmp / "out").string()};
    args.insert(args.end(), c.dirs.begin(), c.dirs.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << c.expect << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    EXPECT_FALSE(fs::exists(tmp / "out" / "summary.json")) << c.expect;
  }
  // A --plot that is a shard's file (its samples) is refused before anything is written.
  const std::string samples_before = read_text(fs::path(a0) / "samples.jsonl");
  const auto over = run_cli({"merge", (tmp / "out").string(), a0, a1, "--plot", (fs::path(a0) / "samples.jsonl").string()});
  EXPECT_EQ(over.exit_code, 1) << over.err;
  EXPECT_NE(over.err.find("--plot: is "), std::string::npos) << over.err;
  EXPECT_EQ(read_text(fs::path(a0) / "samples.jsonl"), samples_before);
  // An unfinished shard: one result missing.
  const std::string text = read_text(fs::path(a1) / "results.jsonl");
  write_text(fs::path(a1) / "results.jsonl", text.substr(0, text.rfind('\n', text.size() - 2) + 1));
  const auto r = run_cli({"merge", (tmp / "out").string(), a0, a1});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("incomplete"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
  // Completed with --resume, it merges.
  auto finish = eval_args(tiny_model(), a1, common);
  finish.insert(finish.end(), {"--shard", "1/2", "--resume"});
  ASSERT_EQ(run_cli(finish).exit_code, 0);
  fs::create_directories(tmp / "mine");
  write_text(tmp / "mine" / "report.md", "mine\n");  // a directory of other files is not merged into
  const auto full = run_cli({"merge", (tmp / "mine").string(), a0, a1});
  EXPECT_EQ(full.exit_code, 1) << full.err;
  EXPECT_NE(full.err.find("is not empty"), std::string::npos) << full.err;
  EXPECT_EQ(read_text(tmp / "mine" / "report.md"), "mine\n");
  const auto ok = run_cli({"merge", (tmp / "out").string(), a0, a1});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(read_jsonl(tmp / "out" / "results.jsonl").size(), 4u);
  // Shards reported with other --k and --reference: the merge reports them all; one reference
  // name with two values is an error (which one would the report show?).
  const std::string k1 = shard("k1", "0/2", {"--k", "1", "--reference", "A=0.5"}, tiny_model());
  const std::string k2 = shard("k2", "1/2", {"--k", "2", "--reference", "B=0.7"}, tiny_model());
  const auto both = run_cli({"merge", (tmp / "both").string(), k1, k2, "--json"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const json sboth = json::parse(both.out);
  EXPECT_EQ(sboth["k"], json::array({1, 2}));
  EXPECT_EQ(sboth["references"], (json{{"A", 0.5}, {"B", 0.7}}));
  const std::string k3 = shard("k3", "1/2", {"--reference", "A=0.6"}, tiny_model());
  const auto clash = run_cli({"merge", (tmp / "clash").string(), k1, k3});
  EXPECT_EQ(clash.exit_code, 1) << clash.err;
  EXPECT_NE(clash.err.find("--reference A is 0.5 in"), std::string::npos) << clash.err;
}

TEST(Shard, GenerateShardsTogetherEqualAnUnshardedRun) {
  TempDir tmp;
  // Prompts with different n: pair numbers run over the prompts (0..2, 3..7, 8).
  write_text(tmp / "prompts.jsonl", R"({"id": "a", "prompt": "def add(a, b):", "n": 3}
{"id": "b", "prompt": "import os\n", "n": 5}
{"id": "c", "prompt": "class Stack:", "n": 1}
)");
  auto gen = [&](const std::vector<std::string>& extra, const fs::path& out) {
    std::vector<std::string> a = {"generate", "--model", tiny_model().string(), "--prompts", (tmp / "prompts.jsonl").string(), "--device", "cpu",
                                  "--temperature", "1.0", "--seed", "4", "--max-new-tokens", "12", "--batch", "3", "--out", out.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_cli(a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_jsonl(out);
  };
  const auto whole = rows_by_key(gen({}, tmp / "whole.jsonl"), "id");
  ASSERT_EQ(whole.size(), 9u);
  const std::map<std::string, int> first = {{"a", 0}, {"b", 3}, {"c", 8}};
  std::map<Key, json> joined;
  for (int i = 0; i < 4; ++i) {
    for (const auto& [k, row] : rows_by_key(gen({"--shard", std::to_string(i) + "/4"}, tmp / ("s" + std::to_string(i) + ".jsonl")), "id")) {
      EXPECT_EQ((first.at(k.first) + k.second) % 4, i) << k.first << " " << k.second;
      EXPECT_TRUE(joined.emplace(k, row).second);
    }
  }
  ASSERT_EQ(joined.size(), whole.size());
  for (const auto& [k, row] : whole) {
    ASSERT_TRUE(joined.count(k)) << k.first << " " << k.second;
    EXPECT_EQ(row, joined.at(k)) << k.first << " " << k.second;
  }
  // --shard with a per-prompt choice of the best candidate is refused (it needs all candidates).
  const auto r = run_cli({"generate", "--model", tiny_model().string(), "--prompt", "x", "-n", "2", "--select", "logprob", "--shard", "0/2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(Shard, UsageErrors) {
  TempDir tmp;
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--shard", "2/2"}, {"--shard", "x"}, {"--shard", "0/2", "--stop-on-pass"}}) {
    const auto r = run_cli(eval_args(tiny_model(), tmp / "u", bad));
    EXPECT_EQ(r.exit_code, 2) << bad[1] << ": " << r.err;
    EXPECT_NE(r.err.find("--shard"), std::string::npos) << r.err;
  }
  // --devices is for the CUDA engine: a usage error with --device cpu, an error naming it when
  // no CUDA device can be had (a CPU-only build, or no GPU).
  const auto cpu = run_cli(eval_args(tiny_model(), tmp / "d", {"--devices", "0"}));
  EXPECT_EQ(cpu.exit_code, 2) << cpu.err;
  EXPECT_NE(cpu.err.find("--devices"), std::string::npos) << cpu.err;
  EXPECT_NE(cpu.err.find("cuda"), std::string::npos) << cpu.err;
  if (bestofn::backend_info().cuda_devices.empty()) {
    const auto r = run_cli(eval_args(tiny_model(), tmp / "d2", {"--device", "auto", "--devices", "0,1"}));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("--devices"), std::string::npos) << r.err;
  }
  EXPECT_THROW(bestofn::parse_devices("0,0", 2), bestofn::Error);
  EXPECT_THROW(bestofn::parse_devices("2", 2), bestofn::Error);
  EXPECT_THROW(bestofn::parse_devices("", 0), bestofn::Error);
  EXPECT_EQ(bestofn::parse_devices("1,0", 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(bestofn::parse_devices("", 3), (std::vector<int>{0, 1, 2}));
}
