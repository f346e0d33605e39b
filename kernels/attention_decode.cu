// Decode attention: the GPU twin of cpu::decode_attention (src/cpu/attention.cpp), which repeats
// CpuEngine::attend_decode. Each query row attends over its prefix (the prompt's cache rows,
// shared by the slots of a prompt) and its own suffix separately; the two softmaxes merge by
// log-sum-exp (Hydragen, arXiv 2402.05099; FlashInfer's cascade attention).
//
// Simple first: one block per (row t, query head h), so the prefix K/V are read once per query
// head, not once per prefix and KV head as the CPU's matrix form does (--cuda-prefix-gemm does
// that). When T x n_heads blocks cannot fill the GPU (few candidates), each row's positions are
// split over several blocks (flash-decoding) and their states merged by a second kernel, or (with
// merge counters) by the last of a row's blocks to finish, in the same launch.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "attention.cuh"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

// q (T, n_heads, hd); k_prefix / v_prefix / k_suffix / v_suffix (T) pointers to len cache rows of
// format F (kv_row_bytes each); prefix_len / suffix_len (T); out (T, n_heads, hd). With suffix_table (--paged-kv),
// the suffix rows are blocks of a pool at k_suffix[t] / v_suffix[t], row t's block table at
// suffix_table + suffix_table_start[t]. grid = (n_heads, T, splits), block = attn::kThreads.
// splits == 1: the block attends over everything and writes out. splits > 1 (flash-decoding):
// block z takes the z-th of `splits` contiguous chunks of the prefix and of the suffix and writes
// its state (m, l, unnormalized o) to partial[(row * splits + z) * (hd + 2)]; kernel_decode_merge
// finishes.
template <KvFormat F>
__global__ void __launch_bounds__(attn::kThreads)
    kernel_decode_attention(const float* q, const std::uint16_t* const* k_prefix, const std::uint16_t* const* v_prefix,
                            const int* prefix_len, const std::uint16_t* const* k_suffix,
                            const std::uint16_t* const* v_suffix, const int* suffix_len, int group, int hd,
                            std::size_t kv_dim, float scale, float* out, const int* suffix_table,
                            const int* suffix_table_start, int block, float* partial, int* merge_counters) {
  __shared__ attn::Shared sh;
  __shared__ float o_p[attn::kMaxHeadDim], o_s[attn::kMaxHeadDim];  // unnormalized outputs
  const int h = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y);
  const int z = static_cast<int>(blockIdx.z), splits = static_cast<int>(gridDim.z);
  const std::size_t row = static_cast<std::size_t>(t) * gridDim.x + static_cast<std::size_t>(h);
  const int off = (h / group) * hd;  // the KV head's slice of a cache row
  float qr[attn::kPerLane];
  attn::load_query(q + row * static_cast<std::size_t>(hd), hd, qr);

  int pb, pe, sb, se;  // this block's chunks of the prefix and of the suffix
  attn::chunk_of(max(prefix_len[t], 0), z, splits, pb, pe);
  attn::chunk_of(max(suffix_len[t], 0), z, splits, sb, se);
  // prefix: (m_p, l_p, O_p); suffix: (m_s, l_s, O_s)
  const attn::RunState sp = attn::attend_run<F>(qr, k_prefix[t], v_prefix[t], pb, pe, kv_dim, off, hd, scale, sh, o_p);
  const attn::RunState ss = attn::attend_run<F>(qr, k_suffix[t], v_suffix[t], sb, se, kv_dim, off, hd, scale, sh, o_s,
                                             suffix_table ? suffix_table + suffix_table_start[t] : nullptr, block);

  // o = (O_p a + O_s b) / (l_p a + l_s b), a = exp(m_p - m), b = exp(m_s - m); zeros when both
  // sides are empty.
  const float m = fmaxf(sp.m, ss.m);
  const float a = attn::merge_weight(sp.m, m), b = attn::merge_weight(ss.m, m);
  const float denom = sp.l * a + ss.l * b;
  if (splits == 1) {
    float* o = out + row * static_cast<std::size_t>(hd);
    for (int i = static_cast<int>(threadIdx.x); i < hd; i += attn::kThreads)
      o[i] = denom > 0.0f ? (o_p[i] * a + o_s[i] * b) / denom : 0.0f;
    return;
  }
  float* st = partial + (row * static_cast<std::size_t>(splits) + static_cast<std::size_t>(z)) * static_cast<std::size_t>(hd + 2);
  if (threadIdx.x == 0) st[0] = m, st[1] = denom;
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += attn::kThreads) st[2 + i] = o_p[i] * a + o_s[i] * b;
  // In-kernel merge: the last of the row's blocks merges the states (kernel_decode_merge's numbers).
  if (merge_counters && attn::last_chunk_block(merge_counters + row, splits)) {
    attn::merge_chunk_states(partial + row * static_cast<std::size_t>(splits) * static_cast<std::size_t>(hd + 2), splits, hd,
                             out + row * static_cast<std::size_t>(hd), static_cast<int>(threadIdx.x), attn::kThreads);
    if (threadIdx.x == 0) merge_counters[row] = 0;
  }
}

