// bestofn merge's flags and usage checks; the merge is run_merge (bestofn/eval/run_merge.h).
#include <memory>

#include "bestofn/eval/eval_summary.h"
#include "bestofn/eval/run_merge.h"
#include "bestofn/eval/scoring.h"
#include "cli/commands.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_merge(CLI::App& app, const std::string& command) {
  auto o = std::make_shared<MergeOptions>();
  auto* sub = app.add_subcommand("merge", "Combine the output directories of the shards of one eval run (--shard I/N)");
  sub->footer(
      "OUT_DIR gets what the unsharded run would have left: run.json, samples.jsonl and results.jsonl\n"
      "(sorted by problem and index), summary.json (time fields summed over the shards), report.md and\n"
      "the fail@k plot. Refused, naming the problem: shards of different runs (the setting that differs:\n"
      "model, seed, sampling, n, dataset/tasks, ...), the same shard twice, shards of different N, a\n"
      "missing shard, and a shard whose results do not cover its share (finish it with --resume).\n"
      "Examples:\n"
      "  bestofn merge runs/llama8b runs/llama8b.shard0 runs/llama8b.shard1 runs/llama8b.shard2 runs/llama8b.shard3\n"
      "  bestofn merge runs/all runs/shard-* --reference GPT-4o=0.902 --json");
  sub->add_option("OUT_DIR", o->out, "Output directory (new or empty)")->required();
  sub->add_option("SHARD_DIR", o->shards, "The shards' --out-dir directories, all N of them")->required();
  sub->add_option("--k", o->k, "pass@k values, comma-separated (default: the shards' --k)")->check(k_list());
  sub->add_option("--reference", o->references, "NAME=PASS_AT_1 drawn on the plot (repeatable; default: the shards' references)");
  sub->add_option("--plot", o->plot, "fail@k chart (SVG; default: OUT_DIR/fail_at_k.svg)")->check(non_empty());
  sub->add_flag("--json", o->json, "Print the summary as JSON on stdout");
  sub->callback([o] {
    if (!o->k.empty()) parse_ks(o->k);
    for (const auto& r : o->references) usage_checked([&] { return name_value(r, "--reference"); });
  });
  return [o, command] { return run_merge(*o, command); };
}

}  // namespace bestofn::cli
