// Shared-prefix decode attention as cuBLAS GEMMs (see prefix_attention.h for the precision). The
// GEMM arguments come from prefix_gemms (src/cuda/plan.h), which test_cuda_plan runs through a
// BLAS reference of the same pipeline against cpu::decode_attention. Column-major terms, for KV
// head kv of group g (batch index kv):
//   S^T (L x R) = K_kv (L x hd, ld kv_dim)  Q_kv^T (hd x R)  -> row-major S (R x L), ld L
//   O^T (hd x R) = V_kv^T (hd x L, ld kv_dim)  P^T (L x R)    -> row-major O (R x hd), ld hd
// K_kv starts at kv * hd in each cache row (batch stride hd); Q_kv, S and O batches are
// consecutive blocks of R rows (state rows base_g + kv R_g + r).
#include "cuda/prefix_attention.h"

#include <algorithm>
#include <cmath>

#include "bestofn/util/error.h"
#include "cuda/cublas_loader.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

// cuBLAS's recommended workspace on Hopper (cublasSetWorkspace).
constexpr std::size_t kWorkspaceBytes = 32u << 20;

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// One F32 strided-batched GEMM (CUBLAS_COMPUTE_32F; the handle's pedantic math rules out TF32).
void run_gemm(cublasHandle_t h, const StridedGemm& g, float alpha, const float* a, const float* b, float* c) {
  const float beta = 0.0f;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, &alpha, a, CUDA_R_32F, g.lda, g.stride_a, b,
                                          CUDA_R_32F, g.ldb, g.stride_b, &beta, c, CUDA_R_32F, g.ldc, g.stride_c, g.batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

PrefixAttention::PrefixAttention(cudaStream_t stream) : stream_(stream) {
  require_cublas();  // loaded on first use: a missing library is a one-line error
  CUBLAS_CHECK(cublasCreate(&handle_));
  CUBLAS_CHECK(cublasSetStream(handle_, stream_));
  // Pedantic: no TF32 and no reduced-precision reductions, whatever the environment says.
  CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));
  workspace_.resize(kWorkspaceBytes);
  CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.get(), kWorkspaceBytes));
}

PrefixAttention::~PrefixAttention() {
  if (handle_) cublasDestroy(handle_);
}

void PrefixAttention::run(const float* q, const PrefixStateMap& plan, const int* d_map, const std::vector<Group>& groups,
                          const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len,
                          int T, int n_heads, int n_kv, int hd, float* out, const int* suffix_table,
                          const int* suffix_table_start, int block_tokens, int tiled_splits, float* partial, KvFormat kv) {
  reserve(plan, groups, n_kv, hd);
  const auto D = static_cast<std::size_t>(hd);
  gather_prefix_queries_cuda(q, d_map, T, n_heads, n_kv, hd, qg_.get<float>(), stream_);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int L = groups[g].len, R = plan.R[g];
    if (L <= 0) throw Error("PrefixAttention::run", "an empty prefix");
    const std::size_t first = static_cast<std::size_t>(plan.base[g]);
    float* S = s_.get<float>();
    const PrefixGemms gemms = prefix_gemms(L, R, n_kv, hd);
    // S = (Q K^T) * scale, the scale as alpha (the CPU multiplies each finished dot product by it).
    run_gemm(handle_, gemms.scores, scale, groups[g].k, qg_.get<float>() + first * D, S);
    // P = exp(S - m) in place; m, l per state row.
    prefix_softmax_cuda(S, n_kv * R, L, m_.get<float>() + first, l_.get<float>() + first, stream_);
    // O = P V, unnormalized.
    run_gemm(handle_, gemms.values, 1.0f, groups[g].v, S, o_.get<float>() + first * D);
  }
  if (tiled_splits > 0) {
    TiledAttentionArgs a;
    a.q = q, a.k_suffix = k_suffix, a.v_suffix = v_suffix, a.suffix_len = suffix_len;
    a.T = T, a.n_heads = n_heads, a.n_kv = n_kv, a.hd = hd, a.out = out;
    a.suffix_table = suffix_table, a.suffix_table_start = suffix_table_start, a.block_tokens = block_tokens;
    a.splits = tiled_splits, a.partial = partial, a.kv = kv;
    a.prefix_map = d_map, a.prefix_m = m_.get<float>(), a.prefix_l = l_.get<float>(), a.prefix_o = o_.get<float>();
    decode_attention_tiled_cuda(a, stream_);
    return;
  }
  prefix_merge_cuda(q, d_map, m_.get<float>(), l_.get<float>(), o_.get<float>(), k_suffix, v_suffix, suffix_len, T, n_heads,
                    n_kv, hd, out, stream_, suffix_table, suffix_table_start, block_tokens, kv);
}

void PrefixAttention::reserve(const PrefixStateMap& plan, const std::vector<Group>& groups, int n_kv, int hd) {
  if (groups.size() != plan.base.size()) throw Error("PrefixAttention::run", "groups and plan disagree");
  const auto rows = static_cast<std::size_t>(plan.rows), D = static_cast<std::size_t>(hd);
  std::size_t s_floats = 1;
  for (std::size_t g = 0; g < groups.size(); ++g)
    s_floats = std::max(s_floats, static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(plan.R[g]) *
                                      static_cast<std::size_t>(std::max(groups[g].len, 1)));
  qg_.resize(rows * D * 4), o_.resize(rows * D * 4), m_.resize(rows * 4), l_.resize(rows * 4), s_.resize(s_floats * 4);
}

void PrefixAttention::reserve_for(std::size_t state_rows, std::size_t longest, int hd) {
  const auto D = static_cast<std::size_t>(hd);
  qg_.resize(state_rows * D * 4), o_.resize(state_rows * D * 4), m_.resize(state_rows * 4), l_.resize(state_rows * 4);
  s_.resize(std::max<std::size_t>(state_rows * longest, 1) * 4);
}

void PrefixAttention::add_to_key(GraphKey& key) const {
  for (const DeviceBuffer* b : {&qg_, &s_, &m_, &l_, &o_}) key.push_back(key_address(b->get()));
}

}  // namespace bestofn::cuda
