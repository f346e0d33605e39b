// The FP8 GEMM's dequantization epilogue: y[t, o] = y[t, o] * sx[t] * sw[o or 0], evaluated left
// to right exactly as the store step of cpu::linear does (`v * sx[t] * w_scale[o]`), so that for
// the same GEMM output the result is bit-identical. Not sx * sw first: that rounds differently.
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// y: (T, out) in place, sx: (T) or null (1), sw: (out) when per_channel, else (1); grid-stride.
__global__ void __launch_bounds__(kBlock)
    kernel_scale_output(float* y, std::size_t n, int out, const float* sx, const float* sw, bool per_channel) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    const std::size_t t = i / static_cast<std::size_t>(out), o = i % static_cast<std::size_t>(out);
    float v = y[i];
    if (sx) v = v * sx[t];  // y * 1 is exact, so a null sx and sx = 1 agree
    y[i] = v * sw[per_channel ? o : 0];
  }
}

void scale_output_cuda(float* y, int T, int out, const float* sx, const float* sw, bool per_channel, cudaStream_t stream) {
  rowops::check_count("scale_output_cuda", "T", T);
  rowops::check_count("scale_output_cuda", "out", out);
  if (T == 0 || out == 0) return;
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(out);
  kernel_scale_output<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(y, n, out, sx, sw, per_channel);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
