// Decode attention, tiled per KV head (--split-attention): the twin of cpu::decode_attention, as
// kernels/attention_decode.cu, but one block per (row t, KV head, chunk of positions) serves all
// the query heads of that KV head (GQA), so each K/V row is read once per KV head instead of once
// per query head, and positions go in tiles of kTile:
//   1. each thread computes whole dot products q_h . k_j (one cache row, 16-byte loads: 8 BF16
//      values or 16 FP8 codes, four partial sums);
//   2. one warp per query head takes the tile's max, rescales its running state (online softmax,
//      Milakov & Gimelshein) and turns the scores into exp(s - m);
//   3. each thread owns output dimensions and accumulates p_j v_j over the tile (coalesced rows).
// The prefix and the suffix run through one running state (the CPU merges two softmaxes by
// log-sum-exp; the same sum, another rounding). With a prefix state (--cuda-prefix-gemm: m, l and
// the unnormalized O of the prefix from the GEMMs) chunk 0 starts from it and the prefix is not
// read here. More than one chunk per row (few rows): the chunk states go to `partial` and
// kernel_decode_merge (attention_decode.cu) finishes, as for the plain kernel split over positions, or with
// merge counters the last block of each (row, KV head) to finish merges in the same launch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "attention.cuh"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

constexpr int kTile = 64;
constexpr int kTiledThreads = 128;
constexpr int kTiledWarps = kTiledThreads / 32;
constexpr int kDimsPerThread = attn::kMaxHeadDim / kTiledThreads;  // 2
constexpr int kPvBatch = 8;

struct Shared {
  float q[kMaxTiledGroup * attn::kMaxHeadDim];  // the group's queries
  float p[kMaxTiledGroup][kTile];               // scores, then exp(s - m)
  const std::uint16_t* k[kTile];  // the head slice of each row (a byte address for FP8 rows)
  const std::uint16_t* v[kTile];
  float ks[kTile], vs[kTile];       // FP8 rows: their scales for this KV head
  float m[kMaxTiledGroup], l[kMaxTiledGroup], corr[kMaxTiledGroup];
};

// q . k for BF16 rows (dot_row below).
__device__ __forceinline__ float dot_row_bf16(const float* q, const std::uint16_t* k, int hd) {
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (hd % 8 == 0 && (reinterpret_cast<std::uintptr_t>(k) & 15) == 0) {
#pragma unroll 4
    for (int i = 0; i < hd; i += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(k + i);
      const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        d[u] += q[i + 2 * u] * __uint_as_float(w[u] << 16);
        d[u] += q[i + 2 * u + 1] * __uint_as_float(w[u] & 0xffff0000u);
      }
    }
  } else {
    for (int i = 0; i < hd; ++i) d[(i / 2) % 4] += q[i] * attn::bf16_to_float(k[i]);
  }
  return (d[0] + d[1]) + (d[2] + d[3]);
}

// q . k over hd elements: four partial sums (element i goes to sum (i / 2) % 4), so that four
// chains of FMAs and several loads are in flight at once; then (s0 + s1) + (s2 + s3).
// FP8 rows: k_i = fp8(code_i) * scale, into the same partial sums in the same order.
template <KvFormat F>
__device__ __forceinline__ float dot_row(const float* q, const std::uint16_t* k, float scale, int hd) {
  if constexpr (F == KvFormat::FP8) {
    const auto* c = reinterpret_cast<const std::uint8_t*>(k);
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (hd % 16 == 0 && (reinterpret_cast<std::uintptr_t>(c) & 15) == 0) {
      // 16 codes per load; code i + b goes to sum (b / 2) % 4, the order of the loop below.
#pragma unroll 2
      for (int i = 0; i < hd; i += 16) {
        const uint4 raw = *reinterpret_cast<const uint4*>(c + i);
        const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int b = 0; b < 16; ++b) {
          const auto code = static_cast<std::uint8_t>(w[b / 4] >> (8 * (b % 4)));
          d[(b / 2) % 4] += q[i + b] * (attn::fp8_e4m3_to_float(code) * scale);
        }
      }
    } else {
      for (int i = 0; i < hd; ++i) d[(i / 2) % 4] += q[i] * (attn::fp8_e4m3_to_float(c[i]) * scale);
    }
    return (d[0] + d[1]) + (d[2] + d[3]);
  } else {
    (void)scale;
    return dot_row_bf16(q, k, hd);
  }
}


