// bestofn merge OUT_DIR SHARD_DIR...: the output directories of the N shards of one eval run
// (--shard I/N) combined into one, as an unsharded run would have left it: run.json, samples.jsonl
// and results.jsonl (sorted by problem and index), summary.json, report.md and the fail@k plot.
// Shards of different runs, overlapping, missing or unfinished shards are refused.
#include "bestofn/eval/run_merge.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "bestofn/eval/eval_files.h"
#include "bestofn/eval/eval_summary.h"
#include "bestofn/eval/scoring.h"
#include "bestofn/generate/shard.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "util/json_file.h"
#include "util/jsonl.h"

namespace bestofn {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

struct ShardRun {
  fs::path dir;
  ordered_json manifest;
  json summary;  // summary.json when the shard wrote one, else null
  Shard shard;
  std::vector<json> samples, results;
};

ordered_json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw Error(p.string(), "cannot be read: not a finished bestofn eval output directory");
  const ordered_json j = ordered_json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(p.string(), "not a JSON object");
  return j;
}

ShardRun read_shard(const fs::path& dir) {
  ShardRun s;
  s.dir = dir;
  s.manifest = read_json_file(dir / "run.json");
  const ordered_json& sh = s.manifest.contains("shard") ? s.manifest["shard"] : ordered_json::object();
  s.shard = {sh.value("index", 0), sh.value("count", 1)};
  if (s.shard.count < 1 || s.shard.index < 0 || s.shard.index >= s.shard.count)
    throw Error((dir / "run.json").string(), "shard " + sh.dump() + " is not I/N with 0 <= I < N");
  if (fs::exists(dir / "summary.json")) s.summary = json(read_json_file(dir / "summary.json"));
  for (const char* name : {"samples.jsonl", "results.jsonl"}) {
    const fs::path p = dir / name;
    if (!fs::exists(p)) throw Error(p.string(), "missing: the shard has not run (or not in this directory)");
    auto& rows = std::string(name) == "samples.jsonl" ? s.samples : s.results;
    for_each_jsonl(p.string(), [&](json&& j, const std::string& where) {
      if (!j.is_object() || !j.contains("task_id") || !j["task_id"].is_string() || !j.contains("index") || !j["index"].is_number_integer())
        throw Error(where, "not a sample row (task_id and index expected)");
      rows.push_back(std::move(j));
    });
  }
  return s;
}

// Every setting but the shard must agree; the first that differs is named.
void check_same_run(const ShardRun& a, const ShardRun& b) {
  std::set<std::string> keys;
  for (const auto& [k, v] : a.manifest.items()) keys.insert(k);
  for (const auto& [k, v] : b.manifest.items()) keys.insert(k);
  for (const auto& k : keys) {
    if (k == "shard") continue;
    const bool in_a = a.manifest.contains(k), in_b = b.manifest.contains(k);
    if (in_a && in_b && same_setting(k, a.manifest[k], b.manifest[k])) continue;
    const std::string what = k == "tasks" ? "tasks (the dataset's selected problems)" : k;
    throw Error("merge: the shards are of different runs: " + what + " = " + (in_b ? b.manifest[k].dump() : "(unset)") + " in " +
                (b.dir / "run.json").string() + ", but " + (in_a ? a.manifest[k].dump() : "(unset)") + " in " + (a.dir / "run.json").string());
  }
}

// Shards 0..N-1 of one N, each once.
void check_shard_set(const std::vector<ShardRun>& runs) {
  const int count = runs.front().shard.count;
  std::map<int, const ShardRun*> by_index;
  for (const auto& r : runs) {
    if (r.shard.count != count)
      throw Error("merge: shards of different N: " + runs.front().dir.string() + " is shard " + runs.front().shard.str() + ", " + r.dir.string() +
                  " is shard " + r.shard.str());
    const auto [it, fresh] = by_index.emplace(r.shard.index, &r);
    if (!fresh)
      throw Error("merge: overlapping shards: " + it->second->dir.string() + " and " + r.dir.string() + " are both shard " + r.shard.str());
  }
  std::string missing;
  for (int i = 0; i < count; ++i)
    if (!by_index.count(i)) missing += (missing.empty() ? "" : ", ") + Shard{i, count}.str();
  if (!missing.empty()) throw Error("merge: missing shard(s) " + missing + ": give the output directories of all " + std::to_string(count) + " shards");
}

