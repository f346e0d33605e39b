// The kernels around the shared-prefix GEMMs (--cuda-prefix-gemm; src/cuda/prefix_attention.cpp
// runs S = Q K^T and O = P V as cuBLAS strided-batched GEMMs, Hydragen, arXiv 2402.05099):
// gathering each prefix's queries into one matrix per KV head, the row softmax of S with its
// statistics, and the suffix attention per slot merged with the prefix state by log-sum-exp (also
// the merges of --cascade-attention, whose prefix state comes from kernels/cascade_attention.cu,
// and whose suffix states come from there too with --paged-kv: kernel_state_merge).
//
// State rows: the queries of prefix group g sit at rows base_g + kv * R_g + i * group + j (kv the
// KV head, i the slot within the group, j the query head within the KV head's group, R_g = slots
// x group). `map` (3T ints) gives per batch row t: base of its group, R of its group, i.
#include <cmath>
#include <string>

#include "attention.cuh"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;

}  // namespace

// qg (rows, hd): row state_row(t, h) = q (T, n_heads, hd) row (t, h). grid (n_heads, T).
__global__ void kernel_gather_prefix_queries(const float* q, const int* map, int T, int group, int hd, float* qg) {
  const int h = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y);
  const float* src = q + (static_cast<std::size_t>(t) * gridDim.x + static_cast<std::size_t>(h)) * static_cast<std::size_t>(hd);
  float* dst = qg + attn::state_row(map, T, t, h, group) * static_cast<std::size_t>(hd);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += static_cast<int>(blockDim.x)) dst[i] = src[i];
}

// Row r of s (rows, L): m[r] = max, s <- exp(s - m), l[r] = sum. One block per row.
__global__ void __launch_bounds__(kSoftmaxThreads) kernel_prefix_softmax(float* s, int L, float* m_out, float* l_out) {
  __shared__ float red[kSoftmaxThreads];
  float* row = s + static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(L);
  const int tid = static_cast<int>(threadIdx.x);
  float m = -INFINITY;
  for (int j = tid; j < L; j += kSoftmaxThreads) m = fmaxf(m, row[j]);
  red[tid] = m;
  __syncthreads();
  for (int w = kSoftmaxThreads / 2; w > 0; w >>= 1) {
    if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float l = 0.0f;
  for (int j = tid; j < L; j += kSoftmaxThreads) {
    const float e = expf(row[j] - m);
    row[j] = e;
    l += e;
  }
  red[tid] = l;
  __syncthreads();
  for (int w = kSoftmaxThreads / 2; w > 0; w >>= 1) {
    if (tid < w) red[tid] += red[tid + w];
    __syncthreads();
  }
  if (tid == 0) m_out[blockIdx.x] = m, l_out[blockIdx.x] = red[0];
}

// The prefix state at a state row: --cuda-prefix-gemm's (m, l, unnormalized O, F32), or
// --cascade-attention's (FlashInfer's base-2 log-sum-exp and normalized BF16 output), read as
// m = lse ln 2, l = 1, O the output: the same merge, since exp(lse ln 2 - M) = l' exp(m' - M) for
// the state (m', l') that lse summarizes.
struct GemmState {
  const float *m, *l, *o;
  __device__ float m_at(std::size_t sr) const { return m[sr]; }
  __device__ float l_at(std::size_t sr) const { return l[sr]; }
  __device__ float o_at(std::size_t sr, int hd, int i) const { return o[sr * static_cast<std::size_t>(hd) + static_cast<std::size_t>(i)]; }
};
struct CascadeState {
  const float* lse2;
  const std::uint16_t* o;
  __device__ float m_at(std::size_t sr) const { return lse2[sr] * 0.693147180559945309f; }
  __device__ float l_at(std::size_t) const { return 1.0f; }
  __device__ float o_at(std::size_t sr, int hd, int i) const {
    return attn::bf16_to_float(o[sr * static_cast<std::size_t>(hd) + static_cast<std::size_t>(i)]);
  }
};

// The suffix of each (t, h) by attn::attend_run, merged with the prefix state at state_row(t, h).
// grid (n_heads, T), block attn::kThreads.
template <KvFormat F, typename State>
__global__ void __launch_bounds__(attn::kThreads)
    kernel_prefix_merge(const float* q, const int* map, State prefix, const std::uint16_t* const* k_suffix,
                        const std::uint16_t* const* v_suffix, const int* suffix_len, int T, int group, int hd, std::size_t kv_dim,
                        float scale, float* out, const int* suffix_table, const int* suffix_table_start, int block) {
  __shared__ attn::Shared sh;
  __shared__ float o_s[attn::kMaxHeadDim];
  const int h = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y);
  const std::size_t row = static_cast<std::size_t>(t) * gridDim.x + static_cast<std::size_t>(h);
  float qr[attn::kPerLane];
  attn::load_query(q + row * static_cast<std::size_t>(hd), hd, qr);
  const attn::RunState ss = attn::attend_run<F>(qr, k_suffix[t], v_suffix[t], 0, max(suffix_len[t], 0), kv_dim, (h / group) * hd,
                                             hd, scale, sh, o_s,
                                             suffix_table ? suffix_table + suffix_table_start[t] : nullptr, block);
  const std::size_t sr = attn::state_row(map, T, t, h, group);
  const float mp = prefix.m_at(sr), lp = prefix.l_at(sr);
  const float m = fmaxf(mp, ss.m);
  const float a = attn::merge_weight(mp, m), b = attn::merge_weight(ss.m, m);
  const float denom = lp * a + ss.l * b;
  float* o = out + row * static_cast<std::size_t>(hd);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += attn::kThreads)
    o[i] = denom > 0.0f ? (prefix.o_at(sr, hd, i) * a + o_s[i] * b) / denom : 0.0f;
}