// Attends the block's query heads over positions [b, e) of one run (K/V with optional block
// table), updating the running state in sh (m, l) and acc (this thread's dimensions).
template <KvFormat F>
__device__ __forceinline__ void attend_tiles(Shared& sh, float (&acc)[kMaxTiledGroup][kDimsPerThread], const std::uint16_t* K,
                             const std::uint16_t* V, int b, int e, std::size_t kv_dim, int off, int group, int hd, float scale,
                             const int* table, int block) {
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  for (int t0 = b; t0 < e; t0 += kTile) {
    const int cnt = min(kTile, e - t0);
    if (tid < cnt) {
      const int j = t0 + tid;
      const std::size_t r = table ? static_cast<std::size_t>(table[j / block]) * static_cast<std::size_t>(block) +
                                        static_cast<std::size_t>(j % block)
                                  : static_cast<std::size_t>(j);
      const attn::KvRow<F> kr(K, r, kv_dim, off, hd), vr(V, r, kv_dim, off, hd);
      sh.k[tid] = static_cast<const std::uint16_t*>(kr.row), sh.ks[tid] = kr.scale;
      sh.v[tid] = static_cast<const std::uint16_t*>(vr.row), sh.vs[tid] = vr.scale;
    }
    __syncthreads();
    for (int idx = tid; idx < group * cnt; idx += kTiledThreads) {
      const int h = idx / cnt, j = idx % cnt;
      sh.p[h][j] = dot_row<F>(sh.q + h * hd, sh.k[j], sh.ks[j], hd) * scale;
    }
    __syncthreads();
    for (int h = warp; h < group; h += kTiledWarps) {
      float mx = -INFINITY;
      for (int j = lane; j < cnt; j += 32) mx = fmaxf(mx, sh.p[h][j]);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sh.m[h], m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int j = lane; j < cnt; j += 32) {
        const float p = expf(sh.p[h][j] - m_new);
        sh.p[h][j] = p;
        sum += p;
      }
      sum = attn::warp_sum(sum);
      if (lane == 0) {
        const float corr = attn::merge_weight(m_old, m_new);  // 0 while the state is empty
        sh.corr[h] = corr;
        sh.l[h] = sh.l[h] * corr + sum;
        sh.m[h] = m_new;
      }
    }
    __syncthreads();
    // acc is indexed with constants only (unrolled, bounded by kMaxTiledGroup): it stays in registers.
#pragma unroll
    for (int h = 0; h < kMaxTiledGroup; ++h)
      if (h < group)
#pragma unroll
        for (int u = 0; u < kDimsPerThread; ++u) acc[h][u] *= sh.corr[h];
    // p_j v_j, kPvBatch positions at a time: their loads are issued before the FMAs use them
    // (the sum still goes position by position).
    for (int j0 = 0; j0 < cnt; j0 += kPvBatch) {
      float x[kPvBatch][kDimsPerThread];
#pragma unroll
      for (int jj = 0; jj < kPvBatch; ++jj)
#pragma unroll
        for (int u = 0; u < kDimsPerThread; ++u) {
          const int d = tid + u * kTiledThreads;
          if (j0 + jj >= cnt || d >= hd) x[jj][u] = 0.0f;
          else if constexpr (F == KvFormat::FP8)
            x[jj][u] = attn::fp8_e4m3_to_float(reinterpret_cast<const std::uint8_t*>(sh.v[j0 + jj])[d]) * sh.vs[j0 + jj];
          else
            x[jj][u] = attn::bf16_to_float(sh.v[j0 + jj][d]);
        }
#pragma unroll
      for (int jj = 0; jj < kPvBatch; ++jj) {
        if (j0 + jj >= cnt) break;
#pragma unroll
        for (int h = 0; h < kMaxTiledGroup; ++h)
          if (h < group) {
            const float p = sh.p[h][j0 + jj];
#pragma unroll
            for (int u = 0; u < kDimsPerThread; ++u) acc[h][u] += p * x[jj][u];
          }
      }
    }
    __syncthreads();  // sh.p, sh.k and sh.v are reused by the next tile
  }
}

