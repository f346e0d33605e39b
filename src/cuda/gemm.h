#pragma once
// Linear-layer GEMMs through cuBLASLt: y (T, out) = x (T, in) W^T, W (out, in) row-major, all
// row-major on the device, fp32 output. In cuBLASLt's column-major terms that is
// D (out x T) = op(A) B with A = W as an (in x out) matrix, transposed, and B = x^T (in x T): the
// "TN" layout Hopper's FP8 tensor cores require. FP8 inputs are E4M3 codes with unit scales; the
// caller applies the activation and weight scales in the epilogue kernel (scale_output_cuda), which
// covers per-tensor, per-channel and per-token scales alike.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace bestofn::cuda {

enum class GemmInput { F32, BF16, FP8 };  // the element type of both W and x

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Asynchronous on the stream. Throws bestofn::Error when cuBLASLt has no algorithm for the shape
  // (FP8 needs in and out to be multiples of 16).
  void run(GemmInput type, const void* w, const void* x, float* y, int out, int in, int T);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // Plans are made once per (type, out, in, T) from cuBLASLt's heuristic and cached.
  const Plan& plan(GemmInput type, int out, int in, int T);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::tuple<int, int, int, int>, Plan> plans_;
};

inline constexpr std::size_t kGemmWorkspaceBytes = 32u << 20;

}  // namespace bestofn::cuda
