#pragma once
// Device helpers shared by the row kernels (rmsnorm.cu, quantize_act.cu, swiglu.cu, argmax.cu,
// embedding.cu): block reductions, weight widening, and FP8 E4M3 quantization of one row exactly
// as quantize_fp8_rows / quantize_fp8_row do it. Device code: include from .cu files only.
// No relocatable device code in bestofn_cuda, so everything here is inline and each .cu file gets
// its own copy.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"

namespace bestofn::cuda::rowops {

// Threads per block of every row kernel: one block per row, each thread strides over the row.
constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;

// Sum over the block, returned to every thread. The order is fixed for a fixed kBlock (each
// thread's strided partial, then a butterfly within each warp, then across the warps), so a row
// gives the same sum on every run — but not the CPU's sequential sum: tests state a tolerance.
__device__ inline float block_sum(float v) {
  __shared__ float warp_part[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_part[lane] : 0.0f;
  __syncthreads();  // every warp has read warp_part: a second call may overwrite it
  for (int offset = 16; offset > 0; offset >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Max over the block of values >= 0 (0 is the identity), returned to every thread. fmaxf is exact
// and order-independent, so the result equals the CPU's sequential std::fmax.
__device__ inline float block_max(float v) {
  __shared__ float warp_max[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_max[lane] : 0.0f;
  __syncthreads();
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// 1 / sqrt(mean(x^2) + eps) of one row x (dim), on the whole block; every thread gets it. Each
// thread's strided sum of squares as fused multiply-adds, then block_sum; explicitly rounded
// division and square root, like the CPU's `1.0f / std::sqrt(ss / dim + eps)`. The order is
// src/cuda/small_m_linear.h's small_m_inv_rms_twin (rmsnorm.cu and --small-m-linear's prologue).
__device__ inline float inv_rms(const float* x, int dim, float eps) {
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += kBlock) ss = __fmaf_rn(x[i], x[i], ss);
  ss = block_sum(ss);
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(dim)), eps)));
}

// A weight element widened to fp32: F32 as is, BF16 by placing its bits on top (exact).
__device__ inline float widen(float w) { return w; }
__device__ inline float widen(std::uint16_t w) { return __uint_as_float(static_cast<unsigned>(w) << 16); }

// FP8 E4M3 codes q_row (n) and *scale_out for one row whose element c is value_at(c), on the whole
// block. static_scale > 0: that scale; else amax / 448 (1 for an all-zero row), fp8_row_scale.
// value_at must return the same float for the same c on every call (it is called twice).
template <typename ValueAt>
__device__ void quantize_row_fp8(ValueAt value_at, int n, float static_scale, std::uint8_t* q_row, float* scale_out) {
  float scale = static_scale;
  if (!(static_scale > 0.0f)) {  // uniform over the block: the block_max below is reached by all
    // fmaxf drops a NaN like std::fmax on the CPU, so a NaN never becomes the amax.
    float amax = 0.0f;
    for (int c = static_cast<int>(threadIdx.x); c < n; c += kBlock) amax = fmaxf(amax, fabsf(value_at(c)));
    amax = block_max(amax);
    // __fdiv_rn: IEEE round-to-nearest division whatever -prec-div says, as on the CPU.
    scale = amax > 0.0f ? __fdiv_rn(amax, kFp8E4M3Max) : 1.0f;
  }
  if (threadIdx.x == 0) *scale_out = scale;
  // A true division (not a multiply by 1/scale), then RNE to E4M3, saturating to +-448.
  for (int c = static_cast<int>(threadIdx.x); c < n; c += kBlock)
    q_row[c] = __nv_cvt_float_to_fp8(__fdiv_rn(value_at(c), scale), __NV_SATFINITE, __NV_E4M3);
}

// Host side: a negative count is a caller's bug; zero means nothing to launch.
inline void check_count(const char* op, const char* what, long long value) {
  if (value < 0) throw Error(op, std::string("expected ") + what + " >= 0, got " + std::to_string(value));
}

// Blocks for a grid-stride loop over n elements: enough to fill the device, never zero.
inline unsigned grid_stride_blocks(std::size_t n) {
  constexpr std::size_t kMaxBlocks = 4096;  // 1M threads in flight; the loop covers the rest
  const std::size_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

}  // namespace bestofn::cuda::rowops