// The in-kernel merge of a block: if it is the last of its row and KV head's `splits` blocks to
// finish (counter), the chunk states of the group's query heads (partial, consecutive) merged into
// out. Not inlined: inlined, ptxas kept its registers live across the tile loop (72 registers and
// spills, against 64 without the merge).
__device__ __noinline__ void merge_if_last(int* counter, const float* partial, float* out, int hd, int group, int splits) {
  if (!attn::last_chunk_block(counter, splits)) return;
  for (int h = 0; h < group; ++h)
    attn::merge_chunk_states(partial + static_cast<std::size_t>(h) * static_cast<std::size_t>(splits) * static_cast<std::size_t>(hd + 2), splits,
                             hd, out + static_cast<std::size_t>(h) * static_cast<std::size_t>(hd), static_cast<int>(threadIdx.x), kTiledThreads);
  if (threadIdx.x == 0) *counter = 0;
}

// grid (n_kv, T, splits), block kTiledThreads.
template <KvFormat F>
__global__ void __launch_bounds__(kTiledThreads) kernel_decode_attention_tiled(TiledAttentionArgs a, int group, std::size_t kv_dim,
                                                                                float scale) {
  __shared__ Shared sh;
  const int g = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y);
  const int z = static_cast<int>(blockIdx.z), splits = static_cast<int>(gridDim.z);
  const int tid = static_cast<int>(threadIdx.x), hd = a.hd;
  const std::size_t head0 = static_cast<std::size_t>(t) * static_cast<std::size_t>(a.n_heads) + static_cast<std::size_t>(g * group);
  for (int i = tid; i < group * hd; i += kTiledThreads) sh.q[i] = a.q[head0 * static_cast<std::size_t>(hd) + static_cast<std::size_t>(i)];
  float acc[kMaxTiledGroup][kDimsPerThread];
#pragma unroll
  for (int h = 0; h < kMaxTiledGroup; ++h)
#pragma unroll
    for (int u = 0; u < kDimsPerThread; ++u) acc[h][u] = 0.0f;
  if (tid < group) {
    sh.m[tid] = -INFINITY, sh.l[tid] = 0.0f;
    if (a.prefix_m && z == 0) {  // chunk 0 starts from the prefix GEMMs' state
      const std::size_t sr = attn::state_row(a.prefix_map, a.T, t, g * group + tid, group);
      sh.m[tid] = a.prefix_m[sr], sh.l[tid] = a.prefix_l[sr];
    }
  }
  if (a.prefix_m && z == 0)
#pragma unroll
    for (int h = 0; h < kMaxTiledGroup; ++h) {
      if (h >= group) break;
      const float* o = a.prefix_o + attn::state_row(a.prefix_map, a.T, t, g * group + h, group) * static_cast<std::size_t>(hd);
#pragma unroll
      for (int u = 0; u < kDimsPerThread; ++u) {
        const int d = tid + u * kTiledThreads;
        if (d < hd) acc[h][u] = o[d];
      }
    }
  __syncthreads();
  const int off = g * hd;
  int b = 0, e = 0;
  if (!a.prefix_m) {
    attn::chunk_of(max(a.prefix_len[t], 0), z, splits, b, e);
    attend_tiles<F>(sh, acc, a.k_prefix[t], a.v_prefix[t], b, e, kv_dim, off, group, hd, scale, nullptr, 0);
  }
  attn::chunk_of(max(a.suffix_len[t], 0), z, splits, b, e);
  attend_tiles<F>(sh, acc, a.k_suffix[t], a.v_suffix[t], b, e, kv_dim, off, group, hd, scale,
               a.suffix_table ? a.suffix_table + a.suffix_table_start[t] : nullptr, a.block_tokens);
