// The multi-block device sampler (kernels/sample.cu) checked without a GPU: a host emulation of
// its passes (the same chunking and blocks, the same warp lanes and add order, the same histogram,
// tile plan, radix select and walks, with the arithmetic of src/cuda/sample_passes.h that the
// kernels run) against bestofn::sample_token on many rows: the tokens must be identical, the
// logprobs within the bound below.
//
// The logprob bound. Both sides compute lse = zmax + float(log(all)) and logprob = z_tok - lse in
// float; only `all` (the sum of every weight, in double) is summed in another order: the host
// adds each of its 16 lanes over the whole row (V / 16 adds), the device per chunk and then in
// chunk order (64 + 8 + V / 1024 adds). Both are within 2^-53 * adds (relative) of the exact sum,
// so log(all) differs by < 1e-11 and float(log(all)) by at most one ulp of L = log(all), which
// moves lse by at most ulp(L) + ulp(lse) and the logprob by that + ulp(logprob):
//   |logprob_device - logprob_host| <= 2^-22 * (|L| + |lse| + |logprob|)
// (2^-23 per ulp, doubled for the device's double log, within 1 ulp of glibc's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bestofn/engine/sampler.h"
#include "bestofn/util/rng.h"
#include "cuda/sample_passes.h"
#include "util/exp_poly.h"


// The sanitizer build (build-asan) runs a third of the draws: the same arithmetic on the same rows,
// where ASan and UBSan look for memory and undefined-behaviour errors, which fewer draws reach as
// well; the full counts run in the main build (CI time, docs/development.md).
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDrawScale = 3;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kDrawScale = 3;
#else
constexpr int kDrawScale = 1;
#endif
#else
constexpr int kDrawScale = 1;
#endif
namespace bestofn {
namespace {

namespace sp = cuda::sampling;
using u64 = std::uint64_t;

struct EmuOptions {
  int blocks_per_row = 8;      // P (kernel_max's blocks; nothing else depends on it)
  int cap = sp::kTileCap;      // keys per tile
  bool exact_total = false;    // SampleOptions::exact_total
  double bound_scale = 1.0;    // > 1: a wider top-p bound, so that the ambiguous path runs (tests only)
};

// What the emulation did, for the tests that aim at a path.
struct EmuTrace {
  bool id_walk = false, ambiguous = false, bins_tile = false;
  int tiles = 0;  // tiles loaded, all walks
  std::vector<double> chunk_mass;
};

struct Emulated {
  Sample sample;
  EmuTrace trace;
};

struct ArgMax {
  float v;
  int i;
};
ArgMax argmax_op(ArgMax a, ArgMax b) { return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a; }

// The device's passes over one row, on the host.
class Emulator {
 public:
  Emulator(std::span<const float> row, const SamplingParams& p, const EmuOptions& o)
      : x_(row), V_(static_cast<int>(row.size())), nb_((V_ + sp::kChunk - 1) / sp::kChunk), o_(o), code_{V_, sp::id_bits(V_)} {
    a_.greedy = p.temperature <= 0.0f;
    a_.inv_t = a_.greedy ? 1.0f : 1.0f / p.temperature;
    a_.top_k = p.top_k, a_.top_p = p.top_p, a_.min_p = p.min_p, a_.seed = p.seed;
    a_.d_stop = p.min_p > 0.0f ? sp::min_p_stop(p.min_p) : 0.0f;
    a_.cap = o.cap;
    a_.exact_total = o.exact_total;
    truncation_ = !a_.greedy && (p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f);
  }

