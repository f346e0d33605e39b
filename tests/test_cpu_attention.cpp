// cpu::decode_attention and cpu::prefill_attention (the CPU twins of the attention kernels) against
// naive references computed in double: one full softmax over the concatenated prefix + suffix for
// decode (so the log-sum-exp merge is checked, not repeated), and a causal softmax for prefill.
//
// Tolerance |cpu - ref| <= 2e-5 + 1e-4 |ref|. The twin works in fp32: each score is an fp32 dot
// product of hd <= 128 terms, exp is within 1 ulp, and the sums run over at most ~640 positions
// (relative error 640 * 2^-24 = 4e-5 at worst, far less in practice). Outputs are convex
// combinations of BF16 values of magnitude <= ~4. Measured: at most 9e-6 over these cases, so
// the bound leaves a margin of 2x at the smallest |ref| and ~10x at |ref| ~ 1; a missing or
// duplicated position moves an output by ~p_j |v_j|, about 1e-3 at these lengths, and fails it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cpu/attention.h"
#include "util/exp_poly.h"
#include "cpu/prefix_attention.h"
#include "test_util.h"

// ExpV16 passes 64-byte vectors by value to an inline function: -Wpsabi's ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace bestofn {
namespace {

constexpr double kAtol = 2e-5, kRtol = 1e-4;

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint16_t> h(n);
  const std::vector<float> f = test::random_floats(n, seed);
  for (std::size_t i = 0; i < n; ++i) h[i] = bf16_from_float(f[i]);
  return h;
}

// "" when every |got - ref| <= kAtol + kRtol |ref|, else the count and the first mismatches.
std::string compare(const std::vector<float>& got, const std::vector<double>& ref, int n_heads, int hd) {
  std::ostringstream report;
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    worst = std::max(worst, err);
    if (err <= kAtol + kRtol * std::fabs(ref[i])) continue;
    const std::size_t row = i / static_cast<std::size_t>(hd);
    if (bad++ < 8)
      report << "  [t " << row / static_cast<std::size_t>(n_heads) << ", head " << row % static_cast<std::size_t>(n_heads)
             << ", i " << i % static_cast<std::size_t>(hd) << "] got " << got[i] << ", ref " << ref[i] << "\n";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(ref.size()) + " values out of tolerance (max error " +
         std::to_string(worst) + "), first ones:\n" + report.str();
}

// Softmax(q.k / sqrt(hd)) v over the given K/V rows (each a kv_dim-wide BF16 row), in double.
void naive_attend(const float* q, const std::vector<const std::uint16_t*>& k_rows,
                  const std::vector<const std::uint16_t*>& v_rows, std::size_t off, int hd, double* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> s(k_rows.size());
  double m = -INFINITY;
  for (std::size_t j = 0; j < k_rows.size(); ++j) {
    double d = 0.0;
    for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * bf16_to_float(k_rows[j][off + static_cast<std::size_t>(i)]);
    s[j] = d * scale;
    m = std::max(m, s[j]);
  }
  double sum = 0.0;
  for (double& x : s) sum += x = std::exp(x - m);
  for (int i = 0; i < hd; ++i) {
    double o = 0.0;
    for (std::size_t j = 0; j < v_rows.size(); ++j) o += s[j] * bf16_to_float(v_rows[j][off + static_cast<std::size_t>(i)]);
    out[i] = k_rows.empty() ? 0.0 : o / sum;
  }
}

// A decode batch: rows share prefixes (as the slots of one prompt do); each row has its own suffix.
struct DecodeCase {
  int T, n_heads, n_kv, hd;
  std::vector<float> q;                        // (T, n_heads, hd)
  std::vector<std::vector<std::uint16_t>> kp, vp, ks, vs;  // prefixes (len, kv_dim), suffixes per row
  std::vector<int> prefix_of, prefix_len, suffix_len;
  std::vector<const std::uint16_t*> k_prefix, v_prefix, k_suffix, v_suffix;

