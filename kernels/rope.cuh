#pragma once
// Device helpers shared by the kernels that rotate q / k and write the KV cache: rope_kv.cu (its
// own launch) and linear_small_m.cu (--small-m-linear's q/k/v product with RoPE and the cache
// write in its epilogue). One definition, so the two give the same bits. Include from .cu files only.
#include <cuda_runtime.h>

#include <cstdint>

namespace bestofn::cuda::ropeops {

// bestofn::bf16_from_float bit for bit: round to nearest even, NaN kept quiet with its sign.
__device__ __forceinline__ std::uint16_t bf16_from_float(float x) {
  const unsigned bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Rotates the pair (a, b) = (x[i], x[i + half]) by the angle with cosine c and sine s. GCC 12 with
// -march=native compiles cpu::rope to exactly these fused forms (fma(a, c, -(b s)) and
// fma(b, c, a s), read from the disassembly of ops.cpp.o); writing them out keeps nvcc from
// contracting differently, so the results agree bit for bit wherever cosf / sinf do.
__device__ __forceinline__ void rotate(float a, float b, float c, float s, float& x0, float& x1) {
  x0 = fmaf(a, c, -__fmul_rn(b, s));
  x1 = fmaf(b, c, __fmul_rn(a, s));
}

// The angle of pair i at position p: one IEEE multiply, as cpu::rope.
__device__ __forceinline__ float angle(int p, const float* inv_freq, int i) { return __fmul_rn(static_cast<float>(p), inv_freq[i]); }

}  // namespace bestofn::cuda::ropeops
