// FP8 GEMM kernels (the order they share is in gemm_fp8.h).
//
// AVX-512 BF16 path. Every E4M3 value is exact in BF16 (subnormals included: they are normal
// BF16 numbers, so vdpbf16ps's flush of BF16 denormals never applies), so `vdpbf16ps` multiplies
// E4M3 pairs exactly and adds 32 products per instruction, twice the fp32 FMA rate. A 64-byte block
// of weight codes becomes BF16 through two `vpermi2b` lookups (the high and the low byte of the
// BF16 value of each of the 128 magnitudes) and the sign bit, and `vpunpck{l,h}bw` join the bytes.
// The unpacks interleave within 128-bit lanes; the activations are packed once per call in the
// same order, so no weight is ever shuffled.
//
// vdpbf16ps adds a lane's odd product, then its even product, rounding after each (Intel's
// pseudo-code; AMD Zen 4 does the same). A CPU that rounded otherwise would change the order, so
// the path is used only after self_check() has compared it with the generic code on this CPU.
//
// Generic path: the same sums in the same order with fp32 vectors (GCC vector extension), on weights
// widened to floats in that order; each product is exact, so a fused or a separate multiply-add
// rounds the same.
#include "cpu/gemm_fp8.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "bestofn/numeric.h"

#define BESTOFN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16")))