  DecodeCase(int T_, int heads, int kv, int hd_, std::uint64_t seed, int max_prefix, int max_suffix, float q_std = 1.0f)
      : T(T_), n_heads(heads), n_kv(kv), hd(hd_) {
    std::mt19937_64 rng(seed);
    const auto kv_dim = static_cast<std::size_t>(n_kv * hd);
    q = test::random_floats(static_cast<std::size_t>(T * n_heads * hd), seed + 1, q_std);
    const int n_prefixes = std::max(1, T / 4);
    for (int p = 0; p < n_prefixes; ++p) {
      const int len = std::uniform_int_distribution<int>(std::min(1, max_prefix), max_prefix)(rng);
      kp.push_back(random_bf16(static_cast<std::size_t>(len) * kv_dim, seed + 100 + static_cast<std::uint64_t>(p)));
      vp.push_back(random_bf16(static_cast<std::size_t>(len) * kv_dim, seed + 200 + static_cast<std::uint64_t>(p)));
    }
    for (int t = 0; t < T; ++t) {
      const int p = std::uniform_int_distribution<int>(0, n_prefixes - 1)(rng);
      const int len = std::uniform_int_distribution<int>(std::min(1, max_suffix), max_suffix)(rng);
      prefix_of.push_back(p);
      prefix_len.push_back(static_cast<int>(kp[static_cast<std::size_t>(p)].size() / kv_dim));
      suffix_len.push_back(len);
      ks.push_back(random_bf16(static_cast<std::size_t>(len) * kv_dim, seed + 300 + static_cast<std::uint64_t>(t)));
      vs.push_back(random_bf16(static_cast<std::size_t>(len) * kv_dim, seed + 400 + static_cast<std::uint64_t>(t)));
    }
    pointers();
  }
  void pointers() {
    k_prefix.clear(), v_prefix.clear(), k_suffix.clear(), v_suffix.clear();
    for (int t = 0; t < T; ++t) {
      const auto ts = static_cast<std::size_t>(t), p = static_cast<std::size_t>(prefix_of[ts]);
      k_prefix.push_back(kp[p].data()), v_prefix.push_back(vp[p].data());
      k_suffix.push_back(ks[ts].data()), v_suffix.push_back(vs[ts].data());
    }
  }
  std::vector<float> run() const {
    std::vector<float> out(q.size(), NAN);
    cpu::decode_attention(q.data(), k_prefix.data(), v_prefix.data(), prefix_len.data(), k_suffix.data(),
                          v_suffix.data(), suffix_len.data(), T, n_heads, n_kv, hd, out.data());
    return out;
  }
  // One softmax over prefix rows then suffix rows, in double.
  std::vector<double> naive() const {
    std::vector<double> out(q.size());
    const auto kv_dim = static_cast<std::size_t>(n_kv * hd), D = static_cast<std::size_t>(hd);
    for (int t = 0; t < T; ++t) {
      const auto ts = static_cast<std::size_t>(t);
      std::vector<const std::uint16_t*> k_rows, v_rows;
      for (int j = 0; j < prefix_len[ts]; ++j)
        k_rows.push_back(k_prefix[ts] + static_cast<std::size_t>(j) * kv_dim), v_rows.push_back(v_prefix[ts] + static_cast<std::size_t>(j) * kv_dim);
      for (int j = 0; j < suffix_len[ts]; ++j)
        k_rows.push_back(k_suffix[ts] + static_cast<std::size_t>(j) * kv_dim), v_rows.push_back(v_suffix[ts] + static_cast<std::size_t>(j) * kv_dim);
      for (int h = 0; h < n_heads; ++h) {
        const std::size_t row = ts * static_cast<std::size_t>(n_heads) + static_cast<std::size_t>(h);
        const std::size_t off = static_cast<std::size_t>(h / (n_heads / n_kv)) * D;
        naive_attend(q.data() + row * D, k_rows, v_rows, off, hd, out.data() + row * D);
      }
    }
    return out;
  }
};

std::string shape_name(int T, int heads, int kv, int hd) {
  return "T " + std::to_string(T) + ", heads " + std::to_string(heads) + "/" + std::to_string(kv) + ", hd " + std::to_string(hd);
}

TEST(CpuAttention, DecodeMatchesOneSoftmaxOverPrefixAndSuffix) {
  std::uint64_t seed = 1;
  for (int T : {1, 5, 33})
    for (auto [heads, kv] : {std::pair{8, 8}, std::pair{32, 8}})
      for (int hd : {64, 128})
        for (float q_std : {1.0f, 4.0f}) {  // 4: peaked softmax, scores spread over ~+-16
          SCOPED_TRACE(shape_name(T, heads, kv, hd) + ", q stddev " + std::to_string(q_std) + ", seed " + std::to_string(seed));
          const DecodeCase c(T, heads, kv, hd, seed, 600, 40, q_std);
          seed += 1000;
          EXPECT_EQ(compare(c.run(), c.naive(), heads, hd), "");
        }
}

