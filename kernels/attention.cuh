#pragma once
// Device helpers shared by kernels/attention_decode.cu and kernels/attention_prefill.cu (device
// code is not separately compiled, so shared device functions live in a header).
//
// One block per (query row, query head); the block's warps share out the K/V positions (warp w
// takes positions w, w + kWarps, ...), each lane holds hd / 32 elements of q and of the running
// output. Each warp keeps an online softmax (Milakov & Gimelshein, arXiv 1805.02867); the warps'
// states then merge by log-sum-exp in shared memory. K/V rows are BF16 (widening is exact) or FP8
// with a scale per KV head (KvFormat).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace bestofn::cuda::attn {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxHeadDim = 256;               // the launchers reject a larger head_dim
constexpr int kPerLane = kMaxHeadDim / 32;     // q / output elements per lane: i = lane + 32 r

// Softmax state of one query over a run of positions: max score m, sum l of exp(s - m), and the
// unnormalized output o = sum exp(s - m) v. An empty run has m = -inf, l = 0, o = 0.
struct RunState {
  float m, l;
};

// Per-warp states for the cross-warp merge: (8 + 8 + 8 * 256) floats = 8.3 KB at kMaxHeadDim.
struct Shared {
  float m[kWarps];
  float l[kWarps];
  float o[kWarps][kMaxHeadDim];
};

__device__ __forceinline__ float bf16_to_float(std::uint16_t h) { return __uint_as_float(static_cast<unsigned>(h) << 16); }

// bestofn::fp8_e4m3_to_float_finite: the 7 magnitude bits at float bits 20..26 read as
// value * 2^-120 (normal and subnormal codes alike), then an exact scale by 2^120.
__device__ __forceinline__ float fp8_e4m3_to_float(std::uint8_t c) {
  return __uint_as_float((static_cast<unsigned>(c & 0x80u) << 24) | (static_cast<unsigned>(c & 0x7fu) << 20)) * 0x1p120f;
}

// Reads the head slice [off, off + hd) of row r of a cache part based at `base`.
template <KvFormat F>
struct KvRow {
  const void* row;
  float scale;
  __device__ __forceinline__ KvRow(const std::uint16_t* base, std::size_t r, std::size_t kv_dim, int off, int hd) {
    const auto* b = reinterpret_cast<const unsigned char*>(base) + r * kv_row_bytes(F, kv_dim, hd);
    if constexpr (F == KvFormat::FP8) {
      row = b + off;
      scale = reinterpret_cast<const float*>(b + kv_dim)[off / hd];
    } else {
      row = reinterpret_cast<const std::uint16_t*>(b) + off;
      scale = 1.0f;
    }
  }
  __device__ __forceinline__ float operator[](int i) const {
    if constexpr (F == KvFormat::FP8) return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(row)[i]) * scale;
    else return bf16_to_float(static_cast<const std::uint16_t*>(row)[i]);
  }
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Chunk z of `splits` contiguous chunks of a run of n positions: [b, e), empty past the end.
__device__ __forceinline__ void chunk_of(int n, int z, int splits, int& b, int& e) {
  const int per = (n + splits - 1) / splits;
  b = min(z * per, n), e = min(b + per, n);
}

// --cuda-prefix-gemm: the state row of batch row t, query head h (src/cuda/plan.h): map[t] is its
// group's base, map[T + t] its group's R and map[2T + t] its index within the group.
__device__ __forceinline__ std::size_t state_row(const int* map, int T, int t, int h, int group) {
  const int base = map[t], R = map[T + t], i = map[2 * T + t];
  return static_cast<std::size_t>(base) + static_cast<std::size_t>(h / group) * static_cast<std::size_t>(R) +
         static_cast<std::size_t>(i * group + h % group);
}

// Loads this lane's slice of the query head q (hd).
__device__ __forceinline__ void load_query(const float* q, int hd, float (&qr)[kPerLane]) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int i = lane + 32 * r;
    qr[r] = i < hd ? q[i] : 0.0f;
  }
}

// Weight of a state with max m in a merge whose max is M: exp(m - M), 0 for an empty state
// (m = -inf), so that an empty run contributes nothing and never makes a NaN.
__device__ __forceinline__ float merge_weight(float m, float M) { return m == -INFINITY ? 0.0f : expf(m - M); }