  Emulated run(u64 prompt, u64 candidate, u64 step) {
    Emulated out;
    EmuTrace& tr = out.trace;
    // kernel_max: blocks of cpb chunks (the launcher's shape), then the partials combined
    int P = std::min(std::max(o_.blocks_per_row, 1), nb_);
    const int cpb = (nb_ + P - 1) / P;
    P = (nb_ + cpb - 1) / cpb;
    ArgMax best{-INFINITY, std::numeric_limits<int>::max()};
    bool nan = false;
    for (int p = 0; p < P; ++p) {
      ArgMax b{-INFINITY, std::numeric_limits<int>::max()};
      for (int i = p * cpb * sp::kChunk; i < std::min(V_, (p + 1) * cpb * sp::kChunk); ++i) {
        const float v = x_[static_cast<std::size_t>(i)];
        if (v != v) nan = true;
        else if (v > b.v || b.i == std::numeric_limits<int>::max()) b = {v, i};
      }
      best = argmax_op(best, b);
    }
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    if (nan || !(best.v > -INFINITY && best.v < INFINITY)) {
      out.sample = {-1, kNaN};
      return out;
    }
    zmax_ = sp::fmul(best.v, a_.inv_t);
    cut_ = sp::fsub(zmax_, sp::kDropNats);
    // kernel_chunks
    std::vector<double> mass(static_cast<std::size_t>(nb_)), all(static_cast<std::size_t>(nb_));
    std::vector<unsigned> hist(sp::kBins, 0);
    count_ = 0;
    for (int c = 0; c < nb_; ++c) chunk(c, mass[static_cast<std::size_t>(c)], all[static_cast<std::size_t>(c)], hist);
    tr.chunk_mass = mass;
    // kernel_finish: the sums in chunk order
    double all_sum = 0.0;
    total_ = 0.0;
    for (int c = 0; c < nb_; ++c) all_sum += all[static_cast<std::size_t>(c)], total_ += mass[static_cast<std::size_t>(c)];
    const float lse = sp::fadd(zmax_, static_cast<float>(std::log(all_sum)));
    if (!std::isfinite(lse)) {
      out.sample = {-1, lse};
      return out;
    }
    if (a_.greedy) {
      out.sample = {best.i, sp::fsub(best.v, lse)};
      return out;
    }
    rule_ = sp::make_rule(a_, count_);
    const double u = static_cast<double>(uniform01(a_.seed, prompt, candidate, step));
    int token;
    if (!sp::truncates(rule_)) {
      tr.id_walk = true;
      token = id_order_draw(mass, u, best.i);
    } else {
      // kernel_gather: the plan (prefix counts of the bins) and the first tile's list
      int over = sp::kBins, reach = sp::kBins;
      long long prefix = 0;
      for (int b = 0; b < sp::kBins; ++b) {
        prefix += hist[static_cast<std::size_t>(b)];
        if (prefix > a_.cap && over == sp::kBins) over = b;
        if (prefix >= rule_.k && reach == sp::kBins) reach = b;
      }
      bstar_ = sp::plan_first_tile(rule_, over, reach);
      list_.clear();
      if (bstar_ >= 0)
        for (int i = 0; i < V_; ++i) {
          const float z = sp::fmul(x_[static_cast<std::size_t>(i)], a_.inv_t);
          if (z >= cut_ && sp::bin_of(z, zmax_) <= bstar_) list_.push_back(code_.key(z, i));
        }
      tr.bins_tile = bstar_ >= 0;
      token = ordered_draw(u, tr);
    }
    out.sample = {token, sp::fsub(sp::fmul(x_[static_cast<std::size_t>(token)], a_.inv_t), lse)};
    return out;
  }

 private:
  float z(int i) const { return sp::fmul(x_[static_cast<std::size_t>(i)], a_.inv_t); }

  // One warp on chunk c: lane j loads id base + 32 k + j; lanes 0..15 add their group, then
  // lane j + 16's; then sum_lanes over lanes 0..7, 8..15 and the two.
  void chunk(int c, double& mass_out, double& all_out, std::vector<unsigned>& hist) {
    const int base = c * sp::kChunk;
    double mass[32] = {}, all[32] = {};
    for (int k = 0; k < 32; ++k) {
      float w[32];
      bool cand[32], group[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int i = base + 32 * k + lane;
        group[lane] = base + 32 * k + 16 * (lane / 16) < V_;
        const float x = i < V_ ? x_[static_cast<std::size_t>(i)] : -INFINITY;
        const float zi = sp::fmul(x, a_.inv_t);
        w[lane] = sp::exp_poly(sp::fsub(zi, zmax_));
        cand[lane] = zi >= cut_;
        if (cand[lane]) {
          ++count_;
          if (truncation_) ++hist[static_cast<std::size_t>(sp::bin_of(zi, zmax_))];
        }
      }
      for (int lane = 0; lane < 16; ++lane) {
        if (group[lane]) all[lane] += static_cast<double>(w[lane]);
        if (cand[lane]) mass[lane] += static_cast<double>(w[lane]);
        if (group[lane + 16]) all[lane] += static_cast<double>(w[lane + 16]);
        if (cand[lane + 16]) mass[lane] += static_cast<double>(w[lane + 16]);
      }
    }
    double mlo = 0.0, mhi = 0.0, alo = 0.0, ahi = 0.0;
    for (int l = 0; l < 8; ++l) mlo += mass[l], mhi += mass[8 + l], alo += all[l], ahi += all[8 + l];
    mass_out = mlo + mhi;
    all_out = alo + ahi;
  }