TEST(CpuAttention, DecodeWithAnEmptySide) {
  DecodeCase c(6, 8, 2, 64, 77, 50, 10);
  c.prefix_len[0] = 0;  // suffix only
  c.suffix_len[1] = 0;  // prefix only
  c.prefix_len[2] = 0, c.suffix_len[2] = 0;  // nothing: zeros
  const std::vector<float> out = c.run();
  EXPECT_EQ(compare(out, c.naive(), 8, 64), "");
  const std::size_t per_row = 8 * 64;
  for (std::size_t i = 2 * per_row; i < 3 * per_row; ++i) ASSERT_EQ(out[i], 0.0f) << "element " << i;
}

// Prefill: row t over positions 0..t, against the naive softmax.
TEST(CpuAttention, PrefillMatchesNaiveCausalSoftmax) {
  std::uint64_t seed = 5000;
  for (int T : {1, 5, 33, 300})
    for (auto [heads, kv] : {std::pair{8, 8}, std::pair{32, 8}})
      for (int hd : {64, 128}) {
        SCOPED_TRACE(shape_name(T, heads, kv, hd) + ", seed " + std::to_string(seed));
        const auto kv_dim = static_cast<std::size_t>(kv * hd), D = static_cast<std::size_t>(hd);
        const std::vector<float> q = test::random_floats(static_cast<std::size_t>(T * heads * hd), seed, 2.0f);
        const std::vector<std::uint16_t> k = random_bf16(static_cast<std::size_t>(T) * kv_dim, seed + 1);
        const std::vector<std::uint16_t> v = random_bf16(static_cast<std::size_t>(T) * kv_dim, seed + 2);
        seed += 10;
        std::vector<float> out(q.size(), NAN);
        cpu::prefill_attention(q.data(), k.data(), v.data(), T, heads, kv, hd, out.data());
        std::vector<double> ref(q.size());
        std::vector<const std::uint16_t*> k_rows, v_rows;
        for (int t = 0; t < T; ++t) {
          k_rows.push_back(k.data() + static_cast<std::size_t>(t) * kv_dim);
          v_rows.push_back(v.data() + static_cast<std::size_t>(t) * kv_dim);
          for (int h = 0; h < heads; ++h) {
            const std::size_t row = static_cast<std::size_t>(t * heads + h);
            naive_attend(q.data() + row * D, k_rows, v_rows, static_cast<std::size_t>(h / (heads / kv)) * D, hd,
                         ref.data() + row * D);
          }
        }
        EXPECT_EQ(compare(out, ref, heads, hd), "");
      }
}

// A chunk of a prompt (rows at positions a..b-1, q_offset = a, the cache holding positions 0..b-1)
// gets the rows a..b-1 of the whole prompt's prefill, bit for bit: each row's sums are the same
// (the twin of a prefill pass that continues a prompt, prefill_attention_segments_cuda).
TEST(CpuAttention, PrefillChunkAtAnOffsetIsTheWholePromptsRows) {
  const int T = 70, heads = 8, kv = 2, hd = 64;
  const auto kv_dim = static_cast<std::size_t>(kv * hd), per_row = static_cast<std::size_t>(heads * hd);
  const std::vector<float> q = test::random_floats(static_cast<std::size_t>(T) * per_row, 9101, 2.0f);
  const std::vector<std::uint16_t> k = random_bf16(static_cast<std::size_t>(T) * kv_dim, 9102);
  const std::vector<std::uint16_t> v = random_bf16(static_cast<std::size_t>(T) * kv_dim, 9103);
  std::vector<float> full(q.size());
  cpu::prefill_attention(q.data(), k.data(), v.data(), T, heads, kv, hd, full.data());
  for (const auto& [a, b] : {std::pair{0, 1}, std::pair{0, 70}, std::pair{1, 2}, std::pair{17, 48}, std::pair{48, 70}, std::pair{69, 70}}) {
    SCOPED_TRACE("rows " + std::to_string(a) + ".." + std::to_string(b));
    std::vector<float> out(static_cast<std::size_t>(b - a) * per_row, NAN);
    cpu::prefill_attention(q.data() + static_cast<std::size_t>(a) * per_row, k.data(), v.data(), b - a, heads, kv, hd, out.data(), a);
    EXPECT_EQ(std::memcmp(out.data(), full.data() + static_cast<std::size_t>(a) * per_row, out.size() * sizeof(float)), 0);
  }
}

