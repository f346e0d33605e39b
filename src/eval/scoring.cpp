#include "bestofn/eval/scoring.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "bestofn/util/error.h"
#include "bestofn/util/trim_blanks.h"

namespace bestofn {

std::vector<int> parse_ks(const std::string& s) {
  std::vector<int> ks;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    part = trim_blanks(part);
    std::size_t used = 0;
    int k = 0;
    try {
      k = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || k < 1) throw Error("--k: '" + part + "' is not a positive integer (e.g. --k 1,10,100)");
    if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);  // "1,1": pass@1 once
  }
  if (ks.empty()) throw Error("--k: empty list");
  if (s.back() == ',') throw Error("--k: '" + s + "' ends in a comma: a K is missing (e.g. --k 1,10,100)");
  return ks;
}

const char* verdict_kind(const Verdict& v) {
  switch (v.status) {
    case Verdict::Status::Passed: return "passed";
    case Verdict::Status::Failed: return "failed";
    case Verdict::Status::TimedOut: return "timed_out";
    case Verdict::Status::SandboxError: break;
  }
  return "sandbox_error";
}

nlohmann::json result_row(nlohmann::json sample, const Verdict& base, bool has_plus, const Verdict* plus, const char* judged) {
  sample["result"] = base.result;
  sample["passed"] = base.passed();
  if (judged) sample["judged"] = judged;
  if (has_plus) {
    sample["plus_result"] = plus ? plus->result : "not run: the base tests did not pass";
    sample["plus_passed"] = plus && plus->passed();
    if (judged && plus) sample["plus_judged"] = "outside";  // judge_plus: always outside
  }
  return sample;
}

void add_judged(nlohmann::ordered_json& summary, const Tally& tally, bool has_plus) {
  if (!tally.judged(false).empty()) summary["judged"] = tally.judged(false);
  if (has_plus && !tally.judged(true).empty()) summary["plus_judged"] = tally.judged(true);
}

namespace {
// " (95% CI 0.3700 to 0.4500)", or nothing without an interval.
void print_interval(const PassAtK& r) {
  if (r.interval) std::printf(" (%g%% CI %.4f to %.4f)", 100 * IntervalSettings{}.level, r.interval->lo, r.interval->hi);
}
}  // namespace

void print_pass_at_k(const std::vector<PassAtK>& base, const std::vector<PassAtK>& plus) {
  for (const auto& r : base) {
    if (r.problems_used > 0) {
      std::printf("pass@%d: %.4f", r.k, r.mean);
      print_interval(r);
      std::printf(" over %d problems", r.problems_used);
    } else {
      std::printf("pass@%d: not computable (every problem has fewer than %d samples)", r.k, r.k);
    }
    if (r.problems_used > 0 && r.problems_skipped > 0) std::printf(" (%d with fewer than %d samples not computable)", r.problems_skipped, r.k);
    std::printf("\n");
  }
  for (const auto& r : plus)
    if (r.problems_used > 0) {
      std::printf("plus pass@%d: %.4f", r.k, r.mean);
      print_interval(r);
      std::printf(" over %d problems (base and plus tests)\n", r.problems_used);
    }
}

void add_pass_at_k(nlohmann::ordered_json& summary, std::vector<PassAtK>& base, std::vector<PassAtK>* plus) {
  const IntervalSettings settings;
  add_intervals(base, settings);
  summary["pass_at_k"] = Tally::to_json(base);
  summary["pass_at_k_interval"] = Tally::interval_json(base);
  if (plus) {
    add_intervals(*plus, settings);
    summary["plus_pass_at_k"] = Tally::to_json(*plus);
    summary["plus_pass_at_k_interval"] = Tally::interval_json(*plus);
  }
  summary["problems_skipped"] = Tally::skipped_json(base);
  summary["interval"] = interval_settings_json(settings);
}

void Tally::add(const std::string& task_id, const std::string& result, bool passed, bool sandbox_error, const std::string* plus_result,
                bool plus_passed) {
  const bool plus_error = plus_result && plus_result->starts_with("sandbox error");
  counts_[sandbox_error ? "sandbox_error" : passed ? "passed" : result == "timed out" ? "timed_out" : "failed"]++;
  if (plus_error) counts_["sandbox_error"]++;
  if (sandbox_error) return;
  auto& [n, c] = base_[task_id];
  ++n;
  c += passed;
  if (plus_result && !plus_error) {
    auto& [pn, pc] = plus_[task_id];
    ++pn;
    pc += plus_passed;
  }
}

void Tally::add_row(const nlohmann::json& row) {
  const std::string result = row.value("result", "");
  std::string plus_result;
  if (row.contains("plus_result") && row["plus_result"].is_string()) plus_result = row["plus_result"].get<std::string>();
  add(row.at("task_id").get<std::string>(), result, row.value("passed", false), result.starts_with("sandbox error"),
      row.contains("plus_result") ? &plus_result : nullptr, row.value("plus_passed", false));
  if (const auto it = row.find("judged"); it != row.end() && it->is_string()) judged_[it->get<std::string>()]++;
  if (const auto it = row.find("plus_judged"); it != row.end() && it->is_string()) plus_judged_[it->get<std::string>()]++;
}

std::vector<PassAtK> Tally::pass_at_k(const std::vector<Problem>& problems, const std::vector<int>& ks, bool plus) const {
  std::vector<std::string> ids;
  for (const auto& p : problems) ids.push_back(p.task_id);
  return pass_at_k(ids, ks, plus);
}

std::vector<PassAtK> Tally::pass_at_k(const std::vector<std::string>& task_ids, const std::vector<int>& ks, bool plus) const {
  const auto& m = plus ? plus_ : base_;
  std::vector<std::pair<int, int>> nc;
  for (const auto& id : task_ids)
    if (auto it = m.find(id); it != m.end()) nc.push_back(it->second);
  return bestofn::pass_at_k(nc, ks);
}

int Tally::passed(const std::string& task_id) const {
  const auto it = base_.find(task_id);
  return it == base_.end() ? 0 : it->second.second;
}

std::pair<int, int> Tally::n_c(const std::string& task_id, bool plus) const {
  const auto& m = plus ? plus_ : base_;
  const auto it = m.find(task_id);
  return it == m.end() ? std::pair<int, int>{0, 0} : it->second;
}

int Tally::sandbox_errors() const {
  const auto it = counts_.find("sandbox_error");
  return it == counts_.end() ? 0 : it->second;
}

nlohmann::ordered_json Tally::to_json(const std::vector<PassAtK>& r) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& x : r) out[std::to_string(x.k)] = x.problems_used > 0 ? nlohmann::ordered_json(x.mean) : nlohmann::ordered_json(nullptr);
  return out;
}

nlohmann::ordered_json Tally::interval_json(const std::vector<PassAtK>& r) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& x : r) out[std::to_string(x.k)] = bestofn::interval_json(x.interval);
  return out;
}

nlohmann::ordered_json Tally::skipped_json(const std::vector<PassAtK>& r) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& x : r)
    if (x.problems_skipped > 0) out[std::to_string(x.k)] = x.problems_skipped;
  return out;
}

}  // namespace bestofn
