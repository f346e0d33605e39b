#pragma once
// bestofn compare A B: whether two runs' pass@k differ beyond the noise of which problems were
// drawn, paired over the problems both ran (src/eval/run_compare.cpp).
#include <string>

#include "bestofn/eval/intervals.h"

namespace bestofn {

struct CompareOptions {
  std::string a, b;  // eval output directories (their results.jsonl) or results .jsonl(.gz) files
  std::string k;     // empty: the k of the runs' summary.json files (their union), else 1,10,100
  IntervalSettings interval;
  bool json = false;
  bool fail_if_worse = false;  // exit kExitBelowThreshold when B is worse than A beyond noise
};

// Per k (and with plus verdicts in both runs, per k of the plus tests): A's and B's pass@k over
// the problems both ran with at least k verified samples in each, B - A, its paired interval
// (intervals.h) and the verdict: "differ" when the interval excludes 0, else "within noise".
// Prints text, or JSON with o.json. Returns kExitOk, or with o.fail_if_worse kExitBelowThreshold
// when some difference is below 0 beyond noise. Missing or malformed inputs, and runs that share
// no problem, are a bestofn::Error.
int run_compare(const CompareOptions& o);

}  // namespace bestofn