// The `splits` chunk states of each (t, h), merged by log-sum-exp in chunk order. grid (n_heads, T).
__global__ void kernel_decode_merge(const float* partial, int splits, int hd, float* out) {
  const std::size_t row = static_cast<std::size_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  attn::merge_chunk_states(partial + row * static_cast<std::size_t>(splits) * static_cast<std::size_t>(hd + 2), splits, hd,
                           out + row * static_cast<std::size_t>(hd), static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

int decode_attention_splits(int T, int blocks_per_row, int sm_count) {
  if (T <= 0 || blocks_per_row <= 0) return 1;
  // About two blocks per SM in all, at most kMaxDecodeSplits chunks per row.
  const long long want = 2LL * std::max(sm_count, 1);
  const long long blocks = static_cast<long long>(T) * blocks_per_row;
  const long long s = (want + blocks - 1) / blocks;
  return static_cast<int>(std::clamp<long long>(s, 1, kMaxDecodeSplits));
}

std::size_t decode_attention_workspace_floats(int T, int n_heads, int hd, int splits) {
  return splits <= 1 ? 0
                     : static_cast<std::size_t>(T) * static_cast<std::size_t>(n_heads) * static_cast<std::size_t>(splits) *
                           static_cast<std::size_t>(hd + 2);
}

void decode_attention_cuda(const float* q, const std::uint16_t* const* k_prefix, const std::uint16_t* const* v_prefix,
                           const int* prefix_len, const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix,
                           const int* suffix_len, int T, int n_heads, int n_kv, int hd, float* out, cudaStream_t stream,
                           const int* suffix_table, const int* suffix_table_start, int block_tokens, int splits,
                           float* workspace, KvFormat kv, int* merge_counters) {
  if (hd <= 0 || hd > attn::kMaxHeadDim)
    throw Error("decode_attention_cuda", "expected 1 <= head_dim <= " + std::to_string(attn::kMaxHeadDim) + ", got " +
                                             std::to_string(hd));
  if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0)
    throw Error("decode_attention_cuda", "expected n_heads a multiple of n_kv_heads, got " + std::to_string(n_heads) +
                                             " and " + std::to_string(n_kv));
  if (T < 0 || T > 65535)  // the grid's y dimension
    throw Error("decode_attention_cuda", "expected 0 <= T <= 65535 rows, got " + std::to_string(T));
  if (suffix_table && (!suffix_table_start || block_tokens < 1))
    throw Error("decode_attention_cuda", "a suffix block table needs its row starts and block_tokens >= 1, got " +
                                             std::to_string(block_tokens));
  if (splits < 1 || splits > kMaxDecodeSplits || (splits > 1 && !workspace))
    throw Error("decode_attention_cuda", "expected 1 <= splits <= " + std::to_string(kMaxDecodeSplits) +
                                             " (and a workspace when > 1), got " + std::to_string(splits));
  if (kv == KvFormat::FP8 && (static_cast<long long>(n_kv) * hd) % 4 != 0)
    throw Error("decode_attention_cuda", "FP8 rows need n_kv_heads x head_dim a multiple of 4 (4-byte aligned scales), got " +
                            std::to_string(n_kv * hd));
  if (T == 0) return;
  // The same float scale as the CPU: 1 / sqrt(hd), each step rounded in fp32.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(T), static_cast<unsigned>(splits));
  const auto kernel = kv == KvFormat::FP8 ? kernel_decode_attention<KvFormat::FP8> : kernel_decode_attention<KvFormat::BF16>;
  kernel<<<grid, attn::kThreads, 0, stream>>>(q, k_prefix, v_prefix, prefix_len, k_suffix, v_suffix, suffix_len, n_heads / n_kv,
                                              hd, static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd), scale, out,
                                              suffix_table, suffix_table_start, block_tokens, workspace,
                                              splits > 1 ? merge_counters : nullptr);
  CUDA_CHECK(cudaGetLastError());
  if (splits > 1 && !merge_counters) decode_merge_cuda(workspace, T, n_heads, hd, splits, out, stream);
}

void decode_merge_cuda(const float* partial, int T, int n_heads, int hd, int splits, float* out, cudaStream_t stream) {
  if (T == 0) return;
  kernel_decode_merge<<<dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(T)), 128, 0, stream>>>(partial, splits, hd, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
