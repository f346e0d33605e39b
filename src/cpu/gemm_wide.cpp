// GEMM kernels for BF16, F16 and F32 weights (the order and layouts are in gemm_wide.h). Each
// kernel is a template on the weight format, which decides only how 16 (or 8) weights are loaded
// and widened: BF16 by zero-extending and shifting (it is the top half of a float), F16 by
// vcvtph2ps (every finite F16 value, subnormals included, is a float), F32 as it is.
//
// AVX-512: a strip's 16 weights for input k are one load, widened into 16 lanes, one row each;
// each token's activation for k is broadcast from its chunk's line and meets them in one
// vfmadd231ps. Lane j accumulates output j in input order, so there is no horizontal sum. Few
// tokens take several strips per call, so that enough independent chains of FMAs are in flight.
//
// AVX2 + FMA: the same on two 8-lane vectors per strip (below).
//
// Portable path: the same FMAs (std::fma, one rounding each) in the same order, lane by lane.
#include "cpu/gemm_wide.h"
#include "cpu/cpu_features.h"
#include "cpu/strip_calls.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "bestofn/util/numeric.h"

#define BESTOFN_AVX512 __attribute__((target("avx512f,fma")))

namespace bestofn::cpu::wide {
namespace {

constexpr std::size_t kChunk = kStrip;  // tokens per kernel call
constexpr int kMaxStrips = 4;

// The stored element of each format.
template <Format F>
using Elem = std::conditional_t<F == Format::F32, float, std::uint16_t>;

// One weight widened to fp32 (exact for every format).
template <Format F>
inline float widen(Elem<F> e) {
  if constexpr (F == Format::Bf16) return bf16_to_float(e);
  else if constexpr (F == Format::F16) return f16_to_float(e);
  else return e;
}

// The portable path, one strip and one chunk of tokens at a time: each input's 16 weights are
// widened once for the chunk's tokens.
template <Format F>
void dot_strips_generic(const Elem<F>* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, const float* x,
                        std::size_t T, float* y, std::size_t ys) {
  for (std::size_t s = s0; s < s1; ++s) {
    const Elem<F>* sw = pw + s * kStrip * in;
    const std::size_t r0 = s * kStrip, rows = std::min(kStrip, out - r0);
    for (std::size_t c0 = 0; c0 < T; c0 += kChunk) {
      const std::size_t n = std::min(kChunk, T - c0);
      const float* xc = x + c0 * in;  // the chunk's token t, input k at xc[k * n + t]
      float acc[kChunk][kStrip] = {};
      for (std::size_t k = 0; k < in; ++k) {
        float wk[kStrip];
        for (std::size_t j = 0; j < kStrip; ++j) wk[j] = widen<F>(sw[k * kStrip + j]);
        for (std::size_t t = 0; t < n; ++t)
          for (std::size_t j = 0; j < kStrip; ++j) acc[t][j] = std::fma(xc[k * n + t], wk[j], acc[t][j]);
      }
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t j = 0; j < rows; ++j) y[(c0 + t) * ys + r0 + j] = acc[t][j];
    }
  }
}

// AVX2 + FMA: the AVX-512 kernel's scheme on 8-lane vectors, a strip's 16 rows in two of them.
// S strips x TT tokens x 2 halves accumulators, at most 12 (with the two weight vectors and a
// broadcast, 15 of the 16 registers) and at least 8 (FMA chains in flight); more than 6 tokens of
// a chunk go in calls of at most 6 (avx2_call_tokens) over each group of strips while it is in
// the caches.
#define BESTOFN_AVX2 __attribute__((target("avx2,fma,f16c")))

template <Format F>
struct Avx2Args {
  const Elem<F>* w;  // the first strip; the others follow, kStrip * in elements apart
  std::size_t in;
  const float* x;  // token 0 of the call within its chunk: its value for input k at x[k * xn]
  std::size_t xn;  // tokens in the chunk
  float* y;        // token 0 of the call, row 0 of the first strip
  std::size_t ys;
  std::size_t rows[kMaxStrips];  // each strip's rows that exist
};

// Weights p[0..7] widened to fp32.
template <Format F>
BESTOFN_AVX2 inline __m256 widen8(const Elem<F>* p) {
  if constexpr (F == Format::Bf16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  else if constexpr (F == Format::F16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else
    return _mm256_loadu_ps(p);
}

template <Format F, int TT, int S>
BESTOFN_AVX2 void avx2_kernel(const Avx2Args<F>& a) {
  __m256 acc[S][2][TT];
  for (auto& strip : acc)
    for (auto& half : strip)
      for (auto& v : half) v = _mm256_setzero_ps();
  const std::size_t sw = kStrip * a.in;
  for (std::size_t k = 0; k < a.in; ++k) {
    const float* xk = a.x + k * a.xn;
    for (int j = 0; j < S; ++j) {
      const Elem<F>* p = a.w + static_cast<std::size_t>(j) * sw + k * kStrip;
      const __m256 w0 = widen8<F>(p), w1 = widen8<F>(p + 8);
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
// {make(1), ..., make(N)} with each argument a std::integral_constant: the kernels for 1..N
// tokens, indexed by tokens - 1.
template <int N, class Make>
constexpr auto kernel_table(Make make) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array{make(std::integral_constant<int, static_cast<int>(I) + 1>{})...};
  }(std::make_index_sequence<N>{});
}

template <Format F>
constexpr auto kAvx2 = kernel_table<kAvx2Tokens>([](auto tt) { return &avx2_kernel<F, tt(), avx2_strips_for(tt())>; });
template <Format F>
constexpr auto kAvx2Single = kernel_table<kAvx2Tokens>([](auto tt) { return &avx2_kernel<F, tt(), 1>; });

template <Format F>
BESTOFN_AVX2 void dot_strips_avx2(const Elem<F>* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, const float* x,
                                  std::size_t T, float* y, std::size_t ys) {
  const std::size_t sw = kStrip * in;
  // Strips that all of a chunk's token groups pass over while they stay in L2 (256 KB of them).
  const std::size_t group = std::max<std::size_t>(1, (256u << 10) / std::max<std::size_t>(1, sw * sizeof(Elem<F>)));
  for (std::size_t c0 = 0; c0 < T; c0 += kChunk) {
    const std::size_t n = std::min(kChunk, T - c0);
    for (std::size_t g0 = s0; g0 < s1; g0 += group) {
      const std::size_t g1 = std::min(s1, g0 + group);
      for (std::size_t t0 = 0; t0 < n;) {
        const std::size_t tt = avx2_call_tokens(n - t0, kAvx2Tokens);
        const auto per_call = static_cast<std::size_t>(avx2_strips_for(static_cast<int>(tt)));
        for_strip_calls(g0, g1, per_call, [&](std::size_t s, std::size_t ns) BESTOFN_AVX2 {
          Avx2Args<F> a;
          a.w = pw + s * sw;
          a.in = in;
          a.x = x + c0 * in + t0;
          a.xn = n;
          a.y = y + (c0 + t0) * ys + s * kStrip;
          a.ys = ys;
          for (std::size_t j = 0; j < ns; ++j) a.rows[j] = std::min(kStrip, out - (s + j) * kStrip);
          (ns == 1 ? kAvx2Single<F> : kAvx2<F>)[tt - 1](a);
        });
        t0 += tt;
      }
    }
  }
}

template <Format F>
struct StripArgs {
  const Elem<F>* w;     // the first strip; the others follow, kStrip * in elements apart
  const Elem<F>* next;  // the strips after them, prefetched a line per two inputs (BF16, F16) or per input (F32) and strip
  std::size_t in;
  const float* x;  // the chunk of tokens
  float* y;        // token 0 of the chunk, row 0 of the first strip
  std::size_t ys;
  __mmask16 rows[kMaxStrips];
};

// Weights p[0..15] widened to fp32.
template <Format F>
BESTOFN_AVX512 inline __m512 widen16(const Elem<F>* p) {
  if constexpr (F == Format::Bf16) {
    // (The zero-masked forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized on their own
    // undefined pass-through operand.)
    const __m512i h = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, h, 16));
  } else if constexpr (F == Format::F16) {
    return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    return _mm512_loadu_ps(p);
  }
}

template <Format F, int TT, int S>
BESTOFN_AVX512 void strip_kernel(const StripArgs<F>& a) {
  __m512 acc[S][TT];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  const std::size_t sw = kStrip * a.in;
  constexpr std::size_t kPrefetchEvery = 64 / (kStrip * sizeof(Elem<F>));  // inputs per 64-byte line of a strip
  for (std::size_t k = 0; k < a.in; ++k) {
    const float* xk = a.x + k * TT;
    for (int j = 0; j < S; ++j) {
      const std::size_t at = static_cast<std::size_t>(j) * sw + k * kStrip;
      if (k % kPrefetchEvery == 0) _mm_prefetch(reinterpret_cast<const char*>(a.next + at), _MM_HINT_T0);
      const __m512 w = widen16<F>(a.w + at);
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

template <Format F>
constexpr auto kKernels = kernel_table<kChunk>([](auto tt) { return &strip_kernel<F, tt(), strips_for(tt())>; });
template <Format F>
constexpr auto kSingle = kernel_table<kChunk>([](auto tt) { return &strip_kernel<F, tt(), 1>; });

template <Format F>
BESTOFN_AVX512 void dot_strips_avx512(const Elem<F>* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                                      const float* x, std::size_t T, float* y, std::size_t ys) {
  const std::size_t sw = kStrip * in;
  for (std::size_t c0 = 0; c0 < T; c0 += kChunk) {
    const std::size_t tt = std::min(kChunk, T - c0);
    const auto per_call = static_cast<std::size_t>(strips_for(static_cast<int>(tt)));
    for_strip_calls(s0, s1, per_call, [&](std::size_t s, std::size_t n) {
      StripArgs<F> a;
      a.w = pw + s * sw;
      a.next = s + 2 * n <= s1 ? a.w + n * sw : a.w;  // the next n strips, if the range has them
      a.in = in;
      a.x = x + c0 * in;
      a.y = y + c0 * ys + s * kStrip;
      a.ys = ys;
      for (std::size_t j = 0; j < n; ++j) a.rows[j] = static_cast<__mmask16>((1u << std::min(kStrip, out - (s + j) * kStrip)) - 1);
      (n == 1 ? kSingle<F> : kKernels<F>)[tt - 1](a);
    });
  }
}

template <Format F>
void pack_weights_as(const Elem<F>* w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, Elem<F>* packed) {
  for (std::size_t s = s0; s < s1; ++s)
    for (std::size_t j = 0; j < kStrip; ++j) {
      const std::size_t r = s * kStrip + j;
      Elem<F>* dst = packed + s * kStrip * in + j;
      for (std::size_t k = 0; k < in; ++k) dst[k * kStrip] = r < out ? w[r * in + k] : Elem<F>{};
    }
}

template <Format F>
void dot_strips_as(Path p, const void* packed_w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, const float* x,
                   std::size_t T, float* y, std::size_t ys) {
  const auto* pw = static_cast<const Elem<F>*>(packed_w);
  if constexpr (F == Format::F16) {
    static const bool f16c = has_f16c();
    if (p == Path::Avx2Fma && !f16c) p = Path::Portable;  // an AVX2 CPU (or VM) without F16C: the same bits, slower
  }
  switch (p) {
    case Path::Avx512: dot_strips_avx512<F>(pw, out, in, s0, s1, x, T, y, ys); break;
    case Path::Avx2Fma: dot_strips_avx2<F>(pw, out, in, s0, s1, x, T, y, ys); break;
    default: dot_strips_generic<F>(pw, out, in, s0, s1, x, T, y, ys);
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

void pack_weights(Format f, const void* w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, void* packed) {
  switch (f) {
    case Format::Bf16: pack_weights_as<Format::Bf16>(static_cast<const std::uint16_t*>(w), out, in, s0, s1, static_cast<std::uint16_t*>(packed)); break;
    case Format::F16: pack_weights_as<Format::F16>(static_cast<const std::uint16_t*>(w), out, in, s0, s1, static_cast<std::uint16_t*>(packed)); break;
    case Format::F32: pack_weights_as<Format::F32>(static_cast<const float*>(w), out, in, s0, s1, static_cast<float*>(packed)); break;
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

void dot_strips(Path p, Format f, const void* packed_w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                const float* x, std::size_t T, float* y, std::size_t y_stride) {
  s1 = std::min(s1, strip_count(out));
  if (s0 >= s1 || T == 0) return;
  switch (f) {
    case Format::Bf16: dot_strips_as<Format::Bf16>(p, packed_w, out, in, s0, s1, x, T, y, y_stride); break;
    case Format::F16: dot_strips_as<Format::F16>(p, packed_w, out, in, s0, s1, x, T, y, y_stride); break;
    case Format::F32: dot_strips_as<Format::F32>(p, packed_w, out, in, s0, s1, x, T, y, y_stride); break;
  }
}

}  // namespace bestofn::cpu::wide
