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
#include <string>
#include <tuple>

#include "cuda/gemm_algo_cache.h"

namespace bestofn::cuda {

enum class GemmInput { F32, BF16, FP8 };  // the element type of both W and x

class Gemm {
 public:
  // tune (GEMM autotuning): each shape's algorithm is measured at its first use (or taken from the
  // cache, keyed by GPU, cuBLASLt version, shape and token-count bucket) instead of the
  // heuristic's first choice. Null: the heuristic's first choice, nothing measured.
  explicit Gemm(cudaStream_t stream, GemmAlgoCache* tune = nullptr);
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
    bool tuned = false;
  };
  // Plans are made once per (type, out, in, T) from cuBLASLt's heuristic and cached.
  Plan& plan(GemmInput type, int out, int in, int T);
  // GEMM autotuning: p.algo from the cache when it passes cublasLtMatmulAlgoCheck for this shape,
  // else the fastest of the heuristic's candidates, timed on this call's own operands (y is
  // overwritten; the caller's run follows), and cached. Synchronizes the stream.
  void tune(Plan& p, GemmInput type, const void* w, const void* x, float* y, int out, int in, int T);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::tuple<int, int, int, int>, Plan> plans_;
  GemmAlgoCache* tune_ = nullptr;
  std::string gpu_;  // the device's name, for the cache key
};

inline constexpr std::size_t kGemmWorkspaceBytes = 32u << 20;

}  // namespace bestofn::cuda
