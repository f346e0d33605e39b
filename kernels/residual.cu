// Residual add x += y: the GPU twin of the CPU engine's residual loops, bit for bit (one IEEE add).
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// x: (n) updated in place, y: (n); grid-stride loop.
__global__ void __launch_bounds__(kBlock) kernel_residual_add(float* x, const float* y, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) x[i] += y[i];
}

void residual_add_cuda(float* x, const float* y, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  kernel_residual_add<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(x, y, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