namespace bestofn::cpu::fp8 {
namespace {

constexpr int kRows = 4;         // weight rows per block, each decoded once for all tokens
constexpr std::size_t kTile = 32;  // tokens per tile, so a tile of activations stays in L2
// Up to this many tokens, weights are decoded in registers (a decoded 64-code block serves every
// token at once; bench-100m at N = 3 and 4 ran at 1.9x and 1.2x the panel kernels' speed, and at
// N = 8 the panel was as fast, at N = 16 faster).
constexpr std::size_t kFusedMax = 4;

// Element (within its 64-block) of packed position p: what vpunpck{l,h}bw put there.
constexpr std::size_t element(std::size_t p) { return 16 * ((p % 32) / 8) + 8 * (p / 32) + p % 8; }
// Element of position f of the generic layout: per block, lanes of (odd, even) products of the
// low unpack, then of the high unpack.
constexpr std::size_t generic_element(std::size_t f) {
  const std::size_t s = f / 16, j = f % 16;
  return 16 * (j / 4) + 2 * (j % 4) + (s >= 2 ? 8 : 0) + (s % 2 == 0 ? 1 : 0);
}

inline float tree_sum(const float* a) {
  float h8[8], h4[4];
  for (int i = 0; i < 8; ++i) h8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) h4[i] = h8[i] + h8[i + 4];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// ---- generic path ----------------------------------------------------------------------------

typedef float Vec __attribute__((vector_size(16 * sizeof(float))));
inline Vec load_vec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Row of codes -> floats in the generic layout, zero past `in`: each block widened in element
// order (a loop that vectorizes), then permuted.
void widen_generic(const std::uint8_t* w, std::size_t in, float* out) {
  static constexpr auto order = [] {
    std::array<std::uint8_t, 64> a{};
    for (std::size_t f = 0; f < 64; ++f) a[f] = static_cast<std::uint8_t>(generic_element(f));
    return a;
  }();
  float block[64];
  for (std::size_t b = 0; b < in; b += 64) {
    const std::size_t n = std::min<std::size_t>(64, in - b);
    for (std::size_t e = 0; e < n; ++e) block[e] = fp8_e4m3_to_float_finite(w[b + e]);
    for (std::size_t e = n; e < 64; ++e) block[e] = 0.0f;
    for (std::size_t f = 0; f < 64; ++f) out[b + f] = block[order[f]];
  }
}

template <int TT>
void kernel_generic(const float* panel, std::size_t pad, const float* const* xs, float (*out)[kRows]) {
  Vec acc[TT][kRows] = {};
  for (std::size_t i = 0; i < pad; i += 16) {
    Vec w[kRows];
    for (int k = 0; k < kRows; ++k) w[k] = load_vec(panel + static_cast<std::size_t>(k) * pad + i);
    for (int t = 0; t < TT; ++t) {
      const Vec x = load_vec(xs[t] + i);
      for (int k = 0; k < kRows; ++k) acc[t][k] += x * w[k];
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int k = 0; k < kRows; ++k) {
      float lanes[16];
      std::memcpy(lanes, &acc[t][k], sizeof lanes);
      out[t][k] = tree_sum(lanes);
    }
}

using GenericKernel = void (*)(const float*, std::size_t, const float* const*, float (*)[kRows]);
constexpr GenericKernel kGeneric[kRows] = {kernel_generic<1>, kernel_generic<2>, kernel_generic<3>, kernel_generic<4>};

void dot_rows_generic(const std::uint8_t* w, std::size_t in, std::size_t r0, std::size_t r1, const float* x, std::size_t T,
                      float* acc, std::size_t stride) {
  const std::size_t pad = padded(in);
  thread_local std::vector<float> panel;
  panel.resize(kRows * pad);
  for (std::size_t t0 = 0; t0 < T; t0 += kTile) {
    const std::size_t t1 = std::min(T, t0 + kTile);
    for (std::size_t r = r0; r < r1; r += kRows) {
      const std::size_t rows = std::min<std::size_t>(kRows, r1 - r);
      for (std::size_t k = 0; k < kRows; ++k) widen_generic(w + std::min(r + k, r1 - 1) * in, in, panel.data() + k * pad);
      for (std::size_t t = t0; t < t1; t += kRows) {
        const std::size_t tt = std::min<std::size_t>(kRows, t1 - t);
        const float* xs[kRows];
        for (std::size_t j = 0; j < tt; ++j) xs[j] = x + (t + j) * pad;
        float out[kRows][kRows];
        kGeneric[tt - 1](panel.data(), pad, xs, out);
        for (std::size_t j = 0; j < tt; ++j)
          for (std::size_t k = 0; k < rows; ++k) acc[(t + j) * stride + r + k] = out[j][k];
      }
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

BESTOFN_AVX512_BF16 inline Tables load_tables() {
  const ByteTables& b = byte_tables();
  return {_mm512_load_si512(b.hi), _mm512_load_si512(b.hi + 64), _mm512_load_si512(b.lo), _mm512_load_si512(b.lo + 64)};
}

// 64 codes (zero past `left`) -> two vectors of 32 BF16 values in the packed order.
BESTOFN_AVX512_BF16 inline void decode(const std::uint8_t* p, std::size_t left, const Tables& tb, __m512i& p0, __m512i& p1) {
  const __m512i w = left >= 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(static_cast<__mmask64>((1ull << left) - 1), p);
  // vpermi2b reads index bits 0..6 only: the sign bit is or-ed in after (0xf8: a | (b & c)).
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(tb.hi0, w, tb.hi1), w, _mm512_set1_epi8(-128), 0xf8);
  const __m512i lo = _mm512_permutex2var_epi8(tb.lo0, w, tb.lo1);
  p0 = _mm512_unpacklo_epi8(lo, hi);
  p1 = _mm512_unpackhi_epi8(lo, hi);
}

BESTOFN_AVX512_BF16 inline __m512 dot2(__m512 acc, __m512i w, const std::uint16_t* x) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(_mm512_loadu_si512(x)));
}

BESTOFN_AVX512_BF16 inline float tree_sum(__m512 a) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, a);
  return tree_sum(lanes);
}

// kRows rows x TT tokens, the weights decoded in registers (few tokens: nothing to amortize a
// panel over). The next block of rows (contiguous, at `next`) is prefetched line by line as this
// one is read: four interleaved rows of a few hundred bytes are too short for the hardware
// prefetcher to pick up.
template <int TT>
BESTOFN_AVX512_BF16 void kernel_fused(const std::uint8_t* const* w, std::size_t in, const std::uint16_t* const* xs,
                                      const Tables& tb, const std::uint8_t* next, float (*out)[kRows]) {
  __m512 acc[TT][kRows];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  for (std::size_t i = 0; i < in; i += 64)
    for (int k = 0; k < kRows; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<std::size_t>(k) * in + i), _MM_HINT_T0);
      __m512i p0, p1;
      decode(w[k] + i, in - i, tb, p0, p1);
      for (int t = 0; t < TT; ++t) acc[t][k] = dot2(dot2(acc[t][k], p0, xs[t] + i), p1, xs[t] + i + 32);
    }
  for (int t = 0; t < TT; ++t)
    for (int k = 0; k < kRows; ++k) out[t][k] = tree_sum(acc[t][k]);
}

// _mm512_shuffle_f32x4 through its masked form: GCC 12's plain form passes an "undefined" vector
// that -Wuninitialized reports once inlined (a full mask gives the same instruction).
template <int Imm>
BESTOFN_AVX512_BF16 inline __m512 shuffle_quarters(__m512 a, __m512 b) {
  return _mm512_mask_shuffle_f32x4(a, static_cast<__mmask16>(0xffff), a, b, Imm);
}

