// fp32 -> BF16, round to nearest even: the GPU twin of bestofn::bf16_from_float, bit for bit.
#include <cuda_bf16.h>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// x: (n), out: (n) BF16 bits; grid-stride loop.
__global__ void __launch_bounds__(kBlock) kernel_f32_to_bf16(const float* x, std::size_t n, std::uint16_t* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    const unsigned bits = __float_as_uint(v);
    // Finite values and infinities: __float2bfloat16_rn (cvt.rn.bf16.f32) is RNE like the CPU.
    // NaN: the hardware returns a canonical NaN, the CPU keeps sign and payload and sets the quiet
    // bit; do what the CPU does so that the two agree on every input.
    out[i] = (bits & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((bits >> 16) | 0x40u)
                                                : __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

void f32_to_bf16_cuda(const float* x, std::size_t n, std::uint16_t* out, cudaStream_t stream) {
  if (n == 0) return;
  kernel_f32_to_bf16<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(x, n, out);
  CUDA_CHECK(cudaGetLastError());
}

// out[i] = the float of BF16 x[i] (exact). grid-stride loop.
__global__ void __launch_bounds__(kBlock) kernel_bf16_to_f32(const std::uint16_t* x, std::size_t n, float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride)
    out[i] = __uint_as_float(static_cast<unsigned>(x[i]) << 16);
}

void bf16_to_f32_cuda(const std::uint16_t* x, std::size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  kernel_bf16_to_f32<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(x, n, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
