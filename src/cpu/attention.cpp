// CPU twins of the attention kernels. The loops repeat CpuEngine::attend_decode and attend_prefill
// (src/cpu/cpu_engine.cpp) operation for operation (same sums in the same order, same compile
// flags in bestofn_core), so on the same BF16 cache they give the engine's numbers.
#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "bestofn/util/numeric.h"
#include "util/exp_poly.h"

namespace bestofn::cpu {
namespace {

// Softmax statistics of one query over a run of positions: max score m, sum l of exp(s - m).
struct Softmax {
  float m = -INFINITY, l = 0.0f;
};

// Widens elements [off, off + n) of BF16 row j (rows of `width` values) to floats.
void read_row(const std::uint16_t* rows, std::size_t width, std::size_t j, std::size_t off, std::size_t n, float* out) {
  const std::uint16_t* r = rows + j * width + off;
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(r[i]);
}

float dot(const float* q, const float* k, std::size_t n) {
  float s = 0.0f;
  for (std::size_t i = 0; i < n; ++i) s += q[i] * k[i];
  return s;
}

// One side (prefix or suffix) for one query head: scores q.k * scale over `len` rows, their
// softmax statistics, and o (hd) = sum_j exp(s_j - m) v_j, unnormalized.
Softmax attend_run(const float* q, const std::uint16_t* K, const std::uint16_t* V, std::size_t len, std::size_t width,
                   std::size_t off, std::size_t hd, float scale, std::vector<float>& scores, std::vector<float>& kv,
                   float* o) {
  Softmax sm;
  scores.assign(len, 0.0f);
  for (std::size_t j = 0; j < len; ++j) {
    read_row(K, width, j, off, hd, kv.data());
    scores[j] = dot(q, kv.data(), hd) * scale;
    sm.m = std::max(sm.m, scores[j]);
  }
  std::fill_n(o, hd, 0.0f);
  for (std::size_t j = 0; j < len; ++j) {
    const float e = exp_poly(scores[j] - sm.m);
    sm.l += e;
    read_row(V, width, j, off, hd, kv.data());
    for (std::size_t i = 0; i < hd; ++i) o[i] += e * kv[i];
  }
  return sm;
}

}  // namespace

void decode_attention(const float* q, const std::uint16_t* const* k_prefix, const std::uint16_t* const* v_prefix,
                      const int* prefix_len, const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix,
                      const int* suffix_len, int T, int n_heads, int n_kv, int hd, float* out) {
  const auto H = static_cast<std::size_t>(n_heads), D = static_cast<std::size_t>(hd);
  const std::size_t group = H / static_cast<std::size_t>(n_kv), width = static_cast<std::size_t>(n_kv) * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scores, kv(D), o_p(D), o_s(D);
  for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t) {
    const auto Lp = static_cast<std::size_t>(std::max(prefix_len[t], 0));
    const auto Ls = static_cast<std::size_t>(std::max(suffix_len[t], 0));
    for (std::size_t h = 0; h < H; ++h) {
      const float* qh = q + (t * H + h) * D;
      const std::size_t off = (h / group) * D;
      const Softmax sp = attend_run(qh, k_prefix[t], v_prefix[t], Lp, width, off, D, scale, scores, kv, o_p.data());
      const Softmax ss = attend_run(qh, k_suffix[t], v_suffix[t], Ls, width, off, D, scale, scores, kv, o_s.data());
      // The log-sum-exp merge; an empty side (m = -inf) gets weight 0.
      const float m = std::max(sp.m, ss.m);
      const float a = Lp > 0 ? std::exp(sp.m - m) : 0.0f, b = Ls > 0 ? std::exp(ss.m - m) : 0.0f;
      const float denom = sp.l * a + ss.l * b;
      float* o = out + (t * H + h) * D;
      for (std::size_t i = 0; i < D; ++i) o[i] = denom > 0.0f ? (o_p[i] * a + o_s[i] * b) / denom : 0.0f;
    }
  }
}

void prefill_attention(const float* q, const std::uint16_t* k, const std::uint16_t* v, int T, int n_heads, int n_kv,
                       int hd, float* out, int q_offset) {
  const auto H = static_cast<std::size_t>(n_heads), D = static_cast<std::size_t>(hd), N = static_cast<std::size_t>(T);
  const auto first = static_cast<std::size_t>(q_offset);
  const std::size_t group = H / static_cast<std::size_t>(n_kv), width = static_cast<std::size_t>(n_kv) * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> kv(D), scores(first + N);
  for (std::size_t h = 0; h < H; ++h) {
    const std::size_t off = (h / group) * D;
    for (std::size_t r = 0; r < N; ++r) {
      const float* qh = q + (r * H + h) * D;
      const std::size_t t = first + r;  // the row's position
      float m = -INFINITY;
      for (std::size_t j = 0; j <= t; ++j) {
        read_row(k, width, j, off, D, kv.data());
        scores[j] = dot(qh, kv.data(), D) * scale;
        m = std::max(m, scores[j]);
      }
      float sum = 0.0f;
      for (std::size_t j = 0; j <= t; ++j) sum += scores[j] = exp_poly(scores[j] - m);
      float* o = out + (r * H + h) * D;
      std::fill_n(o, D, 0.0f);
      for (std::size_t j = 0; j <= t; ++j) {
        read_row(v, width, j, off, D, kv.data());
        const float pj = scores[j] / sum;
        for (std::size_t i = 0; i < D; ++i) o[i] += pj * kv[i];
      }
    }
  }
}

}  // namespace bestofn::cpu
