// Causal prefill attention: the GPU twin of cpu::prefill_attention (src/cpu/attention.cpp), which
// repeats CpuEngine::attend_prefill. Row t attends over positions 0..t of the prompt's cache rows;
// in a pass of several prompts (prefill_attention_segments_cuda), over positions 0..pos[t] of its
// own prompt's rows, the rows of its prompt's earlier passes included.
//
// Simple first: one block per (row t, query head h), warps over positions with an online softmax
// (kernels/attention.cuh); work is O(T^2) K/V row reads per head, fine for prompts of a few
// thousand tokens. A tiled (flash-attention style) kernel is the follow-up (benchmarks/GPU_TODO.md).
// A pass of many prompts is one launch: each block finds its row's prompt in a per-row table, so
// the grid is the pass's rows in any order (the engine puts the prompts' last rows first), and the
// blocks of short prompts finish early instead of waiting on a launch per prompt.
#include <cmath>
#include <string>

#include "attention.cuh"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

// Where row t's keys and values are and how many positions it sees: one prompt (seg == nullptr:
// rows k / v, positions 0..t) or a pass of segments (k / v of segment seg[t], positions 0..pos[t]).
struct PrefillRows {
  const std::uint16_t* k = nullptr;
  const std::uint16_t* v = nullptr;
  const std::uint16_t* const* seg_k = nullptr;
  const std::uint16_t* const* seg_v = nullptr;
  const int* seg = nullptr;
  const int* pos = nullptr;
};

// q (T, n_heads, hd); out (T, n_heads, hd). grid = (n_heads, T), block = attn::kThreads.
template <KvFormat F>
__global__ void __launch_bounds__(attn::kThreads)
    kernel_prefill_attention(const float* q, PrefillRows rows, int group, int hd, std::size_t kv_dim, float scale, float* out) {
  __shared__ attn::Shared sh;
  __shared__ float o_run[attn::kMaxHeadDim];  // unnormalized output
  const int h = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y);
  const std::size_t row = static_cast<std::size_t>(t) * gridDim.x + static_cast<std::size_t>(h);
  float qr[attn::kPerLane];
  attn::load_query(q + row * static_cast<std::size_t>(hd), hd, qr);
  const std::uint16_t* k = rows.k;
  const std::uint16_t* v = rows.v;
  int last = t;
  if (rows.seg) {
    const int s = rows.seg[t];
    k = rows.seg_k[s], v = rows.seg_v[s], last = rows.pos[t];
  }

  // softmax(q.k * scale) over positions 0..last, then o / l
  const attn::RunState st = attn::attend_run<F>(qr, k, v, 0, last + 1, kv_dim, (h / group) * hd, hd, scale, sh, o_run);
  float* o = out + row * static_cast<std::size_t>(hd);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += attn::kThreads) o[i] = o_run[i] / st.l;
}

void launch(const char* who, const float* q, const PrefillRows& rows, int T, int n_heads, int n_kv, int hd, float* out,
            cudaStream_t stream, KvFormat kv) {
  if (hd <= 0 || hd > attn::kMaxHeadDim)
    throw Error(who, "expected 1 <= head_dim <= " + std::to_string(attn::kMaxHeadDim) + ", got " + std::to_string(hd));
  if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0)
    throw Error(who, "expected n_heads a multiple of n_kv_heads, got " + std::to_string(n_heads) + " and " + std::to_string(n_kv));
  if (T < 0 || T > 65535)  // the grid's y dimension
    throw Error(who, "expected 0 <= T <= 65535 rows, got " + std::to_string(T));
  if (kv == KvFormat::FP8 && (static_cast<long long>(n_kv) * hd) % 4 != 0)
    throw Error(who, "FP8 rows need n_kv_heads x head_dim a multiple of 4 (4-byte aligned scales), got " + std::to_string(n_kv * hd));
  if (T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));  // as the CPU computes it
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(T));
  const auto kernel = kv == KvFormat::FP8 ? kernel_prefill_attention<KvFormat::FP8> : kernel_prefill_attention<KvFormat::BF16>;
  kernel<<<grid, attn::kThreads, 0, stream>>>(q, rows, n_heads / n_kv, hd, static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd),
                                              scale, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void prefill_attention_cuda(const float* q, const std::uint16_t* k, const std::uint16_t* v, int T, int n_heads, int n_kv, int hd,
                            float* out, cudaStream_t stream, KvFormat kv) {
  PrefillRows rows;
  rows.k = k, rows.v = v;
  launch("prefill_attention_cuda", q, rows, T, n_heads, n_kv, hd, out, stream, kv);
}

void prefill_attention_segments_cuda(const float* q, const std::uint16_t* const* seg_k, const std::uint16_t* const* seg_v,
                                     const int* seg, const int* pos, int T, int n_heads, int n_kv, int hd, float* out,
                                     cudaStream_t stream, KvFormat kv) {
  PrefillRows rows;
  rows.seg_k = seg_k, rows.seg_v = seg_v, rows.seg = seg, rows.pos = pos;
  launch("prefill_attention_segments_cuda", q, rows, T, n_heads, n_kv, hd, out, stream, kv);
}

}  // namespace bestofn::cuda
