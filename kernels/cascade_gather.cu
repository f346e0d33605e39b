// --cascade-attention: the step's queries gathered into prefix-group order and rounded to BF16, the
// input of FlashInfer's tensor-core prefill (kernels/cascade_attention.cu).
//
// The rounding this adds: the CPU engine scores the prefix with the F32 queries; here each query
// element is rounded to BF16 (round to nearest even, relative error <= 2^-9), so each prefix score
// q.k / sqrt(hd) moves by at most 2^-9 sum_i |q_i k_i| / sqrt(hd). The suffix side (cascade_merge_cuda)
// keeps the F32 queries. The parity tests take their tolerance from this (tests/test_gpu_ops_attention.cpp).
#include <cuda_bf16.h>

#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

// One block per output row; its n_heads x hd values from q row order[r].
__global__ void __launch_bounds__(256) kernel_gather_queries_bf16(const float* q, const int* order, int width, std::uint16_t* out) {
  const std::size_t r = blockIdx.x, w = static_cast<std::size_t>(width);
  const float* src = q + static_cast<std::size_t>(order[r]) * w;
  std::uint16_t* dst = out + r * w;
  for (int i = static_cast<int>(threadIdx.x); i < width; i += static_cast<int>(blockDim.x))
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

void gather_queries_bf16_cuda(const float* q, const int* order, int rows, int n_heads, int hd, std::uint16_t* out, cudaStream_t stream) {
  if (rows < 0 || n_heads <= 0 || hd <= 0)
    throw Error("gather_queries_bf16_cuda", "expected rows >= 0, n_heads > 0 and hd > 0, got " + std::to_string(rows) + ", " +
                                                std::to_string(n_heads) + ", " + std::to_string(hd));
  if (rows == 0) return;
  kernel_gather_queries_bf16<<<static_cast<unsigned>(rows), 256, 0, stream>>>(q, order, n_heads * hd, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
