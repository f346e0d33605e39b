// Causal prefill attention: the GPU twin of cpu::prefill_attention (src/cpu/attention.cpp), which
// repeats CpuEngine::attend_prefill. Row t attends over positions 0..t of the prompt's cache rows.
//
// Simple first: one block per (row t, query head h), warps over positions with an online softmax
// (kernels/attention.cuh); work is O(T^2) K/V row reads per head, fine for prompts of a few
// thousand tokens. A tiled (flash-attention style) kernel is the follow-up (benchmarks/GPU_TODO.md).
#include <cmath>
#include <string>

#include "attention.cuh"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

// q (T, n_heads, hd); k, v T cache rows of format F; out (T, n_heads, hd). grid = (n_heads, T),
// block = attn::kThreads.
template <KvFormat F>
__global__ void __launch_bounds__(attn::kThreads)
    kernel_prefill_attention(const float* q, const std::uint16_t* k, const std::uint16_t* v, int group, int hd,
                             std::size_t kv_dim, float scale, float* out) {
  __shared__ attn::Shared sh;
  __shared__ float o_run[attn::kMaxHeadDim];  // unnormalized output
  const int h = static_cast<int>(blockIdx.x), t = static_cast<int>(blockIdx.y);
  const std::size_t row = static_cast<std::size_t>(t) * gridDim.x + static_cast<std::size_t>(h);
  float qr[attn::kPerLane];
  attn::load_query(q + row * static_cast<std::size_t>(hd), hd, qr);

  // softmax(q.k * scale) over positions 0..t, then o / l
  const attn::RunState st = attn::attend_run<F>(qr, k, v, 0, t + 1, kv_dim, (h / group) * hd, hd, scale, sh, o_run);
  float* o = out + row * static_cast<std::size_t>(hd);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += attn::kThreads) o[i] = o_run[i] / st.l;
}

void prefill_attention_cuda(const float* q, const std::uint16_t* k, const std::uint16_t* v, int T, int n_heads, int n_kv, int hd,
                            float* out, cudaStream_t stream, KvFormat kv) {
  if (hd <= 0 || hd > attn::kMaxHeadDim)
    throw Error("prefill_attention_cuda", "expected 1 <= head_dim <= " + std::to_string(attn::kMaxHeadDim) + ", got " +
                                              std::to_string(hd));
  if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0)
    throw Error("prefill_attention_cuda", "expected n_heads a multiple of n_kv_heads, got " + std::to_string(n_heads) +
                                              " and " + std::to_string(n_kv));
  if (T < 0 || T > 65535)  // the grid's y dimension
    throw Error("prefill_attention_cuda", "expected 0 <= T <= 65535 positions, got " + std::to_string(T));
  if (kv == KvFormat::FP8 && (static_cast<long long>(n_kv) * hd) % 4 != 0)
    throw Error("prefill_attention_cuda", "FP8 rows need n_kv_heads x head_dim a multiple of 4 (4-byte aligned scales), got " +
                            std::to_string(n_kv * hd));
  if (T == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));  // as the CPU computes it
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(T));
  const auto kernel = kv == KvFormat::FP8 ? kernel_prefill_attention<KvFormat::FP8> : kernel_prefill_attention<KvFormat::BF16>;
  kernel<<<grid, attn::kThreads, 0, stream>>>(q, k, v, n_heads / n_kv, hd,
                                              static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd), scale, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
