#pragma once
// Cascade attention (Hydragen, arXiv 2402.05099; FlashInfer's cascade): per decode step and
// layer, one FlashInfer batch-prefill launch computes every prefix group's query rows (all query
// heads of all its candidates, GQA packed by the kernel) against the group's prompt K/V on tensor
// cores (kernels/cascade_attention.cu), then each candidate's own suffix is merged in by
// log-sum-exp:
// - with paged KV, BF16 KV and the 8B shape (head_dim 128, 4 query heads per KV head): one
//   launch of FlashInfer's paged batch decode over the paged KV block pools for every row's
//   suffix (its page table from the slots' block tables: suffix_pages, cascade_plan.h), then one
//   merge pass for the batch (cascade_state_merge_cuda);
// - otherwise (FP8 KV: FlashInfer's decode reads one scale per tensor, not this cache's scale per
//   position and head; no paged KV: the suffixes are not in pages; another shape: one kernel
//   instantiation only) today's per-row kernel, cascade_merge_cuda (kernels/prefix_attention.cu).
//   FlashInfer 0.7.4 reads per-(position, head) F32 scales in its tensor-core prefill only
//   (USE_TOKEN_HEAD_SF, the scale applied to the BF16 fragments in BF16): FP8 suffixes through it
//   would be ~10 more kernel instantiations to compile, and whether they beat the per-row kernel
//   on suffixes of at most a few hundred positions is the device check's A/B to say
//   (bench_8b_cascade_fp8kv against bench_8b_cascade and bench_8b_cascade_rowkernel).
//
// The prompts' K/V sit once more in a per-layer BF16 page pool (pages of kCascadePageTokens
// positions, NHD), each prompt in a run of consecutive pages (PageRuns, src/cuda/cascade_plan.h),
// so that FlashInfer's paged_kv_t (one base pointer, page indices) reaches every prefix. The pool
// grows at prefill only, never inside a step; a prompt's run is freed at release_prefix.
//
// Precision against the CPU engine: the prefix side reads BF16 queries (one rounding, 2^-9
// relative, kernels/cascade_gather.cu), rounds the softmax weights to BF16 for the P.V tensor-core
// product, and returns a BF16 output (another 2^-9); with FP8 KV cache the pages hold the BF16
// of each value code x scale (2^-9 again). The suffix side reads F32 queries and BF16 (or FP8)
// rows in F32, with an F32 output, on either path.
//
// CUDA graphs: the step's ints sit at offsets fixed by the bucket (cascade_layout), the groups
// are padded to the rows with empty groups (cascade_step's pad_groups) and FlashInfer's plans run
// in their graph mode with a row bound and split fixed by the bucket (cascade_shape, and the
// decode's split iff rows x n_kv is under one wave), so a graph replays while the prompts in
// flight change.
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

// A step's cascade: the host plan (cascade_plan.h) and FlashInfer's schedules, made in
// the step's program; the step's ints go up in one copy from their own pinned buffer at the layout's
// offsets (their own upload: the page tables' sizes vary, and FlashInfer's schedules are made
// after them from the same host arrays), and `dev` is where they landed.
struct CascadeStepPlan {
  CascadeShape shape;     // rows (T), the groups FlashInfer's prefill sees, its row bound
  CascadeLayout layout;   // where each array sits in `host` and at `dev`
  std::span<const int> host;  // the ints as uploaded (pinned; valid until the next plan)
  const int* dev = nullptr;
  CascadeSchedule schedule;
  bool suffix = false;    // the suffixes by FlashInfer's decode (else cascade_merge_cuda)
  CascadeSuffixSchedule suffix_schedule;
  std::uint64_t epoch = 0;  // CascadeAttention::epoch() right after it was made
  int side = 0;             // the pinned staging it was written to (CascadeAttention's staging_)
};

