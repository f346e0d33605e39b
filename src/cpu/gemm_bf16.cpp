// BF16-weight GEMM kernels on AVX-512 (the order is in gemm_bf16.h). Few tokens: the weights are
// widened in registers (BF16 -> fp32 is a zero-extend and a shift), so an N=1 decode step reads
// each weight once from memory and never writes it back; more tokens: 4 rows are widened once into
// an L1 panel and every group of 4 tokens reads them from there.
#include "cpu/gemm_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#define BESTOFN_AVX512 __attribute__((target("avx512f,fma")))

namespace bestofn::cpu::bf16 {
namespace {

constexpr int kRows = 4;
constexpr std::size_t kTile = 32;     // tokens per tile, as in ops.cpp
constexpr std::size_t kFusedMax = 2;  // up to this many tokens, no panel

// (The zero-masked forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized on their own
// undefined pass-through operand.)
BESTOFN_AVX512 inline __m512 widen16(const std::uint16_t* p) {
  const __m512i h = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, h, 16));
}

BESTOFN_AVX512 inline float bf16_value(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<std::uint32_t>(h) << 16))));
}

// Rows as BF16 in memory, or as floats in a panel. From memory, the next block of rows
// (contiguous, at `next`) is prefetched as this one is read: four interleaved rows of 1-2 KB are
// too short for the hardware prefetcher.
struct Bf16Rows {
  const std::uint16_t* w[kRows];
  const std::uint16_t* next;
  std::size_t in;
  BESTOFN_AVX512 __m512 load(int k, std::size_t i) const {
    _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<std::size_t>(k) * in + i), _MM_HINT_T0);
    return widen16(w[k] + i);
  }
  BESTOFN_AVX512 float at(int k, std::size_t i) const { return bf16_value(w[k][i]); }
};
struct PanelRows {
  const float* w[kRows];
  BESTOFN_AVX512 __m512 load(int k, std::size_t i) const { return _mm512_loadu_ps(w[k] + i); }
  BESTOFN_AVX512 float at(int k, std::size_t i) const { return w[k][i]; }
};

template <int TT, class Rows>
BESTOFN_AVX512 void kernel(const Rows& rows, const float* const* xs, std::size_t n, float (*out)[kRows]) {
  __m512 acc[TT][kRows];
  for (auto& r : acc)
    for (auto& a : r) a = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 w[kRows];
    for (int k = 0; k < kRows; ++k) w[k] = rows.load(k, i);
    for (int t = 0; t < TT; ++t) {
      const __m512 x = _mm512_loadu_ps(xs[t] + i);
      for (int k = 0; k < kRows; ++k) acc[t][k] = _mm512_fmadd_ps(x, w[k], acc[t][k]);
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int k = 0; k < kRows; ++k) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc[t][k]);
      float a = 0.0f;
      for (float l : lanes) a += l;
      for (std::size_t j = i; j < n; ++j) a = __builtin_fmaf(xs[t][j], rows.at(k, j), a);
      out[t][k] = a;
    }
}

template <class Rows>
BESTOFN_AVX512 void run(const Rows& rows, std::size_t tt, const float* const* xs, std::size_t n, float (*out)[kRows]) {
  switch (tt) {
    case 1: kernel<1>(rows, xs, n, out); break;
    case 2: kernel<2>(rows, xs, n, out); break;
    case 3: kernel<3>(rows, xs, n, out); break;
    default: kernel<4>(rows, xs, n, out); break;
  }
}

BESTOFN_AVX512 void dot_rows_avx512(const std::uint16_t* w, std::size_t in, std::size_t r0, std::size_t r1, const float* x,
                                    std::size_t T, float* y, std::size_t stride) {
  thread_local std::vector<float> panel;
  panel.resize(kRows * in);
  for (std::size_t t0 = 0; t0 < T; t0 += kTile) {
    const std::size_t t1 = std::min(T, t0 + kTile);
    const bool fused = t1 - t0 <= kFusedMax;
    for (std::size_t r = r0; r < r1; r += kRows) {
      const std::size_t nrows = std::min<std::size_t>(kRows, r1 - r);
      Bf16Rows src;
      PanelRows pan;
      src.next = w + std::min(r + kRows, r1 - 1) * in, src.in = in;
      for (std::size_t k = 0; k < kRows; ++k) {
        src.w[k] = w + std::min(r + k, r1 - 1) * in;  // a short block repeats its last row
        pan.w[k] = panel.data() + k * in;
        if (fused) continue;
        std::size_t i = 0;
        for (; i + 16 <= in; i += 16) _mm512_storeu_ps(panel.data() + k * in + i, widen16(src.w[k] + i));
        for (; i < in; ++i) panel[k * in + i] = bf16_value(src.w[k][i]);
      }
      for (std::size_t t = t0; t < t1; t += kRows) {
        const std::size_t tt = std::min<std::size_t>(kRows, t1 - t);
        const float* xs[kRows];
        for (std::size_t j = 0; j < tt; ++j) xs[j] = x + (t + j) * in;
        float out[kRows][kRows];
        if (fused) run(src, tt, xs, in, out);
        else run(pan, tt, xs, in, out);
        for (std::size_t j = 0; j < tt; ++j)
          for (std::size_t k = 0; k < nrows; ++k) y[(t + j) * stride + r + k] = out[j][k];
      }
    }
  }
}

}  // namespace

bool available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  }();
  return ok;
}

void dot_rows(const std::uint16_t* w, std::size_t in, std::size_t r0, std::size_t r1, const float* x, std::size_t T, float* y,
              std::size_t out_stride) {
  if (r0 < r1 && T > 0) dot_rows_avx512(w, in, r0, r1, x, T, y, out_stride);
}

}  // namespace bestofn::cpu::bf16