// The prefix state at state_row(t, h) and row t's suffix states, chunks c in [c0, c1) of (so, slse2)
// (normalized outputs, base-2 log-sum-exp: read as m = lse ln 2, l = 1, as CascadeState reads the
// prefix's; -inf: an empty chunk, weight 0), merged by log-sum-exp. grid (n_heads, T), block
// kMergeThreads; the chunks' weights are recomputed per element (1 or 2 chunks in practice).
constexpr int kMergeThreads = 128;
template <typename State>
__global__ void __launch_bounds__(kMergeThreads)
    kernel_state_merge(const int* map, State prefix, const float* so, const float* slse2, const int* chunk_indptr, int T, int group,
                       int hd, float* out) {
  const int h = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y), H = static_cast<int>(gridDim.x);
  const std::size_t sr = attn::state_row(map, T, t, h, group);
  const int c0 = chunk_indptr ? chunk_indptr[t] : t, c1 = chunk_indptr ? chunk_indptr[t + 1] : t + 1;
  auto m_of = [&](int c) { return slse2[static_cast<std::size_t>(c) * H + h] * 0.693147180559945309f; };
  const float mp = prefix.m_at(sr);
  float m = mp;
  for (int c = c0; c < c1; ++c) m = fmaxf(m, m_of(c));
  const float a = prefix.l_at(sr) * attn::merge_weight(mp, m);
  float denom = a;
  for (int c = c0; c < c1; ++c) denom += attn::merge_weight(m_of(c), m);
  float* o = out + (static_cast<std::size_t>(t) * H + static_cast<std::size_t>(h)) * static_cast<std::size_t>(hd);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += kMergeThreads) {
    float acc = prefix.o_at(sr, hd, i) * a;
    for (int c = c0; c < c1; ++c)
      acc += so[(static_cast<std::size_t>(c) * H + static_cast<std::size_t>(h)) * static_cast<std::size_t>(hd) + static_cast<std::size_t>(i)] *
             attn::merge_weight(m_of(c), m);
    o[i] = denom > 0.0f ? acc / denom : 0.0f;
  }
}

namespace {
void check_heads(const char* what, int T, int n_heads, int n_kv, int hd) {
  if (hd <= 0 || hd > attn::kMaxHeadDim)
    throw Error(what, "expected 1 <= head_dim <= " + std::to_string(attn::kMaxHeadDim) + ", got " + std::to_string(hd));
  if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0)
    throw Error(what, "expected n_heads a multiple of n_kv_heads, got " + std::to_string(n_heads) + " and " + std::to_string(n_kv));
  if (T < 0 || T > 65535) throw Error(what, "expected 0 <= T <= 65535 rows, got " + std::to_string(T));
}
}  // namespace

