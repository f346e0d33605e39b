// BF16-weight GEMM kernels (the order and layouts are in gemm_bf16.h).
//
// AVX-512: a strip's 16 weights for input k are one 32-byte load, widened (zero-extend, shift:
// BF16 is the top half of a float) into 16 lanes, one row each; each token's activation for k is
// broadcast from its chunk's line and meets them in one vfmadd231ps. Lane j accumulates output j
// in input order, so there is no horizontal sum. Few tokens take several strips per call, so that
// enough independent chains of FMAs are in flight.
//
// AVX2 + FMA: the same on two 8-lane vectors per strip (below).
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

// The portable path, one token and one strip at a time.
void dot_strips_generic(const std::uint16_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, const float* x,
                        std::size_t T, float* y, std::size_t ys) {
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

// AVX2 + FMA: the AVX-512 kernel's scheme on 8-lane vectors, a strip's 16 rows in two of them.
// S strips x TT tokens x 2 halves accumulators, at most 12 (with the two weight vectors and a
// broadcast, 15 of the 16 registers) and at least 8 (FMA chains in flight); more than 6 tokens of
// a chunk go in groups of at most 6 over each group of strips while it is in the caches.
#define BESTOFN_AVX2 __attribute__((target("avx2,fma")))

struct Avx2Args {
  const std::uint16_t* w;  // the first strip; the others follow, kStrip * in words apart
  std::size_t in;
  const float* x;  // token 0 of the call within its chunk: its value for input k at x[k * xn]
  std::size_t xn;  // tokens in the chunk
  float* y;        // token 0 of the call, row 0 of the first strip
  std::size_t ys;
  std::size_t rows[kMaxStrips];  // each strip's rows that exist
};

BESTOFN_AVX2 inline __m256 widen8(const std::uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

template <int TT, int S>
BESTOFN_AVX2 void avx2_kernel(const Avx2Args& a) {
  __m256 acc[S][2][TT];
  for (auto& strip : acc)
    for (auto& half : strip)
      for (auto& v : half) v = _mm256_setzero_ps();
  const std::size_t sw = kStrip * a.in;
  for (std::size_t k = 0; k < a.in; ++k) {
    const float* xk = a.x + k * a.xn;
    for (int j = 0; j < S; ++j) {
      const std::uint16_t* p = a.w + static_cast<std::size_t>(j) * sw + k * kStrip;
      const __m256 w0 = widen8(p), w1 = widen8(p + 8);
      for (int t = 0; t < TT; ++t) {
        const __m256 b = _mm256_set1_ps(xk[t]);
        acc[j][0][t] = _mm256_fmadd_ps(b, w0, acc[j][0][t]);
        acc[j][1][t] = _mm256_fmadd_ps(b, w1, acc[j][1][t]);
      }
    }
  }
  for (int j = 0; j < S; ++j)
    for (int t = 0; t < TT; ++t) {
      float* dst = a.y + static_cast<std::size_t>(t) * a.ys + static_cast<std::size_t>(j) * kStrip;
      if (a.rows[j] == kStrip) {
        _mm256_storeu_ps(dst, acc[j][0][t]);
        _mm256_storeu_ps(dst + 8, acc[j][1][t]);
      } else {
        alignas(32) float lanes[kStrip];
        _mm256_store_ps(lanes, acc[j][0][t]);
        _mm256_store_ps(lanes + 8, acc[j][1][t]);
        std::copy_n(lanes, a.rows[j], dst);
      }
    }
}

constexpr int kAvx2Tokens = 6;  // tokens per call at most
constexpr int avx2_strips_for(int tt) { return tt == 1 ? 4 : tt == 2 ? 3 : tt == 3 ? 2 : 1; }
using Avx2Kernel = void (*)(const Avx2Args&);
template <std::size_t... I>
constexpr std::array<Avx2Kernel, sizeof...(I)> make_avx2(std::index_sequence<I...>) {
  return {avx2_kernel<static_cast<int>(I) + 1, avx2_strips_for(static_cast<int>(I) + 1)>...};
}
template <std::size_t... I>
constexpr std::array<Avx2Kernel, sizeof...(I)> make_avx2_single(std::index_sequence<I...>) {
  return {avx2_kernel<static_cast<int>(I) + 1, 1>...};
}
constexpr auto kAvx2 = make_avx2(std::make_index_sequence<kAvx2Tokens>{});
constexpr auto kAvx2Single = make_avx2_single(std::make_index_sequence<kAvx2Tokens>{});

BESTOFN_AVX2 void dot_strips_avx2(const std::uint16_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                                  const float* x, std::size_t T, float* y, std::size_t ys) {
  const std::size_t sw = kStrip * in;
  // Strips that all of a chunk's token groups pass over while they stay in L2 (256 KB of them).
  const std::size_t group = std::max<std::size_t>(1, (256u << 10) / (sw * sizeof(std::uint16_t)));
  for (std::size_t c0 = 0; c0 < T; c0 += kChunk) {
    const std::size_t n = std::min(kChunk, T - c0);
    for (std::size_t g0 = s0; g0 < s1; g0 += group) {
      const std::size_t g1 = std::min(s1, g0 + group);
      for (std::size_t t0 = 0; t0 < n; t0 += kAvx2Tokens) {
        const std::size_t tt = std::min<std::size_t>(kAvx2Tokens, n - t0);
        const auto per_call = static_cast<std::size_t>(avx2_strips_for(static_cast<int>(tt)));
        for_strip_calls(g0, g1, per_call, [&](std::size_t s, std::size_t ns) BESTOFN_AVX2 {
          Avx2Args a;
          a.w = pw + s * sw;
          a.in = in;
          a.x = x + c0 * in + t0;
          a.xn = n;
          a.y = y + (c0 + t0) * ys + s * kStrip;
          a.ys = ys;
          for (std::size_t j = 0; j < ns; ++j) a.rows[j] = std::min(kStrip, out - (s + j) * kStrip);
          (ns == 1 ? kAvx2Single : kAvx2)[tt - 1](a);
        });
      }
    }
  }
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
