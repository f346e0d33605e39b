// The FP8 GEMM's dispatcher (the order every path follows is in gemm_fp8.h): which paths this CPU
// runs (each checked against the generic path, bit for bit) and which is fastest, the packing of
// weights and activations, and dot_strips. The paths, one file per instruction set:
//   gemm_fp8_avx512.cpp  AVX-512 BF16 (vdpbf16ps) and AVX-512 FMA (VBMI decode, fp32 FMAs)
//   gemm_fp8_avx2.cpp    AVX2 + FMA, the codes widened by shifts or by F16C
//   gemm_fp8_generic.cpp portable vector code
#include "cpu/gemm_fp8.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm_fp8_paths.h"

namespace bestofn::cpu::fp8 {
namespace {

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
  const SubnormalsAsNumbers daz_off;  // (see gemm_fp8_avx2.cpp)
  const StripsKernel run = p == Path::Avx512Bf16 || p == Path::Avx512Fma ? avx512_kernel(p == Path::Avx512Bf16)
                           : p == Path::Avx2 || p == Path::Avx2F16c      ? avx2_kernel(p == Path::Avx2F16c)
                                                                         : dot_strips_generic;
  run(packed_w, out, in, s0, s1, x, T, y, y_stride, token_scale, row_scale, row_scales);
}

}  // namespace bestofn::cpu::fp8