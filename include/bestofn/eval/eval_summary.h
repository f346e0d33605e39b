#pragma once
// summary.json, report.md and the fail@k plot of an eval run directory, built from the run's
// manifest (run.json) and the tally of its results: `eval` writes them at the end of a run,
// `merge` for the union of shards. The schema is in include/bestofn/eval/report.h.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bestofn/eval/passk.h"
#include "bestofn/eval/scoring.h"

namespace bestofn {

// NAME=VALUE with VALUE in [0, 1]: --reference GPT-4o=0.902, --fail-under pass@10=0.5. Throws
// bestofn::Error naming `flag` ("--reference: 'x' must be ..."); the CLI makes it a usage error.
std::pair<std::string, double> name_value(const std::string& s, const std::string& flag);

struct RunSummary {
  nlohmann::ordered_json json;
  std::vector<PassAtK> passk, passk_plus;  // empty with stop_on_pass
};

// The settings (model, dataset, n, k, shard, sampling) from the manifest, and pass@k over the
// manifest's tasks (or, for a --stop-on-pass run, the solved problems and why pass@k is absent).
// kind: the dataset kind ("humaneval", "humaneval+", "mbpp"); has_plus: report plus_pass_at_k.
RunSummary build_summary(const nlohmann::ordered_json& manifest, const std::string& kind, const std::vector<int>& ks,
                         const Tally& tally, bool has_plus);

// A --plot path that cannot be written (a directory; a directory that does not exist, other than
// the run's out_dir, which the run makes) or that names a file the run reads or writes besides
// the plot (one of `inputs`: check_not_inputs; out_dir's run.json, samples.jsonl, results.jsonl,
// summary.json, report.md) is an error before any work, not after it: bestofn::Error naming the
// path. An earlier plot in out_dir may be replaced.
void check_plot_path(const std::string& plot, const std::filesystem::path& out_dir, std::vector<std::filesystem::path> inputs);

// Adds "references" and "plot" to the summary and writes the plot (not for --stop-on-pass),
// summary.json and report.md into dir. plot: the SVG path (empty: dir/fail_at_k.svg).
// task_ids: the run's problems, in order (the manifest's "tasks").
void write_summary_files(const std::filesystem::path& dir, nlohmann::ordered_json& summary, const Tally& tally,
                         const std::vector<std::string>& task_ids, const std::vector<std::string>& references, const std::string& plot,
                         const std::string& title);

}  // namespace bestofn