  float weight_or_flag(int i) const {
    if (i >= V_) return -1.0f;
    const float zi = z(i);
    return zi >= cut_ ? sp::exp_poly(sp::fsub(zi, zmax_)) : -1.0f;
  }

  int id_order_draw(const std::vector<double>& mass, double u, int best) const {
    const double r = u * total_;
    double cum = 0.0;
    int b = 0;
    while (b + 1 < nb_ && cum + mass[static_cast<std::size_t>(b)] <= r) cum += mass[static_cast<std::size_t>(b++)];
    int last = best;
    for (; b < nb_; ++b)
      for (int j = 0; j < sp::kChunk; ++j) {
        const float v = weight_or_flag(b * sp::kChunk + j);
        if (v < 0.0f) continue;
        last = b * sp::kChunk + j;
        cum += static_cast<double>(v);
        if (cum > r) return last;
      }
    return last;
  }

  double host_order_total() const {
    double cum = 0.0;
    for (int i = 0; i < V_; ++i) {
      const float v = weight_or_flag(i);
      if (v >= 0.0f) cum += static_cast<double>(v);
    }
    return cum;
  }

  // radix_select: the want-th largest candidate key below bound, kDigitBits a pass.
  u64 radix_select(u64 bound, long long want) const {
    const int passes = (code_.width() + sp::kDigitBits - 1) / sp::kDigitBits;
    u64 prefix = 0;
    long long rank = want;
    std::vector<unsigned> digits(sp::kDigits);
    for (int pass = passes - 1; pass >= 0; --pass) {
      const int shift = pass * sp::kDigitBits, hi = shift + sp::kDigitBits;
      std::fill(digits.begin(), digits.end(), 0u);
      for (int i = 0; i < V_; ++i) {
        const float zi = z(i);
        if (!(zi >= cut_)) continue;
        const u64 key = code_.key(zi, i);
        if (key >= bound || (hi < 64 && (key >> hi) != (prefix >> hi))) continue;
        ++digits[static_cast<std::size_t>((key >> shift) & (sp::kDigits - 1))];
      }
      long long above = 0;
      const int d = sp::choose_digit(digits.data(), sp::kDigits, rank, above);
      rank -= above;
      prefix |= static_cast<u64>(d) << shift;
    }
    return prefix;
  }

  // load_tile: tile j sorted into w_ / id_ (cached).
  void load_tile(int j, u64 bound, long long seen, EmuTrace& tr) {
    if (loaded_ == j) return;
    ++tr.tiles;
    std::vector<u64> keys;
    if (j == 0 && bstar_ >= 0) {
      keys = list_;
    } else {
      const long long remaining = count_ - seen;
      const long long want = std::min<long long>(remaining, a_.cap);
      const u64 tau = remaining <= a_.cap ? 0 : radix_select(bound, want);
      for (int i = 0; i < V_; ++i) {
        const float zi = z(i);
        if (!(zi >= cut_)) continue;
        const u64 key = code_.key(zi, i);
        if (key >= tau && key < bound) keys.push_back(key);
      }
      EXPECT_EQ(static_cast<long long>(keys.size()), want) << "radix select: a tile of the wrong size";
    }
    EXPECT_LE(keys.size(), static_cast<std::size_t>(sp::kTileCap));
    std::sort(keys.begin(), keys.end(), std::greater<>());
    w_.resize(keys.size()), id_.resize(keys.size());
    for (std::size_t k = 0; k < keys.size(); ++k) {
      w_[k] = sp::exp_poly(sp::fsub(code_.z(keys[k]), zmax_));
      id_[k] = code_.id(keys[k]);
    }
    min_key_ = keys.empty() ? 0 : keys.back();
    loaded_ = j;
  }

