// bestofn compare A B: two runs' pass@k on the problems both ran, B - A with its paired interval
// over problems, and whether that interval excludes 0.
#include "bestofn/eval/run_compare.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "bestofn/eval/passk.h"
#include "bestofn/eval/scoring.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/text_file.h"
#include "util/json_file.h"
#include "util/jsonl.h"

namespace bestofn {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

// One run's verdicts, from its results rows.
struct RunRows {
  std::string file;                // the results file read
  std::vector<std::string> tasks;  // in the order the rows first name them
  Tally tally;
  std::size_t rows = 0, plus_rows = 0;
  std::vector<int> ks;  // the run's --k, from the summary.json beside it (empty: none)
  bool has_plus() const { return plus_rows > 0; }
};

// A results row as eval and score write it: task_id and passed, plus_passed when plus_result is there.
void check_row(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where, "not a results row: expected a JSON object with task_id and passed");
  if (!j.contains("task_id") || !j["task_id"].is_string()) throw Error(where, "not a results row: no string field \"task_id\"");
  if (!j.contains("passed") || !j["passed"].is_boolean())
    throw Error(where, "not a results row: no boolean field \"passed\" (a samples file? verify it with bestofn score first)");
  if (j.contains("plus_result") && (!j.contains("plus_passed") || !j["plus_passed"].is_boolean()))
    throw Error(where, "not a results row: plus_result without a boolean \"plus_passed\"");
}

// A directory is an eval run's: its results.jsonl, and its summary.json's "k" when there is one.
RunRows read_run(const std::string& arg) {
  RunRows r;
  std::error_code ec;
  const bool dir = fs::is_directory(arg, ec);
  r.file = dir ? (fs::path(arg) / "results.jsonl").string() : arg;
  if (dir && !fs::exists(r.file, ec))
    throw Error(r.file, "missing: " + arg + " is not an eval output directory (give the directory eval wrote, or a results .jsonl file)");
  if (!dir && arg != "-" && !fs::exists(arg, ec)) throw Error(arg, "no such file or directory");
  std::set<std::string> seen;
  for_each_jsonl(r.file, [&](json&& j, const std::string& where) {
    check_row(j, where);
    if (seen.insert(j["task_id"].get<std::string>()).second) r.tasks.push_back(j["task_id"].get<std::string>());
    r.tally.add_row(j);
    ++r.rows;
    r.plus_rows += j.contains("plus_result");
  });
  if (r.rows == 0) throw Error(input_name(r.file), "no results rows");
  // An early-stopped run's pass@k is biased (eval_summary.cpp's pass_at_k_note): not a score to compare.
  const fs::path manifest = fs::path(arg) / "run.json";
  if (dir && fs::exists(manifest, ec)) {
    const json m = json::parse(read_text_file(manifest), nullptr, false);
    if (m.is_object() && (m.value("stop_on_pass", false) || m.value("until_pass", 0) > 0))
      throw Error(manifest.string(), "a --stop-on-pass or --until-pass run: its problems stopped at their passes, so its pass@k is biased; "
                                     "compare runs of all n samples");
  }
  const fs::path summary = fs::path(arg) / "summary.json";
  if (dir && fs::exists(summary, ec)) {
    const json s = json::parse(read_text_file(summary), nullptr, false);
    if (s.is_object() && s.contains("k") && s["k"].is_array())
      for (const json& k : s["k"])
        if (k.is_number_integer() && k.get<int>() >= 1) r.ks.push_back(k.get<int>());
  }
  return r;
}

// One k's comparison: pass@k of both runs over the problems where both can estimate it.
struct KResult {
  int k = 0;
  std::vector<double> a, b;  // per problem, paired
  std::optional<Interval> a_interval, b_interval, difference;
  double mean_a() const { return mean(a); }
  double mean_b() const { return mean(b); }
  static double mean(const std::vector<double>& v) {
    double s = 0;
    for (const double x : v) s += x;
    return s / static_cast<double>(v.size());
  }
  // "differ" when the interval excludes 0; B - A < 0 then means B is worse.
  const char* verdict() const {
    if (a.empty()) return "not computable";
    if (!difference) return "no interval";
    return difference->lo > 0 || difference->hi < 0 ? "differ" : "within noise";
  }
  bool b_worse() const { return difference && difference->hi < 0; }
};

KResult compare_k(const RunRows& A, const RunRows& B, const std::vector<std::string>& shared, int k, bool plus, const IntervalSettings& s) {
  KResult r;
  r.k = k;
  for (const std::string& t : shared) {
    const auto [na, ca] = A.tally.n_c(t, plus);
    const auto [nb, cb] = B.tally.n_c(t, plus);
    const std::optional<double> pa = pass_at_k(na, ca, k), pb = pass_at_k(nb, cb, k);  // nullopt: n < k (0 with no verified sample)
    if (pa && pb) r.a.push_back(*pa), r.b.push_back(*pb);
  }
  r.a_interval = bootstrap_interval(r.a, s);
  r.b_interval = bootstrap_interval(r.b, s);
  r.difference = paired_difference_interval(r.a, r.b, s);
  return r;
}

