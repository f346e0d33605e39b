#pragma once
// What the FP8 GEMM's paths share (gemm_fp8.cpp dispatches to them; gemm_fp8.h states their common
// order): the block layout pack_weights writes, and each path's kernel over a range of strips, in
// a file of its own, compiled for its instruction set (gemm_fp8_generic.cpp, gemm_fp8_avx2.cpp,
// gemm_fp8_avx512.cpp).
#include <array>
#include <cstddef>
#include <cstdint>

#include "cpu/gemm_fp8.h"

namespace bestofn::cpu::fp8 {

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

// The AVX2 path's scaling (gemm_fp8_avx2.cpp): pack_activations multiplies its activations by
// kAvx2ActivationScale, decode_half's fp32s are the weights times kAvx2WeightScale, and the sums
// are multiplied back by kAvx2Unscale, all exactly.
constexpr float kAvx2WeightScale = 0x1p-120f;     // what decode_half's fp32s are, times the weights
constexpr float kAvx2ActivationScale = 0x1p112f;  // what pack_activations multiplies by
constexpr float kAvx2Unscale = 1.0f / (kAvx2WeightScale * kAvx2ActivationScale);  // 2^8 (avx2_f16c: 2^-8 x 1, the same)

// A path's kernel over strips [s0, s1) for all T tokens: dot_strips' arguments, already checked.
using StripsKernel = void (*)(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                              const std::uint16_t* x, std::size_t T, float* y, std::size_t ys, const float* ts,
                              const float* rs, std::size_t row_scales);
void dot_strips_generic(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                        const std::uint16_t* x, std::size_t T, float* y, std::size_t ys, const float* ts, const float* rs,
                        std::size_t row_scales);
// The AVX2 kernel with the F16C decode or the shift one; the AVX-512 kernel with vdpbf16ps or
// fp32 FMAs. (Pointers: the kernels' target attributes stay inside their files.)
StripsKernel avx2_kernel(bool f16c);
StripsKernel avx512_kernel(bool bf16);

}  // namespace bestofn::cpu::fp8
