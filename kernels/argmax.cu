// Greedy decoding: the first index of the maximum of each logits row, the GPU twin of
// std::max_element (bestofn::sample_token's greedy rule). One block per row. The reduction compares
// (value, index) pairs and keeps the larger value, the lower index on a tie: an order-independent
// choice, so the result is exact and deterministic whatever the tree shape.
// NaN follows std::max_element too: a NaN is never chosen unless it is element 0, in which case
// element 0 is the answer (operator< with a NaN is false both ways).
#include <climits>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {
namespace {

using rowops::kBlock;
using rowops::kWarps;

constexpr int kNone = INT_MAX;  // "no candidate yet" (a thread with only NaNs or no elements)

struct Best {
  float value;
  int index;
};

// The better of two candidates: a real one over kNone, then the larger value, then the lower index.
__device__ inline Best better(Best a, Best b) {
  if (a.index == kNone) return b;
  if (b.index == kNone) return a;
  if (a.value > b.value || (a.value == b.value && a.index < b.index)) return a;
  return b;
}

__device__ inline Best warp_best(Best v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, v.value, offset), __shfl_xor_sync(0xffffffffu, v.index, offset)};
    v = better(v, other);
  }
  return v;
}

}  // namespace

// logits: (T, V), out: (T); grid = T, block = kBlock.
__global__ void __launch_bounds__(kBlock) kernel_argmax(const float* logits, int V, int* out) {
  __shared__ Best warp_part[kWarps];
  const std::size_t row = blockIdx.x;
  const float* l_row = logits + row * static_cast<std::size_t>(V);  // (V)

  // Each thread scans its strided elements in increasing index order: a strict > keeps the first.
  Best best{0.0f, kNone};
  for (int i = static_cast<int>(threadIdx.x); i < V; i += kBlock) {
    const float v = l_row[i];
    if (!isnan(v) && (best.index == kNone || v > best.value)) best = Best{v, i};
  }
  best = warp_best(best);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_part[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = warp_best(lane < kWarps ? warp_part[lane] : Best{0.0f, kNone});
    // All NaN, or element 0 a NaN: std::max_element returns the first element.
    if (lane == 0) out[row] = best.index == kNone || isnan(l_row[0]) ? 0 : best.index;
  }
}

void argmax_cuda(const float* logits, int T, int V, int* out, cudaStream_t stream) {
  rowops::check_count("argmax_cuda", "T", T);
  rowops::check_count("argmax_cuda", "V", V);
  if (T == 0) return;
  if (V == 0) throw Error("argmax_cuda", "expected V >= 1, got 0");
  kernel_argmax<<<static_cast<unsigned>(T), kBlock, 0, stream>>>(logits, V, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