// The shard's samples are exactly its share of (problem, candidate) pairs, each with one result.
void check_complete(const ShardRun& r, const std::map<std::string, std::size_t>& pos, int n) {
  const std::string resume = "; finish it with its eval command and --resume";
  std::set<std::pair<std::string, int>> samples, results;
  for (const auto& row : r.samples) {
    const std::string t = row["task_id"].get<std::string>();
    const int c = row["index"].get<int>();
    const auto it = pos.find(t);
    if (it == pos.end() || c < 0 || c >= n || !r.shard.owns(it->second * static_cast<std::uint64_t>(n) + static_cast<std::uint64_t>(c)))
      throw Error((r.dir / "samples.jsonl").string(), t + " index " + std::to_string(c) + " is not a sample of shard " + r.shard.str());
    if (!samples.insert({t, c}).second) throw Error((r.dir / "samples.jsonl").string(), "a second row for " + t + " index " + std::to_string(c));
  }
  for (const auto& row : r.results) {
    const std::pair<std::string, int> key{row["task_id"].get<std::string>(), row["index"].get<int>()};
    if (!samples.count(key) || !results.insert(key).second)
      throw Error((r.dir / "results.jsonl").string(), "a result for " + key.first + " index " + std::to_string(key.second) +
                                                         " that is not in samples.jsonl, or a second one");
  }
  std::size_t expected = 0;
  std::string first_missing;
  for (const auto& [t, p] : pos)
    for (int c : r.shard.candidates(p * static_cast<std::uint64_t>(n), n)) {
      ++expected;
      if (first_missing.empty() && !results.count({t, c})) first_missing = t + " index " + std::to_string(c);
    }
  if (results.size() != expected)
    throw Error("merge: " + r.dir.string() + " is incomplete: shard " + r.shard.str() + " has " + std::to_string(results.size()) + " of its " +
                std::to_string(expected) + " verified samples (" + first_missing + " is missing)" + resume);
}

// The dataset kind of the summary: the shards' own word, else what the rows show.
std::string dataset_kind(const std::vector<ShardRun>& runs, bool has_plus) {
  const json& s = runs.front().summary;
  if (s.is_object() && s.contains("dataset") && s["dataset"].is_object() && s["dataset"].contains("kind") && s["dataset"]["kind"].is_string())
    return s["dataset"]["kind"];
  const auto& tasks = runs.front().manifest["tasks"];
  if (!tasks.empty() && tasks.front().get<std::string>().starts_with("Mbpp/")) return "mbpp";
  return has_plus ? "humaneval+" : "humaneval";
}

// Sums of the shards' summary fields, summary[group][key] (group nullptr: summary[key]); absent
// ones count 0.
double sum_field(const std::vector<ShardRun>& runs, const char* group, const char* key) {
  double total = 0;
  for (const auto& r : runs) {
    if (!r.summary.is_object() || (group && !r.summary.contains(group))) continue;
    const json& g = group ? r.summary[group] : r.summary;
    if (g.is_object() && g.contains(key) && g[key].is_number()) total += g[key].get<double>();
  }
  return total;
}

void write_rows(const fs::path& p, const std::vector<const json*>& rows) {
  std::string text;
  for (const json* r : rows) text += json_text(*r) + "\n";
  write_file_atomic(p, text);
}

// The shards' directories read and checked: one run, shards 0..N-1 of one N, each complete, none
// of them OUT_DIR.
std::vector<ShardRun> read_shards(const MergeOptions& o) {
  std::vector<ShardRun> runs;
  std::set<fs::path> seen_dirs;
  const fs::path out = fs::absolute(o.out).lexically_normal();
  for (const auto& d : o.shards) {
    const fs::path dir = fs::absolute(d).lexically_normal();
    if (dir == out) throw Error("merge: OUT_DIR " + o.out + " is also a shard directory; choose a new OUT_DIR");
    if (!seen_dirs.insert(dir).second) throw Error("merge: " + d + " is given twice (overlapping shards)");
    runs.push_back(read_shard(d));
  }
  for (const auto& r : runs) check_same_run(runs.front(), r);
  check_shard_set(runs);
  const ordered_json& manifest = runs.front().manifest;
  if (manifest.value("stop_on_pass", false) || manifest.value("until_pass", 0) > 0)
    throw Error("merge: " + o.shards.front() + " is a --stop-on-pass or --until-pass run, which has no pass@k to merge");
  const int n = manifest.at("n").get<int>();
  const auto tasks = manifest.at("tasks").get<std::vector<std::string>>();
  std::map<std::string, std::size_t> pos;
  for (std::size_t i = 0; i < tasks.size(); ++i) pos[tasks[i]] = i;
  for (const auto& r : runs) check_complete(r, pos, n);
  return runs;
}

