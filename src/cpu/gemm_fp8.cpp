// FP8 GEMM kernels (the order they share is in gemm_fp8.h).
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
//
// AVX2 path (AVX2 + FMA, the x86 CPUs without AVX-512 VBMI): the same sums with fp32 FMAs, 8 rows
// per vector. Each product of two E4M3 values is exact in fp32, so fma(w, x, acc) rounds exactly
// as the add of that product does. A half block (32 bytes: 8 rows x 4 inputs) becomes four
// vectors of weights with integer operations alone: each 16-bit code pair gives its odd code as
// the top half of an fp32 by an arithmetic shift right by 4 and a mask (sign to bit 15, the 7
// magnitude bits to 10..4: E4M3's exponent and mantissa in fp32's fields, exponent unbiased) and
// its even code after a shift left by 8 first, and unpacking with zero words makes the fp32s. Such
// an fp32 is the weight times 2^-120 (kAvx2WeightScale), a subnormal for E4M3's subnormal codes;
// the activations are packed times 2^112, exactly (|x| <= 448, far from overflow), so every
// product and partial sum is the true one times 2^-8: a power of two that changes no rounding (the
// smallest nonzero product, 2^-26 so scaled, is far above fp32's subnormals), and the sum is
// multiplied back by 2^8, exactly, before it is stored. (This needs subnormal operands read as
// such, the default; a thread running with denormals-are-zero (MXCSR.DAZ, set by code built with
// -ffast-math) would lose the subnormal weights, and the generic path's code table is built by the
// same kind of arithmetic: dot_strips clears DAZ for its own duration.) `vcvtph2ps`, the obvious
// widening, is slower than this on Zen 3 (two cycles per vector). But Intel's cores multiply a
// subnormal operand through a microcode assist: on the Emerald Rapids VM of 2026-12-02 this path
// ran at 1.0 GFLOP/s (`bench_cpu_gemm`, random codes: ~5% subnormal, most vectors hold one)
// against 60-100 for the AVX-512 ones. So the AVX2 path has a second decode (avx2_f16c): each code
// becomes an FP16 (sign to bit 15, the 7 magnitude bits to 13..7: the weight times 2^-8, E4M3's
// subnormals FP16 subnormals) that `vcvtph2ps` widens to a normal fp32; the activations are
// packed as they are, so the products and sums are again the true ones times 2^-8. best_path()
// times the two where AVX-512 is missing. With up to 4 tokens the weights are decoded in registers as they
// are used (4, 2 or 1 strips at a time, so that few tokens still have 8 independent chains);
// with more, each strip is decoded once into a buffer that the tokens then pass over 6 at a time
// (12 accumulators + 2 weight vectors + a broadcast: 15 of the 16 registers), the rest last.
//
// Generic path: the same sums in the same order with fp32 vectors of 16 lanes, one row each (GCC
// vector extension), on the strip widened to floats; each product is exact, so a fused or a
// separate multiply-add rounds the same.
#include "cpu/gemm_fp8.h"
#include "cpu/cpu_features.h"
#include "cpu/strip_calls.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bestofn/util/numeric.h"