ordered_json k_json(const KResult& r) {
  const bool any = !r.a.empty();
  ordered_json j = {{"problems", r.a.size()},
                    {"a", any ? ordered_json(r.mean_a()) : ordered_json(nullptr)},
                    {"b", any ? ordered_json(r.mean_b()) : ordered_json(nullptr)},
                    {"difference", any ? ordered_json(r.mean_b() - r.mean_a()) : ordered_json(nullptr)},
                    {"interval", interval_json(r.difference)},
                    {"verdict", r.verdict()}};
  if (r.difference && std::string(r.verdict()) == "differ") j["direction"] = r.b_worse() ? "B worse" : "B better";
  j["a_interval"] = interval_json(r.a_interval);
  j["b_interval"] = interval_json(r.b_interval);
  return j;
}

void print_k(const KResult& r, const char* prefix, double level) {
  if (r.a.empty()) {
    std::printf("%spass@%d: not computable (no problem has %d verified samples in both runs)\n", prefix, r.k, r.k);
    return;
  }
  std::printf("%spass@%d: A %.4f, B %.4f, B-A %+.4f", prefix, r.k, r.mean_a(), r.mean_b(), r.mean_b() - r.mean_a());
  if (r.difference) std::printf(" (%g%% CI %+.4f to %+.4f)", 100 * level, r.difference->lo, r.difference->hi);
  std::printf(" over %zu problem%s: ", r.a.size(), r.a.size() == 1 ? "" : "s");
  if (!r.difference) std::printf("no interval (fewer than 2 problems)\n");
  else if (std::string(r.verdict()) == "differ") std::printf("differ, B %s\n", r.b_worse() ? "worse" : "better");
  else std::printf("within noise\n");
}

// --k, else the runs' own k values (their union), else 1,10,100.
std::vector<int> compare_ks(const CompareOptions& o, const RunRows& A, const RunRows& B) {
  if (!o.k.empty()) return parse_ks(o.k);
  std::vector<int> ks = A.ks;
  ks.insert(ks.end(), B.ks.begin(), B.ks.end());
  if (ks.empty()) ks = {1, 10, 100};
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  return ks;
}

}  // namespace

int run_compare(const CompareOptions& o) {
  const RunRows A = read_run(o.a), B = read_run(o.b);
  const std::set<std::string> in_b(B.tasks.begin(), B.tasks.end());
  std::vector<std::string> shared;
  for (const std::string& t : A.tasks)
    if (in_b.count(t)) shared.push_back(t);
  if (shared.empty())
    throw Error("compare: " + input_name(A.file) + " and " + input_name(B.file) + " share no problem (A's are like \"" + A.tasks.front() +
                "\", B's like \"" + B.tasks.front() + "\")");
  const std::size_t only_a = A.tasks.size() - shared.size(), only_b = B.tasks.size() - shared.size();
  const std::vector<int> ks = compare_ks(o, A, B);
  const bool plus = A.has_plus() && B.has_plus();
  std::vector<KResult> base_r, plus_r;
  for (const int k : ks) base_r.push_back(compare_k(A, B, shared, k, false, o.interval));
  if (plus)
    for (const int k : ks) plus_r.push_back(compare_k(A, B, shared, k, true, o.interval));

  if (o.json) {
    ordered_json j;
    j["a"] = {{"results", input_name(A.file)}, {"problems", A.tasks.size()}, {"samples", A.rows}};
    j["b"] = {{"results", input_name(B.file)}, {"problems", B.tasks.size()}, {"samples", B.rows}};
    j["shared_problems"] = shared.size();
    j["only_in_a"] = only_a;
    j["only_in_b"] = only_b;
    j["interval"] = interval_settings_json(o.interval);
    j["pass_at_k"] = ordered_json::object();
    for (const KResult& r : base_r) j["pass_at_k"][std::to_string(r.k)] = k_json(r);
    if (plus) {
      j["plus_pass_at_k"] = ordered_json::object();
      for (const KResult& r : plus_r) j["plus_pass_at_k"][std::to_string(r.k)] = k_json(r);
    }
    std::cout << json_text(j, 2) << "\n";
  } else {
    std::printf("A: %s (%zu problems, %zu samples)\nB: %s (%zu problems, %zu samples)\n", input_name(A.file).c_str(), A.tasks.size(), A.rows,
                input_name(B.file).c_str(), B.tasks.size(), B.rows);
    std::printf("paired over the %zu problems both ran (%zu only in A, %zu only in B); %g%% intervals of B-A: percentile bootstrap over "
                "problems, %d resamples, seed %llu\n",
                shared.size(), only_a, only_b, 100 * o.interval.level, o.interval.resamples, static_cast<unsigned long long>(o.interval.seed));
    for (const KResult& r : base_r) print_k(r, "", o.interval.level);
    for (const KResult& r : plus_r) print_k(r, "plus ", o.interval.level);
    if (A.has_plus() != B.has_plus())
      std::printf("plus tests: only %s has plus verdicts; compared on the base tests only\n", A.has_plus() ? "A" : "B");
  }
  int code = kExitOk;
  if (o.fail_if_worse)
    for (const auto* list : {&base_r, &plus_r})
      for (const KResult& r : *list)
        if (r.b_worse()) {
          std::cerr << "bestofn: " << (list == &plus_r ? "plus " : "") << "pass@" << r.k << ": B is worse than A beyond noise (B-A "
                    << r.mean_b() - r.mean_a() << ", interval " << r.difference->lo << " to " << r.difference->hi << ")\n";
          code = kExitBelowThreshold;
        }
  return code;
}

}  // namespace bestofn
