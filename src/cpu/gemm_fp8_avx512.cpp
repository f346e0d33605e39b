// The FP8 GEMM's AVX-512 paths (the order they share with the others is in gemm_fp8.h).
//
// AVX-512 BF16 path. Every E4M3 value is exact in BF16 (subnormals included: they are normal
// BF16 numbers, so vdpbf16ps's flush of BF16 denormals never applies), so `vdpbf16ps` multiplies
// E4M3 pairs exactly and adds 32 products per instruction, twice the fp32 FMA rate. A strip's
// 64-byte block of codes (16 rows x 4 inputs) becomes BF16 through two `vpermi2b` lookups (the
// high and the low byte of the BF16 value of each of the 128 magnitudes) and the sign bit, and
// `vpunpck{l,h}bw` join the bytes: pack_weights put each code where the unpacks leave lane j =
// row j holding the row's inputs (k, k+1) in the first vector and (k+2, k+3) in the second. Each
// token's activation pair is broadcast from memory into the other operand, so a strip needs no
// horizontal sum: lane j is output j.
//
// vdpbf16ps adds a lane's odd product, then its even product, rounding after each (Intel's
// pseudo-code; AMD Zen 4 does the same). A CPU that rounded otherwise would change the order, so
// the path is used only after self_check() has compared it with the generic code on this CPU.
//
// AVX-512 FMA path (AVX-512 VBMI): the BF16 path's decoded blocks as fp32 vectors, met by fp32
// FMAs; the same sums. Faster than `vdpbf16ps` on Intel's cores; best_path() times the two.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "bestofn/util/numeric.h"
#include "cpu/gemm_fp8_paths.h"
#include "cpu/strip_calls.h"

#define BESTOFN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16")))
#define BESTOFN_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

namespace bestofn::cpu::fp8 {
namespace {

// ---- AVX-512 BF16 path -------------------------------------------------------------------------

// BF16 high and low bytes of the E4M3 magnitudes 0..127 (0x7f, a NaN code weights never hold,
// reads as 480 like fp8_e4m3_to_float_finite).
struct ByteTables {
  alignas(64) std::uint8_t hi[128];
  alignas(64) std::uint8_t lo[128];
};
const ByteTables& byte_tables() {
  static const ByteTables t = [] {
    ByteTables b{};
    for (unsigned m = 0; m < 128; ++m) {
      const auto bits = std::bit_cast<std::uint32_t>(fp8_e4m3_to_float_finite(static_cast<std::uint8_t>(m)));
      b.hi[m] = static_cast<std::uint8_t>(bits >> 24);
      b.lo[m] = static_cast<std::uint8_t>(bits >> 16);
    }
    return b;
  }();
  return t;
}

struct Tables {
  __m512i hi0, hi1, lo0, lo1;
};

BESTOFN_AVX512_VBMI inline Tables load_tables() {
  const ByteTables& b = byte_tables();
  return {_mm512_load_si512(b.hi), _mm512_load_si512(b.hi + 64), _mm512_load_si512(b.lo), _mm512_load_si512(b.lo + 64)};
}

// One block -> lane j: row j's BF16 weights for inputs (k, k+1) in p0, (k+2, k+3) in p1.
BESTOFN_AVX512_VBMI inline void decode(const std::uint8_t* p, const Tables& tb, __m512i& p0, __m512i& p1) {
  const __m512i w = _mm512_loadu_si512(p);
  // vpermi2b reads index bits 0..6 only: the sign bit is or-ed in after (0xf8: a | (b & c)).
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(tb.hi0, w, tb.hi1), w, _mm512_set1_epi8(-128), 0xf8);
  const __m512i lo = _mm512_permutex2var_epi8(tb.lo0, w, tb.lo1);
  p0 = _mm512_unpacklo_epi8(lo, hi);
  p1 = _mm512_unpackhi_epi8(lo, hi);
}

// The BF16 pair at x, in every lane.
BESTOFN_AVX512_BF16 inline __m512bh pair(const std::uint16_t* x) {
  std::uint32_t v;
  std::memcpy(&v, x, sizeof v);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(v)));
}

constexpr int kMaxStrips = 8;  // strips per kernel call

struct StripArgs {
  const std::uint8_t* w;     // the first strip's blocks; the others follow, sb bytes apart
  const std::uint8_t* next;  // the strips after them, prefetched a line per block and strip
  std::size_t sb;            // bytes per strip
  std::size_t pin;           // padded inputs
  const std::uint16_t* x;    // the chunk of tokens (pack_activations' layout)
  std::size_t xs;            // the FMA path: words per token (the generic layout: floats)
  float* y;                  // output (token 0 of the chunk, row 0 of the first strip)
  std::size_t ys;            // y's token stride
  const float* ts;           // token scales of the chunk, or nullptr: raw sums
  __mmask16 rows[kMaxStrips];  // each strip's rows that exist
  __m512 rs[kMaxStrips];       // each strip's row scales
};

