#pragma once
// Host-side planning for the CUDA engine's optional paths, in plain C++ (built into bestofn_core, so
// its unit tests run on machines without CUDA): the state-row map of the shared-prefix GEMMs and
// the concatenation of linear layers for the fused QKV and gate/up GEMMs.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/model/weights.h"

namespace bestofn::cuda {

// The shared-prefix GEMMs (prefix-GEMM attention) work on one matrix of queries per prefix group and
// KV head. Group g (the batch rows of one prefix, in batch order) owns state rows
// [base[g], base[g] + n_kv * R[g]), R[g] = its slots x (n_heads / n_kv); batch row t, query head
// h sits at map[t] + (h / group) * map[T + t] + map[2T + t] * group + h % group, where map[t] is
// its group's base, map[T + t] its group's R and map[2T + t] its index within the group.
struct PrefixStateMap {
  std::vector<int> map;   // (3 T)
  std::vector<int> base;  // per group: first state row
  std::vector<int> R;     // per group: query rows per KV head
  int rows = 0;           // state rows in all
};

// group_rows: per prefix group, its batch rows; every row in [0, T) appears exactly once (throws
// bestofn::Error otherwise).
PrefixStateMap prefix_state_map(const std::vector<std::vector<int>>& group_rows, int T, int n_heads, int n_kv);

// One strided-batched GEMM in BLAS (column-major) terms, as cublasGemmStridedBatchedEx takes it:
// for b < batch, C_b (m x n, ldc) = alpha op(A_b) op(B_b) + beta C_b, with X_b = X + b * stride_x;
// op(A) is m x k (A stored k x m with lda when trans_a), op(B) k x n (B stored n x k when trans_b).
struct StridedGemm {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 0;
};

// The two GEMMs of one prefix group of R query rows per KV head over L prefix positions (batch =
// KV heads): scores, S^T (L x R) = K_kv Q_kv^T with A = the prefix K (L rows of kv_dim floats,
// head kv at column kv * hd), B = the gathered queries (R x hd per head) and C = S (R x L per
// head, row-major); values, O^T (hd x R) = V_kv^T P^T with A = the prefix V, B = P (= S after the
// softmax) and C = O (R x hd per head, row-major).
struct PrefixGemms {
  StridedGemm scores, values;
};
PrefixGemms prefix_gemms(int L, int R, int n_kv, int hd);

// Paged KV: the suffix KV cache in blocks of a fixed number of positions, from a free list.
// Each slot holds a table of block ids (the same ids in every layer); a slot's suffix row j lives
// in block table[j / block_tokens], at row j % block_tokens. Admission is by free blocks: a slot
// may be given a budget (the most blocks it will ever hold), and a new slot is admitted only when
// the free blocks cover its budget plus what the admitted slots may still take.
class KvBlockPool {
 public:
  KvBlockPool(int blocks, int block_tokens);
  int block_tokens() const { return block_tokens_; }
  int blocks() const { return static_cast<int>(used_.size()); }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  // Blocks a slot needs for `tokens` positions.
  int blocks_for(int tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
  // A free block (the most recently freed first), or -1 when none is left.
  int take();
  // Returns a block; throws bestofn::Error for an id out of range or not taken.
  void give(int block);
  // Budgets: `admit` succeeds (and records the budget) when free_blocks() covers `budget` plus
  // every admitted slot's budget not yet taken; `taken` counts blocks a budgeted slot took since;
  // `retire` ends a slot's budget (its blocks go back through give).
  bool admit(int budget);
  long long promised() const { return promised_; }  // budgeted blocks not yet taken
  void taken(int budget_left_before);
  void retire(int budget_left);
  // n more blocks promised again to a slot whose blocks went back through give (shrink_blocks:
  // only what its admitted budget still covers).
  void repromise(int n);

 private:
  int block_tokens_;
  std::vector<int> free_;
  std::vector<bool> used_;
  long long promised_ = 0;  // budgeted blocks not yet taken, over all admitted slots
};

// A slot's blocks (paged KV): its table and what is left of its promise.
struct PagedSlot {
  std::vector<int> blocks;  // the block table
  int budget = 0;           // blocks promised at admission (0: admitted without a promise)
  int budget_left = 0;      // of those, not yet taken: max(budget - blocks held, 0)
};
// Blocks for each slot's rows up to and including row lens[i] (a step's row, or the last row of
// its speculation run): as many as the table lacks, from the slot's promise first. Throws a
// one-line bestofn::Error, with nothing taken, when the pool cannot give those outside the
// promises.
void take_blocks(KvBlockPool& pool, std::span<PagedSlot* const> slots, std::span<const int> lens);
// Keeps the blocks of the slot's first `rows` rows and gives the rest back to the pool
// (truncate_slot after speculation's rejected positions); as many of them as its admitted budget
// covers are promised to it again (never more than it was admitted with).
void shrink_blocks(KvBlockPool& pool, PagedSlot& slot, int rows);

// Several linear layers on the same input as one (fused q/k/v): weights concatenated along the
// output dimension, scales per output channel (a per-tensor scale repeated over its shard's
// rows), so the one GEMM's epilogue applies each shard's own scale.
struct FusedLinear {
  std::vector<std::uint8_t> weight;  // (sum of out, in) in the shards' dtype
  DType dtype = DType::F32;
  std::vector<float> weight_scale;   // FP8: (sum of out), or (1) when every shard has the same per-tensor scale
  float input_scale = 0.0f;          // FP8 static activation scale, shared by all shards; 0: dynamic
  std::vector<int> outs;             // each shard's out_features
  int in = 0;
  std::vector<float> bias;           // (sum of out): the shards' biases (0 for a shard without); empty when none has one
};

// Empty when the shards cannot share one GEMM: different dtypes, input widths, or FP8 input
// schemes (static scales that differ, or static and dynamic mixed) — the caller keeps them apart.
std::optional<FusedLinear> fuse_linears(std::span<const Linear* const> shards);

// The rows of one prefill pass (a plan_prefill_passes entry) as CudaEngine::prefill_many lays them
// out: first the last row of each prompt that ends in the pass (consecutive prompts, in order), so
// that their logits are the lm_head over the pass's first `ending` rows; then every other row,
// segment by segment, in position order. Each (segment, position) of the pass is one row.
struct PrefillPassRows {
  std::vector<int> segment;   // per row: its segment (index into the pass)
  std::vector<int> position;  // per row: its position in its prompt
  int ending = 0;             // prompts that end in the pass
  std::size_t first_ending = 0;  // the first of them (their logits rows follow in prompt order)
};
// lengths: every prompt's length (the pass's segments index it). Throws bestofn::Error when the
// prompts ending in the pass are not consecutive (not a pass of plan_prefill_passes).
PrefillPassRows prefill_pass_rows(std::span<const PrefillSegment> pass, std::span<const int> lengths);

}  // namespace bestofn::cuda
