#pragma once
// The arithmetic of the multi-block device sampler (kernels/sample.cu), shared by the kernels and
// by the host emulation of its passes (tests/test_sampler_passes.cpp), so that what the CPU checks
// against bestofn::sample_token is what the device runs. Plain C++ outside nvcc; every function is
// __host__ __device__ under nvcc, with each float operation rounded on its own on the device
// (__fmul_rn / __fadd_rn: no FMA contraction) and compiled with -ffp-contract=off on the host,
// as src/engine/sampler.cpp is.
//
// The passes over a row of V logits (one row per candidate), each across many blocks:
//   1. max:    per block of chunks, the largest logit, its first index, a NaN flag.
//   2. chunks: per chunk of kChunk = 1024 ids (the host sampler's kBlock), with the same 16 lanes
//              (lane = id mod 16, each lane summed in id order, lanes 0..7 then 8..15 then the
//              two): the candidates' mass in double, bit for bit the host's block_mass; the mass
//              of every weight (the log-sum-exp's, summed here per chunk and then in chunk order,
//              where the host sums each lane over the whole row); the candidate count; with a
//              truncation, a histogram of the candidates over bins of kBinScale per nat below the
//              best z.
//   3. gather (truncation only): the candidates of the bins that fit kTileCap, into a list.
//   4. finish, one block per row: the id-order draw through the chunk masses and one chunk walked
//              id by id; or the list sorted by probability and walked in order (the walks below);
//              candidates past the first tile come in further tiles of the kTileCap largest keys
//              below the last tile, found by radix select over the row.
// Everything that decides the token is exact: maxima, integer counts, a sort of unique keys, and
// double sums in the host's own orders. The one sum that is not (the top-p total without top-k,
// which the host adds in id order over the whole row) is used with a certified error bound, and
// where the cut could move within that bound the finish adds the row in the host's order instead.
#include <cstdint>

#if defined(__CUDACC__)
#define BESTOFN_HD __host__ __device__ __forceinline__
#else
#define BESTOFN_HD inline
#endif

namespace bestofn::cuda::sampling {

constexpr int kChunk = 1024;       // ids per chunk: the host sampler's kBlock
constexpr int kLanes = 16;         // the host sampler's lanes
constexpr float kDropNats = 30.0f; // candidates: z >= zmax - 30
constexpr int kBins = 4096;        // histogram bins over [0, 32) nats below the best z
constexpr float kBinScale = 128.0f;
constexpr int kTileCap = 4096;     // keys the finish block sorts at once
constexpr int kDigitBits = 11;     // radix select digit
constexpr int kDigits = 1 << kDigitBits;

// ---- float arithmetic, each operation rounded on its own ----
BESTOFN_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BESTOFN_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
BESTOFN_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
BESTOFN_HD std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(std::uint32_t, x);
#endif
}
BESTOFN_HD float bits_float(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return __builtin_bit_cast(float, b);
#endif
}

