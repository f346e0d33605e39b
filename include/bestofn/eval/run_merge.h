#pragma once
// bestofn merge: the output directories of the N shards of one eval run (--shard I/N) combined
// into one, as an unsharded run would have left it (src/eval/run_merge.cpp).
#include <string>
#include <vector>

namespace bestofn {

struct MergeOptions {
  std::string out;  // the new (or empty) output directory
  std::vector<std::string> shards, references;
  std::string k, plot;  // k empty: the shards' k values; references empty: the shards' references
  bool json = false;
};

// Writes run.json, samples.jsonl, results.jsonl (sorted by problem and index), summary.json,
// report.md and the fail@k plot into o.out and prints the summary. command: recorded in
// summary.json. Returns kExitOk, or kExitError when a sample could not be run (sandbox errors);
// shards of different runs, overlapping, missing or unfinished shards are a bestofn::Error.
int run_merge(const MergeOptions& o, const std::string& command);

}  // namespace bestofn
