// BF16-weight GEMM kernels (the order and layouts are in gemm_bf16.h).
//
// AVX-512: a strip's 16 weights for input k are one 32-byte load, widened (zero-extend, shift:
// BF16 is the top half of a float) into 16 lanes, one row each; each token's activation for k is
// broadcast from its chunk's line and meets them in one vfmadd231ps. Lane j accumulates output j
// in input order, so there is no horizontal sum. Few tokens take several strips per call, so that
// enough independent chains of FMAs are in flight.
//
// Portable path: the same FMAs (std::fma, one rounding each) in the same order, lane by lane.
#include "cpu/gemm_bf16.h"
#include "cpu/strip_calls.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#define BESTOFN_AVX512 __attribute__((target("avx512f,fma")))

namespace bestofn::cpu::bf16 {
namespace {

constexpr std::size_t kChunk = kStrip;  // tokens per kernel call
constexpr int kMaxStrips = 4;

inline float widen(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Built twice: plain (dot_strips_generic) and for AVX2 + FMA (dot_strips_avx2), where the lane loop
// becomes vector FMAs.
__attribute__((always_inline)) inline void generic_body(const std::uint16_t* pw, std::size_t out, std::size_t in, std::size_t s0,
                                                        std::size_t s1, const float* x, std::size_t T, float* y, std::size_t ys) {
  for (std::size_t s = s0; s < s1; ++s) {
    const std::uint16_t* sw = pw + s * kStrip * in;
    const std::size_t r0 = s * kStrip, rows = std::min(kStrip, out - r0);
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t c = t / kChunk, n = std::min(kChunk, T - c * kChunk);
      const float* xt = x + c * kChunk * in + t % kChunk;  // token t's value for input k at xt[k * n]
      float acc[kStrip] = {};
      for (std::size_t k = 0; k < in; ++k)
        for (std::size_t j = 0; j < kStrip; ++j) acc[j] = std::fma(xt[k * n], widen(sw[k * kStrip + j]), acc[j]);
      for (std::size_t j = 0; j < rows; ++j) y[t * ys + r0 + j] = acc[j];
    }
  }
}

void dot_strips_generic(const std::uint16_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, const float* x,
                        std::size_t T, float* y, std::size_t ys) {
  generic_body(pw, out, in, s0, s1, x, T, y, ys);
}
__attribute__((target("avx2,fma"))) void dot_strips_avx2(const std::uint16_t* pw, std::size_t out, std::size_t in, std::size_t s0,
                                                         std::size_t s1, const float* x, std::size_t T, float* y, std::size_t ys) {
  generic_body(pw, out, in, s0, s1, x, T, y, ys);
}

struct StripArgs {
  const std::uint16_t* w;     // the first strip; the others follow, kStrip * in words apart
  const std::uint16_t* next;  // the strips after them, prefetched a line per two inputs and strip
  std::size_t in;
  const float* x;  // the chunk of tokens
  float* y;        // token 0 of the chunk, row 0 of the first strip
  std::size_t ys;
  __mmask16 rows[kMaxStrips];
};

BESTOFN_AVX512 inline __m512 widen16(const std::uint16_t* p) {
  // (The zero-masked forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized on their own
  // undefined pass-through operand.)
  const __m512i h = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, h, 16));
}

template <int TT, int S>
BESTOFN_AVX512 void strip_kernel(const StripArgs& a) {
  __m512 acc[S][TT];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  const std::size_t sw = kStrip * a.in;
  for (std::size_t k = 0; k < a.in; ++k) {
    const float* xk = a.x + k * TT;
    for (int j = 0; j < S; ++j) {
      const std::size_t at = static_cast<std::size_t>(j) * sw + k * kStrip;
      if (k % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(a.next + at), _MM_HINT_T0);
      const __m512 w = widen16(a.w + at);
      for (int t = 0; t < TT; ++t) acc[j][t] = _mm512_fmadd_ps(_mm512_set1_ps(xk[t]), w, acc[j][t]);
    }
  }
  for (int j = 0; j < S; ++j)
    for (int t = 0; t < TT; ++t)
      _mm512_mask_storeu_ps(a.y + static_cast<std::size_t>(t) * a.ys + static_cast<std::size_t>(j) * kStrip, a.rows[j], acc[j][t]);
}