  void run_walk(int phase, EmuTrace& tr) {
    const double r = walk_.r;
    sp::walk_start(walk_, phase);
    walk_.r = r;
    long long seen = 0;
    u64 bound = ~u64{0};
    for (int j = 0;; ++j) {
      load_tile(j, bound, seen, tr);
      sp::walk_tile(rule_, walk_, w_.data(), id_.data(), static_cast<int>(w_.size()));
      seen += static_cast<long long>(w_.size());
      if (walk_.done || seen >= count_ || w_.empty()) break;
      if (j == 0 && bstar_ >= 0 &&
          (bstar_ == sp::kBins - 1 || sp::first_tile_suffices(rule_, bstar_, static_cast<long long>(w_.size()))))
        break;
      bound = min_key_;
    }
    sp::walk_end(rule_, walk_);
  }

  int ordered_draw(double u, EmuTrace& tr) {
    loaded_ = -1;
    if (rule_.top_k && rule_.top_p) {
      run_walk(sp::kTotal, tr);
      rule_.need_lo = rule_.need_hi = static_cast<double>(a_.top_p) * walk_.total;
    } else if (rule_.top_p) {
      if (a_.exact_total) {
        rule_.need_lo = rule_.need_hi = static_cast<double>(a_.top_p) * host_order_total();
      } else {
        sp::top_p_need_bounds(total_, count_, nb_, a_.top_p, rule_.need_lo, rule_.need_hi);
        if (o_.bound_scale != 1.0) {  // widen the certified interval (tests of the ambiguous path)
          const double mid = static_cast<double>(a_.top_p) * total_;
          rule_.need_lo = std::max(0.0, mid - (mid - rule_.need_lo) * o_.bound_scale);
          rule_.need_hi = mid + (rule_.need_hi - mid) * o_.bound_scale;
        }
      }
    }
    run_walk(sp::kCut, tr);
    if (walk_.ambiguous) {
      tr.ambiguous = true;
      rule_.need_lo = rule_.need_hi = static_cast<double>(a_.top_p) * host_order_total();
      run_walk(sp::kCut, tr);
    }
    walk_.r = u * walk_.kept;
    run_walk(sp::kDraw, tr);
    return walk_.token;
  }