// The `splits` chunk states st[z * (hd + 2)] = (m, l, unnormalized o (hd)) of one (row, query
// head), merged by log-sum-exp in chunk order into o (hd), threads tid, tid + nthreads, ...: the
// arithmetic of kernel_decode_merge and of the in-kernel merge (each element on its own, so the
// thread mapping does not change a bit). Reads through L2 (__ldcg): other blocks wrote st.
__device__ __forceinline__ void merge_chunk_states(const float* st, int splits, int hd, float* o, int tid, int nthreads) {
  const std::size_t stride = static_cast<std::size_t>(hd + 2);
  float M = -INFINITY;
  for (int z = 0; z < splits; ++z) M = fmaxf(M, __ldcg(st + z * stride));
  float L = 0.0f;
  for (int z = 0; z < splits; ++z) L = __fmaf_rn(__ldcg(st + z * stride + 1), merge_weight(__ldcg(st + z * stride), M), L);
  for (int i = tid; i < hd; i += nthreads) {
    float acc = 0.0f;
    for (int z = 0; z < splits; ++z) acc = __fmaf_rn(__ldcg(st + z * stride + 2 + i), merge_weight(__ldcg(st + z * stride), M), acc);
    o[i] = L > 0.0f ? __fdiv_rn(acc, L) : 0.0f;
  }
}

// The in-kernel merge's election (counters non-null): after the block wrote its chunk state,
// whether it is the last of the `splits` blocks of its counter to finish; the last one merges and
// sets the counter back to 0 (so that it is 0 at every launch, graph replays included). Every
// thread of the block must call it; all get the same answer.
__device__ __forceinline__ bool last_chunk_block(int* counter, int splits) {
  __shared__ int last;
  __threadfence();  // this block's state visible device-wide before it counts itself
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (last) __threadfence();  // the others' states, fenced before their counts, are read after
  return last != 0;
}

// Attention of one query head over the K/V rows j in [begin, end): row j's head slice starts at
// K + r * kv_dim + off, r = j, or with a block table (--paged-kv) r = table[j / block] * block +
// j % block. An empty range gives the empty state.
// scores = q.k * scale. Writes the unnormalized output to out_o (hd, shared memory) and
// returns (m, l); every thread of the block must call it, and every thread gets the same result.
// F: the cache rows' format (KvFormat above; a row's address is r times its size in bytes).
template <KvFormat F = KvFormat::BF16>
__device__ inline RunState attend_run(const float (&qr)[kPerLane], const std::uint16_t* K, const std::uint16_t* V, int begin,
                                      int end, std::size_t kv_dim, int off, int hd, float scale, Shared& sh, float* out_o,
                                      const int* table = nullptr, int block = 0) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float m = -INFINITY, l = 0.0f, o[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) o[r] = 0.0f;
  for (int j = begin + warp; j < end; j += kWarps) {
    const std::size_t r = table ? static_cast<std::size_t>(table[j / block]) * static_cast<std::size_t>(block) +
                                      static_cast<std::size_t>(j % block)
                                : static_cast<std::size_t>(j);
    const KvRow<F> k(K, r, kv_dim, off, hd), v(V, r, kv_dim, off, hd);
    float d = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int i = lane + 32 * r;
      if (i < hd) d += qr[r] * k[i];
    }
    const float s = warp_sum(d) * scale;  // every lane holds the same score
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);  // corr = 0 on the first position
    l = l * corr + p;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int i = lane + 32 * r;
      if (i < hd) o[r] = o[r] * corr + p * v[i];
    }
    m = m_new;
  }
  if (lane == 0) sh.m[warp] = m, sh.l[warp] = l;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int i = lane + 32 * r;
    if (i < hd) sh.o[warp][i] = o[r];
  }
  __syncthreads();
  // Merge the warps' states (in warp order: the result does not depend on scheduling).
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sh.m[w]);
  float L = 0.0f;
  for (int w = 0; w < kWarps; ++w) L += sh.l[w] * merge_weight(sh.m[w], M);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += kThreads) {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) acc += sh.o[w][i] * merge_weight(sh.m[w], M);
    out_o[i] = acc;
  }
  __syncthreads();  // out_o is complete, and sh may be reused
  return {M, L};
}

}  // namespace bestofn::cuda::attn