#define BESTOFN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16")))
#define BESTOFN_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#define BESTOFN_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bestofn::cpu::fp8 {
namespace {

constexpr std::size_t kQuad = 4;               // inputs per block
constexpr std::size_t kBlock = kStrip * kQuad;  // bytes per block
constexpr std::size_t kChunk = kStrip;          // tokens per kernel call (one accumulator each)
// With more tokens than one chunk, a group of strips this large (bytes) stays in L2 while every
// chunk of tokens passes over it.
constexpr std::size_t kGroupBytes = 256 << 10;

// Where byte b of a block goes: vpunpcklbw takes bytes 0-7 of each 128-bit lane to the words of
// the first vector, vpunpckhbw bytes 8-15 to the second; word w of a vector is lane w / 2's
// (even, odd) half. So byte b holds row `row`, input k + `d` of the quad.
struct Place {
  std::uint8_t row, d;
};
constexpr Place place(std::size_t b) {
  const std::size_t within = b % 16, word = 8 * (b / 16) + within % 8;
  return {static_cast<std::uint8_t>(word / 2), static_cast<std::uint8_t>(word % 2 + (within < 8 ? 0 : 2))};
}
constexpr auto kPlaces = [] {
  std::array<Place, kBlock> a{};
  for (std::size_t b = 0; b < kBlock; ++b) a[b] = place(b);
  return a;
}();

// ---- generic path ----------------------------------------------------------------------------

typedef float Vec __attribute__((vector_size(kStrip * sizeof(float))));

const std::array<float, 256>& code_values() {
  static const auto t = [] {
    std::array<float, 256> a{};
    for (unsigned c = 0; c < 256; ++c) a[c] = fp8_e4m3_to_float_finite(static_cast<std::uint8_t>(c));
    return a;
  }();
  return t;
}

// The scaled (or raw) sums of lanes [0, rows) of acc into y.
inline void store_row(const float* acc, std::size_t rows, float* y, const float* ts, const float* rs, std::size_t row_scales) {
  for (std::size_t j = 0; j < rows; ++j)
    y[j] = ts ? acc[j] * *ts * rs[row_scales == 1 ? 0 : j] : acc[j];
}

// x: the generic layout, floats held in 16-bit words (pack_activations), read by memcpy.
void dot_strips_generic(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                        const std::uint16_t* x, std::size_t T, float* y, std::size_t ys, const float* ts, const float* rs,
                        std::size_t row_scales) {
  const std::size_t pin = padded(in), quads = pin / kQuad;
  const auto& value = code_values();
  thread_local std::vector<Vec> wv;  // (quad, d): the 16 rows' weights for input 4q + d
  wv.resize(quads * kQuad);
  for (std::size_t s = s0; s < s1; ++s) {
    const std::uint8_t* sw = pw + s * strip_bytes(in);
    for (std::size_t q = 0; q < quads; ++q)
      for (std::size_t b = 0; b < kBlock; ++b) wv[q * kQuad + kPlaces[b].d][kPlaces[b].row] = value[sw[q * kBlock + b]];
    const std::size_t r0 = s * kStrip, rows = std::min(kStrip, out - r0);
    for (std::size_t t = 0; t < T; ++t) {
      const std::uint16_t* xt = x + t * 2 * pin;
      Vec acc = {};
      for (std::size_t q = 0; q < quads; ++q) {
        const Vec* w = &wv[q * kQuad];
        float xk[kQuad];
        std::memcpy(xk, xt + 2 * q * kQuad, sizeof xk);
        acc += w[1] * xk[1];
        acc += w[0] * xk[0];
        acc += w[3] * xk[3];
        acc += w[2] * xk[2];
      }
      float lanes[kStrip];
      std::memcpy(lanes, &acc, sizeof lanes);
      store_row(lanes, rows, y + t * ys + r0, ts ? ts + t : nullptr, rs ? (row_scales == 1 ? rs : rs + r0) : nullptr, row_scales);
    }
  }
}

// ---- AVX2 path ---------------------------------------------------------------------------------

constexpr float kAvx2WeightScale = 0x1p-120f;     // what decode_half's fp32s are, times the weights
constexpr float kAvx2ActivationScale = 0x1p112f;  // what pack_activations multiplies by
constexpr float kAvx2Unscale = 1.0f / (kAvx2WeightScale * kAvx2ActivationScale);  // 2^8 (avx2_f16c: 2^-8 x 1, the same)

// Half block h of a block (rows 8h .. 8h+7) -> w[d] = those rows' weights for input k + d, times
// 2^-120 (kAvx2WeightScale), or times 2^-8 with kF16c. In the packed block, word i of each 16-byte
// group is a (d0, d1) code pair for i < 4 and (d2, d3) for i >= 4, of row 4 * group + i % 4
// (kPlaces), so the low and high word unpacks of each 128-bit lane give rows 0-3 and 4-7 of one
// input in order; for vcvtph2ps the low (d0 / d1) and high (d2 / d3) 64 bits of the two lanes are
// brought together instead.
template <bool kF16c>
BESTOFN_AVX2 inline void decode_half(const std::uint8_t* p, __m256 w[4]) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // BF16 sign and bits 10..4 (shift by 4), or FP16 sign and bits 13..7 (shift by 1)
  constexpr int kShift = kF16c ? 1 : 4;
  const __m256i fields = _mm256_set1_epi16(static_cast<short>(kF16c ? 0xbf80 : 0x87f0));
  const __m256i odd = _mm256_and_si256(_mm256_srai_epi16(b, kShift), fields);                         // d1, d3
  const __m256i even = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), kShift), fields);  // d0, d2
  if constexpr (kF16c) {
    const __m256i o = _mm256_permute4x64_epi64(odd, 0xd8), e = _mm256_permute4x64_epi64(even, 0xd8);  // qwords 0, 2, 1, 3
    w[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(e));
    w[1] = _mm256_cvtph_ps(_mm256_castsi256_si128(o));
    w[2] = _mm256_cvtph_ps(_mm256_extracti128_si256(e, 1));
    w[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(o, 1));
  } else {
    const __m256i zero = _mm256_setzero_si256();
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, even));
    w[1] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, odd));
    w[2] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, even));
    w[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, odd));
  }
}