// The two twins agree: decode with prefix = positions 0..t-1 and suffix = position t is prefill's
// row t (the split the engine makes when a slot continues a prompt).
TEST(CpuAttention, DecodeSplitAgreesWithPrefillRow) {
  const int T = 40, heads = 32, kv = 8, hd = 128;
  const auto kv_dim = static_cast<std::size_t>(kv * hd), per_row = static_cast<std::size_t>(heads * hd);
  const std::vector<float> q = test::random_floats(static_cast<std::size_t>(T) * per_row, 9001, 2.0f);
  const std::vector<std::uint16_t> k = random_bf16(static_cast<std::size_t>(T) * kv_dim, 9002);
  const std::vector<std::uint16_t> v = random_bf16(static_cast<std::size_t>(T) * kv_dim, 9003);
  std::vector<float> full(q.size());
  cpu::prefill_attention(q.data(), k.data(), v.data(), T, heads, kv, hd, full.data());
  for (int t : {1, 7, 39}) {
    for (int split : {0, t / 2, t}) {  // the suffix holds positions split..t
      SCOPED_TRACE("row " + std::to_string(t) + ", prefix " + std::to_string(split));
      const std::uint16_t* kp = k.data();
      const std::uint16_t* vp = v.data();
      const std::uint16_t* ks = k.data() + static_cast<std::size_t>(split) * kv_dim;
      const std::uint16_t* vs = v.data() + static_cast<std::size_t>(split) * kv_dim;
      const int plen = split, slen = t + 1 - split;
      std::vector<float> out(per_row);
      cpu::decode_attention(q.data() + static_cast<std::size_t>(t) * per_row, &kp, &vp, &plen, &ks, &vs, &slen, 1, heads,
                            kv, hd, out.data());
      std::vector<double> ref(full.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t) * per_row),
                              full.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t + 1) * per_row));
      EXPECT_EQ(compare(out, ref, heads, hd), "");
    }
  }
}