// OUT_DIR: made, or one that is empty.
void make_out_dir(const std::string& dir) {
  const fs::path out = fs::absolute(dir).lexically_normal();
  if (fs::exists(out / "run.json") || fs::exists(out / "samples.jsonl"))
    throw Error(dir, "holds a run already; merge writes into a new (or empty) directory");
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec))  // its report.md, summary.json ... would replace the files there
    throw Error(dir, "is not empty; merge writes into a new (or empty) directory");
  fs::create_directories(out, ec);
  if (ec) throw Error(dir, "cannot create the output directory: " + ec.message());
}

// The union of the shards' rows, as written into OUT_DIR, and what they add up to.
struct MergedRows {
  Tally tally;
  std::size_t results = 0;
  double tokens = 0;
  bool has_plus = false;
};

// run.json (`manifest`), samples.jsonl and results.jsonl in problem order, then by index (the
// shards wrote them in the order they finished).
MergedRows write_merged_rows(const fs::path& out, const std::vector<ShardRun>& runs, const ordered_json& manifest) {
  const auto tasks = manifest.at("tasks").get<std::vector<std::string>>();
  std::map<std::string, std::size_t> pos;
  for (std::size_t i = 0; i < tasks.size(); ++i) pos[tasks[i]] = i;
  auto order = [&](const json* a, const json* b) {
    return std::make_pair(pos[(*a)["task_id"].get<std::string>()], (*a)["index"].get<int>()) <
           std::make_pair(pos[(*b)["task_id"].get<std::string>()], (*b)["index"].get<int>());
  };
  std::vector<const json*> samples, results;
  MergedRows m;
  for (const auto& r : runs) {
    for (const auto& s : r.samples) samples.push_back(&s), m.tokens += s.value("num_tokens", 0.0);
    for (const auto& x : r.results) results.push_back(&x), m.tally.add_row(x), m.has_plus |= x.contains("plus_result");
  }
  std::sort(samples.begin(), samples.end(), order);
  std::sort(results.begin(), results.end(), order);
  write_file_atomic(out / "run.json", json_text(manifest, 2) + "\n");
  write_rows(out / "samples.jsonl", samples);
  write_rows(out / "results.jsonl", results);
  m.results = results.size();
  return m;
}

// Without --k / --reference: every k the shards reported (their union), and their references
// (one name with two values in two shards is an error: which would the report show?).
void shards_ks_and_references(const MergeOptions& o, const std::vector<ShardRun>& runs, std::vector<int>& ks, std::vector<std::string>& refs) {
  ks = o.k.empty() ? std::vector<int>{} : parse_ks(o.k);
  refs = o.references;
  std::map<std::string, std::pair<json, std::string>> ref_of;  // name -> (value, shard directory)
  for (const auto& r : runs) {
    const json& sm = r.summary;
    if (!sm.is_object()) continue;
    if (o.k.empty() && sm.contains("k") && sm["k"].is_array())
      for (const json& k : sm["k"])
        if (k.is_number_integer() && std::find(ks.begin(), ks.end(), k.get<int>()) == ks.end()) ks.push_back(k.get<int>());
    if (o.references.empty() && sm.contains("references") && sm["references"].is_object())
      for (const auto& [name, v] : sm["references"].items()) {
        const auto [it, fresh] = ref_of.emplace(name, std::make_pair(v, r.dir.string()));
        if (!fresh && it->second.first != v)
          throw Error("merge: --reference " + name + " is " + it->second.first.dump() + " in " + it->second.second + " and " + v.dump() +
                      " in " + r.dir.string() + "; give the one to report with merge --reference");
        if (fresh) refs.push_back(name + "=" + v.dump());
      }
  }
  if (ks.empty()) ks = {1, 10, 100};
  std::sort(ks.begin(), ks.end());
}

// The shards' device: the one they all ran on, "mixed", or "unknown" for shards without a summary.
std::string merged_device(const std::vector<ShardRun>& runs) {
  std::string device;
  for (const auto& r : runs) {
    const std::string d = r.summary.is_object() ? r.summary.value("device", std::string("unknown")) : "unknown";
    device = device.empty() || device == d ? d : "mixed";
  }
  return device;
}

