// The FP8 GEMM's dequantization epilogue: y[t, o] = y[t, o] * sx[t] * sw[o or 0], evaluated left
// to right exactly as the store step of cpu::linear does (`v * sx[t] * w_scale[o]`), so that for
// the same GEMM output the result is bit-identical. Not sx * sw first: that rounds differently.
// Then a linear layer's bias (Qwen2's q/k/v), one rounded add after the scales as cpu::linear
// adds it: fused into the epilogue for FP8, its own kernel after a BF16 or F32 GEMM.
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// y: (T, out) in place, sx: (T) or null (1), sw: (out) when per_channel, else (1), bias: (out) or
// null; grid-stride.
__global__ void __launch_bounds__(kBlock)
    kernel_scale_output(float* y, std::size_t n, int out, const float* sx, const float* sw, bool per_channel, const float* bias) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    const std::size_t t = i / static_cast<std::size_t>(out), o = i % static_cast<std::size_t>(out);
    float v = y[i];
    if (sx) v = __fmul_rn(v, sx[t]);  // y * 1 is exact, so a null sx and sx = 1 agree
    v = __fmul_rn(v, sw[per_channel ? o : 0]);
    y[i] = bias ? __fadd_rn(v, bias[o]) : v;  // rounded apart: never contracted into an fma
  }
}

// y: (T, out) in place, bias: (out); grid-stride.
__global__ void __launch_bounds__(kBlock) kernel_bias_add(float* y, std::size_t n, int out, const float* bias) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride)
    y[i] += bias[i % static_cast<std::size_t>(out)];
}

void scale_output_cuda(float* y, int T, int out, const float* sx, const float* sw, bool per_channel, cudaStream_t stream,
                       const float* bias) {
  rowops::check_count("scale_output_cuda", "T", T);
  rowops::check_count("scale_output_cuda", "out", out);
  if (T == 0 || out == 0) return;
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(out);
  kernel_scale_output<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(y, n, out, sx, sw, per_channel, bias);
  CUDA_CHECK(cudaGetLastError());
}

void bias_add_cuda(float* y, int T, int out, const float* bias, cudaStream_t stream) {
  rowops::check_count("bias_add_cuda", "T", T);
  rowops::check_count("bias_add_cuda", "out", out);
  if (T == 0 || out == 0) return;
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(out);
  kernel_bias_add<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(y, n, out, bias);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
