#pragma once
// Best-of-N that picks: one candidate per prompt chosen without the hidden tests, from
// what the candidates themselves show when run.
//  - public:  the examples the prompt shows (public_tests.h: HumanEval's docstring examples, MBPP's
//             assert in its prompt, a row's own public_tests): candidates that pass all of them are
//             kept (if none does, all are);
//  - cluster: the candidates are run on the public examples' inputs and on type-preserving
//             variations of them (mutate_args: an int one more or less, a string shorter or
//             reversed, a list without its last element, ...; no model needed), grouped by their
//             outputs (an exception is an output too), and the largest group kept (CodeT's and
//             AlphaCode's agreement: wrong programs disagree in many ways, right ones alike);
//  - logprob: the highest mean logprob (the model's own confidence) among those left.
// A strategy is a chain of these, applied in order ("public,cluster,logprob": filter, then group,
// then break ties); ties left at its end go to the highest mean logprob, then the lowest index.
// Every candidate's evidence comes from one sandbox run that holds only its own code and the
// inputs (outside_tests.h's harness, exceptions as outputs); the expected values of the public
// examples from a run of only the prompt's example texts. The hidden tests never steer a choice:
// they only judge the chosen candidate (selected@1).
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/verifier/sandbox.h"

namespace bestofn {

enum class SelectStep { Public, Cluster, Logprob };

struct SelectStrategy {
  std::string name;  // as written: "public,cluster,logprob"
  std::vector<SelectStep> steps;
};

// "public", "cluster", "logprob" or a comma-separated chain of them (each at most once). Throws
// bestofn::Error naming --select and the bad word.
SelectStrategy parse_strategy(const std::string& text);

// What eval reports when no --select is given: each step alone, and the three chained.
std::vector<SelectStrategy> default_strategies();

// The strategies --select names (each once, in order); "none" among them: none at all; empty: `defaults`.
std::vector<SelectStrategy> strategies_from(const std::vector<std::string>& select, const std::vector<SelectStrategy>& defaults);

// What selection knows of one candidate.
struct CandidateFacts {
  double mean_logprob = 0;  // the candidate's cumulative logprob / its tokens (0 when unknown)
  int public_passed = -1;   // 1: passes every public example; 0: fails one; -1: no public example ran
  std::string signature;    // its outputs on the cluster inputs, as a key equal outputs share; "" when it did not run
};

// The chosen candidate's index (c must not be empty).
std::size_t select_candidate(const std::vector<CandidateFacts>& c, const SelectStrategy& s);

// Type-preserving variations of one call's arguments (plain data as compare_outputs.h encodes it),
// deterministic: at most `count`, none equal to the original or to each other.
std::vector<nlohmann::json> mutate_args(const nlohmann::json& args, std::size_t count);

// A problem's selection inputs, from one sandbox run of only the prompt's example texts: the
// public examples' calls and expected values, and the calls the cluster step runs (the public
// calls and mutants of their arguments). error: why there are none ("" when the run worked).
struct SelectionInputs {
  std::vector<std::string> public_calls;
  std::vector<nlohmann::json> expected;
  std::vector<std::string> cluster_calls;  // public_calls first
  int unreadable = 0;  // examples the prompt shows that could not be read or evaluated
  std::string error;
};
SelectionInputs selection_inputs(const Sandbox& sandbox, const Problem& problem, int worker);

// One candidate's facts but the logprob: its run on the cluster calls (its whole code, as
// datasets.h's solution_code makes it of a completion or a "solution" is, without the tests),
// public_passed from the first public_calls.size() outputs. A run that fails as a whole (a syntax
// error, a time-out), or raises on every input, has no signature.
CandidateFacts candidate_evidence(const Sandbox& sandbox, const Problem& problem, const SelectionInputs& in, const std::string& code,
                                  int worker, double timeout_s);

// A problem's candidates for selected@1: their facts and their verdicts on the hidden tests.
struct SelectionPool {
  std::vector<CandidateFacts> facts;
  std::vector<bool> passed, plus_passed;
};

// summary.json's "selection": per strategy, selected@1 (base, and plus with has_plus) over the
// problems with at least one candidate, its 95% interval over those problems
// (selected_at_1_interval: [lo, hi], null below 2 problems; intervals.h's default settings), and
// the share of the gap between pass@1 and pass@n it closes ((selected - pass@1) / (pass@n -
// pass@1); null when pass@n == pass@1).
nlohmann::ordered_json selection_summary(const std::vector<SelectionPool>& pools, const std::vector<SelectStrategy>& strategies,
                                         bool has_plus);

// The text lines of a selection summary: "selected@1 public,cluster,logprob: 0.4120 (95% CI 0.3700
// to 0.4500) (closes 63% of the gap from pass@1 0.3000 to pass@n 0.4800)" per strategy.
void print_selection(const nlohmann::ordered_json& selection);

// For eval and score: the facts of every sample (grouped by problem, in `rows` order), from
// `rows` (results rows: task_id, completion, logprob, num_tokens, passed, plus_passed) and one
// evidence run each, on `workers` sandbox workers. problems: by task_id.
std::vector<SelectionPool> gather_pools(const Sandbox& sandbox, const std::vector<const Problem*>& problems,
                                        const std::vector<nlohmann::json>& rows, int workers, double timeout_s);

}  // namespace bestofn