// The tree sums of 16 accumulators at once, in tree_sum's order: each step adds the same pairs
// of partial sums that tree_sum adds, for 2, 4, 8 and then all 16 accumulators per instruction.
// Lane 4q + j of the result holds the sum of a[4j + q].
BESTOFN_AVX512_BF16 inline __m512 tree_sum16(const __m512* a) {
  __m512 s[8], u[4], w[2];
  for (int k = 0; k < 8; ++k)  // (j, j + 8): [a0 | a1] halves
    s[k] = _mm512_add_ps(shuffle_quarters<0x44>(a[2 * k], a[2 * k + 1]), shuffle_quarters<0xee>(a[2 * k], a[2 * k + 1]));
  for (int k = 0; k < 4; ++k)  // (j, j + 4) within each half: quarters
    u[k] = _mm512_add_ps(shuffle_quarters<0x88>(s[2 * k], s[2 * k + 1]), shuffle_quarters<0xdd>(s[2 * k], s[2 * k + 1]));
  for (int k = 0; k < 2; ++k)  // (j, j + 2) within each quarter
    w[k] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * k], u[2 * k + 1], 0x44), _mm512_shuffle_ps(u[2 * k], u[2 * k + 1], 0xee));
  return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xdd));  // (0, 1)
}

// kRows rows of a decoded panel (BF16, packed order) x TT tokens. The rows at `next` (the next
// block, contiguous codes) are prefetched a line per step, so that they arrive while this block
// computes.
template <int TT>
BESTOFN_AVX512_BF16 void kernel_panel(const std::uint16_t* panel, std::size_t pad, const std::uint16_t* const* xs,
                                      const std::uint8_t* next, std::size_t next_bytes, float (*out)[kRows]) {
  __m512 acc[TT][kRows];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  std::size_t line = 0;
  for (std::size_t i = 0; i < pad; i += 32) {
    for (int l = 0; l < 2 && line < next_bytes; ++l, line += 64)  // 4 rows x 64 codes per step: 2 lines
      _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T0);
    __m512i w[kRows];
    for (int k = 0; k < kRows; ++k) w[k] = _mm512_loadu_si512(panel + static_cast<std::size_t>(k) * pad + i);
    for (int t = 0; t < TT; ++t)
      for (int k = 0; k < kRows; ++k) acc[t][k] = dot2(acc[t][k], w[k], xs[t] + i);
  }
  if constexpr (TT == 4 && kRows == 4) {
    // Lane 4k + t holds out[t][k]: transposed back on the way out.
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, tree_sum16(&acc[0][0]));
    for (int t = 0; t < TT; ++t)
      for (int k = 0; k < kRows; ++k) out[t][k] = lanes[4 * k + t];
  } else {
    for (int t = 0; t < TT; ++t)
      for (int k = 0; k < kRows; ++k) out[t][k] = tree_sum(acc[t][k]);
  }
}

BESTOFN_AVX512_BF16 void dot_rows_avx512(const std::uint8_t* w, std::size_t in, std::size_t r0, std::size_t r1,
                                         const std::uint16_t* x, std::size_t T, float* acc, std::size_t stride) {
  const std::size_t pad = padded(in);
  const Tables tb = load_tables();
  thread_local std::vector<std::uint16_t> panel;
  panel.resize(kRows * pad);
  for (std::size_t t0 = 0; t0 < T; t0 += kTile) {
    const std::size_t t1 = std::min(T, t0 + kTile);
    for (std::size_t r = r0; r < r1; r += kRows) {
      const std::size_t rows = std::min<std::size_t>(kRows, r1 - r);
      const std::uint8_t* wr[kRows];
      for (std::size_t k = 0; k < kRows; ++k) wr[k] = w + std::min(r + k, r1 - 1) * in;  // a short block repeats its last row
      const bool fused = t1 - t0 <= kFusedMax;
      if (!fused)
        for (std::size_t k = 0; k < kRows; ++k)
          for (std::size_t i = 0; i < in; i += 64) {
            __m512i p0, p1;
            decode(wr[k] + i, in - i, tb, p0, p1);
            _mm512_storeu_si512(panel.data() + k * pad + i, p0);
            _mm512_storeu_si512(panel.data() + k * pad + i + 32, p1);
          }
      for (std::size_t t = t0; t < t1; t += kRows) {
        const std::size_t tt = std::min<std::size_t>(kRows, t1 - t);
        const std::uint16_t* xs[kRows];
        for (std::size_t j = 0; j < tt; ++j) xs[j] = x + (t + j) * pad;
        float out[kRows][kRows];
        const std::uint8_t* next = w + std::min(r + kRows, r1 - 1) * in;
        // Panel kernels: the next block's codes, a share per token group (a burst of prefetches
        // would overrun the misses the core can keep in flight).
        const std::size_t groups = (t1 - t0 + kRows - 1) / kRows, g = (t - t0) / kRows;
        const std::size_t all = r + kRows < r1 ? std::min<std::size_t>(kRows, r1 - r - kRows) * in : 0;
        const std::size_t lb = all * g / groups / 64 * 64, le = g + 1 == groups ? all : all * (g + 1) / groups / 64 * 64;
        if (fused) {
          if (tt == 1) kernel_fused<1>(wr, in, xs, tb, next, out);
          else if (tt == 2) kernel_fused<2>(wr, in, xs, tb, next, out);
          else if (tt == 3) kernel_fused<3>(wr, in, xs, tb, next, out);
          else kernel_fused<4>(wr, in, xs, tb, next, out);
        }
        else if (tt == 1) kernel_panel<1>(panel.data(), pad, xs, next + lb, le - lb, out);
        else if (tt == 2) kernel_panel<2>(panel.data(), pad, xs, next + lb, le - lb, out);
        else if (tt == 3) kernel_panel<3>(panel.data(), pad, xs, next + lb, le - lb, out);
        else kernel_panel<4>(panel.data(), pad, xs, next + lb, le - lb, out);
        for (std::size_t j = 0; j < tt; ++j)
          for (std::size_t k = 0; k < rows; ++k) acc[(t + j) * stride + r + k] = out[j][k];
      }
    }
  }
}

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512bf16");
}

