#include "bestofn/sampler.h"

#include <algorithm>
#include <cmath>

#include "bestofn/rng.h"

namespace bestofn {
namespace {

// log(sum exp(z_i / t)) over all logits, with the max taken out.
float log_sum_exp(std::span<const float> logits, float inv_t, float zmax) {
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l * inv_t - zmax));
  return zmax + static_cast<float>(std::log(sum));
}

}  // namespace

Sample sample_token(std::span<const float> logits, const SamplingParams& p, std::uint64_t prompt,
                    std::uint64_t candidate, std::uint64_t step, SamplerScratch& s) {
  const std::size_t best = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float inv_t = p.temperature <= 0.0f ? 1.0f : 1.0f / p.temperature;
  const float zmax = logits[best] * inv_t;
  // A NaN anywhere, a +Inf, or nothing above -Inf makes it NaN or Inf: no distribution to draw from.
  const float lse = log_sum_exp(logits, inv_t, zmax);
  if (!std::isfinite(lse)) return {-1, lse};
  if (p.temperature <= 0.0f) return {static_cast<int>(best), logits[best] - lse};
  auto& c = s.candidates;
  c.clear();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float z = logits[i] * inv_t;
    if (z >= zmax - 30.0f) c.emplace_back(z, static_cast<int>(i));
  }
  auto by_prob = [](const std::pair<float, int>& a, const std::pair<float, int>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < c.size()) {
    std::partial_sort(c.begin(), c.begin() + p.top_k, c.end(), by_prob);
    c.resize(static_cast<std::size_t>(p.top_k));
  } else if (p.top_p < 1.0f || p.min_p > 0.0f) {
    std::sort(c.begin(), c.end(), by_prob);
  }  // else: no truncation needs an order; the walk goes by id
  // Probabilities relative to the best, then the truncations (c is sorted when they apply).
  double total = 0.0;
  for (auto& [z, id] : c) {
    z = std::exp(z - zmax);
    total += z;
  }
  std::size_t keep = c.size();
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (std::size_t i = 0; i < c.size(); ++i) {
      cum += c[i].first;
      if (cum >= static_cast<double>(p.top_p) * total) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f)
    while (keep > 1 && c[keep - 1].first < p.min_p) --keep;  // relative to the best, which is 1
  double kept = 0.0;
  for (std::size_t i = 0; i < keep; ++i) kept += c[i].first;
  const double r = static_cast<double>(uniform01(p.seed, prompt, candidate, step)) * kept;
  double cum = 0.0;
  int token = c[keep - 1].second;
  for (std::size_t i = 0; i < keep; ++i) {
    cum += c[i].first;
    if (cum > r) {
      token = c[i].second;
      break;
    }
  }
  return {token, logits[static_cast<std::size_t>(token)] * inv_t - lse};
}

}  // namespace bestofn