// FlashInfer's recommended workspace sizes (its Python wrappers allocate a 128 MB float buffer and
// an 8 MB int one per wrapper).
constexpr std::size_t kCascadeFloatWorkspace = std::size_t{128} << 20;
constexpr std::size_t kCascadeIntWorkspace = std::size_t{8} << 20;

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
  void release_prefix(int first_page) {
    runs_.give(first_page);
    ++epoch_;
  }
  // Before a run: the pool grown so that `pages` more are free (Engine::reserve; add_prefix then
  // grows it only when no free run is long enough).
  void reserve_pages(int pages);
  // Before a run (Engine::reserve, after reserve_pages and use_paged_suffix): the scratch for
  // `rows` rows, the step's ints for them, FlashInfer's workspaces at the size its own Python
  // wrappers allocate (kCascadeFloatWorkspace, kCascadeIntWorkspace), and (FP8 KV cache) the
  // widening buffer for prompts of up to longest_prompt positions. A plan that needs more grows
  // them then (counted by EngineStatistics::device_counts).
  void reserve(int rows, int longest_prompt);

  // Paged KV: the suffixes by FlashInfer's paged decode over these block pools (layer l's K pool
  // at pools.k + l x pools.layer_stride; `blocks` blocks of kCascadePageTokens rows, the scratch
  // block included) when the shape and KV format allow it (cascade_suffix_supported); returns
  // whether they will be. Call once, before the first plan.
  bool use_paged_suffix(const KvLayout& pools, int blocks);
  bool suffix_decode() const { return suffix_blocks_ > 0; }

  // On the host, outside any capture: the step's groups from each batch row's prefix, with
  // suffix_decode() the suffixes' page table from each row's block table and length (else none),
  // FlashInfer's schedules (uploaded on the stream) and the scratch sized for T rows. fixed_grid
  // with CUDA graphs (grids, offsets and splits that depend on T alone).
  // ahead: made while a step runs (StepProgrammer::speculate): throws bestofn::Error, nothing grown, where it
  // would grow a buffer (the step may be reading it).
  CascadeStepPlan plan(std::span<const CascadeRow> rows, std::span<const SuffixRow> suffix, bool fixed_grid, bool ahead = false);
  // Layer l's attention: att (T, n_heads, hd) from q (T, n_heads, hd) F32, the prefix pages and
  // each row's suffix: from the block pools when s.suffix, else as decode_attention_cuda takes it
  // (paged or not).
  void run(int l, const CascadeStepPlan& s, const float* q, const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix,
           const int* suffix_len, float* att, const int* suffix_table, const int* suffix_table_start, int block_tokens);
  // CUDA graphs: the addresses and plan values the captured launches depend on (under graphs a
  // function of the bucket and of buffers that only move when they grow: no group count).
  void add_to_key(GraphKey& key, const CascadeStepPlan& s) const;

  // Bumped by every plan and every change of the page pool: a plan is still the one its buffers
  // hold, and its pages still the prompts', while epoch() is its epoch (a plan made ahead, while the
  // previous step ran, is used only then).
  std::uint64_t epoch() const { return epoch_; }
  bool current(const CascadeStepPlan& s) const { return s.epoch == epoch_; }

  int pool_pages() const { return runs_.pages(); }
  // The last run's prefix state (rows in group order): the normalized BF16 output (T, n_heads,
  // hd) and the base-2 log-sum-exp (T, n_heads); for the op table's checks.
  const std::uint16_t* prefix_out() const { return o_bf16_.get<std::uint16_t>(); }
  const float* prefix_lse2() const { return lse_.get<float>(); }

 private:
  std::size_t page_bytes() const;
  void grow_pool(int pages);
  // Plans into (f, i, pinned) with `plan` (a CascadeWorkspace -> schedule), growing them once when
  // the schedule asks for more.
  template <class Plan>
  auto plan_into(DeviceBuffer& f, DeviceBuffer& i, PinnedBuffer& pinned, bool ahead, Plan&& plan);
  void grow_scratch(int T);
  cudaStream_t stream_;
  int n_layers_, n_heads_, n_kv_, hd_;
  KvFormat kv_;
  PageRuns runs_;
  std::vector<DeviceBuffer> k_pages_, v_pages_;  // per layer: (pages, 16, n_kv, hd) BF16
  DeviceBuffer widened_;                          // FP8 KV cache: a prompt's rows widened to F32 on their way to BF16
  DeviceBuffer q_bf16_, o_bf16_, lse_;            // (T, n_heads, hd) BF16 twice, (T, n_heads) F32
  DeviceBuffer fi_float_, fi_int_;                // FlashInfer's workspaces: the prefix side's plan
  DeviceBuffer dec_float_, dec_int_;              // and the suffix side's
  DeviceBuffer suffix_o_, suffix_lse_;            // (T, n_heads, hd), (T, n_heads) F32: the suffix states when not split
  KvLayout suffix_pool_;                          // Paged KV's block pools (use_paged_suffix)
  int suffix_blocks_ = 0;
  DeviceBuffer ints_;  // the step's ints at CascadeStepPlan::layout (grow-only)
  // The host side of a plan's uploads, two of them used in turn: a plan writes the pair the plan
  // before last used, whose copies left with the step before last (over by the last step's
  // synchronization), so that it never waits (wait_event: counted if it had to). The device
  // buffers above are single: the uploads into them are ordered on the stream after the launches
  // of the step that reads their previous contents.
  struct Staging {
    PinnedBuffer fi, dec, ints;       // FlashInfer's int workspaces for the two plans, the step's ints
    cudaEvent_t uploaded = nullptr;   // recorded after this pair's last uploads
  };
  Staging staging_[2];
  int side_ = 0;                      // the pair the last plan used
  int scratch_T_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace bestofn::cuda
