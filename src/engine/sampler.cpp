// The sampling rule of include/bestofn/engine/sampler.h over a vocabulary row, in passes that vectorize:
// one for the maximum, one for the weights w = exp_poly(z - zmax) (cpu/exp_poly.h: the same bits
// on 16 lanes as on one) and their sums, then the draw. Without truncation the draw walks the
// tokens by id through per-block sums (no list of candidates); with top-k, top-p or min-p only
// the prefix the rule reaches is sorted. All sums are in double; their orders are fixed (the
// list's order, or blocks of kBlock ids), so a draw depends only on its row and its key.
#include "bestofn/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "bestofn/util/rng.h"
#include "util/exp_poly.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // vectors wider than SSE inside this file only

namespace bestofn {
namespace {

// The passes run on vectors of the target's own width: kFV float vectors (and kDV double vectors)
// per group of kLanes = 16 ids, so that lane l of the sums always takes the ids = l mod 16, on any
// width. (One 16-float vector type on an AVX2 target is not split into registers by GCC: the
// sums lived in memory, 19 times slower.)
#if defined(__AVX512F__)
#define BESTOFN_SAMPLER_VEC_BYTES 64
#elif defined(__AVX__)
#define BESTOFN_SAMPLER_VEC_BYTES 32
#else
#define BESTOFN_SAMPLER_VEC_BYTES 16
#endif
typedef float VF __attribute__((vector_size(BESTOFN_SAMPLER_VEC_BYTES)));
typedef float VH __attribute__((vector_size(BESTOFN_SAMPLER_VEC_BYTES / 2)));  // half a VF
typedef double VD __attribute__((vector_size(BESTOFN_SAMPLER_VEC_BYTES)));
typedef std::int32_t VI __attribute__((vector_size(BESTOFN_SAMPLER_VEC_BYTES)));
constexpr std::size_t kLanes = 16;
constexpr std::size_t kF = sizeof(VF) / sizeof(float);  // floats per VF
constexpr std::size_t kD = sizeof(VD) / sizeof(double);  // doubles per VD (kF / 2)
constexpr std::size_t kFV = kLanes / kF, kDV = kLanes / kD;
constexpr std::size_t kBlock = 1024;  // ids per block of the id-order walk (a multiple of kLanes)
constexpr float kDropNats = 30.0f;    // candidates: z >= zmax - 30

VF load(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Floats [i, i + kF) of x, -inf past its end.
VF load_or_inf(std::span<const float> x, std::size_t i) {
  if (i + kF <= x.size()) return load(x.data() + i);
  VF v = VF{} - INFINITY;
  for (std::size_t k = 0; i + k < x.size(); ++k) v[k] = x[i + k];
  return v;
}
// v's lanes as two vectors of doubles, the low half first.
void widen(const VF& v, VD& lo, VD& hi) {
  VH a, b;
  std::memcpy(&a, &v, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + sizeof a, sizeof b);
  lo = __builtin_convertvector(a, VD);
  hi = __builtin_convertvector(b, VD);
}
// The 16 lanes' sum: lanes 0..7 in order, lanes 8..15 in order, then the two.
double sum_lanes(const VD (&v)[kDV]) {
  double lane[kLanes];
  std::memcpy(lane, v, sizeof lane);
  double lo = 0.0, hi = 0.0;
  for (std::size_t k = 0; k < 8; ++k) lo += lane[k], hi += lane[8 + k];
  return lo + hi;
}

// The largest logit (NaNs skipped) and whether any logit is NaN.
struct RowMax {
  float value;
  bool nan;
};
RowMax row_max(std::span<const float> x) {
  VF mv = VF{} - INFINITY;
  VI bad = {};
  std::size_t i = 0;
  for (; i + kF <= x.size(); i += kF) {
    const VF v = load(x.data() + i);
    mv = mv < v ? v : mv;
    bad |= v != v;
  }
  RowMax m{-INFINITY, false};
  for (std::size_t k = 0; k < kF; ++k) m.value = std::max(m.value, mv[k]), m.nan = m.nan || bad[k] != 0;
  for (; i < x.size(); ++i) {
    if (std::isnan(x[i])) m.nan = true;
    else m.value = std::max(m.value, x[i]);
  }
  return m;
}

// Pass two: the sum of every weight (the log-sum-exp's) and, per block of kBlock ids, the sum of
// the candidates' weights; with `list`, the candidates themselves too, in id order. Lanes past the
// row count as z = -inf (weight ~1e-38, never a candidate).
struct Sums {
  double all = 0.0;
  std::size_t candidates = 0;
  std::vector<double>* blocks;
  std::vector<SamplerScratch::Candidate>* list;  // nullptr: not wanted
};
template <bool kList>  // s.list given (the lanes then leave registers for the list)
void weight_sums_impl(std::span<const float> x, float inv_t, float zmax, Sums& s) {
  if (kList) s.list->clear();
  const float cut = zmax - kDropNats;
  const std::size_t n = x.size(), nb = (n + kBlock - 1) / kBlock;
  s.blocks->assign(nb, 0.0);
  VD all[kDV] = {};
  VI count = {};
  for (std::size_t b = 0; b < nb; ++b) {
    VD block[kDV] = {};
    for (std::size_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); i += kLanes)
#pragma GCC unroll 8
      for (std::size_t f = 0; f < kFV; ++f) {  // ids i + f * kF ..: lanes f * kF .. (unrolled: the sums stay in registers)
        const std::size_t at = i + f * kF;
        const VF z = load_or_inf(x, at) * inv_t;
        const VF w = exp_poly_impl<VF, VI>(z - zmax);
        const VI is = z >= cut;  // -1 where a candidate
        count -= is;
        const VF cw = is ? w : VF{};
        if (kList)
          for (std::size_t k = 0; k < kF; ++k)
            if (is[k]) s.list->push_back({z[k], w[k], static_cast<int>(at + k)});
        VD lo, hi;
        widen(w, lo, hi);
        all[2 * f] += lo, all[2 * f + 1] += hi;
        widen(cw, lo, hi);
        block[2 * f] += lo, block[2 * f + 1] += hi;
      }
    (*s.blocks)[b] = sum_lanes(block);
  }
  s.all = sum_lanes(all);
  for (std::size_t k = 0; k < kF; ++k) s.candidates += static_cast<std::size_t>(count[k]);
}
void weight_sums(std::span<const float> x, float inv_t, float zmax, Sums& s) {
  if (s.list) weight_sums_impl<true>(x, inv_t, zmax, s);
  else weight_sums_impl<false>(x, inv_t, zmax, s);
}

// Most probable first, ties by lower id (an object, so that the sorts inline it).
constexpr struct {
  bool operator()(const SamplerScratch::Candidate& a, const SamplerScratch::Candidate& b) const {
    return a.z != b.z ? a.z > b.z : a.id < b.id;
  }
} by_prob;

}  // namespace

Sample sample_token(std::span<const float> logits, const SamplingParams& p, std::uint64_t prompt,
                    std::uint64_t candidate, std::uint64_t step, SamplerScratch& s) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  // A NaN anywhere, a +Inf, or nothing above -Inf: no distribution to draw from.
  const RowMax m = row_max(logits);
  if (logits.empty() || m.nan || !std::isfinite(m.value)) return {-1, kNaN};
  const auto best = static_cast<std::size_t>(std::find(logits.begin(), logits.end(), m.value) - logits.begin());
  const float inv_t = p.temperature <= 0.0f ? 1.0f : 1.0f / p.temperature;
  const float zmax = logits[best] * inv_t;
  // The candidate list only where a truncation may apply (top-k applies only with more than k).
  const bool listed = p.temperature > 0.0f && (p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f);
  Sums sums{0.0, 0, &s.block_mass, listed ? &s.candidates : nullptr};
  weight_sums(logits, inv_t, zmax, sums);
  const float lse = zmax + static_cast<float>(std::log(sums.all));
  if (!std::isfinite(lse)) return {-1, lse};
  if (p.temperature <= 0.0f) return {static_cast<int>(best), logits[best] - lse};
  const float cut = zmax - kDropNats;
  auto weight = [&](float z) { return exp_poly(z - zmax); };
  const double u = static_cast<double>(uniform01(p.seed, prompt, candidate, step));