// Strip j's block at input k, decoded (the next strips' one prefetched).
BESTOFN_AVX512_VBMI inline void block(const StripArgs& a, int j, std::size_t k, const Tables& tb, __m512i& p0, __m512i& p1) {
  const std::size_t at = static_cast<std::size_t>(j) * a.sb + k * kStrip;
  _mm_prefetch(reinterpret_cast<const char*>(a.next + at), _MM_HINT_T0);
  decode(a.w + at, tb, p0, p1);
}

// The sums (scaled by the token's and the row's scales, if any) into the rows that exist.
template <int TT, int S>
BESTOFN_AVX512_VBMI inline void store_strips(const StripArgs& a, const __m512 (&acc)[S][TT]) {
  for (int j = 0; j < S; ++j)
    for (int t = 0; t < TT; ++t) {
      __m512 v = acc[j][t];
      if (a.ts) v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(a.ts[t])), a.rs[j]);
      _mm512_mask_storeu_ps(a.y + static_cast<std::size_t>(t) * a.ys + static_cast<std::size_t>(j) * kStrip, a.rows[j], v);
    }
}

// S strips x TT tokens: S * TT accumulators of 16 rows, the weights decoded once per block for
// all tokens. Several strips give few tokens independent chains of additions (one accumulator
// alone would wait on each vdpbf16ps); each output still has its one accumulator and order.
template <int TT, int S>
BESTOFN_AVX512_BF16 void bf16_kernel(const StripArgs& a, const Tables& tb) {
  __m512 acc[S][TT];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  for (std::size_t k = 0; k < a.pin; k += kQuad)
    for (int j = 0; j < S; ++j) {
      __m512i p0, p1;
      block(a, j, k, tb, p0, p1);
      const std::uint16_t* xk = a.x + k * TT;  // the chunk's values for this quad, 4 per token
      for (int t = 0; t < TT; ++t) {
        const std::uint16_t* xt = xk + 4 * t;
        acc[j][t] = _mm512_dpbf16_ps(acc[j][t], reinterpret_cast<__m512bh>(p0), pair(xt));
        acc[j][t] = _mm512_dpbf16_ps(acc[j][t], reinterpret_cast<__m512bh>(p1), pair(xt + 2));
      }
    }
  store_strips<TT, S>(a, acc);
}

// The BF16 kernels: strips per call for TT tokens, up to 16 accumulators.
struct Bf16Kernels {
  static constexpr bool kFloats = false;  // activations in 16-token chunks of BF16 quads
  static constexpr int strips_for(int tt) { return tt <= 4 ? 4 : tt <= 8 ? 2 : 1; }
  template <int TT, int S>
  static constexpr auto kernel = bf16_kernel<TT, S>;
};

// ---- AVX-512 FMA path ----------------------------------------------------------------------
// The same blocks decoded as above, then each BF16 pair word split into two fp32s (the odd input
// is the word's high half as it stands, the even one its low half shifted up): four vectors of
// weights per block, met by each token's four values in the order of gemm_fp8.h with fp32 FMAs
// (a broadcast from memory each). Every product is exact in fp32, so an FMA rounds as the
// addition of that product: the sums of the BF16 path, bit for bit. Intel's cores (Sapphire and
// Emerald Rapids) issue two 16-lane FMAs a cycle but one `vdpbf16ps` every other cycle, so this
// path does twice the multiply-adds per second there (`bench_cpu_peak`); best_path() times both.

BESTOFN_AVX512_VBMI inline float activation(const std::uint16_t* x) {
  float v;
  std::memcpy(&v, x, sizeof v);
  return v;
}

