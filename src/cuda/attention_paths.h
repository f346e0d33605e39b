#pragma once
// Decode attention as one of three paths, chosen once when the engine is made (make_attention_path):
// - DecodeKernelAttention: one kernel per layer over every row's prefix and suffix rows; with split
//   attention the tiled kernel (blocks per KV head) where the shape allows it, each row's positions
//   split into chunks when few rows leave the device idle (flash-decoding);
// - PrefixGemmAttention (Hydragen): the rows grouped by prompt, each group's prefix attention as
//   cuBLAS GEMMs over an F32 copy of the prompt's K/V, each row's suffix merged in; a step where no
//   prompt has kMinPrefixGemmRows rows takes the decode kernel;
// - CascadeAttentionPath: every prompt's prefix attention in one FlashInfer launch per layer over a
//   page pool of the prompts' K/V, the suffixes merged in (src/cuda/cascade_attention.h).
// Each path owns what is its alone: what it keeps per prompt, its workspace, the plan of the step
// about to run (and of the next one, where it plans ahead), its launches, and its part of the
// CUDA graph key. What it can do is data (Can), read by the engine's capabilities and planner.
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "bestofn/engine/engine.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"
#include "cuda/kv_parts.h"
#include "cuda/paged_kv.h"
#include "cuda/step_plan.h"
#include "cuda/step_program.h"

namespace bestofn::cuda {

// Prefix-GEMM attention: the fewest rows of one prefix in a step for the prefix GEMMs to be used.
constexpr int kMinPrefixGemmRows = 2;

// What every path reads of the engine, fixed when it is made.
struct AttentionSetup {
  cudaStream_t stream = nullptr;
  int n_layers = 0, n_heads = 0, n_kv = 0, hd = 0;
  KvFormat kv = KvFormat::BF16;
  int sm_count = 1;
  // Split attention (above), and its chunk states merged inside the attention launch by the last
  // block of each row rather than by a second launch (with small-M linear's fused layer).
  bool split = false, merge_inline = false;
  bool graphs = false;       // CUDA graphs: plans with a grid fixed by the bucket (cascade)
  PagedKv* paged = nullptr;  // Paged KV, when on
  // The prompt of a step row (kPaddingPrefix: the padding rows' one-position prefix).
  std::function<const Prefix&(int)> prefix_of;
};

class AttentionPath {
 public:
  struct Can {
    bool runs = true;      // speculation's runs of positions per slot in one step
    bool ahead = true;     // step t+1's arrays made while step t runs (the plan not hanging on the prompts' groups)
    bool grouped = false;  // the step's arrays carry a state-row map (group)
  };
  virtual ~AttentionPath() = default;
  // Its name in messages ("the decode kernel", "prefix-GEMM attention", "cascade attention").
  virtual const char* name() const = 0;
  const Can& can() const { return can_; }

  // A prompt: what the path keeps of it after its forward (its F32 copy, its page run), and gives
  // back at its release (to_pool: its F32 copy back to the pool reserve_prefixes made, as the
  // engine does with the KV part; false for a prompt dropped before it was registered).
  virtual void add_prefix(Prefix& p) { (void)p; }
  virtual void release_prefix(Prefix& p, bool to_pool) { (void)p, (void)to_pool; }
  // A run's prompts, before any is prefilled: bytes per position on top of the KV rows (the
  // engine's budget for them), then what the path keeps ready for prompts of these lengths.
  virtual std::size_t prefix_bytes_per_position() const { return 0; }
  virtual void reserve_prefixes(std::span<const int> lengths) { (void)lengths; }
  // The run's steps: up to `rows` rows (the bucket) over prompts of up to `longest` positions.
  virtual void reserve(int rows, int longest) { (void)rows, (void)longest; }
  // Its workspace for steps of up to T rows (before any step of T rows; never inside one).
  virtual void size_rows(int T) { (void)T; }

  // A step, in three calls. (1) Before its arrays are written (Can::grouped): the rows grouped by
  // prompt (StepGroups, padded to T rows); returns the state-row map to write with the arrays,
  // empty when the step is not grouped.
  virtual std::span<const int> group(const StepGroups& g, int T) { (void)g, (void)T; return {}; }
  // (2) Once they are uploaded: the step's plan. speculated: the batch is row for row the one
  // speculate() was given during the last step (its plan may be used, if nothing has changed).
  virtual void plan(const StepProgram& s, bool speculated) = 0;
  // (3) Layer l: out (T, n_heads, hd) from q (T, n_heads, hd) and the step's caches.
  virtual void attend(int l, const StepProgram& s, const float* q, float* out) = 0;
  // What a CUDA graph of the planned step bakes in besides the arrays (its buffers, its shape).
  virtual void add_to_key(GraphKey& key) const = 0;
  // Step t+1's batch (Can::ahead), with its bucket, while step t runs; a failure is silent (the
  // next step plans in full).
  virtual void speculate(std::span<Slot* const> batch, int T) { (void)batch, (void)T; }
  // The steps it planned ahead, and in full.
  struct Counts {
    long long ahead = 0, planned = 0;
  };
  virtual Counts counts() const { return {}; }

 protected:
  Can can_;
};

// The path of these options: cascade attention, prefix-GEMM attention, or the decode kernel (the
// options checked by cuda_refusal first).
std::unique_ptr<AttentionPath> make_attention_path(const CudaOptions& o, const AttentionSetup& setup);

}  // namespace bestofn::cuda
