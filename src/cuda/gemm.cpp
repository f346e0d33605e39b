#include "cuda/gemm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cublas_loader.h"
#include "cuda/cuda_check.h"
#include "cuda/event_pair.h"

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

Gemm::Gemm(cudaStream_t stream, GemmAlgoCache* tune) : stream_(stream), tune_(tune) {
  require_cublas();  // loaded on first use: a missing library is a one-line error
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kGemmWorkspaceBytes));
  if (tune_) {
    int dev = 0;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    gpu_ = prop.name;
  }
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

Gemm::Plan& Gemm::plan(GemmInput type, int out, int in, int T) {
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
  Plan& p = plan(type, out, in, T);
  if (tune_ && !p.tuned) tune(p, type, w, x, y, out, in, T);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo, workspace_,
                              kGemmWorkspaceBytes, stream_));
}

void Gemm::tune(Plan& p, GemmInput type, const void* w, const void* x, float* y, int out, int in, int T) {
  p.tuned = true;  // whatever happens below, once per plan
  const std::string key = gemm_algo_key(gpu_, cublasLtGetVersion(), name(type), out, in, gemm_bucket(T));
  static_assert(sizeof(cublasLtMatmulAlgo_t::data) == sizeof(GemmAlgoWords));
  if (const auto words = tune_->find(key)) {
    cublasLtMatmulAlgo_t algo{};
    std::memcpy(algo.data, words->data(), sizeof algo.data);
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.d, p.d, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= kGemmWorkspaceBytes) {
      p.algo = algo;
      return;
    }
  }
  constexpr int kCandidates = 8, kRuns = 5;
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = kGemmWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const cublasStatus_t hst = st == CUBLAS_STATUS_SUCCESS
                                 ? cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, kCandidates, results, &found)
                                 : st;
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(hst);
  EventPair events;
  const float alpha = 1.0f, beta = 0.0f;
  float best_ms = 0.0f;
  bool have = false;
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    auto once = [&] {
      return cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &algo, workspace_, kGemmWorkspaceBytes,
                            stream_);
    };
    if (results[i].state != CUBLAS_STATUS_SUCCESS || once() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up, or not usable
    events.start(stream_);
    for (int r = 0; r < kRuns; ++r) CUBLAS_CHECK(once());
    events.stop(stream_);
    const float ms = events.elapsed_ms();
    if (!have || ms < best_ms) best_ms = ms, p.algo = algo, have = true;
  }
  if (!have) return;  // the heuristic's first choice (plan) stays
  GemmAlgoWords words{};
  std::memcpy(words.data(), p.algo.data, sizeof p.algo.data);
  tune_->put(key, words, 1000.0 * best_ms / kRuns);
}

}  // namespace bestofn::cuda