// What the summary adds to build_summary's: counts, the shards' times and sandboxes, and where
// the rows came from.
void add_merged_fields(ordered_json& summary, const std::vector<ShardRun>& runs, const MergedRows& m, const std::string& device) {
  const double gen_s = sum_field(runs, "time", "generation_s");
  summary["samples"] = m.results;
  summary["tokens"] = static_cast<std::uint64_t>(m.tokens);
  summary["verdicts"] = m.tally.counts();
  // The shards ran apart: their times are summed (engine-seconds, verifier-seconds).
  const double wall_s = sum_field(runs, "time", "wall_s"), overlap_s = sum_field(runs, "time", "overlap_s");
  summary["time"] = {{"generation_s", gen_s},
                     {"verification_s", sum_field(runs, "time", "verification_s")},
                     {"wall_s", wall_s},
                     {"overlap_s", overlap_s},
                     {"overlap_fraction", wall_s > 0 ? overlap_s / wall_s : 0.0},
                     {"generation_waited_for_verifier_s", sum_field(runs, "time", "generation_waited_for_verifier_s")}};
  summary["throughput"] = {{"tok_per_s", gen_s > 0 ? m.tokens / gen_s : 0.0},
                           {"samples_per_s", wall_s > 0 ? static_cast<double>(m.results) / wall_s : 0.0}};
  // Counts summed over the shards; the isolation any shard's sandbox lacked.
  summary["cancelled"] = static_cast<std::uint64_t>(sum_field(runs, nullptr, "cancelled"));
  summary["resumed_samples"] = static_cast<std::uint64_t>(sum_field(runs, nullptr, "resumed_samples"));
  std::set<std::string> missing;
  for (const auto& r : runs)
    if (r.summary.is_object() && r.summary.contains("sandbox_missing") && r.summary["sandbox_missing"].is_array())
      for (const json& s : r.summary["sandbox_missing"])
        if (s.is_string()) missing.insert(s.get<std::string>());
  summary["sandbox_missing"] = missing;
  // The rules that judged (evalplus_rules.h): the same in every shard (run.json holds them), the
  // first shard's record of its times file.
  if (runs.front().summary.is_object() && runs.front().summary.contains("rules")) summary["rules"] = runs.front().summary["rules"];
  summary["device"] = device;
  summary["shards"] = runs.size();
  ordered_json from = ordered_json::array();
  for (const auto& r : runs) from.push_back({{"dir", fs::absolute(r.dir).lexically_normal().string()}, {"shard", r.shard.str()}});
  summary["merged_from"] = from;
}

}  // namespace

int run_merge(const MergeOptions& o, const std::string& command) {
  check_plot_path(o.plot, o.out, std::vector<fs::path>(o.shards.begin(), o.shards.end()));
  const std::vector<ShardRun> runs = read_shards(o);
  make_out_dir(o.out);
  const fs::path out = fs::absolute(o.out).lexically_normal();
  ordered_json manifest = runs.front().manifest;
  manifest["shard"] = {{"index", 0}, {"count", 1}};  // the merged directory is a whole run
  const MergedRows m = write_merged_rows(out, runs, manifest);
  std::vector<int> ks;
  std::vector<std::string> refs;
  shards_ks_and_references(o, runs, ks, refs);
  const std::string device = merged_device(runs);

  const RunSummary rs = build_summary(manifest, dataset_kind(runs, m.has_plus), ks, m.tally, m.has_plus);
  ordered_json summary = rs.json;
  add_merged_fields(summary, runs, m, device);
  summary["command"] = command;
  const std::string model_name = fs::path(manifest["model"].get<std::string>()).filename().string();
  write_summary_files(out, summary, m.tally, manifest.at("tasks").get<std::vector<std::string>>(), refs, o.plot,
                      manifest["dataset"].get<std::string>() + ": " + model_name + ", n = " + std::to_string(manifest.at("n").get<int>()) +
                          " (" + device + ", " + std::to_string(runs.size()) + " shards)");
  if (o.json) {
    std::cout << json_text(summary, 2) << "\n";
  } else {
    print_pass_at_k(rs.passk, rs.passk_plus);
    std::printf("merged %zu shards: %zu samples into %s (report.md, summary.json)\n", runs.size(), m.results, o.out.c_str());
  }
  if (m.tally.sandbox_errors() > 0) {
    std::cerr << "bestofn: error: " << m.tally.sandbox_errors() << " sample(s) could not be run (sandbox errors; see \"result\" in "
              << (out / "results.jsonl").string() << "); they are not in pass@k\n";
    return kExitError;
  }
  return kExitOk;
}

}  // namespace bestofn