// src/util/exp_poly.h's exp_poly, operation for operation (the same bits).
BESTOFN_HD float exp_poly(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float t = fadd(fmul(x, 1.44269504088896341f), 12582912.0f);
  const float n = fsub(t, 12582912.0f);
  const auto e = static_cast<std::int32_t>(float_bits(t)) - 0x4B400000;
  float r = fsub(x, fmul(n, 0.693359375f));
  r = fsub(r, fmul(n, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = fadd(fmul(p, r), 1.3981999507e-3f);
  p = fadd(fmul(p, r), 8.3334519073e-3f);
  p = fadd(fmul(p, r), 4.1665795894e-2f);
  p = fadd(fmul(p, r), 1.6666665459e-1f);
  p = fadd(fmul(p, r), 5.0000001201e-1f);
  const float y = fadd(fadd(fmul(p, fmul(r, r)), r), 1.0f);
  return fmul(y, bits_float(static_cast<std::uint32_t>(e + 127) << 23));
}

// ---- the probability order as one 64-bit key (larger key: earlier) ----
// ord maps floats to unsigned in their order, -0 and +0 to one value (the host's z != z' does).
BESTOFN_HD std::uint32_t ord(float z) {
  const std::uint32_t b = float_bits(z == 0.0f ? 0.0f : z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
BESTOFN_HD float unord(std::uint32_t o) { return bits_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o); }

struct KeyCode {
  int V, idbits;  // idbits: bits that hold V - 1
  BESTOFN_HD std::uint64_t key(float z, int id) const {
    return (static_cast<std::uint64_t>(ord(z)) << idbits) | static_cast<std::uint64_t>(V - 1 - id);
  }
  BESTOFN_HD int id(std::uint64_t k) const { return V - 1 - static_cast<int>(k & ((std::uint64_t{1} << idbits) - 1)); }
  BESTOFN_HD float z(std::uint64_t k) const { return unord(static_cast<std::uint32_t>(k >> idbits)); }
  BESTOFN_HD int width() const { return 32 + idbits; }
};
inline int id_bits(int V) {
  int b = 0;
  while ((std::int64_t{1} << b) < V) ++b;
  return b < 1 ? 1 : b;
}

// A candidate's bin: kBinScale per nat of zmax - z (a float, as the host's z - zmax negated),
// monotone in z, so every bin's candidates come before the next bin's in the probability order.
BESTOFN_HD int bin_of(float z, float zmax) {
  const float below = fmul(fsub(zmax, z), kBinScale);
  return below >= static_cast<float>(kBins - 1) ? kBins - 1 : static_cast<int>(below);
}

// ---- the row's rule, decided once the chunks are summed ----
struct Rule {
  bool top_k;    // top_k > 0 and fewer than the candidates
  bool top_p;    // top_p < 1
  bool min_p;    // min_p > 0
  long long k;   // items in the top-k (top_k), else the candidate count
  float min_p_value;
  float d_stop;   // min-p alone: a candidate with z - zmax < d_stop has weight < min_p (see below)
  double w_stop;  // min-p alone: min_p (1 - 2^-18) (walk_tile)
  double need_lo, need_hi;  // top-p: top_p * total lies in [need_lo, need_hi] (equal when exact)
  // The walks' mode: a prefix of the order (top-k, top-p), or min-p alone (the set w >= min_p).
  BESTOFN_HD bool min_p_alone() const { return min_p && !top_k && !top_p; }
};

// The sampling parameters as the passes use them (the launcher fills them once per call).
struct Params {
  float inv_t;  // 1 / temperature as the host rounds it; 1 when greedy
  int top_k;
  float top_p, min_p;
  float d_stop;  // min_p_stop(min_p)
  std::uint64_t seed;
  int cap;            // keys per tile (<= kTileCap)
  bool greedy;
  bool exact_total;   // top-p without top-k: always the host-order total (tests)
};

// The row's rule once its candidates are counted (the host's top_k test: more than k candidates);
// need_lo / need_hi are set by the finish.
BESTOFN_HD Rule make_rule(const Params& a, long long candidates) {
  Rule r{};
  r.top_k = a.top_k > 0 && static_cast<long long>(a.top_k) < candidates;
  r.top_p = a.top_p < 1.0f;
  r.min_p = a.min_p > 0.0f;
  r.k = r.top_k ? a.top_k : candidates;
  r.min_p_value = a.min_p;
  r.d_stop = a.d_stop;
  r.w_stop = static_cast<double>(a.min_p) * (1.0 - 0x1p-18);
  r.need_lo = r.need_hi = 0.0;
  return r;
}
BESTOFN_HD bool truncates(const Rule& r) { return r.top_k || r.top_p || r.min_p; }

// d_stop for min-p alone: exp_poly is within 2 ulp of exp (src/util/exp_poly.h; checked to 2^-21
// over [-31, 0] by tests/test_sampler_passes.cpp), so d < log(min_p) - 2^-10 gives
// w <= e^d (1 + 2^-21) < min_p: no candidate after the first such one (in the order, z only falls)
// is kept, and the walk may stop there.
// (min_p >= 1: d_stop = -2^-10, below which w < 0.9991 < min_p.)
inline float min_p_stop(float min_p) {
  const double l = __builtin_log(static_cast<double>(min_p));
  return static_cast<float>((l < 0.0 ? l : 0.0) - 0x1p-10);
}

// The top-p total's bound when the finish sums it in chunk order (chunk masses, then the chunks
// in order) and the host in id order over the row. Summing n nonnegative terms, each term passing
// through at most m rounded adds, lands within m 2^-53 (1 + O(m 2^-53)) of the exact sum,
// relative: the host's m is n - 1, the chunks' 64 + 8 + 1 + chunks, so the two lie within
// (n + chunks + 73) 2^-53 of each other; delta is four times that, which also covers the
// roundings of the bound itself. The host's need = top_p * total (one rounding, monotone in
// total) then lies in [lo, hi].
BESTOFN_HD void top_p_need_bounds(double total, long long candidates, int chunks, float top_p, double& lo, double& hi) {
  const double adds = static_cast<double>(candidates) + static_cast<double>(chunks) + 128.0;
  const double delta = adds * 0x1p-51 * total;
  lo = static_cast<double>(top_p) * ((total - delta) * (1.0 - 0x1p-50));
  hi = static_cast<double>(top_p) * ((total + delta) * (1.0 + 0x1p-50));
}

// ---- the walks over the candidates in probability order (thread 0 of the finish block) ----
// phase kTotal: the top-k's mass (top-k with top-p: the host's total);
// phase kCut:   the top-p cut (the first n with cum_n >= need; all if none) and min-p's trim
//               (the last kept item with w >= min_p, at least the first), with kept = the prefix
//               sum through it; or, for min-p alone, the mass of the items with w >= min_p;
// phase kDraw:  the first kept item whose cumulative mass exceeds r = u * kept.
// Each walk is fed tile after tile (w, ids of consecutive items of the order) and says when it is
// done; walk_end closes a walk that ran out of items.
enum Phase : int { kTotal = 0, kCut = 1, kDraw = 2 };

struct Walk {
  int phase;
  long long i;  // items of the order seen in this walk
  double cum;
  // kTotal
  double total;
  // kCut
  long long keep_lo, keep_hi;  // -1: not reached yet
  long long last_good;         // 1 + the index of the last item with w >= min_p; 0 none
  double good_cum, first_w;
  long long kept_n;            // min-p alone: items with w >= min_p
  // the results
  long long keep;  // items kept (prefix modes)
  double kept;     // their mass
  bool ambiguous;  // the cut moved within [need_lo, need_hi]: redo with the exact total
  double r;        // kDraw: u * kept
  int token, last_id;
  bool done;
};

BESTOFN_HD void walk_start(Walk& s, int phase) {
  s.phase = phase, s.i = 0, s.cum = 0.0, s.done = false;
  if (phase == kTotal) s.total = 0.0;
  if (phase == kCut) s.keep_lo = s.keep_hi = -1, s.last_good = 0, s.good_cum = 0.0, s.first_w = 0.0, s.kept_n = 0;
  if (phase == kDraw) s.token = -1, s.last_id = -1;
}

// Whether min-p keeps an item: the host's w >= min_p, in float.
BESTOFN_HD bool min_p_keeps(const Rule& rule, float w) { return w >= rule.min_p_value; }

// One tile: n items of the order, weights w[0..n) and ids id[0..n). Returns s.done. A prefix
// walk takes at most top-k's k or every candidate (kTotal, kCut), or the kept items (kDraw); min-p
// alone's stops at an item with w < min_p (1 - 2^-18): exp_poly is within 2^-21 of exp, which
// only falls along the order, so no later item reaches min_p.
BESTOFN_HD bool walk_tile(const Rule& rule, Walk& s, const float* w, const int* id, int n) {
  if (rule.min_p_alone()) {
    for (int j = 0; j < n && !s.done; ++j) {
      if (s.i > 0 && static_cast<double>(w[j]) < rule.w_stop) {  // the first item always counts
        s.done = true;
        break;
      }
      const double wj = static_cast<double>(w[j]);
      if (s.i++ == 0) s.first_w = wj, s.last_id = id[j];
      if (!min_p_keeps(rule, w[j])) continue;
      s.cum += wj;
      if (s.phase == kCut) {
        ++s.kept_n;
      } else {  // kDraw
        s.last_id = id[j];
        if (s.cum > s.r) s.token = id[j], s.done = true;
      }
    }
    return s.done;
  }
  const long long limit = s.phase == kDraw ? s.keep : rule.k;
  for (int j = 0; j < n && !s.done; ++j) {
    if (s.i >= limit) {
      s.done = true;
      break;
    }
    const double wj = static_cast<double>(w[j]);
    ++s.i;
    s.cum += wj;
    if (s.phase == kTotal) {
      s.total = s.cum;
    } else if (s.phase == kCut) {
      if (s.i == 1) s.first_w = wj;
      if (rule.min_p && min_p_keeps(rule, w[j])) s.last_good = s.i, s.good_cum = s.cum;
      if (rule.top_p) {
        if (s.keep_lo < 0 && s.cum >= rule.need_lo) s.keep_lo = s.i;
        if (s.cum >= rule.need_hi) s.keep_hi = s.i, s.done = true;
      }
    } else {  // kDraw
      s.last_id = id[j];
      if (s.cum > s.r) s.token = id[j], s.done = true;
    }
    if (s.i >= limit) s.done = true;
  }
  return s.done;
}

// After the last tile (done or out of items): the phase's results.
BESTOFN_HD void walk_end(const Rule& rule, Walk& s) {
  if (s.phase == kCut) {
    s.ambiguous = false;
    if (rule.min_p_alone()) {
      if (s.kept_n == 0) s.kept_n = 1, s.cum = s.first_w;  // min_p > 1: the best alone (it is first)
      s.keep = s.kept_n, s.kept = s.cum;
      return;
    }
    // the walk stopped at the cut, or took every item it may (top-p never reached: all of them)
    long long keep = s.i;
    double kept = s.cum;
    if (rule.top_p) s.ambiguous = (s.keep_lo < 0 ? s.i : s.keep_lo) != keep;
    if (rule.min_p && s.last_good < keep) {  // the trim: back to the last item with w >= min_p, at least the first
      if (s.last_good == 0) keep = 1, kept = s.first_w;
      else keep = s.last_good, kept = s.good_cum;
    }
    s.keep = keep, s.kept = kept;
  } else if (s.phase == kDraw && s.token < 0) {
    s.token = s.last_id;  // rounding left cum <= r: the last kept item
  }
}

// ---- radix select: the digit of a histogram (bins 0..nbins) holding the `want`-th largest key ----
// above: how many keys lie in higher digits; returns the digit (0 when there are fewer).
BESTOFN_HD int choose_digit(const unsigned* hist, int nbins, long long want, long long& above) {
  above = 0;
  for (int d = nbins - 1; d >= 0; --d) {
    if (above + hist[d] >= want) return d;
    above += hist[d];
  }
  return 0;
}

// The first tile from the histogram: the largest bin b* such that the candidates of bins <= b*
// number at most cap, looking no further than where the walks must end (top-k: the first bin
// whose prefix holds k; min-p alone: the bin past d_stop); -1 when bin 0 alone holds more than cap.
// over_cap: the first bin whose prefix count (bins 0..b) exceeds cap; reach_k: the first whose
// prefix holds at least k (kBins where none): both prefix counts only grow with b.
BESTOFN_HD int plan_first_tile(const Rule& rule, int over_cap, int reach_k) {
  int end = kBins - 1;
  if (rule.min_p_alone()) {
    const float stop = fadd(fmul(-rule.d_stop, kBinScale), 1.0f);
    if (stop < static_cast<float>(kBins - 1)) end = static_cast<int>(stop);
  }
  if (over_cap - 1 < end) end = over_cap - 1;
  if (rule.top_k && reach_k < end) end = reach_k;
  return end;
}
// Whether a first tile of bins 0..b* holds every item the walks can take: top-k's k, or, for
// min-p alone, every candidate above d_stop.
BESTOFN_HD bool first_tile_suffices(const Rule& rule, int bstar, long long tile_items) {
  if (rule.top_k) return tile_items >= rule.k;
  if (rule.min_p_alone()) return static_cast<float>(bstar) >= fadd(fmul(-rule.d_stop, kBinScale), 1.0f) - 1.0f;
  return false;
}

}  // namespace bestofn::cuda::sampling
