// Embedding lookup: the GPU twin of cpu::embedding on the token-embedding table. One block per
// token; each element is copied (F32) or widened (BF16, exact), so the result is bit-identical.
#include <string>

#include "bestofn/util/dtype.h"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// table: (vocab, dim) of Elem, tokens: (T), out: (T, dim); grid = T, block = kBlock.
// Token ids are not checked here: the engine validates them on the host before the launch.
template <typename Elem>
__global__ void __launch_bounds__(kBlock) kernel_embedding(const Elem* table, const int* tokens, int dim, float* out) {
  const std::size_t t = blockIdx.x;
  const Elem* src = table + static_cast<std::size_t>(tokens[t]) * static_cast<std::size_t>(dim);  // (dim)
  float* dst = out + t * static_cast<std::size_t>(dim);                                           // (dim)
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += kBlock) dst[i] = rowops::widen(src[i]);
}

void embedding_cuda(const void* table, DType dtype, const int* tokens, int T, int dim, float* out, cudaStream_t stream) {
  rowops::check_count("embedding_cuda", "T", T);
  rowops::check_count("embedding_cuda", "dim", dim);
  if (T == 0 || dim == 0) return;
  const auto grid = static_cast<unsigned>(T);
  switch (dtype) {
    case DType::F32:
      kernel_embedding<<<grid, kBlock, 0, stream>>>(static_cast<const float*>(table), tokens, dim, out);
      break;
    case DType::BF16:
      kernel_embedding<<<grid, kBlock, 0, stream>>>(static_cast<const std::uint16_t*>(table), tokens, dim, out);
      break;
    default:
      throw Error("embedding_cuda", std::string("expected an F32 or BF16 table, got ") + std::string(dtype_name(dtype)));
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
