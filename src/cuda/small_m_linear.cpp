// The host twin of kernels/linear_small_m.cu (src/cuda/small_m_linear.h states the order).
#include "cuda/small_m_linear.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "bestofn/model/quantize.h"
#include "bestofn/util/numeric.h"

namespace bestofn::cuda {

bool small_m_linear_fits(int T, int out, int in) {
  return T >= 1 && T <= kSmallMMaxRows && out >= 1 && in >= kSmallMCodes && in % kSmallMCodes == 0;
}

void small_m_linear_twin(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                         const float* bias, int T, int out, int in, float* y, bool accumulate) {
  const auto K = static_cast<std::size_t>(in);
  constexpr std::size_t kStride = static_cast<std::size_t>(kSmallMLanes) * kSmallMCodes;
  for (int t = 0; t < T; ++t) {
    const std::uint8_t* at = a + static_cast<std::size_t>(t) * K;
    for (int o = 0; o < out; ++o) {
      const std::uint8_t* wo = w + static_cast<std::size_t>(o) * K;
      std::array<float, kSmallMLanes> lane{};
      for (std::size_t l = 0; l < static_cast<std::size_t>(kSmallMLanes); ++l)
        for (std::size_t k0 = l * kSmallMCodes; k0 < K; k0 += kStride)
          for (std::size_t j = 0; j < static_cast<std::size_t>(kSmallMCodes); ++j)
            lane[l] += fp8_e4m3_to_float_finite(wo[k0 + j]) * fp8_e4m3_to_float_finite(at[k0 + j]);  // exact product
      for (std::size_t d = kSmallMLanes / 2; d >= 1; d /= 2) {
        std::array<float, kSmallMLanes> next{};
        for (std::size_t l = 0; l < static_cast<std::size_t>(kSmallMLanes); ++l) next[l] = lane[l] + lane[l ^ d];
        lane = next;
      }
      float v = lane[0] * sx[t];
      v = v * sw[per_channel ? o : 0];
      if (bias) v = v + bias[o];
      float& dst = y[static_cast<std::size_t>(t) * static_cast<std::size_t>(out) + static_cast<std::size_t>(o)];
      dst = accumulate ? dst + v : v;
    }
  }
}

}  // namespace bestofn::cuda

namespace bestofn::cuda {

bool small_m_prologue_fits(int T, int in) {
  return T >= 1 && in >= 1 && static_cast<long long>(T) * (in + 4) <= kSmallMPrologueBytes;
}

std::string small_m_fused_refusal(const SmallMFused& f) {
  const std::string shape = std::to_string(f.T) + " tokens, " + std::to_string(f.out) + " x " + std::to_string(f.in);
  if (!small_m_linear_fits(f.T, f.out, f.in))
    return shape + " (1-" + std::to_string(kSmallMMaxRows) + " tokens, in a multiple of " + std::to_string(kSmallMCodes) + ")";
  if (f.prologue != SmallMPrologue::None && !small_m_prologue_fits(f.T, f.in))
    return shape + ": the prologue's codes need " + std::to_string(static_cast<long long>(f.T) * (f.in + 4)) + " bytes of shared memory (at most " +
           std::to_string(kSmallMPrologueBytes) + ")";
  if (f.prologue == SmallMPrologue::None && (f.a == nullptr || f.sx == nullptr)) return shape + ": no prologue and no activation codes";
  if (f.prologue != SmallMPrologue::None && f.x == nullptr) return shape + ": a prologue without its input x";
  if (f.prologue == SmallMPrologue::NormQuant && f.norm == nullptr) return shape + ": NormQuant without its norm weights";
  if (f.epilogue == SmallMEpilogue::Rows && f.y == nullptr) return shape + ": Rows without y";
  if (f.epilogue == SmallMEpilogue::Heads) {
    if (f.hd <= 0 || f.hd % 2 != 0 || f.n_heads <= 0 || f.n_kv <= 0 ||
        static_cast<long long>(f.n_heads + 2LL * f.n_kv) * f.hd != static_cast<long long>(f.out))
      return shape + ": Heads needs out = (n_heads + 2 n_kv) x an even head_dim, got " + std::to_string(f.n_heads) + " + 2 x " +
             std::to_string(f.n_kv) + " heads of " + std::to_string(f.hd);
    if (f.q == nullptr) return shape + ": Heads without q";
    if (f.rope ? (f.pos == nullptr || f.inv_freq == nullptr || f.k_rows == nullptr || f.v_rows == nullptr) : (f.k == nullptr || f.v == nullptr))
      return shape + (f.rope ? ": rope without positions, frequencies or cache rows" : ": Heads without k or v");
  }
  return "";
}

float small_m_inv_rms_twin(const float* x, int dim, float eps) {
  constexpr int kThreads = kSmallMLanes * kSmallMRowsPerBlock;  // rowops::kBlock
  std::array<float, kThreads> part{};
  for (int i = 0; i < kThreads; ++i)
    for (int j = i; j < dim; j += kThreads) part[static_cast<std::size_t>(i)] = std::fma(x[j], x[j], part[static_cast<std::size_t>(i)]);
  // A butterfly over 32 values: every lane ends with the same sum (each add is commutative).
  auto butterfly = [](std::array<float, kSmallMLanes> v) {
    for (std::size_t d = kSmallMLanes / 2; d >= 1; d /= 2) {
      std::array<float, kSmallMLanes> next{};
      for (std::size_t l = 0; l < static_cast<std::size_t>(kSmallMLanes); ++l) next[l] = v[l] + v[l ^ d];
      v = next;
    }
    return v[0];
  };
  std::array<float, kSmallMLanes> warps{};  // lanes 8..31 read 0
  for (std::size_t w = 0; w < static_cast<std::size_t>(kSmallMRowsPerBlock); ++w) {
    std::array<float, kSmallMLanes> lanes{};
    for (std::size_t l = 0; l < static_cast<std::size_t>(kSmallMLanes); ++l) lanes[l] = part[w * kSmallMLanes + l];
    warps[w] = butterfly(lanes);
  }
  const float ss = butterfly(warps);
  return 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
}

void small_m_prologue_twin(const float* x, const float* norm_w, int T, int in, float eps, float static_scale, std::uint8_t* codes,
                           float* scales) {
  const auto K = static_cast<std::size_t>(in);
  std::vector<float> row(K);
  for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t) {
    const float* xt = x + t * K;
    if (norm_w) {
      const float inv = small_m_inv_rms_twin(xt, in, eps);
      for (std::size_t i = 0; i < K; ++i) row[i] = norm_w[i] * (xt[i] * inv);
    } else {
      std::copy(xt, xt + K, row.begin());
    }
    if (static_scale > 0.0f) {
      quantize_fp8_row(row.data(), K, static_scale, codes + t * K);
      scales[t] = static_scale;
    } else {
      quantize_fp8_rows(row.data(), 1, K, codes + t * K, scales + t);
    }
  }
}

}  // namespace bestofn::cuda

