// The FP8 GEMM's AVX2 paths (the order they share with the others is in gemm_fp8.h).
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
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu/gemm_fp8_paths.h"
#include "cpu/strip_calls.h"

#define BESTOFN_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bestofn::cpu::fp8 {
namespace {

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
BESTOFN_AVX2 void avx2_path(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
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

}  // namespace

StripsKernel avx2_kernel(bool f16c) { return f16c ? avx2_path<true> : avx2_path<false>; }

}  // namespace bestofn::cpu::fp8