void gather_prefix_queries_cuda(const float* q, const int* map, int T, int n_heads, int n_kv, int hd, float* qg,
                                cudaStream_t stream) {
  check_heads("gather_prefix_queries_cuda", T, n_heads, n_kv, hd);
  if (T == 0) return;
  kernel_gather_prefix_queries<<<dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(T)), 128, 0, stream>>>(
      q, map, T, n_heads / n_kv, hd, qg);
  CUDA_CHECK(cudaGetLastError());
}

void prefix_softmax_cuda(float* s, int rows, int L, float* m, float* l, cudaStream_t stream) {
  if (rows < 0 || L <= 0) throw Error("prefix_softmax_cuda", "expected rows >= 0 and L > 0, got " + std::to_string(rows) + ", " + std::to_string(L));
  if (rows == 0) return;
  kernel_prefix_softmax<<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(s, L, m, l);
  CUDA_CHECK(cudaGetLastError());
}

namespace {
template <typename State>
void launch_merge(const char* what, const float* q, const int* map, State prefix, const std::uint16_t* const* k_suffix,
                  const std::uint16_t* const* v_suffix, const int* suffix_len, int T, int n_heads, int n_kv, int hd, float* out,
                  cudaStream_t stream, const int* suffix_table, const int* suffix_table_start, int block_tokens, KvFormat kv) {
  check_heads(what, T, n_heads, n_kv, hd);
  if (kv == KvFormat::FP8 && (static_cast<long long>(n_kv) * hd) % 4 != 0)
    throw Error(what, "FP8 rows need n_kv_heads x head_dim a multiple of 4, got " + std::to_string(n_kv * hd));
  if (suffix_table && (!suffix_table_start || block_tokens < 1))
    throw Error(what, "a suffix block table needs its row starts and block_tokens >= 1");
  if (T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));  // as the CPU: each step rounded in fp32
  const auto kernel = kv == KvFormat::FP8 ? kernel_prefix_merge<KvFormat::FP8, State> : kernel_prefix_merge<KvFormat::BF16, State>;
  kernel<<<dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(T)), attn::kThreads, 0, stream>>>(
      q, map, prefix, k_suffix, v_suffix, suffix_len, T, n_heads / n_kv, hd, static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd),
      scale, out, suffix_table, suffix_table_start, block_tokens);
  CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void prefix_merge_cuda(const float* q, const int* map, const float* prefix_m, const float* prefix_l, const float* prefix_o,
                       const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len, int T,
                       int n_heads, int n_kv, int hd, float* out, cudaStream_t stream, const int* suffix_table,
                       const int* suffix_table_start, int block_tokens, KvFormat kv) {
  launch_merge("prefix_merge_cuda", q, map, GemmState{prefix_m, prefix_l, prefix_o}, k_suffix, v_suffix, suffix_len, T, n_heads, n_kv,
               hd, out, stream, suffix_table, suffix_table_start, block_tokens, kv);
}

void cascade_merge_cuda(const float* q, const int* map, const float* prefix_lse2, const std::uint16_t* prefix_o,
                        const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len, int T,
                        int n_heads, int n_kv, int hd, float* out, cudaStream_t stream, const int* suffix_table,
                        const int* suffix_table_start, int block_tokens, KvFormat kv) {
  launch_merge("cascade_merge_cuda", q, map, CascadeState{prefix_lse2, prefix_o}, k_suffix, v_suffix, suffix_len, T, n_heads, n_kv,
               hd, out, stream, suffix_table, suffix_table_start, block_tokens, kv);
}

void cascade_state_merge_cuda(const int* map, const float* prefix_lse2, const std::uint16_t* prefix_o, const float* suffix_o,
                              const float* suffix_lse2, const int* chunk_indptr, int T, int n_heads, int n_kv, int hd, float* out,
                              cudaStream_t stream) {
  check_heads("cascade_state_merge_cuda", T, n_heads, n_kv, hd);
  if (T == 0) return;
  kernel_state_merge<<<dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(T)), kMergeThreads, 0, stream>>>(
      map, CascadeState{prefix_lse2, prefix_o}, suffix_o, suffix_lse2, chunk_indptr, T, n_heads / n_kv, hd, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
