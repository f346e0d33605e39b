#include "bestofn/eval/intervals.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "bestofn/util/error.h"
#include "bestofn/util/rng.h"

namespace bestofn {
namespace {

void check_settings(const IntervalSettings& s) {
  if (s.resamples < 1) throw Error("interval: expected at least 1 resample, got " + std::to_string(s.resamples));
  if (!(s.level > 0 && s.level < 1)) throw Error("interval: expected a level in (0, 1), got " + std::to_string(s.level));
}

double mean_in_order(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// Hyndman & Fan's type 7 on sorted values: linear between the order statistics around q (n - 1).
double quantile(const std::vector<double>& sorted, double q) {
  const double h = q * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<std::size_t>(std::floor(h));
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (h - static_cast<double>(i)) * (sorted[i + 1] - sorted[i]);
}

}  // namespace

std::optional<Interval> bootstrap_interval(const std::vector<double>& v, const IntervalSettings& s) {
  check_settings(s);
  if (v.size() < 2) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); })) {
    const double m = mean_in_order(v);  // every resample's mean
    return Interval{m, m};
  }
  const std::uint64_t p = v.size();
  const std::array<std::uint32_t, 2> key = {static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32)};
  std::vector<double> means(static_cast<std::size_t>(s.resamples));
  for (std::size_t b = 0; b < means.size(); ++b) {
    double sum = 0;
    for (std::uint64_t i = 0; i < p; i += 4) {
      const auto words = philox4x32_10({static_cast<std::uint32_t>(i / 4), static_cast<std::uint32_t>(b), kBootstrapStream, 0}, key);
      for (std::uint64_t j = 0; j < 4 && i + j < p; ++j) sum += v[(static_cast<std::uint64_t>(words[j]) * p) >> 32];
    }
    means[b] = sum / static_cast<double>(p);
  }
  std::sort(means.begin(), means.end());
  const double tail = (1 - s.level) / 2;
  return Interval{quantile(means, tail), quantile(means, 1 - tail)};
}

std::optional<Interval> paired_difference_interval(const std::vector<double>& a, const std::vector<double>& b, const IntervalSettings& s) {
  if (a.size() != b.size())
    throw Error("paired interval: expected one value per problem in both runs, got " + std::to_string(a.size()) + " and " +
                std::to_string(b.size()));
  // One draw of problems for both runs: the mean of the per-problem differences.
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = b[i] - a[i];
  return bootstrap_interval(d, s);
}

nlohmann::ordered_json interval_settings_json(const IntervalSettings& s) {
  return {{"method", "percentile bootstrap over problems"},
          {"level", s.level},
          {"resamples", s.resamples},
          {"seed", s.seed},
          {"null", "fewer than 2 problems: no interval"}};
}

nlohmann::ordered_json interval_json(const std::optional<Interval>& i) {
  return i ? nlohmann::ordered_json::array({i->lo, i->hi}) : nlohmann::ordered_json(nullptr);
}

}  // namespace bestofn
