#pragma once
// One decode step as the CUDA engine runs it (StepProgram): its rows (the batch, padded to its
// bucket with CUDA graphs), their index arrays uploaded into the step arena, and the device
// addresses of those arrays, which the forward's launches read; made on the host by one planner,
// StepProgrammer (src/cuda/step_program.cpp), which also makes the next step's program while the
// device runs this one. The attention path keeps its own part of the step (attention_paths.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/engine/sampler.h"
#include "util/handle_table.h"
#include "cuda/device_buffer.h"
#include "cuda/kv_parts.h"
#include "cuda/paged_kv.h"
#include "cuda/step_ahead.h"
#include "cuda/step_arena.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {

class AttentionPath;  // attention_paths.h (which reads StepProgram)

// With CUDA graphs the batch is padded to its bucket (step_plan.h): every launch runs T rows, the
// first `real` of them the batch's, the rest padding rows that touch only the padding prefix's
// scratch rows.
struct StepProgram {
  int T = 0;                                   // rows of every launch (padded)
  int real = 0;                                // the batch's rows, first
  std::vector<Slot*> batch;
  StepLayout layout;                           // the arrays' offsets in the arena (fixed per bucket)
  bool grouped = false;                        // the arrays hold a state-row map (prefix-GEMM attention)
  const int* tokens = nullptr;                 // (T)
  const int* pos = nullptr;                    // (T) each row's position
  const int* lens = nullptr;                   // (2 T) prefix lengths, then suffix lengths with this token
  const std::uint64_t* draws = nullptr;        // (3 T) device sampling: prompt, candidate, step indexes
  const int* map = nullptr;                    // (3 T) grouped: the state-row map
  const StepRowDesc* desc = nullptr;           // (T) each row's KV parts, expanded by forward into:
  std::uint16_t* const* rows = nullptr;        // (layers, 2, T) the cache rows this step writes: k, then v
  const std::uint16_t* const* ptrs = nullptr;  // (layers, 4, T) k_prefix, v_prefix, k_suffix, v_suffix
  const int* starts = nullptr;                 // (T) paged KV: row t's block table at tables + starts[t]
  const int* tables = nullptr;                 // Paged KV: the block tables
  int block = 0;                               // Paged KV: positions per block
};

// Device sampling: a step's rows sampled on the device by sample_token's rule and draws
// (Engine::decode_sample), only the samples coming back to `out`.
struct DeviceDraws {
  const SamplingParams& params;
  std::span<const std::uint64_t> prompt, candidate, step;
  std::span<Sample> out;
};

// What the step programmer reads and grows of the engine.
struct StepProgramSetup {
  StepPlanConfig plan;          // the planner's (step_plan.h)
  cudaStream_t stream = nullptr;
  StepArena* arena = nullptr;   // the staging and the device arena the arrays go up to
  DeviceBuffer* pointers = nullptr;  // (layers, 6, T) the per-layer pointers forward expands
  PagedKv* paged = nullptr;     // Paged KV, when on
  AttentionPath* attention = nullptr;
  const HandleTable<Slot>* slots = nullptr;
  const HandleTable<Prefix>* prefixes = nullptr;
  // A slot's own suffix part grown to hold `rows` rows (unpaged), keeping its rows.
  std::function<void(KvPart&, int)> grow_suffix;
  // Every buffer a step of T rows uses (the bucket's activations, and with sampling on the
  // device the sampler's workspace for these parameters), grown before the step, never inside it.
  std::function<void(int, const SamplingParams*)> size_for;
};

// The one planner of decode steps: prepare() makes a step's program (its rows checked, their index
// arrays laid out, written into a pinned staging buffer and uploaded in one copy, the attention
// path's plan made), from the program speculated during the last step where it holds (patched),
// else in full; speculate() makes the next step's program, "every row again, one further", while
// the device runs this one. Speculating is off where the attention's plan hangs on the prompts'
// groups (AttentionPath::Can::ahead).
class StepProgrammer {
 public:
  explicit StepProgrammer(const StepProgramSetup& setup);
  // A step of these rows (slot i takes tokens[i]); runs (speculation's verification): each row's
  // place in its slot's run (StepRow::run), empty for a plain step. Throws (nothing uploaded) for
  // a batch that fails its checks.
  StepProgram prepare(std::span<const int> slots, std::span<const int> tokens, const DeviceDraws* draws, std::span<const int> runs = {});
  // While step s runs (between its launches and the wait for its results): the next step's
  // program, for the same slots one position further. Never fails the step.
  void speculate(std::span<const int> slots, const StepProgram& s, const DeviceDraws* draws);
  // A slot released (its handle may come back as another slot), or truncated (a speculation would
  // write past its new end).
  void forget(int slot) {
    if (ahead_) ahead_->forget(slot);
  }
  void drop() {
    if (ahead_) ahead_->drop();
  }
  // The arena bytes of a step of T rows (Engine::reserve).
  std::size_t capacity(int T, bool draws) const;
  // Both staging buffers sized for steps of up to `bucket` rows (Engine::reserve), a step made
  // ahead dropped first: its arrays sit in one of them, which may move.
  void reserve_staging(int bucket, bool draws) {
    drop();
    setup_.arena->reserve_staging(capacity(bucket, draws));
  }
  // The host work done ahead so far (EngineStatistics::ahead_stats; the cascade counts are the
  // attention path's).
  EngineStatistics::AheadStats stats() const { return stats_; }

 private:
  Slot& slot_at(int s) const { return setup_.slots->at(s); }
  const Prefix& prefix_at(int p) const { return setup_.prefixes->at(p); }
  void plan(StepProgram& s, std::span<const int> slots, std::span<const int> tokens, const DeviceDraws* draws, std::span<const int> runs);
  bool patch(StepProgram& s, std::span<const int> slots, std::span<const int> tokens, const DeviceDraws* draws);
  void bind(StepProgram& s, const DeviceDraws* draws) const;
  // The row of slot `handle` feeding `token`, `run` positions into its run (StepRow::run); its
  // suffix's room is make_room's.
  StepRow row_of(int handle, const Slot& slot, int run, int token) const;
  // Each row's suffix room (batch[i]: row i's slot): grown, or its blocks taken (paged KV).
  void make_room(std::span<StepRow> rows, std::span<Slot* const> batch);
  StepProgramSetup setup_;
  StepPlanner planner_;
  std::unique_ptr<StepAhead> ahead_;  // the next step's program, made during this one
  std::vector<StepRow> rows_, spec_rows_, fresh_rows_;  // the batch's descriptors, reused from step to step
  std::vector<Slot*> spec_batch_, fresh_batch_;        // the speculated rows' slots; a patch's fresh rows' slots
  std::vector<PagedSlot*> room_slots_;                 // paged KV: the slots whose blocks a step takes, and
  std::vector<int> room_lens_;                         // the lengths they take them for
  EngineStatistics::AheadStats stats_;
};

}  // namespace bestofn::cuda