// Strips per call for TT tokens: S * TT independent chains of FMAs (4 cycles each, 2 per cycle: 8
// keep the units busy; few tokens get 4 to 8, N = 1 being bound by memory anyway).
constexpr int strips_for(int tt) { return tt <= 2 ? 4 : tt <= 4 ? 2 : 1; }

using StripKernel = void (*)(const StripArgs&);
template <std::size_t... I>
constexpr std::array<StripKernel, sizeof...(I)> make_kernels(std::index_sequence<I...>) {
  return {strip_kernel<static_cast<int>(I) + 1, strips_for(static_cast<int>(I) + 1)>...};
}
template <std::size_t... I>
constexpr std::array<StripKernel, sizeof...(I)> make_single(std::index_sequence<I...>) {
  return {strip_kernel<static_cast<int>(I) + 1, 1>...};
}
constexpr auto kKernels = make_kernels(std::make_index_sequence<kChunk>{});
constexpr auto kSingle = make_single(std::make_index_sequence<kChunk>{});

BESTOFN_AVX512 void dot_strips_avx512(const std::uint16_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                                      const float* x, std::size_t T, float* y, std::size_t ys) {
  const std::size_t sw = kStrip * in;
  for (std::size_t c0 = 0; c0 < T; c0 += kChunk) {
    const std::size_t tt = std::min(kChunk, T - c0);
    const auto per_call = static_cast<std::size_t>(strips_for(static_cast<int>(tt)));
    for_strip_calls(s0, s1, per_call, [&](std::size_t s, std::size_t n) {
      StripArgs a;
      a.w = pw + s * sw;
      a.next = s + 2 * n <= s1 ? a.w + n * sw : a.w;  // the next n strips, if the range has them
      a.in = in;
      a.x = x + c0 * in;
      a.y = y + c0 * ys + s * kStrip;
      a.ys = ys;
      for (std::size_t j = 0; j < n; ++j) a.rows[j] = static_cast<__mmask16>((1u << std::min(kStrip, out - (s + j) * kStrip)) - 1);
      (n == 1 ? kSingle : kKernels)[tt - 1](a);
    });
  }
}

}  // namespace

bool available(Path p) {
  __builtin_cpu_init();
  switch (p) {
    case Path::Avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    case Path::Avx2Fma: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
}

Path best_path() {
  static const Path p = available(Path::Avx512) ? Path::Avx512 : available(Path::Avx2Fma) ? Path::Avx2Fma : Path::Portable;
  return p;
}

void pack_weights(const std::uint16_t* w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, std::uint16_t* packed) {
  for (std::size_t s = s0; s < s1; ++s)
    for (std::size_t j = 0; j < kStrip; ++j) {
      const std::size_t r = s * kStrip + j;
      std::uint16_t* dst = packed + s * kStrip * in + j;
      for (std::size_t k = 0; k < in; ++k) dst[k * kStrip] = r < out ? w[r * in + k] : 0;
    }
}

void pack_activations(const float* x, std::size_t T, std::size_t in, std::size_t k0, std::size_t k1, float* packed) {
  for (std::size_t c = 0; c * kChunk < T; ++c) {
    const std::size_t n = std::min(kChunk, T - c * kChunk);
    float* chunk = packed + c * kChunk * in;
    for (std::size_t k = k0; k < std::min(k1, in); ++k)
      for (std::size_t j = 0; j < n; ++j) chunk[k * n + j] = x[(c * kChunk + j) * in + k];
  }
}

void dot_strips(Path p, const std::uint16_t* packed_w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                const float* x, std::size_t T, float* y, std::size_t y_stride) {
  s1 = std::min(s1, strip_count(out));
  if (s0 >= s1 || T == 0) return;
  switch (p) {
    case Path::Avx512: dot_strips_avx512(packed_w, out, in, s0, s1, x, T, y, y_stride); break;
    case Path::Avx2Fma: dot_strips_avx2(packed_w, out, in, s0, s1, x, T, y, y_stride); break;
    default: dot_strips_generic(packed_w, out, in, s0, s1, x, T, y, y_stride);
  }
}

}  // namespace bestofn::cpu::bf16