// One quad of one token into an accumulator, in the order of gemm_fp8.h: inputs k+1, k, k+3, k+2.
BESTOFN_AVX2 inline __m256 quad_fma(__m256 acc, const __m256 w[4], const float* xk) {
  acc = _mm256_fmadd_ps(w[1], _mm256_set1_ps(xk[1]), acc);
  acc = _mm256_fmadd_ps(w[0], _mm256_set1_ps(xk[0]), acc);
  acc = _mm256_fmadd_ps(w[3], _mm256_set1_ps(xk[3]), acc);
  return _mm256_fmadd_ps(w[2], _mm256_set1_ps(xk[2]), acc);
}

struct Avx2Call {
  const std::uint8_t* w;  // the first strip's blocks (register kernels); the others follow, sb bytes apart
  const float* wbuf;      // the decoded strip (buffer kernels): (quad, d, 16 rows)
  std::size_t sb;         // bytes per strip
  std::size_t quads;      // pin / 4
  const std::uint16_t* x;  // token 0 of the call, the generic layout (floats, xs words apart)
  std::size_t xs;
  float* y;               // token 0, row 0 of the first strip
  std::size_t ys;
  const float* ts;        // the call's token scales, or nullptr: raw sums
  const float* rs;        // row scales (rs_count 1: one for all rows), indexed from row 0 of the layer
  std::size_t rs_count;
  std::size_t r0;         // the first strip's first row
  std::size_t out;        // rows of the layer
};

// Scales back by 2^8 (and by the token's and the row's scales) and stores the rows that exist.
template <int S, int TT>
BESTOFN_AVX2 void finish_avx2(const Avx2Call& a, __m256 (&acc)[S][2][TT]) {
  for (int j = 0; j < S; ++j)
    for (int h = 0; h < 2; ++h) {
      const std::size_t r = a.r0 + static_cast<std::size_t>(16 * j + 8 * h);
      if (r >= a.out) continue;
      const std::size_t n = std::min<std::size_t>(8, a.out - r);
      float rsv[8] = {};
      if (a.ts)
        for (std::size_t i = 0; i < n; ++i) rsv[i] = a.rs[a.rs_count == 1 ? 0 : r + i];
      const __m256 row_scale = _mm256_loadu_ps(rsv);
      for (int t = 0; t < TT; ++t) {
        __m256 v = _mm256_mul_ps(acc[j][h][t], _mm256_set1_ps(kAvx2Unscale));  // exact
        if (a.ts) v = _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(a.ts[t])), row_scale);
        float* dst = a.y + static_cast<std::size_t>(t) * a.ys + (r - a.r0);
        if (n == 8) {
          _mm256_storeu_ps(dst, v);
        } else {
          float lanes[8];
          _mm256_storeu_ps(lanes, v);
          std::copy_n(lanes, n, dst);
        }
      }
    }
}

