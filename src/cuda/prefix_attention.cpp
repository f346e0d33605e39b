// Shared-prefix decode attention as cuBLAS GEMMs (see prefix_attention.h for the layout and the
// precision). Column-major terms: for KV head kv of group g (batch index kv),
//   S^T (L x R) = K_kv (L x hd, ld kv_dim)  Q_kv^T (hd x R)  -> row-major S (R x L), ld L
//   O^T (hd x R) = V_kv^T (hd x L, ld kv_dim)  P^T (L x R)    -> row-major O (R x hd), ld hd
// K_kv starts at kv * hd in each cache row (batch stride hd); Q_kv, S and O batches are
// consecutive blocks of R rows (state rows base_g + kv R_g + r).
#include "cuda/prefix_attention.h"

#include <algorithm>
#include <cmath>

#include "bestofn/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

PrefixAttention::PrefixAttention(cudaStream_t stream) : stream_(stream) {
  CUBLAS_CHECK(cublasCreate(&handle_));
  CUBLAS_CHECK(cublasSetStream(handle_, stream_));
  // Pedantic: no TF32 and no reduced-precision reductions, whatever the environment says.
  CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));
}

PrefixAttention::~PrefixAttention() {
  if (handle_) cublasDestroy(handle_);
}

void PrefixAttention::run(const float* q, const PrefixStateMap& plan, const int* d_map, const std::vector<Group>& groups,
                          const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len,
                          int T, int n_heads, int n_kv, int hd, float* out) {
  if (groups.size() != plan.base.size()) throw Error("PrefixAttention::run", "groups and plan disagree");
  const auto rows = static_cast<std::size_t>(plan.rows), D = static_cast<std::size_t>(hd);
  std::size_t s_floats = 1;
  for (std::size_t g = 0; g < groups.size(); ++g)
    s_floats = std::max(s_floats, static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(plan.R[g]) *
                                      static_cast<std::size_t>(std::max(groups[g].len, 1)));
  qg_.resize(rows * D * 4), o_.resize(rows * D * 4), m_.resize(rows * 4), l_.resize(rows * 4), s_.resize(s_floats * 4);
  gather_prefix_queries_cuda(q, d_map, T, n_heads, n_kv, hd, qg_.get<float>(), stream_);
  const int kv_dim = n_kv * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd)), one = 1.0f, zero = 0.0f;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int L = groups[g].len, R = plan.R[g];
    if (L <= 0) throw Error("PrefixAttention::run", "an empty prefix");
    const std::size_t first = static_cast<std::size_t>(plan.base[g]);
    float* S = s_.get<float>();
    // S = (Q K^T) * scale, the scale as alpha (the CPU multiplies each finished dot product by it).
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, L, R, hd, &scale, groups[g].k, CUDA_R_32F,
                                            kv_dim, hd, qg_.get<float>() + first * D, CUDA_R_32F, hd,
                                            static_cast<long long>(R) * hd, &zero, S, CUDA_R_32F, L,
                                            static_cast<long long>(R) * L, n_kv, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    // P = exp(S - m) in place; m, l per state row.
    prefix_softmax_cuda(S, n_kv * R, L, m_.get<float>() + first, l_.get<float>() + first, stream_);
    // O = P V, unnormalized.
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, hd, R, L, &one, groups[g].v, CUDA_R_32F,
                                            kv_dim, hd, S, CUDA_R_32F, L, static_cast<long long>(R) * L, &zero,
                                            o_.get<float>() + first * D, CUDA_R_32F, hd, static_cast<long long>(R) * hd, n_kv,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  prefix_merge_cuda(q, d_map, m_.get<float>(), l_.get<float>(), o_.get<float>(), k_suffix, v_suffix, suffix_len, T, n_heads,
                    n_kv, hd, out, stream_);
}

}  // namespace bestofn::cuda
