// bestofn compare's flags and usage checks; the comparison is run_compare (bestofn/eval/run_compare.h).
#include <memory>

#include "bestofn/eval/run_compare.h"
#include "cli/commands.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_compare(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  auto* sub = app.add_subcommand("compare", "Say whether two runs' pass@k differ beyond the noise of which problems were drawn");
  sub->footer(
      "A and B are eval output directories (their results.jsonl) or results files (eval's results.jsonl, score's\n"
      "--out). Only the problems both ran are compared (the others are counted); per k, those with at least\n"
      "k verified samples in both runs. For each k: A's and B's pass@k on those problems, B-A, and its 95%\n"
      "interval from a paired bootstrap over the problems (each resample draws the problems once, for both\n"
      "runs, so what the runs share, the problems' own difficulty, cancels). \"differ\" when the interval\n"
      "excludes 0, else \"within noise\". With plus verdicts in both (HumanEval+), the plus tests' pass@k too.\n"
      "The interval is about the problems: how far B-A could move with another draw of problems like these,\n"
      "each with its samples (their sampling noise is in the spread already); it says nothing of problems\n"
      "unlike these. Runs that share no problem, a missing file and a row without task_id / passed: exit 1.\n"
      "Exit 0 whatever the verdict, unless --fail-if-worse: then 3 (as eval --fail-under) when B is worse\n"
      "than A beyond noise at some k (base or plus), for CI: A the baseline, B the candidate.\n"
      "Examples:\n"
      "  bestofn compare runs/baseline runs/new\n"
      "  bestofn compare runs/baseline/results.jsonl new_results.jsonl --k 1,10 --json\n"
      "  bestofn compare runs/main runs/pr --fail-if-worse --k 1");
  sub->add_option("A", o->a, "The baseline: an eval output directory or a results .jsonl file")->required()->check(non_empty());
  sub->add_option("B", o->b, "The run compared with it (differences are B-A)")->required()->check(non_empty());
  sub->add_option("--k", o->k, "pass@k values, comma-separated (default: the runs' own --k from their summary.json, else 1,10,100)")
      ->check(k_list());
  sub->add_option("--resamples", o->interval.resamples, "Bootstrap resamples")->check(CLI::Range(100, 1000000))->default_str("2000");
  sub->add_option("--seed", o->interval.seed, "The bootstrap's seed (the same seed, the same intervals)")
      ->transform(seed_value())
      ->default_str("47");
  sub->add_flag("--json", o->json, "Print the comparison as JSON");
  sub->add_flag("--fail-if-worse", o->fail_if_worse, "Exit 3 when B's pass@k is below A's beyond noise at some k");
  return [o] { return run_compare(*o); };
}

}  // namespace bestofn::cli