// Both paths on every pair of codes (all 256 x 256, signs and subnormals included) and on sums
// long enough to round: the fast path is used only if it gives the generic path's bits here.
bool self_check() {
  constexpr std::size_t in = 256 + 40, rows = 256 + 3, T = 5;
  std::vector<std::uint8_t> w(rows * in);
  std::vector<float> x(T * in);
  std::uint32_t s = 12345;
  auto next = [&s] { return s = s * 1664525u + 1013904223u; };
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < in; ++i) w[r * in + i] = static_cast<std::uint8_t>(i < 256 ? (r + i) & 0xff : next() >> 24);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint8_t c = static_cast<std::uint8_t>(i % in < 256 ? i % in : next() >> 24);
    if ((c & 0x7f) == 0x7f) c = 0x7e;
    x[i] = fp8_e4m3_to_float_finite(c);
  }
  std::vector<float> a(T * rows), b(T * rows);
  for (Path p : {Path::Generic, Path::Avx512Bf16}) {
    std::vector<std::uint16_t> packed(T * packed_size(p, in));
    pack_activations(p, x.data(), T, in, packed.data());
    for (std::size_t t = 1; t <= T; ++t)  // fused and all panel kernels (4 + 1 tokens at T = 5)
      dot_rows(p, w.data(), in, 0, rows, packed.data(), t, (p == Path::Generic ? a : b).data(), rows);
  }
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

bool available(Path p) {
  if (p == Path::Generic) return true;
  static const bool ok = cpu_has_avx512_bf16() && self_check();
  return ok;
}

Path best_path() { return available(Path::Avx512Bf16) ? Path::Avx512Bf16 : Path::Generic; }

std::size_t packed_size(Path p, std::size_t in) { return p == Path::Generic ? 2 * padded(in) : padded(in); }

void pack_activations(Path p, const float* xq, std::size_t T, std::size_t in, std::uint16_t* packed) {
  const std::size_t pad = padded(in), words = packed_size(p, in);
  for (std::size_t t = 0; t < T; ++t) {
    const float* x = xq + t * in;
    std::uint16_t* out = packed + t * words;
    for (std::size_t b = 0; b < pad; b += 64)
      for (std::size_t f = 0; f < 64; ++f) {
        const std::size_t e = b + (p == Path::Generic ? generic_element(f) : element(f));
        const float v = e < in ? x[e] : 0.0f;
        if (p == Path::Generic) std::memcpy(out + 2 * (b + f), &v, sizeof v);
        else out[b + f] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);  // exact: E4M3 fits BF16
      }
  }
}

void dot_rows(Path p, const std::uint8_t* w, std::size_t in, std::size_t r0, std::size_t r1, const std::uint16_t* packed,
              std::size_t T, float* acc, std::size_t out_stride) {
  if (r0 >= r1 || T == 0) return;
  if (p == Path::Avx512Bf16) {
    dot_rows_avx512(w, in, r0, r1, packed, T, acc, out_stride);
  } else {
    // The generic layout holds floats, written by memcpy: read back through a float pointer to the
    // same bytes (std::vector storage is suitably aligned for float).
    dot_rows_generic(w, in, r0, r1, reinterpret_cast<const float*>(packed), T, acc, out_stride);
  }
}

}  // namespace bestofn::cpu::fp8
