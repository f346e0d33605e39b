#pragma once
// Shared-prefix decode attention as matrix products (prefix-GEMM attention; Hydragen, arXiv
// 2402.05099): per prefix group and KV head, S = Q K^T over the prefix (cuBLAS strided-batched
// GEMM, batch = KV heads), a row softmax with its statistics, O = P V (a second GEMM), then each
// slot's suffix attention merged by log-sum-exp (kernels/prefix_attention.cu).
//
// Precision: the GEMMs read an F32 copy of the prefix K/V (the BF16 cache widened once at prefill,
// exact) and F32 queries with CUBLAS_COMPUTE_32F (no TF32), so they compute the CPU engine's
// products; only summation order differs. Tensor-core BF16 GEMMs (queries and P rounded to BF16)
// are the follow-up, to be measured against this (benchmarks/GPU_TODO.md).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels.h"

#include "cuda/device_buffer.h"
#include "cuda/graph_cache.h"
#include "cuda/plan.h"

namespace bestofn::cuda {

class PrefixAttention {
 public:
  explicit PrefixAttention(cudaStream_t stream);
  ~PrefixAttention();
  PrefixAttention(const PrefixAttention&) = delete;
  PrefixAttention& operator=(const PrefixAttention&) = delete;

  // One prefix group's K and V for this layer: (len, n_kv * hd) F32.
  struct Group {
    const float* k;
    const float* v;
    int len;
  };
  // out (T, n_heads, hd) for q (T, n_heads, hd); plan from prefix_state_map with d_map its map on
  // the device; groups[g] pairs with plan.base[g] / plan.R[g]. Paged suffixes (suffix_table) as
  // decode_attention_cuda takes them. Asynchronous on the stream. tiled_splits > 0
  // (split attention): the suffixes and the merge by the tiled kernel in that many chunks
  // (partial: its workspace when > 1), else by prefix_merge_cuda.
  void run(const float* q, const PrefixStateMap& plan, const int* d_map, const std::vector<Group>& groups,
           const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len, int T,
           int n_heads, int n_kv, int hd, float* out, const int* suffix_table = nullptr, const int* suffix_table_start = nullptr,
           int block_tokens = 0, int tiled_splits = 0, float* partial = nullptr, KvFormat kv = KvFormat::BF16);
  // Sizes the scratch buffers for plan and groups (run does it too); then add_to_key appends
  // their addresses (CUDA graphs: a captured run must find them where they were).
  void reserve(const PrefixStateMap& plan, const std::vector<Group>& groups, int n_kv, int hd);
  // Before a run: room for any step of at most `state_rows` state rows (rows x n_heads) over
  // prefixes of at most `longest` positions (a group's scores are n_kv R_g x L_g <= state_rows x
  // longest floats), so that reserve() above grows nothing inside it.
  void reserve_for(std::size_t state_rows, std::size_t longest, int hd);
  static std::size_t reserve_bytes(std::size_t state_rows, std::size_t longest, int hd) {
    return state_rows * (2 * static_cast<std::size_t>(hd) + 2 + longest) * 4;
  }
  void add_to_key(GraphKey& key) const;

 private:
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;  // cuBLAS's, set explicitly: nothing allocated inside a graph capture
  DeviceBuffer qg_, s_, m_, l_, o_;  // (rows, hd), (n_kv R_g, L_g) one group at a time, (rows), (rows), (rows, hd)
};

}  // namespace bestofn::cuda
