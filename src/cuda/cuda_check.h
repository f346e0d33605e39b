#pragma once
// CUDA_CHECK / CUBLAS_CHECK: every CUDA runtime and cuBLASLt call in the library goes through one
// of these. A failure throws bestofn::Error naming the failed expression, where it was called and
// the runtime's own message, e.g.
//   src/cuda/cuda_device.cpp:42: CUDA error: cudaMalloc(&p, n) failed: out of memory (cudaErrorMemoryAllocation)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "bestofn/util/error.h"

namespace bestofn::cuda::detail {

[[noreturn]] inline void throw_cuda_error(const char* expr, const char* file, int line, cudaError_t err) {
  throw Error(std::string(file) + ":" + std::to_string(line),
              std::string("CUDA error: ") + expr + " failed: " + cudaGetErrorString(err) + " (" +
                  cudaGetErrorName(err) + ")");
}

[[noreturn]] inline void throw_cublas_error(const char* expr, const char* file, int line, cublasStatus_t status) {
  throw Error(std::string(file) + ":" + std::to_string(line),
              std::string("cuBLAS error: ") + expr + " failed: " + cublasLtGetStatusString(status) + " (" +
                  cublasLtGetStatusName(status) + ")");
}

}  // namespace bestofn::cuda::detail

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t bestofn_cuda_err_ = (expr);                                         \
    if (bestofn_cuda_err_ != cudaSuccess)                                                 \
      ::bestofn::cuda::detail::throw_cuda_error(#expr, __FILE__, __LINE__, bestofn_cuda_err_); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                         \
    const cublasStatus_t bestofn_cublas_status_ = (expr);                                      \
    if (bestofn_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::bestofn::cuda::detail::throw_cublas_error(#expr, __FILE__, __LINE__, bestofn_cublas_status_); \
  } while (0)