// S strips x TT tokens, the weights decoded in registers per half block and used by every token.
template <int TT, int S, bool kF16c>
BESTOFN_AVX2 void avx2_regs_kernel(const Avx2Call& a) {
  __m256 acc[S][2][TT];
  for (auto& strip : acc)
    for (auto& half : strip)
      for (auto& v : half) v = _mm256_setzero_ps();
  for (std::size_t q = 0; q < a.quads; ++q)
    for (int j = 0; j < S; ++j)
      for (int h = 0; h < 2; ++h) {
        __m256 w[4];
        decode_half<kF16c>(a.w + static_cast<std::size_t>(j) * a.sb + q * kBlock + static_cast<std::size_t>(32 * h), w);
        for (int t = 0; t < TT; ++t) {
          float xk[kQuad];
          std::memcpy(xk, a.x + static_cast<std::size_t>(t) * a.xs + 2 * kQuad * q, sizeof xk);
          acc[j][h][t] = quad_fma(acc[j][h][t], w, xk);
        }
      }
  finish_avx2<S, TT>(a, acc);
}

// The decoded strip a.wbuf x TT tokens: per input, the strip's two weight vectors in registers
// for every token (2 * TT accumulators, the 2 weights and a broadcast: 15 of the 16 registers).
template <int TT>
BESTOFN_AVX2 void avx2_buf_kernel(const Avx2Call& a) {
  __m256 acc[1][2][TT];
  for (auto& half : acc[0])
    for (auto& v : half) v = _mm256_setzero_ps();
  for (std::size_t q = 0; q < a.quads; ++q) {
    const float* xq[TT];
    for (int t = 0; t < TT; ++t) xq[t] = reinterpret_cast<const float*>(a.x + static_cast<std::size_t>(t) * a.xs) + kQuad * q;
    for (const int d : {1, 0, 3, 2}) {
      const float* wd = a.wbuf + (q * kQuad + static_cast<std::size_t>(d)) * kStrip;
      const __m256 lo = _mm256_load_ps(wd), hi = _mm256_load_ps(wd + 8);
      for (int t = 0; t < TT; ++t) {
        float xv;
        std::memcpy(&xv, xq[t] + d, sizeof xv);
        const __m256 b = _mm256_set1_ps(xv);
        acc[0][0][t] = _mm256_fmadd_ps(lo, b, acc[0][0][t]);
        acc[0][1][t] = _mm256_fmadd_ps(hi, b, acc[0][1][t]);
      }
    }
  }
  finish_avx2<1, TT>(a, acc);
}

template <bool kF16c>
BESTOFN_AVX2 void decode_strip(const std::uint8_t* sw, std::size_t quads, float* buf) {
  for (std::size_t q = 0; q < quads; ++q)
    for (int h = 0; h < 2; ++h) {
      __m256 w[4];
      decode_half<kF16c>(sw + q * kBlock + static_cast<std::size_t>(32 * h), w);
      for (std::size_t d = 0; d < kQuad; ++d) _mm256_store_ps(buf + (q * kQuad + d) * kStrip + static_cast<std::size_t>(8 * h), w[d]);
    }
}