  std::span<const float> x_;
  int V_, nb_;
  EmuOptions o_;
  sp::KeyCode code_;
  sp::Params a_{};
  bool truncation_ = false;
  float zmax_ = 0.0f, cut_ = 0.0f;
  long long count_ = 0;
  double total_ = 0.0;
  sp::Rule rule_{};
  sp::Walk walk_{};
  int bstar_ = -1, loaded_ = -1;
  std::vector<u64> list_;
  std::vector<float> w_;
  std::vector<int> id_;
  u64 min_key_ = 0;
};

Emulated emulate(std::span<const float> row, const SamplingParams& p, u64 prompt, u64 candidate, u64 step,
                 const EmuOptions& o = {}) {
  return Emulator(row, p, o).run(prompt, candidate, step);
}

// The logprob bound of the header comment, from the host's values: L = lse - zmax, lse = z_tok - logprob.
double logprob_bound(float z_tok, float zmax, float logprob) {
  const double lse = static_cast<double>(z_tok) - static_cast<double>(logprob);
  const double L = lse - static_cast<double>(zmax);
  return 0x1p-22 * (std::fabs(L) + std::fabs(lse) + std::fabs(static_cast<double>(logprob)));
}

SamplingParams params(float temperature, int top_k, float top_p, float min_p, u64 seed) {
  SamplingParams p;
  p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.seed = seed;
  return p;
}

std::string name(const SamplingParams& p) {
  return "T=" + std::to_string(p.temperature) + " top_k=" + std::to_string(p.top_k) + " top_p=" + std::to_string(p.top_p) +
         " min_p=" + std::to_string(p.min_p) + " seed=" + std::to_string(p.seed);
}

// Every truncation mode alone and together, the id-order walks, the edge values.
std::vector<SamplingParams> modes() {
  return {params(1.0f, 0, 1.0f, 0.0f, 1),      params(0.7f, 40, 1.0f, 0.0f, 2),     params(1.0f, 0, 0.9f, 0.0f, 3),
          params(0.8f, 0, 1.0f, 0.05f, 4),     params(0.6f, 50, 0.95f, 0.02f, 5),   params(1.0f, 1 << 30, 1.0f, 0.0f, 6),
          params(1.3f, 1, 1.0f, 0.0f, 7),      params(1.0f, 0, 0.0f, 0.0f, 8),      params(1.0f, 0, 1.0f, 2.0f, 9),
          params(1.0f, 0, 0.5f, 0.0f, 10),     params(0.0f, 0, 1.0f, 0.0f, 11),     params(2.0f, 5000, 0.99f, 0.0f, 12),
          params(1.0f, 0, 0.999f, 0.001f, 13), params(1.5f, 0, 1.0f, 1e-9f, 14),    params(0.3f, 3, 0.6f, 0.0f, 15),
          params(1.0f, 0, 1.0f, 1.0f, 16),     params(5.0f, 0, 0.95f, 0.0f, 17),    params(0.05f, 0, 1.0f, 0.0f, 18),
          params(1.0f, 7000, 1.0f, 0.0f, 19),  params(1.0f, 100, 1.0f, 0.3f, 20),   params(1.0f, 0, 0.9999f, 0.0f, 21)};
}

// Rows of the shapes a model gives and the edges the rule has.
enum class RowKind { Zipf, Spread, Flat, Peaked, Ties, SomeNegInf, MostNegInf, AllEqual };
std::vector<float> make_row(RowKind kind, int V, u64 seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(V));
  switch (kind) {
    case RowKind::Zipf: {  // logit = -1.1 log(rank) + noise, ranks shuffled over the ids
      std::vector<int> rank(static_cast<std::size_t>(V));
      std::iota(rank.begin(), rank.end(), 1);
      std::shuffle(rank.begin(), rank.end(), rng);
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = 8.0f - 1.1f * std::log(static_cast<float>(rank[i])) + 0.3f * normal(rng);
      break;
    }
    case RowKind::Spread:
      for (float& v : x) v = 2.5f * normal(rng);
      break;
    case RowKind::Flat:
      for (float& v : x) v = 0.05f * normal(rng);
      break;
    case RowKind::Peaked:
      for (float& v : x) v = 2.5f * normal(rng);
      for (int k = 0; k < 5; ++k) x[rng() % x.size()] = 12.0f + static_cast<float>(k);
      break;
    case RowKind::Ties:  // a grid of 0.25: many equal z, broken by id
      for (float& v : x) v = std::round(2.0f * normal(rng) * 4.0f) / 4.0f;
      break;
    case RowKind::SomeNegInf:
      for (float& v : x) v = rng() % 4 == 0 ? -INFINITY : 3.0f * normal(rng);
      break;
    case RowKind::MostNegInf:
      for (float& v : x) v = -INFINITY;
      for (int k = 0; k < 1 + V / 50; ++k) x[rng() % x.size()] = normal(rng);
      break;
    case RowKind::AllEqual:
      std::fill(x.begin(), x.end(), 0.5f);
      break;
  }
  return x;
}
const char* kind_name(RowKind k) {
  static const char* names[] = {"zipf", "spread", "flat", "peaked", "ties", "some -inf", "most -inf", "all equal"};
  return names[static_cast<int>(k)];
}

// Runs the emulation against sample_token on one row; returns a failure description or "".
std::string compare_row(std::span<const float> row, const SamplingParams& p, u64 prompt, u64 candidate, u64 step,
                        const EmuOptions& o, EmuTrace* trace = nullptr) {
  SamplerScratch scratch;
  const Sample host = sample_token(row, p, prompt, candidate, step, scratch);
  const Emulated emu = emulate(row, p, prompt, candidate, step, o);
  if (trace) *trace = emu.trace;
  if (emu.sample.token != host.token)
    return "token " + std::to_string(emu.sample.token) + " vs host " + std::to_string(host.token);
  if (host.token < 0) {
    if (std::isfinite(emu.sample.logprob) != std::isfinite(host.logprob)) return "non-finite logprobs differ";
    return "";
  }
  const float inv_t = p.temperature <= 0.0f ? 1.0f : 1.0f / p.temperature;
  const float zmax = *std::max_element(row.begin(), row.end()) * inv_t;
  const float z_tok = row[static_cast<std::size_t>(host.token)] * inv_t;
  const double diff = std::fabs(static_cast<double>(emu.sample.logprob) - static_cast<double>(host.logprob));
  if (!(diff <= logprob_bound(z_tok, zmax, host.logprob)))
    return "logprob " + std::to_string(emu.sample.logprob) + " vs host " + std::to_string(host.logprob);
  return "";
}

// ---- the arithmetic the kernels share ----

TEST(SamplerPasses, ExpPolyTwinIsBitForBitTheHostOne) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> any(-100.0f, 100.0f);
  const float edges[] = {0.0f, -0.0f, -87.0f, -87.5f, 88.0f, 89.0f, -30.0f, -1e-30f, INFINITY, -INFINITY};
  for (float x : edges) EXPECT_EQ(std::bit_cast<std::uint32_t>(sp::exp_poly(x)), std::bit_cast<std::uint32_t>(exp_poly(x))) << x;
  for (int k = 0; k < 1000000; ++k) {
    const float x = k % 2 ? any(rng) : -std::ldexp(any(rng) * any(rng), -12);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(sp::exp_poly(x)), std::bit_cast<std::uint32_t>(exp_poly(x))) << x;
  }
}

