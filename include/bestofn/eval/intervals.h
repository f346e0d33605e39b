#pragma once
// 95% intervals over problems: how far a score that is a mean of per-problem values (pass@k's
// per-problem estimates, selected@1's 0/1) could move with another draw of problems like these.
//
// A percentile bootstrap (Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13):
// draw P of the P problems with replacement, take the mean of their values, `resamples` times; the
// interval is the (1 - level)/2 and (1 + level)/2 quantiles of those means, each interpolated
// linearly between order statistics (numpy's default quantile, Hyndman & Fan's type 7).
// Each problem's value is itself an estimate from its n samples, so the spread of the values holds
// that sampling noise too (the law of total variance; Miller, "Adding Error Bars to Evals",
// arXiv 2411.00640): resampling the samples inside each problem as well would count it twice.
//
// The draws are reproducible text-for-text: draw i of resample b is word i % 4 of
//   philox4x32_10(counter {i / 4, b, kBootstrapStream, 0}, key {seed low 32 bits, seed high 32 bits})
// (util/rng.h), mapped to problem (word * P) >> 32. They depend only on (seed, b, i, P): two
// series of the same length resample the same problems (every k of a run, both runs of a pair).
// Means are summed in draw order and divided by P. tools/bootstrap_reference.py computes the same
// in Python, independently.
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bestofn {

struct Interval {
  double lo = 0, hi = 0;
};

struct IntervalSettings {
  // 164 problems x 2000 resamples: about 1 ms per series (a 2-vCPU VM); another seed moves the
  // ends by about a thousandth (pass@1 of a real 164-problem run: 0.0155..0.0524 against
  // 0.0152..0.0512 with 1000 resamples).
  int resamples = 2000;
  std::uint64_t seed = 47;
  double level = 0.95;
};

inline constexpr std::uint32_t kBootstrapStream = 0x426f6f74;  // "Boot": counter word 2

// The mean's interval; nullopt for fewer than 2 values (one problem says nothing about the spread
// over problems). All values equal: {mean, mean}, the mean as the bootstrap sums it. Throws
// bestofn::Error for resamples < 1 or a level outside (0, 1).
std::optional<Interval> bootstrap_interval(const std::vector<double>& values, const IntervalSettings& s = {});

// Paired: the interval of mean(b) - mean(a) over the problems both ran, a[i] and b[i] one
// problem's values in the two runs; each resample draws the problems once, for both runs.
// nullopt for fewer than 2 problems; bestofn::Error when the sizes differ.
std::optional<Interval> paired_difference_interval(const std::vector<double>& a, const std::vector<double>& b, const IntervalSettings& s = {});

// The summaries' record of the method: {"method", "level", "resamples", "seed", "null"}.
nlohmann::ordered_json interval_settings_json(const IntervalSettings& s);

// [lo, hi], or null.
nlohmann::ordered_json interval_json(const std::optional<Interval>& i);

}  // namespace bestofn