  // Top-k truncates only where there are more than k candidates; the walk is by id unless a
  // truncation applies (the CUDA sampler decides the same way).
  const bool top_k = p.top_k > 0 && static_cast<std::size_t>(p.top_k) < sums.candidates;
  if (!top_k && p.top_p >= 1.0f && p.min_p <= 0.0f) {
    // No truncation: the first candidate by id whose cumulative weight exceeds u * total, found
    // through the block sums, then id by id inside the block.
    const std::vector<double>& blocks = s.block_mass;
    double total = 0.0;
    for (double b : blocks) total += b;
    const double r = u * total;
    double cum = 0.0;
    std::size_t b = 0;
    while (b + 1 < blocks.size() && cum + blocks[b] <= r) cum += blocks[b++];
    int last = static_cast<int>(best);  // a candidate to fall back on if rounding leaves cum <= r
    for (; b < blocks.size(); ++b)
      for (std::size_t i = b * kBlock; i < std::min(logits.size(), (b + 1) * kBlock); ++i) {
        const float z = logits[i] * inv_t;
        if (!(z >= cut)) continue;
        last = static_cast<int>(i);
        cum += static_cast<double>(weight(z));
        if (cum > r) return {static_cast<int>(i), z - lse};
      }
    return {last, logits[static_cast<std::size_t>(last)] * inv_t - lse};
  }