// min-p's early stops (Rule::w_stop, min_p_stop) rest on exp_poly being within 2^-21 of exp on the
// weights' range: every float in [-31, 0] with a stride, and the neighbours of each stride point.
TEST(SamplerPasses, ExpPolyIsWithin2ToMinus21OfExpBelowTheBest) {
  double worst = 0.0;
  for (float x = -31.0f; x <= 0.0f; x += 1.0f / 4096.0f)
    for (float y = x, k = 0; k < 3; ++k, y = std::nextafter(y, 0.0f)) {
      const double rel = std::fabs(static_cast<double>(sp::exp_poly(y)) / std::exp(static_cast<double>(y)) - 1.0);
      worst = std::max(worst, rel);
    }
  EXPECT_LE(worst, 0x1p-21);
}

TEST(SamplerPasses, KeysOrderByProbabilityThenIdAndDecode) {
  const sp::KeyCode code{128256, sp::id_bits(128256)};
  EXPECT_EQ(code.idbits, 17);
  const float zs[] = {-INFINITY, -30.5f, -1.0f, -0.0f, 0.0f, 1e-30f, 2.0f, 3.4e38f};
  for (float a : zs)
    for (float b : zs)
      for (int ia : {0, 5, 128255})
        for (int ib : {0, 7, 128255}) {
          const bool before = a != b ? a > b : ia < ib;  // the host's by_prob
          if (a == b && ia == ib) continue;
          EXPECT_EQ(code.key(a, ia) > code.key(b, ib), before) << a << "," << ia << " vs " << b << "," << ib;
        }
  for (float a : zs) {
    EXPECT_EQ(code.z(code.key(a, 123)), a == 0.0f ? 0.0f : a);
    EXPECT_EQ(code.id(code.key(a, 123)), 123);
  }
  EXPECT_EQ(sp::id_bits(1), 1);
  EXPECT_EQ(sp::id_bits(2), 1);
  EXPECT_EQ(sp::id_bits(3), 2);
}

TEST(SamplerPasses, BinsAreMonotoneInZ) {
  const float zmax = 3.7f;
  int last = 0;
  for (float z = zmax; z >= zmax - 30.0f; z = std::nextafter(z, -INFINITY)) {
    const int b = sp::bin_of(z, zmax);
    ASSERT_GE(b, last) << z;
    ASSERT_LT(b, sp::kBins);
    last = b;
    if (z < zmax - 0.01f) z -= 0.001f;  // a walk, not every float
  }
}