#pragma unroll
  for (int h = 0; h < kMaxTiledGroup; ++h) {
    if (h >= group) break;
    const std::size_t row = head0 + static_cast<std::size_t>(h);
    const float m = sh.m[h], l = sh.l[h];
    if (splits == 1) {
      float* o = a.out + row * static_cast<std::size_t>(hd);
#pragma unroll
      for (int u = 0; u < kDimsPerThread; ++u) {
        const int d = tid + u * kTiledThreads;
        if (d < hd) o[d] = l > 0.0f ? acc[h][u] / l : 0.0f;
      }
    } else {
      float* st = a.partial + (row * static_cast<std::size_t>(splits) + static_cast<std::size_t>(z)) * static_cast<std::size_t>(hd + 2);
      if (tid == 0) st[0] = m, st[1] = l;
#pragma unroll
      for (int u = 0; u < kDimsPerThread; ++u) {
        const int d = tid + u * kTiledThreads;
        if (d < hd) st[2 + d] = acc[h][u];
      }
    }
  }
  // In-kernel merge: the last of the (row, KV head)'s blocks merges its query heads' states.
  if (splits > 1 && a.merge_counters)
    merge_if_last(a.merge_counters + static_cast<std::size_t>(t) * static_cast<std::size_t>(a.n_kv) + static_cast<std::size_t>(g),
                  a.partial + head0 * static_cast<std::size_t>(splits) * static_cast<std::size_t>(hd + 2),
                  a.out + head0 * static_cast<std::size_t>(hd), hd, group, splits);
}

}  // namespace

bool decode_attention_tiled_supported(int n_heads, int n_kv, int hd) {
  return n_kv > 0 && n_heads % n_kv == 0 && n_heads / n_kv <= kMaxTiledGroup && hd > 0 && hd <= attn::kMaxHeadDim;
}

void decode_attention_tiled_cuda(const TiledAttentionArgs& a, cudaStream_t stream) {
  if (!decode_attention_tiled_supported(a.n_heads, a.n_kv, a.hd))
    throw Error("decode_attention_tiled_cuda", "needs n_heads / n_kv_heads <= " + std::to_string(kMaxTiledGroup) +
                                                   " and 1 <= head_dim <= " + std::to_string(attn::kMaxHeadDim) + ", got " +
                                                   std::to_string(a.n_heads) + " / " + std::to_string(a.n_kv) + ", " + std::to_string(a.hd));
  if (a.T < 0 || a.T > 65535) throw Error("decode_attention_tiled_cuda", "expected 0 <= T <= 65535 rows, got " + std::to_string(a.T));
  if (a.splits < 1 || a.splits > kMaxDecodeSplits || (a.splits > 1 && !a.partial))
    throw Error("decode_attention_tiled_cuda", "expected 1 <= splits <= " + std::to_string(kMaxDecodeSplits) +
                                                   " (and a workspace when > 1), got " + std::to_string(a.splits));
  if (a.suffix_table && (!a.suffix_table_start || a.block_tokens < 1))
    throw Error("decode_attention_tiled_cuda", "a suffix block table needs its row starts and block_tokens >= 1");
  if (a.prefix_m && (!a.prefix_l || !a.prefix_o || !a.prefix_map))
    throw Error("decode_attention_tiled_cuda", "a prefix state needs its map, m, l and o");
  if (a.kv == KvFormat::FP8 && (static_cast<long long>(a.n_kv) * a.hd) % 4 != 0)
    throw Error("decode_attention_tiled_cuda", "FP8 rows need n_kv_heads x head_dim a multiple of 4 (4-byte aligned scales), got " +
                                                   std::to_string(a.n_kv * a.hd));
  if (a.T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.hd));  // as the CPU: each step rounded in fp32
  const dim3 grid(static_cast<unsigned>(a.n_kv), static_cast<unsigned>(a.T), static_cast<unsigned>(a.splits));
  const auto kernel = a.kv == KvFormat::FP8 ? kernel_decode_attention_tiled<KvFormat::FP8> : kernel_decode_attention_tiled<KvFormat::BF16>;
  kernel<<<grid, kTiledThreads, 0, stream>>>(a, a.n_heads / a.n_kv, static_cast<std::size_t>(a.n_kv) * static_cast<std::size_t>(a.hd), scale);
  CUDA_CHECK(cudaGetLastError());
  if (a.splits > 1 && !a.merge_counters) decode_merge_cuda(a.partial, a.T, a.n_heads, a.hd, a.splits, a.out, stream);
}

}  // namespace bestofn::cuda