template <int TT, int S>
BESTOFN_AVX512_VBMI void fma_kernel(const StripArgs& a, const Tables& tb) {
  __m512 acc[S][TT];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (std::size_t k = 0; k < a.pin; k += kQuad)
    for (int j = 0; j < S; ++j) {
      __m512i p0, p1;
      block(a, j, k, tb, p0, p1);
      // (maskz with every lane: GCC 12's plain _mm512_slli_epi32 trips -Wmaybe-uninitialized)
      const __m512 w1 = _mm512_castsi512_ps(_mm512_and_si512(p0, high));             // input k + 1
      const __m512 w0 = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, p0, 16));  // input k
      const __m512 w3 = _mm512_castsi512_ps(_mm512_and_si512(p1, high));             // input k + 3
      const __m512 w2 = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, p1, 16));  // input k + 2
      for (int t = 0; t < TT; ++t) {
        const std::uint16_t* xt = a.x + static_cast<std::size_t>(t) * a.xs + 2 * k;  // floats k .. k+3
        acc[j][t] = _mm512_fmadd_ps(w1, _mm512_set1_ps(activation(xt + 2)), acc[j][t]);
        acc[j][t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(activation(xt)), acc[j][t]);
        acc[j][t] = _mm512_fmadd_ps(w3, _mm512_set1_ps(activation(xt + 6)), acc[j][t]);
        acc[j][t] = _mm512_fmadd_ps(w2, _mm512_set1_ps(activation(xt + 4)), acc[j][t]);
      }
    }
  store_strips<TT, S>(a, acc);
}

// The FMA kernels: strips per call for TT tokens, at least 8 accumulators where the tokens allow
// (two FMAs a cycle of 4 cycles' latency keep 8 chains busy), at most 16.
struct FmaKernels {
  static constexpr bool kFloats = true;  // activations in the generic layout: a float per input
  static constexpr int strips_for(int tt) { return tt == 1 ? 8 : tt <= 4 ? 4 : tt <= 8 ? 2 : 1; }
  template <int TT, int S>
  static constexpr auto kernel = fma_kernel<TT, S>;
};

// K's kernel per token count 1..kChunk: with K::strips_for(TT) strips (multi), or one strip (the
// last strips of a range that a multi-strip kernel cannot fill).
using StripKernel = void (*)(const StripArgs&, const Tables&);
template <class K, bool kMulti, std::size_t... I>
constexpr std::array<StripKernel, sizeof...(I)> make_kernels(std::index_sequence<I...>) {
  return {K::template kernel<static_cast<int>(I) + 1, kMulti ? K::strips_for(static_cast<int>(I) + 1) : 1>...};
}
template <class K>
struct KernelTable {
  static constexpr auto multi = make_kernels<K, true>(std::make_index_sequence<kChunk>{});
  static constexpr auto single = make_kernels<K, false>(std::make_index_sequence<kChunk>{});
};

// Both AVX-512 paths (K: their kernels): groups of strips that stay in L2 while chunks of up to 16
// tokens pass over them, each chunk in kernel calls of several strips.
template <class K>
BESTOFN_AVX512_VBMI void avx512_path(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                                     const std::uint16_t* x, std::size_t T, float* y, std::size_t ys, const float* ts,
                                     const float* rs, std::size_t row_scales) {
  const std::size_t pin = padded(in), sb = strip_bytes(in);
  const Tables tb = load_tables();
  const std::size_t group = T > kChunk ? std::max<std::size_t>(1, kGroupBytes / sb) : s1 - s0;
  for (std::size_t g0 = s0; g0 < s1; g0 += group) {
    const std::size_t g1 = std::min(s1, g0 + group);
    for (std::size_t c0 = 0; c0 < T; c0 += kChunk) {
      const std::size_t tt = std::min(kChunk, T - c0);
      const auto per_call = static_cast<std::size_t>(K::strips_for(static_cast<int>(tt)));
      for_strip_calls(g0, g1, per_call, [&](std::size_t s, std::size_t n) BESTOFN_AVX512_VBMI {  // (a lambda does not inherit its function's target)
        StripArgs a;
        a.w = pw + s * sb;
        a.next = s + 2 * n <= s1 ? a.w + n * sb : a.w;  // the next n strips, if the range has them
        a.sb = sb;
        a.pin = pin;
        a.xs = 2 * pin;                                  // FMA: a float per input
        a.x = x + c0 * (K::kFloats ? a.xs : pin);  // BF16: chunk c0 / 16, 16 tokens x pin words before it
        a.y = y + c0 * ys + s * kStrip;
        a.ys = ys;
        a.ts = ts ? ts + c0 : nullptr;
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t r0 = (s + j) * kStrip, rows = std::min(kStrip, out - r0);
          a.rows[j] = static_cast<__mmask16>((1u << rows) - 1);
          a.rs[j] = !ts ? _mm512_setzero_ps()
                    : row_scales == 1 ? _mm512_set1_ps(rs[0])
                                      : _mm512_maskz_loadu_ps(a.rows[j], rs + r0);
        }
        (n == 1 ? KernelTable<K>::single : KernelTable<K>::multi)[tt - 1](a, tb);
      });
    }
  }
}

}  // namespace

StripsKernel avx512_kernel(bool bf16) { return bf16 ? avx512_path<Bf16Kernels> : avx512_path<FmaKernels>; }

}  // namespace bestofn::cpu::fp8