using Avx2Kernel = void (*)(const Avx2Call&);
// Every kernel keeps at least 8 chains of FMAs in flight (4 cycles each on Zen 3, 2 a cycle): a
// quad adds 4 products to each accumulator in order, so fewer accumulators wait on latency.
constexpr int kAvx2RegTokens = 4;  // up to this many tokens: weights decoded in registers
constexpr int avx2_strips_for(int tt) { return tt == 1 ? 4 : tt <= 3 ? 2 : 1; }
// The register kernels per token count, with avx2_strips_for(TT) strips (kMulti) or one.
template <bool kF16c, bool kMulti, std::size_t... I>
constexpr std::array<Avx2Kernel, sizeof...(I)> make_avx2_regs(std::index_sequence<I...>) {
  return {avx2_regs_kernel<static_cast<int>(I) + 1, kMulti ? avx2_strips_for(static_cast<int>(I) + 1) : 1, kF16c>...};
}
template <std::size_t... I>
constexpr std::array<Avx2Kernel, sizeof...(I)> make_avx2_buf(std::index_sequence<I...>) {
  return {avx2_buf_kernel<static_cast<int>(I) + 1>...};
}
template <bool kF16c>
constexpr auto kAvx2Regs = make_avx2_regs<kF16c, true>(std::make_index_sequence<kAvx2RegTokens>{});
template <bool kF16c>
constexpr auto kAvx2RegsSingle = make_avx2_regs<kF16c, false>(std::make_index_sequence<kAvx2RegTokens>{});
constexpr int kAvx2BufTokens = 6;  // tokens per buffer kernel call
constexpr auto kAvx2Buf = make_avx2_buf(std::make_index_sequence<kAvx2BufTokens>{});

template <bool kF16c>
BESTOFN_AVX2 void dot_strips_avx2(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                                  const std::uint16_t* x, std::size_t T, float* y, std::size_t ys, const float* ts, const float* rs,
                                  std::size_t row_scales) {
  const std::size_t pin = padded(in), sb = strip_bytes(in), xs = 2 * pin;
  Avx2Call a{};
  a.sb = sb, a.quads = pin / kQuad, a.xs = xs, a.ys = ys, a.rs = rs, a.rs_count = row_scales, a.out = out;
  if (T <= static_cast<std::size_t>(kAvx2RegTokens)) {
    const auto per_call = static_cast<std::size_t>(avx2_strips_for(static_cast<int>(T)));
    for_strip_calls(s0, s1, per_call, [&](std::size_t s, std::size_t n) BESTOFN_AVX2 {
      a.w = pw + s * sb, a.x = x, a.y = y + s * kStrip, a.ts = ts, a.r0 = s * kStrip;
      (n == 1 ? kAvx2RegsSingle<kF16c> : kAvx2Regs<kF16c>)[T - 1](a);
    });
    return;
  }
  // More tokens: each strip decoded into a buffer once, then the tokens over it in calls of at
  // most kAvx2BufTokens (avx2_call_tokens: 16 tokens as 6, 5, 5; 8 as 6, 2).
  struct alignas(32) Lane8 {
    float v[8];
  };
  thread_local std::vector<Lane8> buf;  // the decoded strip, 32-byte aligned
  buf.resize(pin * kStrip / 8);
  float* wbuf = reinterpret_cast<float*>(buf.data());
  a.wbuf = wbuf;
  for (std::size_t s = s0; s < s1; ++s) {
    decode_strip<kF16c>(pw + s * sb, a.quads, wbuf);
    a.r0 = s * kStrip;
    for (std::size_t c0 = 0; c0 < T;) {
      const std::size_t tt = avx2_call_tokens(T - c0, kAvx2BufTokens);
      a.x = x + c0 * xs, a.y = y + c0 * ys + s * kStrip, a.ts = ts ? ts + c0 : nullptr;
      kAvx2Buf[tt - 1](a);
      c0 += tt;
    }
  }
}

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
BESTOFN_AVX512_VBMI void dot_strips_avx512(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
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

// Subnormal operands read as numbers while it lives, whatever the thread's MXCSR said (DAZ
// cleared, then restored).
class SubnormalsAsNumbers {
 public:
  SubnormalsAsNumbers() {
    if (saved_ & kDaz) _mm_setcsr(saved_ & ~kDaz);
  }
  ~SubnormalsAsNumbers() {
    if (saved_ & kDaz) _mm_setcsr(saved_);
  }
  SubnormalsAsNumbers(const SubnormalsAsNumbers&) = delete;
  SubnormalsAsNumbers& operator=(const SubnormalsAsNumbers&) = delete;

 private:
  static constexpr unsigned kDaz = 0x40;  // MXCSR.DAZ
  unsigned saved_ = _mm_getcsr();
};

bool cpu_has_avx512_vbmi() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
}