namespace bestofn::cuda {

bool small_m_mma_fits(int T, int out, int in) {
  return T >= kMmaMinRows && T <= kMmaMaxRows && out >= kMmaRowsPerWarp && out % kMmaRowsPerWarp == 0 && in >= kMmaChunk &&
         in % kMmaChunk == 0;
}

int small_m_mma_slices(int out, int in, int sm_count) {
  const long long groups = std::max(out / kMmaRowsPerWarp, 1), want = 16LL * std::max(sm_count, 1);
  const long long s = (want + groups - 1) / groups;
  return static_cast<int>(std::clamp<long long>(s, 1, std::min<long long>(kMmaMaxSlices, std::max(in / kMmaChunk, 1))));
}

double small_m_mma_bound(int in, int slices) {
  const double chunks = in / kMmaChunk;
  return 0x1p-12 + (2.0 * chunks + 2.0 * slices + 4.0) * 0x1p-24;
}

std::size_t small_m_mma_workspace_floats(int T, int out, int slices) {
  const auto t_pad = static_cast<std::size_t>((T + 7) / 8 * 8);
  return slices <= 1 ? 0 : static_cast<std::size_t>(slices) * t_pad * static_cast<std::size_t>(out);
}

void small_m_mma_twin(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                      const float* bias, int T, int out, int in, int slices, float* y, bool accumulate) {
  const auto K = static_cast<std::size_t>(in);
  const int chunks = in / kMmaChunk;
  for (int t = 0; t < T; ++t) {
    const std::uint8_t* at = a + static_cast<std::size_t>(t) * K;
    for (int o = 0; o < out; ++o) {
      const std::uint8_t* wo = w + static_cast<std::size_t>(o) * K;
      float total = 0.0f;
      for (int s = 0; s < slices; ++s) {
        float acc = 0.0f;
        for (int c = s * chunks / slices; c < (s + 1) * chunks / slices; ++c) {
          double chunk = 0.0;  // the zeroed fragment
          for (int half = 0; half < 2; ++half) {  // j = 0..7, then 8..15 of each 16-code group
            double exact = chunk;                 // 32 products of 8-bit significands and C: exact in double
            for (int q = 0; q < 4; ++q)
              for (int j = 8 * half; j < 8 * half + 8; ++j) {
                const std::size_t k = static_cast<std::size_t>(c * kMmaChunk + 16 * q + j);
                exact += static_cast<double>(fp8_e4m3_to_float_finite(wo[k])) * fp8_e4m3_to_float_finite(at[k]);
              }
            chunk = static_cast<float>(exact);  // the product's one rounding
          }
          acc = acc + static_cast<float>(chunk);  // the chunk into the slice's sum: one F32 add
        }
        total = total + acc;
      }
      float v = total * sx[t];
      v = v * sw[per_channel ? o : 0];
      if (bias) v = v + bias[o];
      float& dst = y[static_cast<std::size_t>(t) * static_cast<std::size_t>(out) + static_cast<std::size_t>(o)];
      dst = accumulate ? dst + v : v;
    }
  }
}

}  // namespace bestofn::cuda
