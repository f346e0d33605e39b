#pragma once
// bestofn eval: N samples per problem of a code benchmark, generated and verified as one pipeline
// into an output directory that a later run with `resume` completes (src/eval/run_eval.cpp).
#include <string>
#include <vector>

#include "bestofn/eval/evalplus_rules.h"
#include "bestofn/generate/model_options.h"

namespace bestofn {

struct EvalOptions {
  ModelOptions m;  // the CLI's default max_new_tokens for eval is 512
  std::string dataset = "humaneval", data_dir, k = "1,10,100", out_dir = "bestofn-eval", plot, tasks, shard, devices;
  std::vector<std::string> references, fail_under;
  std::vector<std::string> select;  // --select: selection.h's strategies; empty: the defaults; "none": none
  int n = 10, limit = 0, workers = 0, queue = 0;
  double timeout = 3.0, plus_timeout = 20.0;
  bool plus_timeout_given = false;  // --plus-timeout was set: a warning when the dataset has no plus tests
  bool resume = false, stop_on_pass = false, json = false, no_zygote = false, allow_processes = false;
  // --until-pass K: a problem's sampling stops once K of its samples pass (--stop-on-pass is K = 1);
  // its queued and running candidates are dropped. 0: every problem gets its n samples.
  int until_pass = 0;
  RulesOptions rules;  // --rules and EvalPlus's time limits (evalplus_rules.h)
  std::string prompt_style = "bestofn";  // --prompt-style (prompt_style.h)
  int stop_after() const { return until_pass > 0 ? until_pass : stop_on_pass ? 1 : 0; }
};

// --fail-under pass@K=X (the base tests) or plus_pass@K=X (HumanEval+'s plus tests).
struct Gate {
  bool plus = false;
  int k = 0;
  double threshold = 0;
  std::string name() const { return (plus ? "plus_pass@" : "pass@") + std::to_string(k); }
};
// Throws bestofn::Error("--fail-under: ...") for text that is not a gate.
Gate parse_gate(const std::string& text);

// --tasks: the ids in order; an empty list or an empty id (",", "a,,b", "a,") is an Error.
std::vector<std::string> task_ids(const std::string& text);

// Runs the evaluation that `o` describes and prints its summary (text, or JSON with o.json).
// command: the command line, recorded in summary.json. Returns kExitOk, kExitError (samples that
// the sandbox could not run), kExitBelowThreshold (a --fail-under gate) or kExitInterrupted (SIGINT
// or SIGTERM: what is written stays valid); throws bestofn::Error for bad input.
int run_eval(const EvalOptions& o, const std::string& command);

}  // namespace bestofn