bool cpu_has_avx512_bf16() { return cpu_has_avx512_vbmi() && __builtin_cpu_supports("avx512bf16"); }

bool cpu_has_avx2_fma_f16c() {  // every AVX2 CPU has F16C; the AVX2 kernels are built for it
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

// Path p and the generic path on every pair of codes (all 256 x 256, signs and subnormals
// included), on sums long enough to round, a partial strip and quad, every kernel shape the token
// counts below reach on either fast path and the scaled store: a fast path is used only if it
// gives the generic path's bits here.
bool self_check(Path fast) {
  constexpr std::size_t in = 256 + 42, rows = 256 + 3, T = kChunk + 1;  // the largest count below
  std::vector<std::uint8_t> w(rows * in);
  std::vector<float> x(T * in), ts(T), rs(rows), ones(T, 1.0f);
  std::uint32_t s = 12345;
  auto next = [&s] { return s = s * 1664525u + 1013904223u; };
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < in; ++i) w[r * in + i] = static_cast<std::uint8_t>(i < 256 ? (r + i) & 0xff : next() >> 24);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint8_t c = static_cast<std::uint8_t>(i % in < 256 ? i % in : next() >> 24);
    if ((c & 0x7f) == 0x7f) c = 0x7e;
    x[i] = fp8_e4m3_to_float_finite(c);
  }
  for (auto& v : ts) v = static_cast<float>(next() >> 8) * 0x1p-30f;
  for (auto& v : rs) v = static_cast<float>(next() >> 8) * 0x1p-28f;
  std::vector<std::uint8_t> pw(packed_weight_bytes(rows, in));
  pack_weights(w.data(), rows, in, 0, strip_count(rows), pw.data());
  std::vector<float> a, b;
  for (Path p : {Path::Generic, fast}) {
    std::vector<float>& y = p == Path::Generic ? a : b;
    std::vector<std::uint16_t> packed;
    for (std::size_t t : {1, 2, 3, 4, 5, 6, 7, 9, 12, 16, 17}) {  // the first t tokens
      packed.assign(packed_size(p, t, in), 0);
      pack_activations(p, x.data(), ones.data(), t, in, 0, t, packed.data());
      std::vector<float> part(t * rows, 0.0f);
      dot_strips(p, pw.data(), rows, in, 0, strip_count(rows), packed.data(), t, part.data(), rows);
      y.insert(y.end(), part.begin(), part.end());
    }
    std::vector<float> scaled(T * rows, 0.0f);
    dot_strips(p, pw.data(), rows, in, 0, strip_count(rows), packed.data(), T, scaled.data(), rows, ts.data(), rs.data(), rows);
    y.insert(y.end(), scaled.begin(), scaled.end());
  }
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

bool available(Path p) {
  switch (p) {
    case Path::Avx512Bf16: {
      static const bool ok = cpu_has_avx512_bf16() && self_check(Path::Avx512Bf16);
      return ok;
    }
    case Path::Avx512Fma: {
      static const bool ok = cpu_has_avx512_vbmi() && self_check(Path::Avx512Fma);
      return ok;
    }
    case Path::Avx2: {
      static const bool ok = cpu_has_avx2_fma_f16c() && self_check(Path::Avx2);
      return ok;
    }
    case Path::Avx2F16c: {
      static const bool ok = cpu_has_avx2_fma_f16c() && self_check(Path::Avx2F16c);
      return ok;
    }
    default: return true;
  }
}

// Weights for timing the paths: 256 KB (in L2), codes 0..126 in turn (~5% subnormal), on a 64-byte
// boundary as the engine's arena is (a block split over two lines cost either AVX-512 path up to a
// third of its speed, more than the paths differ by).
struct TimingWeights {
  static constexpr std::size_t kRows = 256, kIn = 1024;
  std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(packed_weight_bytes(kRows, kIn) + 64);
  std::uint8_t* packed = buf.data() + (64 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64) % 64;
  TimingWeights() {
    std::vector<std::uint8_t> w(kRows * kIn);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::uint8_t>((i * 37) % 0x7f);
    pack_weights(w.data(), kRows, kIn, 0, strip_count(kRows), packed);
  }
};