// The chunk masses are the host's block_mass bit for bit (the one sum the id-order draw needs
// exactly), for any number of blocks per row.
TEST(SamplerPasses, ChunkMassesAreTheHostBlockMasses) {
  for (int V : {1, 17, 1000, 1024, 1025, 5000, 128256})
    for (RowKind kind : {RowKind::Zipf, RowKind::Spread, RowKind::SomeNegInf}) {
      const std::vector<float> row = make_row(kind, V, static_cast<u64>(V) * 7 + static_cast<u64>(kind));
      for (float t : {1.0f, 0.4f}) {
        SamplerScratch scratch;
        const SamplingParams p = params(t, 0, 1.0f, 0.0f, 3);
        sample_token(row, p, 0, 0, 0, scratch);
        for (int P : {1, 3, 200}) {
          EmuOptions o;
          o.blocks_per_row = P;
          const Emulated e = emulate(row, p, 0, 0, 0, o);
          ASSERT_EQ(e.trace.chunk_mass.size(), scratch.block_mass.size()) << V;
          for (std::size_t b = 0; b < scratch.block_mass.size(); ++b)
            ASSERT_EQ(std::bit_cast<u64>(e.trace.chunk_mass[b]), std::bit_cast<u64>(scratch.block_mass[b]))
                << "V " << V << " " << kind_name(kind) << " chunk " << b;
        }
      }
    }
}

// ---- the draws ----

// Llama 3's vocabulary, real-looking rows (Zipf-like, spread, flat, peaked), every mode, many
// candidates: identical tokens.
TEST(SamplerPasses, LargeVocabularyRowsDrawTheHostTokens) {
  const int V = 128256;
  int rows = 0;
  for (RowKind kind : {RowKind::Zipf, RowKind::Spread, RowKind::Flat, RowKind::Peaked}) {
    const std::vector<float> row = make_row(kind, V, 100 + static_cast<u64>(kind));
    // a flat row under top-p walks ~30 tiles by radix select (slow here): one draw per mode
    const u64 draws = kind == RowKind::Flat || kDrawScale > 1 ? 1 : 3;
    for (const SamplingParams& p : modes())
      for (u64 cand = 0; cand < draws; ++cand) {
        SCOPED_TRACE(std::string(kind_name(kind)) + " " + name(p) + " candidate " + std::to_string(cand));
        EmuOptions o;
        o.blocks_per_row = 1 + static_cast<int>(cand * 37 % 126);  // the draw must not depend on it
        ASSERT_EQ(compare_row(row, p, 0x1234567890ull, cand, 17 + cand, o), "");
        ++rows;
      }
  }
  EXPECT_EQ(rows, (kDrawScale > 1 ? 4 : 10) * static_cast<int>(modes().size()));
}

// Small vocabularies and the edge rows: ties, -inf logits, all-equal logits, a chunk's tail.
TEST(SamplerPasses, SmallVocabulariesAndEdgeRowsDrawTheHostTokens) {
  for (int V : {1, 2, 5, 16, 17, 1000, 1023, 1024, 1025, 3000})
    for (RowKind kind : {RowKind::Zipf, RowKind::Spread, RowKind::Ties, RowKind::SomeNegInf, RowKind::MostNegInf,
                         RowKind::AllEqual}) {
      const std::vector<float> row = make_row(kind, V, static_cast<u64>(V) * 31 + static_cast<u64>(kind));
      for (const SamplingParams& p : modes())
        for (u64 cand = 0; cand < 8; ++cand) {
          SCOPED_TRACE("V " + std::to_string(V) + " " + kind_name(kind) + " " + name(p) + " candidate " + std::to_string(cand));
          ASSERT_EQ(compare_row(row, p, cand * 1000003, cand, 3, {}), "");
        }
    }
}

// Small tiles: the first tile from the bins, then tiles by radix select over the row, re-walked
// for each of the walks; the tokens must not depend on the tile size.
TEST(SamplerPasses, TilesFromRadixSelectDrawTheHostTokens) {
  int multi_tile = 0, radix_first = 0;
  struct Case {
    int V, cap;
  };
  for (const Case c : {Case{300, 1}, Case{300, 7}, Case{300, 64}, Case{5000, 64}, Case{5000, 512}, Case{40000, 512},
                       Case{40000, sp::kTileCap}})
    for (RowKind kind : {RowKind::Spread, RowKind::Flat, RowKind::Ties, RowKind::AllEqual}) {
      const int V = c.V, cap = c.cap;
        const std::vector<float> row = make_row(kind, V, static_cast<u64>(V) + static_cast<u64>(cap));
        for (const SamplingParams& p : {params(1.0f, 0, 0.9f, 0.0f, 1), params(1.0f, 200, 0.8f, 0.01f, 2),
                                        params(1.0f, 0, 1.0f, 0.2f, 3), params(2.0f, 1000, 1.0f, 0.0f, 4),
                                        params(1.0f, 0, 0.3f, 0.5f, 5), params(1.0f, 0, 1.0f, 1.5f, 6)})
          for (u64 cand = 0; cand < 3; ++cand) {
            SCOPED_TRACE("V " + std::to_string(V) + " " + kind_name(kind) + " cap " + std::to_string(cap) + " " + name(p));
            EmuOptions o;
            o.cap = cap;
            EmuTrace tr;
            ASSERT_EQ(compare_row(row, p, 9, cand, 1, o, &tr), "");
            multi_tile += tr.tiles > 1;
            radix_first += !tr.bins_tile && !tr.id_walk;
          }
      }
  EXPECT_GT(multi_tile, 100);  // the paths under test ran
  EXPECT_GT(radix_first, 50);
}

