#include "cuda/gemm.h"

#include <string>

#include "bestofn/error.h"
#include "cuda/cuda_check.h"

namespace bestofn::cuda {
namespace {

cudaDataType_t data_type(GemmInput t) {
  switch (t) {
    case GemmInput::FP8: return CUDA_R_8F_E4M3;
    case GemmInput::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

const char* name(GemmInput t) { return t == GemmInput::FP8 ? "FP8 E4M3" : t == GemmInput::BF16 ? "BF16" : "F32"; }

}  // namespace

Gemm::Gemm(cudaStream_t stream) : stream_(stream) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kGemmWorkspaceBytes));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

const Gemm::Plan& Gemm::plan(GemmInput type, int out, int in, int T) {
  const auto key = std::make_tuple(static_cast<int>(type), out, in, T);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan p;
  // fp32 accumulation and output, never TF32: the CPU engine is the oracle.
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  const cudaDataType_t dt = data_type(type);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, dt, static_cast<std::uint64_t>(in), static_cast<std::uint64_t>(out), in));  // W
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, dt, static_cast<std::uint64_t>(in), static_cast<std::uint64_t>(T), in));    // x^T
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, static_cast<std::uint64_t>(out), static_cast<std::uint64_t>(T), out));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = kGemmWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
    throw Error(std::string("cuBLASLt has no ") + name(type) + " GEMM for out " + std::to_string(out) + ", in " +
                std::to_string(in) + ", tokens " + std::to_string(T) + (type == GemmInput::FP8 ? " (FP8 needs multiples of 16)" : "") +
                ": " + cublasLtGetStatusString(st));
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(GemmInput type, const void* w, const void* x, float* y, int out, int in, int T) {
  if (T == 0) return;
  const Plan& p = plan(type, out, in, T);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo, workspace_,
                              kGemmWorkspaceBytes, stream_));
}

}  // namespace bestofn::cuda