// The best of 3 calls of path p on T tokens.
double seconds_per_gemm(const TimingWeights& tw, Path p, std::size_t T) {
  constexpr std::size_t rows = TimingWeights::kRows, in = TimingWeights::kIn;
  std::vector<float> x(T * in, 1.0f), ones(T, 1.0f), y(T * rows);
  std::vector<std::uint16_t> packed(packed_size(p, T, in));
  pack_activations(p, x.data(), ones.data(), T, in, 0, T, packed.data());
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    dot_strips(p, tw.packed, rows, in, 0, strip_count(rows), packed.data(), T, y.data(), rows);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Of two paths that give the same bits, `usual` unless `other` is clearly faster on this core.
// Timed on 1 token (decode-bound) and 16 (FMA-bound), the paths in turn, 5 rounds, the best time
// of each; `other` is taken if the product of its two time ratios to `usual` is below 0.8. The
// margin is for VMs: on the 2-vCPU Emerald Rapids VM of 2026-12-02 the AVX-512 FMA path took 73
// us at 16 tokens to the BF16 path's 109 in 7 runs of 10, and 119-128 us to 125-132 in the other
// 3, as if another thread shared the core's FMA units; a whole benchmark run once took the BF16
// path when a plain "faster" decided. The usual paths are those that never fall far behind:
// avx512_fma (vdpbf16ps does twice its multiply-adds per instruction, but Intel's cores issue it
// at a quarter of the FMAs' rate: bench_cpu_peak 86 against 175 GFLOP/s per core there; AMD's Zen
// 4 and 5 at the FMAs' rate, where avx512_bf16 should win by ~2x) and avx2_f16c (Intel's cores
// multiply the shift decode's subnormal fp32s through microcode assists, ~50x slower there;
// `vcvtph2ps` is slow on AMD's Zen 3, where the shifts should win).
Path prefer(Path usual, Path other) {
  const TimingWeights tw;
  double tu[2] = {1e30, 1e30}, to[2] = {1e30, 1e30};
  auto ratio = [&] { return (to[0] / tu[0]) * (to[1] / tu[1]); };
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 2; ++i) {
      const std::size_t T = i == 0 ? 1 : kChunk;
      tu[i] = std::min(tu[i], seconds_per_gemm(tw, usual, T));
      to[i] = std::min(to[i], seconds_per_gemm(tw, other, T));
    }
    if (ratio() < 0.25 || ratio() > 4.0) break;  // (a path in microcode assists: ~8 ms a call)
  }
  return ratio() < 0.8 ? other : usual;
}

Path best_path() {
  static const Path best = [] {
    if (available(Path::Avx512Bf16) && available(Path::Avx512Fma)) return prefer(Path::Avx512Fma, Path::Avx512Bf16);
    for (Path p : {Path::Avx512Fma, Path::Avx512Bf16})
      if (available(p)) return p;
    if (available(Path::Avx2) && available(Path::Avx2F16c)) return prefer(Path::Avx2F16c, Path::Avx2);
    return Path::Generic;
  }();
  return best;
}

void pack_weights(const std::uint8_t* w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, std::uint8_t* packed) {
  const std::size_t quads = padded(in) / kQuad;
  for (std::size_t s = s0; s < s1; ++s) {
    std::uint8_t* dst = packed + s * strip_bytes(in);
    for (std::size_t q = 0; q < quads; ++q)
      for (std::size_t b = 0; b < kBlock; ++b) {
        const std::size_t r = s * kStrip + kPlaces[b].row, k = q * kQuad + kPlaces[b].d;
        dst[q * kBlock + b] = r < out && k < in ? w[r * in + k] : 0;
      }
  }
}

std::size_t packed_size(Path p, std::size_t T, std::size_t in) {
  return p != Path::Avx512Bf16 ? T * 2 * padded(in) : (T + kChunk - 1) / kChunk * kChunk * padded(in);
}