// Top-p without top-k: the certified total decides almost always; where the cut could move within
// the bound, the host-order total decides. A bound widened a billion times makes the second path
// common; exact_total takes it always: the same tokens.
TEST(SamplerPasses, TopPTotalCertifiedOrRedoneInTheHostOrder) {
  int ambiguous = 0, rows = 0;
  for (RowKind kind : {RowKind::Zipf, RowKind::Spread, RowKind::Ties}) {
    const std::vector<float> row = make_row(kind, 20000, 77 + static_cast<u64>(kind));
    for (float top_p : {0.5f, 0.9f, 0.95f, 0.999f})
      for (u64 cand = 0; cand < 21 / kDrawScale; ++cand) {
        const SamplingParams p = params(1.0f, 0, top_p, cand % 3 == 0 ? 0.01f : 0.0f, 5);
        SCOPED_TRACE(std::string(kind_name(kind)) + " " + name(p));
        EmuOptions wide;
        wide.bound_scale = 1e9;
        EmuTrace tr;
        ASSERT_EQ(compare_row(row, p, 1, cand, 2, wide, &tr), "");
        ambiguous += tr.ambiguous;
        EmuOptions exact;
        exact.exact_total = true;
        ASSERT_EQ(compare_row(row, p, 1, cand, 2, exact), "");
        ASSERT_EQ(compare_row(row, p, 1, cand, 2, {}), "");
        ++rows;
      }
  }
  EXPECT_GT(ambiguous, rows / 4);
}

// Many seeds and steps on one Zipf row of Llama 3's size, with the truncations a generation
// config uses: the draws follow the host's one for one (and so its distribution).
TEST(SamplerPasses, ManyDrawsOnOneRowMatchOneForOne) {
  const std::vector<float> row = make_row(RowKind::Zipf, 128256, 5);
  for (const SamplingParams& p : {params(0.6f, 0, 0.9f, 0.0f, 42), params(1.0f, 0, 1.0f, 0.0f, 43),
                                  params(0.8f, 50, 1.0f, 0.05f, 44)})
    for (u64 step = 0; step < 150 / kDrawScale; ++step) {
      SCOPED_TRACE(name(p) + " step " + std::to_string(step));
      ASSERT_EQ(compare_row(row, p, step * 977, step % 7, step, {}), "");
    }
}

TEST(SamplerPasses, NonFiniteRowsGiveNoToken) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> big = make_row(RowKind::Spread, 5000, 3);
  for (const std::vector<float>& base : {std::vector<float>{1.0f, 2.0f, 3.0f}, big})
    for (int where : {0, 1, -1})
      for (float bad : {nan, inf, -inf}) {
        std::vector<float> row = base;
        if (bad == -inf) std::fill(row.begin(), row.end(), -inf);
        else row[where < 0 ? row.size() - 1 : static_cast<std::size_t>(where)] = bad;
        for (const SamplingParams& p : modes()) {
          SCOPED_TRACE(name(p));
          ASSERT_EQ(compare_row(row, p, 0, 0, 0, {}), "");
          EXPECT_EQ(emulate(row, p, 0, 0, 0).sample.token, -1);
        }
      }
  // A temperature so small that z overflows: the host's log-sum-exp is NaN, no token on both.
  const std::vector<float> row = {1e30f, 2e30f, -3.0f};
  ASSERT_EQ(compare_row(row, params(1e-20f, 0, 1.0f, 0.0f, 1), 0, 0, 0, {}), "");
}

}  // namespace
}  // namespace bestofn