// The blocked prefix products (cpu::prefix_scores / prefix_values, the engine's shared-prefix
// attention) against scalar loops in the order the header states, bit for bit: this file is built
// without FMA contraction (tests/CMakeLists.txt), as the kernels are, so an equal order gives equal
// bits and any reordering of a sum (an accumulator split across tiles, a tree reduction) fails.
// Odd sizes cover every tail: R not a multiple of the row block (6), L not of the tiles (64), hd not
// of 16 nor of the 64 columns of a value block.
TEST(CpuAttention, PrefixProductsSumInTheStatedOrder) {
  std::uint64_t seed = 7100;
  for (std::size_t hd : {8u, 24u, 64u})
    for (std::size_t L : {1u, 31u, 33u, 70u, 130u})
      for (std::size_t R : {1u, 3u, 4u, 9u, 13u}) {
        SCOPED_TRACE("hd " + std::to_string(hd) + ", L " + std::to_string(L) + ", R " + std::to_string(R));
        const std::size_t width = 2 * hd, off = hd;  // two KV heads per row; the second one's slice
        const std::vector<std::uint16_t> k = random_bf16(L * width, ++seed), v = random_bf16(L * width, ++seed);
        const std::vector<float> q = test::random_floats(R * hd, ++seed, 2.0f);
        const std::size_t hdp = cpu::round_up(hd, 16);
        auto value_tile = [&](std::size_t j0, float* out) {  // rows j0.. at stride hdp, zeros past hd and L
          for (std::size_t p = 0; p < cpu::kKeyTile; ++p)
            for (std::size_t i = 0; i < hdp; ++i)
              out[p * hdp + i] = j0 + p < L && i < hd ? bf16_to_float(v[(j0 + p) * width + off + i]) : 0.0f;
        };
        auto tile = [&](std::size_t j0, float* out) {  // keys j0.. transposed, zeros past L
          for (std::size_t i = 0; i < hd; ++i)
            for (std::size_t p = 0; p < cpu::kKeyTile; ++p)
              out[i * cpu::kKeyTile + p] = j0 + p < L ? bf16_to_float(k[(j0 + p) * width + off + i]) : 0.0f;
        };
        const std::size_t Rp = cpu::round_up(R, cpu::kPrefixRowBlock);
        std::vector<float> qt(hd * Rp, 0.0f);
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t i = 0; i < hd; ++i) qt[i * Rp + r] = q[r * hd + i];
        const float scale = 0.125f;
        std::vector<float> scores, acc;
        cpu::prefix_scores(tile, L, hd, qt.data(), Rp, scale, scores);
        std::vector<float> p(Rp * L, 0.0f);
        int bad = 0;
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t j = 0; j < L; ++j) {
            float s = 0.0f;
            for (std::size_t i = 0; i < hd; ++i) s += q[r * hd + i] * bf16_to_float(k[j * width + off + i]);
            s *= scale;
            if (std::memcmp(&s, &scores[r * L + j], 4) != 0 && bad++ < 4)
              ADD_FAILURE() << "score r " << r << " j " << j << ": " << scores[r * L + j] << " vs " << s;
            p[r * L + j] = std::exp(s);
          }
        cpu::prefix_values(value_tile, L, hd, p.data(), Rp, acc);
        ASSERT_EQ(acc.size(), Rp * hdp);
        if (hd % 16 == 0) {
          // The in-place BF16 forms on the engine's tile layouts (both heads, the second one's
          // slice read; zeros past L): the same bits as the copying forms, which the loops below
          // check against the stated order.
          const std::size_t T16 = cpu::kKeyTile, tiles = (L + T16 - 1) / T16, ts = width * T16;
          std::vector<std::uint16_t> ktiles(tiles * ts, 0), vtiles(tiles * ts, 0);
          for (std::size_t j = 0; j < L; ++j)
            for (std::size_t e = 0; e < width; ++e) {
              ktiles[j / T16 * ts + e * T16 + j % T16] = k[j * width + e];
              vtiles[j / T16 * ts + e / hd * hd * T16 + j % T16 * hd + e % hd] = v[j * width + e];
            }
          std::vector<float> scores2, acc2;
          cpu::prefix_scores_bf16(ktiles.data() + off * T16, ts, L, hd, qt.data(), Rp, scale, scores2);
          EXPECT_EQ(std::memcmp(scores2.data(), scores.data(), R * L * sizeof(float)), 0) << "in-place scores";
          cpu::prefix_values_bf16(vtiles.data() + off * T16, ts, L, hd, p.data(), Rp, acc2);
          EXPECT_EQ(std::memcmp(acc2.data(), acc.data(), R * hdp * sizeof(float)), 0) << "in-place values";
        }
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t i = 0; i < hdp; ++i) {
            float o = 0.0f;
            if (i < hd)
              for (std::size_t j = 0; j < L; ++j) o += p[r * L + j] * bf16_to_float(v[j * width + off + i]);
            if (std::memcmp(&o, &acc[r * hdp + i], 4) != 0 && bad++ < 8)
              ADD_FAILURE() << "value r " << r << " i " << i << ": " << acc[r * hdp + i] << " vs " << o;
          }
        EXPECT_EQ(bad, 0);
      }
}

// The softmax weights' exp (exp_poly) against exp in double: within 2 ulp (relative 2.4e-7)
// over the range scores minus their max take, exact at 0, NaN kept; a wrong polynomial coefficient
// or a dropped low part of ln 2 is off by far more.
TEST(CpuAttention, ExpPolyIsWithinTwoUlp) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 87.0f * static_cast<float>(i) / 2000000.0f;
    const double ref = std::exp(static_cast<double>(x));
    const double rel = std::fabs(static_cast<double>(exp_poly(x)) - ref) / ref;
    if (rel > worst) worst = rel, worst_x = x;
  }
  EXPECT_LE(worst, 2.4e-7) << "at x = " << worst_x;
  EXPECT_EQ(exp_poly(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(exp_poly(NAN)));
  // The 16-lane form (softmax_rows) gives each lane exp_poly's bits, clamped ends and NaN included.
  int differ = 0;
  for (int i = 0; i <= 200000; i += 16) {
    ExpV16 v;
    for (int k = 0; k < 16; ++k) v[k] = -100.0f + 200.0f * static_cast<float>(i + k) / 200000.0f;
    if (i == 0) v[3] = NAN, v[4] = -INFINITY, v[5] = INFINITY;
    const ExpV16 e = exp_poly(v);
    for (int k = 0; k < 16; ++k) {
      const float one = exp_poly(static_cast<float>(v[k])), lane = e[k];
      differ += std::memcmp(&one, &lane, sizeof one) != 0;
    }
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(exp_poly(5.0f), 148.41f);
  EXPECT_LT(exp_poly(5.0f), 148.42f);
}

}  // namespace
}  // namespace bestofn
