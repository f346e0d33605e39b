// Step t+1 prepared while step t runs (src/cuda/step_ahead.h): speculate_next, between launching
// step t and waiting for its ids, writes step t+1 as "every row again, one further" into the next
// staging buffer; patch_step, once the scheduler's batch comes, keeps what held and writes the rest.
// The attention path plans the speculated batch too (cascade attention: its groups, FlashInfer's
// schedules, their upload), used when the batch is exactly that one (prepare_step). Off where the
// attention's plan hangs on the prompts' groups (prefix-GEMM attention: its state-row map is in the
// step's arrays; a full plan each step there).
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/cuda_engine.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

void CudaEngine::speculate_next(std::span<const int> slots, const StepProgram& s, const Draws* draws) {
  if (!ahead_) return;
  try {
    spec_rows_.clear(), spec_batch_.clear();
    std::vector<PagedSlot*> need;
    std::vector<int> lens;
    for (std::size_t i = 0; i < s.batch.size(); ++i) {
      Slot* slot = s.batch[i];
      const Prefix& pre = prefix_at(slot->prefix);
      const int len = slot->kv.len;  // after this step
      // Rows that cannot go on without what a step may not do here are left out (fresh if fed):
      // at the context; unpaged, past their part (growing it synchronizes); paged, needing a block
      // outside their promise (take would refuse it).
      if (pre.kv.len + len >= c_.max_position_embeddings) continue;
      if (paged_) {
        const bool needs = len / PagedKv::kBlockTokens >= static_cast<int>(slot->paged.blocks.size());
        if (needs && slot->paged.budget_left == 0) continue;
        if (needs) need.push_back(&slot->paged), lens.push_back(len);
      } else if (len + 1 > slot->kv.capacity) {
        continue;
      }
      StepRow r;
      r.slot = slots[i], r.prefix = slot->prefix, r.prefix_len = pre.kv.len, r.suffix_len = len, r.token = 0;
      r.prefix_kv = pre.kv.layout();
      r.suffix_kv = paged_ ? paged_->layout() : slot->kv.layout();
      spec_rows_.push_back(r), spec_batch_.push_back(slot);
    }
    if (!need.empty()) paged_->take(need, lens);  // the block tables grown ahead
    if (paged_)
      for (std::size_t j = 0; j < spec_rows_.size(); ++j) spec_rows_[j].blocks = spec_batch_[j]->paged.blocks;
    if (spec_rows_.empty()) return ahead_->drop();
    const StepLayout lay = planner_->layout(static_cast<int>(spec_rows_.size()), draws != nullptr, false, planner_->table_entries(spec_rows_));
    ahead_->speculate(spec_rows_, draws != nullptr, arena_.stage(lay.capacity));
  } catch (const Error&) {
    ahead_->drop();  // a speculation never fails a step: the next one plans in full
    return;
  }
  attention_->speculate(spec_batch_, planner_->padded(static_cast<int>(spec_batch_.size())));
}

bool CudaEngine::patch_step(StepProgram& s, std::span<const int> slots, std::span<const int> tokens, const Draws* draws) {
  if (!ahead_->match(slots, tokens)) return false;
  const std::span<const int> src = ahead_->source();
  const auto T = slots.size();
  s.batch.resize(T);
  fresh_rows_.clear();
  std::vector<Slot*> fresh;
  for (std::size_t i = 0; i < T; ++i) {
    if (src[i] >= 0) {
      s.batch[i] = spec_batch_[static_cast<std::size_t>(src[i])];
      continue;
    }
    Slot& slot = slot_at(slots[i]);
    const Prefix& pre = prefix_at(slot.prefix);
    StepRow r;
    r.slot = slots[i], r.prefix = slot.prefix, r.prefix_len = pre.kv.len, r.suffix_len = slot.kv.len, r.token = tokens[i];
    r.prefix_kv = pre.kv.layout();
    fresh_rows_.push_back(r), fresh.push_back(&slot);
    s.batch[i] = &slot;
  }
  if (!fresh_rows_.empty()) planner_->check(fresh_rows_);
  // The fresh rows' room, as plan_step takes it.
  if (paged_) {
    std::vector<PagedSlot*> paged(fresh.size());
    std::vector<int> lens(fresh.size());
    for (std::size_t k = 0; k < fresh.size(); ++k) paged[k] = &fresh[k]->paged, lens[k] = fresh[k]->kv.len;
    paged_->take(paged, lens);
    for (std::size_t k = 0; k < fresh.size(); ++k) fresh_rows_[k].suffix_kv = paged_->layout(), fresh_rows_[k].blocks = fresh[k]->paged.blocks;
  } else {
    for (std::size_t k = 0; k < fresh.size(); ++k) {
      reserve(fresh[k]->kv, fresh[k]->kv.len + 1);
      fresh_rows_[k].suffix_kv = fresh[k]->kv.layout();
    }
  }
  s.T = planner_->padded(static_cast<int>(T));
  size_for_bucket(s.T);
  if (draws) sample_ws_.resize(sample_token_workspace_bytes(s.T, c_.vocab_size, draws->params));
  const StepLayout lay = s.layout = ahead_->layout(fresh_rows_, draws != nullptr);
  const bool inside = ahead_->in_place(fresh_rows_, lay) && arena_.is_current(ahead_->buffer());
  char* out = inside ? arena_.current() : arena_.stage(lay.capacity);
  std::optional<StepDraws> d;
  if (draws) d = StepDraws{draws->prompt, draws->candidate, draws->step};
  ahead_->patch(fresh_rows_, tokens, d ? &*d : nullptr, lay, out);
  arena_.upload(lay.bytes, stream_);
  (inside ? ahead_stats_.in_place : ahead_stats_.copied)++;
  return true;
}

}  // namespace bestofn::cuda