void pack_activations(Path p, const float* x, const float* scale, std::size_t T, std::size_t in, std::size_t t0, std::size_t t1,
                      std::uint16_t* packed) {
  const std::size_t pin = padded(in);
  constexpr std::size_t kSpan = 16;  // inputs quantized per vector loop
  for (std::size_t t = t0; t < std::min(t1, T); ++t) {
    const float* row = x + t * in;
    const float s = scale[t];
    // The row's E4M3 values kSpan at a time (a fixed-length loop GCC vectorizes), zeros past `in`.
    auto values = [&](std::size_t k, float* v) {
      if (k + kSpan <= in)
        for (std::size_t i = 0; i < kSpan; ++i) v[i] = fp8_e4m3_round(row[k + i] / s);
      else
        for (std::size_t i = 0; i < kSpan; ++i) v[i] = k + i < in ? fp8_e4m3_round(row[k + i] / s) : 0.0f;
    };
    float v[kSpan];
    if (p != Path::Avx512Bf16) {  // the generic layout (the AVX-512 FMA path's too; the AVX2 path's times 2^112)
      std::uint16_t* out = packed + t * 2 * pin;  // the floats' bytes, two words each
      for (std::size_t k = 0; k < pin; k += kSpan) {
        values(k, v);
        if (p == Path::Avx2)
          for (float& e : v) e *= kAvx2ActivationScale;  // (avx2_f16c: as they are)
        std::memcpy(out + 2 * k, v, std::min(kSpan, pin - k) * sizeof(float));
      }
      continue;
    }
    // Token t: chunk c of n tokens, place j in it; its values of the quad at input k at k * n + 4j.
    const std::size_t c = t / kChunk, n = std::min(kChunk, T - c * kChunk), j = t % kChunk;
    std::uint16_t* chunk = packed + c * kChunk * pin;
    // The BF16 words (the floats' top halves: exact) stay in a register, a quad per 64-bit lane:
    // through a stack array, each 8-byte read waited on the wide store before it (no forwarding).
    typedef std::uint32_t U32 __attribute__((vector_size(4 * kSpan)));
    typedef std::uint16_t U16 __attribute__((vector_size(2 * kSpan)));
    typedef std::uint64_t U64 __attribute__((vector_size(2 * kSpan)));
    for (std::size_t k = 0; k < pin; k += kSpan) {
      values(k, v);
      U32 bits;
      std::memcpy(&bits, v, sizeof bits);
      const U64 quads = std::bit_cast<U64>(__builtin_convertvector(bits >> 16, U16));
      const std::size_t nq = std::min(kSpan, pin - k) / kQuad;
      for (std::size_t q = 0; q < nq; ++q) {
        const std::uint64_t word = quads[q];
        std::memcpy(chunk + (k + q * kQuad) * n + kQuad * j, &word, sizeof word);
      }
    }
  }
}

void dot_strips(Path p, const std::uint8_t* packed_w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                const std::uint16_t* x, std::size_t T, float* y, std::size_t y_stride, const float* token_scale,
                const float* row_scale, std::size_t row_scales) {
  s1 = std::min(s1, strip_count(out));
  if (s0 >= s1 || T == 0) return;
  if (token_scale && !row_scale) throw std::invalid_argument("fp8::dot_strips: token scales without row scales");
  const SubnormalsAsNumbers daz_off;  // (see the AVX2 path)
  auto* const run = p == Path::Avx512Bf16 ? dot_strips_avx512<Bf16Kernels>
                    : p == Path::Avx512Fma  ? dot_strips_avx512<FmaKernels>
                    : p == Path::Avx2       ? dot_strips_avx2<false>
                    : p == Path::Avx2F16c   ? dot_strips_avx2<true>
                                            : dot_strips_generic;
  run(packed_w, out, in, s0, s1, x, T, y, y_stride, token_scale, row_scale, row_scales);
}

}  // namespace bestofn::cpu::fp8