  // Truncation: the candidates in a list, ordered by probability (ties: lower id first) as far as
  // the rule needs.
  auto& c = s.candidates;  // every candidate, in id order (weight_sums)
  // c[0, have) holds the `have` most probable candidates in order; sort_through(k) extends it to k
  // (a selection, then a sort of what it selected).
  std::size_t have = 0;
  auto sort_through = [&](std::size_t k) {
    if (k <= have) return;
    const auto first = c.begin() + static_cast<std::ptrdiff_t>(have), mid = c.begin() + static_cast<std::ptrdiff_t>(k);
    if (mid != c.end()) std::nth_element(first, mid, c.end(), by_prob);
    std::sort(first, mid, by_prob);
    have = k;
  };
  std::size_t keep = c.size();
  if (top_k) {
    sort_through(static_cast<std::size_t>(p.top_k));
    c.resize(static_cast<std::size_t>(p.top_k));
    keep = c.size();
  } else if (p.top_p >= 1.0f) {  // min-p alone: what it keeps (w >= min_p; the best's w is 1) first
    keep = static_cast<std::size_t>(std::partition(c.begin(), c.end(), [&](const auto& x) { return x.w >= p.min_p; }) - c.begin());
    if (keep == 0) {  // min_p > 1 (the flags refuse it): the best alone
      std::iter_swap(c.begin(), std::min_element(c.begin(), c.end(), by_prob));
      keep = 1;
    }
    std::sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep), by_prob);
  }
  if (p.top_p < 1.0f) {
    // The shortest prefix (in order) whose weight reaches top_p * total, sorting a longer prefix
    // each round until it holds it (a peaked row: one short round; a flat one: about one sort).
    double total = 0.0;
    for (const auto& x : c) total += static_cast<double>(x.w);
    const double need = static_cast<double>(p.top_p) * total;
    keep = c.size();
    if (!top_k) {
      // Bands of a quarter nat of z below zmax: every candidate of band b comes before every one
      // of band b + 1 in the order, so the bands' masses (summed in any order: they only choose)
      // say which bands the cut lies in; those and one more for rounding are moved to the front
      // and sorted. A peaked row sorts a few hundred candidates, not the row.
      constexpr int kBands = 4 * static_cast<int>(kDropNats) + 1;
      auto band = [&](float z) { return std::min(kBands - 1, static_cast<int>((zmax - z) * 4.0f)); };
      double band_mass[kBands] = {};
      for (const auto& x : c) band_mass[band(x.z)] += static_cast<double>(x.w);
      int last = kBands - 1;
      double acc = 0.0;
      for (int b = 0; b < kBands; ++b)
        if ((acc += band_mass[b]) >= need) {
          last = std::min(kBands - 1, b + 1);
          break;
        }
      const auto mid = std::partition(c.begin(), c.end(), [&](const auto& x) { return band(x.z) <= last; });
      std::sort(c.begin(), mid, by_prob);
      have = static_cast<std::size_t>(mid - c.begin());
    }
    double cum = 0.0;
    std::size_t i = 0;  // c[0, i) summed into cum
    for (std::size_t k = std::min<std::size_t>(c.size(), 256);;) {
      sort_through(k);
      for (; i < have && (i == 0 || cum < need); ++i) cum += static_cast<double>(c[i].w);  // the best always
      if (cum >= need) {
        keep = i;
        break;
      }
      if (have == c.size()) break;  // rounding left the sum short: the whole list
      // The rest weigh at most c[have - 1].w each: at least (need - cum) / that many more are needed.
      const double more = (need - cum) / static_cast<double>(c[have - 1].w);
      k = static_cast<std::size_t>(std::min(static_cast<double>(c.size()), std::max(8.0 * static_cast<double>(k), static_cast<double>(have) + 1.05 * more + 1.0)));
    }
    if (p.min_p > 0.0f)
      while (keep > 1 && c[keep - 1].w < p.min_p) --keep;  // relative to the best, which is 1
  } else if (p.min_p > 0.0f && top_k) {
    while (keep > 1 && c[keep - 1].w < p.min_p) --keep;
  }
  double kept = 0.0;
  for (std::size_t i = 0; i < keep; ++i) kept += static_cast<double>(c[i].w);
  const double r = u * kept;
  double cum = 0.0;
  int token = c[keep - 1].id;
  for (std::size_t i = 0; i < keep; ++i) {
    cum += static_cast<double>(c[i].w);
    if (cum > r) {
      token = c[i].id;
      break;
    }
  }
  return {token, logits[static_cast<std::size_t>(token)] * inv_t - lse};
}

}  // namespace bestofn
