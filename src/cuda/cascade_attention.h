#pragma once
// --cascade-attention (Hydragen, arXiv 2402.05099; FlashInfer's cascade): per decode step and
// layer, one FlashInfer batch-prefill launch computes every prefix group's query rows (all query
// heads of all its candidates, GQA packed by the kernel) against the group's prompt K/V on tensor
// cores (kernels/cascade_attention.cu), then cascade_merge_cuda merges each candidate's own suffix
// by log-sum-exp (kernels/prefix_attention.cu).
//
// The prompts' K/V sit once more in a per-layer BF16 page pool (pages of kCascadePageTokens
// positions, NHD), each prompt in a run of consecutive pages (PageRuns, src/cuda/cascade_plan.h),
// so that FlashInfer's paged_kv_t (one base pointer, page indices) reaches every prefix. The pool
// grows at prefill only, never inside a step; a prompt's run is freed at release_prefix.
//
// Precision against the CPU engine: the prefix side reads BF16 queries (one rounding, 2^-9
// relative, kernels/cascade_gather.cu), rounds the softmax weights to BF16 for the P.V tensor-core
// product, and returns a BF16 output (another 2^-9); with --kv-cache fp8 the pages hold the BF16
// of each value code x scale (2^-9 again). The suffix side is the F32 path of the other kernels.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/cascade_plan.h"
#include "cuda/device_buffer.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

// A step's cascade: the host plan (cascade_plan.h) and FlashInfer's schedule, made in prepare_step;
// `ints` go up with FlashInfer's schedule, in one copy from their own pinned buffer (their size
// depends on the groups, so they are not in the step planner's fixed per-bucket layout), and `dev`
// is where they landed.
struct CascadeStepPlan {
  int T = 0, groups = 0;
  std::vector<int> ints;  // order (T), map (3 T), qo_indptr (G + 1), page_indptr (G + 1), last_page_len (G), page_indices
  const int* dev = nullptr;
  CascadeSchedule schedule;
};

class CascadeAttention {
 public:
  // Throws bestofn::Error (one line) when this build lacks FlashInfer or the shape is not the
  // instantiated one (head_dim 128, n_heads a multiple of n_kv).
  CascadeAttention(cudaStream_t stream, int n_layers, int n_heads, int n_kv, int hd, KvFormat kv);
  CascadeAttention(const CascadeAttention&) = delete;
  CascadeAttention& operator=(const CascadeAttention&) = delete;
  ~CascadeAttention();

  // After a prefill: the prompt's len cache rows per layer (k[l], v[l], rows of the engine's
  // format) copied into a fresh run of pages; returns the run's first page. Grows the pool when
  // no free run is long enough (a stream-ordered copy of the pool, then a synchronization).
  int add_prefix(std::span<const std::uint16_t* const> k, std::span<const std::uint16_t* const> v, int len);
  void release_prefix(int first_page) { runs_.give(first_page); }

  // On the host, outside any capture: the step's groups from each batch row's prefix, FlashInfer's
  // schedule (uploaded on the stream) and the scratch sized for T rows. fixed_grid with
  // --cuda-graphs (a grid that does not depend on the lengths).
  CascadeStepPlan plan(std::span<const CascadeRow> rows, bool fixed_grid);
  // Layer l's attention: att (T, n_heads, hd) from q (T, n_heads, hd) F32, the prefix pages and
  // each row's suffix (as decode_attention_cuda takes it, paged or not).
  void run(int l, const CascadeStepPlan& s, const float* q, const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix,
           const int* suffix_len, float* att, const int* suffix_table, const int* suffix_table_start, int block_tokens);
  // --cuda-graphs: the addresses and plan values the captured launches depend on.
  void add_to_key(GraphKey& key, const CascadeStepPlan& s) const;

  int pool_pages() const { return runs_.pages(); }
  // The last run's prefix state (rows in group order): the normalized BF16 output (T, n_heads,
  // hd) and the base-2 log-sum-exp (T, n_heads); for the op table's checks.
  const std::uint16_t* prefix_out() const { return o_bf16_.get<std::uint16_t>(); }
  const float* prefix_lse2() const { return lse_.get<float>(); }

 private:
  std::size_t page_bytes() const;
  cudaStream_t stream_;
  int n_layers_, n_heads_, n_kv_, hd_;
  KvFormat kv_;
  PageRuns runs_;
  std::vector<DeviceBuffer> k_pages_, v_pages_;  // per layer: (pages, 16, n_kv, hd) BF16
  DeviceBuffer widened_;                          // --kv-cache fp8: a prompt's rows widened to F32 on their way to BF16
  DeviceBuffer q_bf16_, o_bf16_, lse_;            // (T, n_heads, hd) BF16 twice, (T, n_heads) F32
  DeviceBuffer fi_float_, fi_int_;                // FlashInfer's workspaces
  PinnedBuffer fi_pinned_;
  DeviceBuffer ints_;               // the step's CascadeStepPlan::ints (grow-only)
  PinnedBuffer ints_pinned_;
  cudaEvent_t uploaded_ = nullptr;  // the last schedule's upload from fi_pinned_ and ints_pinned_
  int scratch_T_ = 0;
};

}  // namespace bestofn::cuda
