#pragma once
// What `bestofn eval` writes besides the samples: the fail@k chart (an SVG the project writes
// itself, no plotting runtime), report.md from summary.json, and the pass@k curve behind the chart.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bestofn/eval/intervals.h"

namespace bestofn {

// The k values of the chart: {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} up to n_min (the smallest
// per-problem n), plus n_min itself when it is not in that list (n = 8 gives 1, 2, 5, 8), so the
// curve always ends at the largest k every problem can estimate. Every problem counts in every
// point (n >= k for all). Empty when there are no problems or n_min is 0. Returns (k, pass@k).
// Throws bestofn::Error for an invalid (n, c) (see passk.h).
std::vector<std::pair<int, double>> pass_at_k_curve(const std::vector<std::pair<int, int>>& n_c_per_problem);

// The smallest fail@k the chart draws: fail@k below it (pass@k = 1 gives 0, which a log axis cannot
// show) is drawn at this value as an open marker, and a note on the chart says so.
inline constexpr double kFailFloor = 1e-3;

// fail@k = 1 - pass@k against k on log-log axes: decade ticks, labels and gridlines (minor gridlines
// at 2..9 x each decade), the model's curve as a polyline with one marker per k, an optional second
// curve for the HumanEval+ plus tests, and one dashed horizontal line per reference (name, pass@1):
// ("GPT-4o", 0.902) draws fail = 0.098, labelled "GPT-4o pass@1 = 0.902". The x axis spans the
// decades around the k values, the y axis from 1 down to the decade below the smallest value drawn.
// Text is XML-escaped; numbers are printed with fixed precision, so the output is deterministic.
// Elements carry classes for tools and tests: "series base" / "series plus" (polylines), "marker",
// "reference" (dashed lines), "xtick" / "ytick" (tick labels, placed at exactly the tick's coordinate),
// "grid major" / "grid minor".
// pass_at_k may be empty (only the axes and references are drawn, with a note). Throws bestofn::Error
// for k < 1, k not strictly increasing, or a pass value outside [0, 1] (NaN included).
// selected: (strategy, selected@1) of selection without the hidden tests (selection.h), each a
// diamond "selected" marker at k = 1, labelled, beside the curve's own fail@1.
// pass_at_k_band, plus_band: each k's interval of pass@k over problems (intervals.h), empty or one
// per point of its curve: a shaded polygon ("band base" / "band plus") from fail = 1 - hi to
// 1 - lo under the curve, and a legend entry. Throws bestofn::Error for another count, or an
// interval that is not 0 <= lo <= hi <= 1.
std::string fail_at_k_svg(const std::vector<std::pair<int, double>>& pass_at_k,
                          const std::vector<std::pair<std::string, double>>& references, const std::string& title,
                          const std::vector<std::pair<int, double>>& plus_pass_at_k = {},
                          const std::vector<std::pair<std::string, double>>& selected = {},
                          const std::vector<Interval>& pass_at_k_band = {}, const std::vector<Interval>& plus_band = {});

// report.md from the summary that `bestofn eval` writes as summary.json. The schema (every field
// optional for the report: a missing field, or one of another type, is left out or shown as "n/a";
// nothing throws):
//   {"bestofn_version": str, "commit": str, "model": str,
//    "dataset": {"name": str, "kind": str, "problems": int},   kind: humaneval | humaneval+ | mbpp
//    "n": int, "k": [int...],
//    "shard": {"index": int, "count": int},             eval --shard I/N only: the summary covers that shard's samples
//    "sampling": {"temperature": f, "top_p": f, "top_k": int, "min_p": f, "seed": int,
//                 "max_new_tokens": int, "stop": [str], "chat": bool},
//    "pass_at_k": {"1": f|null, "10": f|null, ...},      keys are k as strings; null: no problem has n >= k
//    "pass_at_k_interval": {"1": [lo, hi]|null, ...},   each pass@k's interval over problems (intervals.h);
//                                                       null below 2 problems; absent in older runs' summaries
//    "plus_pass_at_k": {...},                            HumanEval+ only: the plus tests, same keys
//    "plus_pass_at_k_interval": {...},                   their intervals
//    "interval": {"method": str, "level": f, "resamples": int, "seed": int, "null": str},  how they were made
//    "pass_at_k_note": str,                              why pass@k is absent (--stop-on-pass)
//    "solved": int, "solve_rate": f,                     --stop-on-pass only: problems with a passing sample
//    "problems_skipped": {"100": int, ...},              problems with n < k, per k
//    "samples": int, "tokens": int,                     the run's (a --resume counts samples.jsonl's num_tokens)
//    "cancelled": int,                                   candidates never generated (--stop-on-pass)
//    "resumed_samples": int,                             samples a --resume found already done
//    "verdicts": {"passed": int, "failed": int, "timed_out": int, "sandbox_error": int},
//    "judged": {"outside": int, "in-process": int},      verdicts of the base tests per mode (outside_tests.h);
//    "plus_judged": {"outside": int},                    of the plus tests; absent when no row says it
//    "time": {"generation_s": f, "verification_s": f, "wall_s": f,
//             "overlap_s": f,                            both generation and verification running
//             "overlap_fraction": f,                     overlap_s / wall_s
//             "generation_waited_for_verifier_s": f},    the engine blocked on a full verifier queue
//    "throughput": {"tok_per_s": f, "samples_per_s": f},  time and throughput: this invocation's (a
//                                                       --resume with nothing left to do keeps the run's summary)
//    "selection": {"problems": int, "pass_at_1": f, "pass_at_n": f, "strategies": {NAME: {"selected_at_1": f,
//                  "selected_at_1_interval": [lo, hi]|null, "gap_closed": f|null, "plus_...": the same}}},
//                                                       selection.h: one pick per problem without the hidden tests
//    "references": {"GPT-4o": 0.902, ...},               pass@1 of other models, as --reference gave them
//    "plot": str,                                        the fail@k SVG's absolute path (absent with --stop-on-pass)
//    "device": str, "workers": int, "command": str,
//    "sandbox_missing": [str],                           isolation the kernel refused (empty: none)
//    "devices": [int...],                               eval on CUDA: the GPUs it ran on (--devices)
//    "shards": int, "merged_from": [{"dir": str, "shard": "I/N"}...]}   bestofn merge only (its "time"
//                                                       fields are sums over the shards)
// The report: settings, the pass@k table (a plus column when plus_pass_at_k is present), the
// references, verdict counts, timing with the overlap, throughput and the command. plot_file, when
// not empty, is linked as an image (a path relative to report.md).
std::string render_report_md(const nlohmann::json& summary, const std::string& plot_file);

}  // namespace bestofn
