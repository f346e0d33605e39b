// A decode step's program (src/cuda/step_program.h): its rows checked, their index arrays laid out,
// written into a pinned staging buffer and uploaded in one copy, the attention path's plan made;
// then, while the device runs it, the next step's program speculated.
//
// Step t+1 prepared while step t runs (src/cuda/step_ahead.h): speculate, between launching
// step t and waiting for its ids, writes step t+1 as "every row again, one further" into the next
// staging buffer; patch, once the scheduler's batch comes, keeps what held and writes the rest.
// The attention path plans the speculated batch too (cascade attention: its groups, FlashInfer's
// schedules, their upload), used when the batch is exactly that one (prepare). Off where the
// attention's plan hangs on the prompts' groups (prefix-GEMM attention: its state-row map is in the
// step's arrays; a full plan each step there).
#include "cuda/step_program.h"

#include <optional>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/attention_paths.h"

namespace bestofn::cuda {
namespace {

// The sampling indexes of a step's rows, as the planner writes them (none without device sampling).
std::optional<StepDraws> draw_indexes(const DeviceDraws* draws) {
  if (!draws) return std::nullopt;
  return StepDraws{draws->prompt, draws->candidate, draws->step};
}

}  // namespace

StepProgrammer::StepProgrammer(const StepProgramSetup& setup) : setup_(setup), planner_(setup.plan) {
  if (setup_.attention->can().ahead) ahead_ = std::make_unique<StepAhead>(planner_);
}

std::size_t StepProgrammer::capacity(int T, bool draws) const {
  return planner_.layout(T, draws, setup_.attention->can().grouped, 0).capacity;
}

// O(batch) host work: the rows' descriptors gathered, checked and grouped by the step planner
// (src/cuda/step_plan.h: stamps, not searches), written straight into a pinned staging buffer and
// uploaded in one copy; the per-layer pointers are expanded on the device by forward.
StepProgram StepProgrammer::prepare(std::span<const int> slots, std::span<const int> tokens, const DeviceDraws* draws,
                                     std::span<const int> runs) {
  StepProgram s;
  s.real = static_cast<int>(slots.size());
  bool patched = false;
  try {
    // A step of runs is never the speculated one ("every row again, one further").
    patched = runs.empty() && ahead_ && ahead_->valid() && patch(s, slots, tokens, draws);
  } catch (...) {
    ahead_->drop();
    throw;
  }
  if (!patched) {
    if (ahead_) ahead_->drop();
    plan(s, slots, tokens, draws, runs);
    stats_.full++;
  }
  bind(s, draws);
  // The attention's plan: the one made while the last step ran may hold when the batch is the
  // speculated one row for row (cascade attention: and nothing has touched its pages since).
  setup_.attention->plan(s, patched && ahead_->exact());
  return s;
}

// The full plan: every row's descriptors gathered, checked, the arrays written and uploaded.
void StepProgrammer::plan(StepProgram& s, std::span<const int> slots, std::span<const int> tokens, const DeviceDraws* draws,
                          std::span<const int> runs) {
  const int T = s.real;
  const auto n_real = static_cast<std::size_t>(T);
  std::vector<StepRow>& rows = rows_;
  rows.resize(n_real);
  s.batch.resize(n_real);
  for (std::size_t i = 0; i < n_real; ++i) {
    Slot& slot = slot_at(slots[i]);
    rows[i] = row_of(slots[i], slot, runs.empty() ? 0 : runs[i], tokens[i]);
    s.batch[i] = &slot;
  }
  planner_.check(rows);  // nothing below runs for a batch that fails its checks
  make_room(rows, s.batch);
  const int Tn = s.T = planner_.padded(T);
  setup_.size_for(Tn, draws ? &draws->params : nullptr);
  // Prefix-GEMM attention: the rows grouped by prompt, and their state-row map written with the
  // arrays where the step is grouped.
  AttentionPath& attention = *setup_.attention;
  const std::span<const int> map = attention.can().grouped ? attention.group(planner_.group(rows), Tn) : std::span<const int>();
  s.grouped = !map.empty();
  const StepLayout& lay = s.layout = planner_.layout(T, draws != nullptr, s.grouped, planner_.table_entries(rows));
  char* staged = setup_.arena->stage(lay.capacity);
  const std::optional<StepDraws> d = draw_indexes(draws);
  planner_.write(rows, lay, d ? &*d : nullptr, map, staged);
  setup_.arena->upload(bucket_of(s.T), lay.bytes, setup_.stream);
}

StepRow StepProgrammer::row_of(int handle, const Slot& slot, int run, int token) const {
  const Prefix& pre = prefix_at(slot.prefix);
  StepRow r;
  r.slot = handle, r.run = run, r.prefix = slot.prefix, r.prefix_len = pre.kv.len, r.suffix_len = slot.kv.len + run, r.token = token;
  r.prefix_kv = pre.kv.layout();
  return r;
}

// Each row's suffix: the slot's own contiguous part, grown first, or the block pools with the
// blocks taken that this step's rows reach (paged KV). A run's last row reaches the furthest:
// the blocks and the growth are its, and the rows' layouts are read after every part has grown.
void StepProgrammer::make_room(std::span<StepRow> rows, std::span<Slot* const> batch) {
  const std::size_t n = rows.size();
  auto last_of_run = [&](std::size_t i) { return i + 1 == n || rows[i + 1].run == 0; };
  if (setup_.paged) {
    room_slots_.clear(), room_lens_.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (last_of_run(i)) room_slots_.push_back(&batch[i]->paged), room_lens_.push_back(rows[i].suffix_len);
    setup_.paged->take(room_slots_, room_lens_);
    const KvLayout pools = setup_.paged->layout();
    for (std::size_t i = 0; i < n; ++i) rows[i].suffix_kv = pools, rows[i].blocks = batch[i]->paged.blocks;
  } else {
    for (std::size_t i = 0; i < n; ++i)
      if (last_of_run(i)) setup_.grow_suffix(batch[i]->kv, rows[i].suffix_len + 1);
    for (std::size_t i = 0; i < n; ++i) rows[i].suffix_kv = batch[i]->kv.layout();
  }
}

// The device addresses of the staged arrays.
void StepProgrammer::bind(StepProgram& s, const DeviceDraws* draws) const {
  const StepLayout& lay = s.layout;
  const auto n = static_cast<std::size_t>(s.T);
  StepArena& arena = *setup_.arena;
  const int bucket = bucket_of(s.T);
  s.tokens = arena.at<int>(bucket, lay.tokens);
  s.pos = arena.at<int>(bucket, lay.pos);
  s.lens = arena.at<int>(bucket, lay.lens);
  s.draws = draws ? arena.at<std::uint64_t>(bucket, lay.draws) : nullptr;
  s.map = s.grouped ? arena.at<int>(bucket, lay.map) : nullptr;
  s.desc = arena.at<StepRowDesc>(bucket, lay.desc);
  const auto L = static_cast<std::size_t>(planner_.config().n_layers);
  s.rows = setup_.pointers->get<std::uint16_t*>();
  s.ptrs = setup_.pointers->get<const std::uint16_t*>() + 2 * L * n;
  s.starts = setup_.paged ? arena.at<int>(bucket, lay.starts) : nullptr;
  s.tables = setup_.paged ? arena.at<int>(bucket, lay.tables) : nullptr;
  s.block = setup_.paged ? PagedKv::kBlockTokens : 0;
}

bool StepProgrammer::patch(StepProgram& s, std::span<const int> slots, std::span<const int> tokens, const DeviceDraws* draws) {
  if (!ahead_->match(slots, tokens)) return false;
  const std::span<const int> src = ahead_->source();
  const auto T = slots.size();
  s.batch.resize(T);
  fresh_rows_.clear(), fresh_batch_.clear();
  for (std::size_t i = 0; i < T; ++i) {
    if (src[i] >= 0) {
      s.batch[i] = spec_batch_[static_cast<std::size_t>(src[i])];
      continue;
    }
    Slot& slot = slot_at(slots[i]);
    fresh_rows_.push_back(row_of(slots[i], slot, 0, tokens[i])), fresh_batch_.push_back(&slot);
    s.batch[i] = &slot;
  }
  if (!fresh_rows_.empty()) planner_.check(fresh_rows_);
  make_room(fresh_rows_, fresh_batch_);  // the fresh rows' room, as plan takes it
  s.T = planner_.padded(static_cast<int>(T));
  setup_.size_for(s.T, draws ? &draws->params : nullptr);
  const StepLayout lay = s.layout = ahead_->layout(fresh_rows_, draws != nullptr);
  const bool inside = ahead_->in_place(fresh_rows_, lay) && setup_.arena->is_current(ahead_->buffer());
  char* out = inside ? setup_.arena->current() : setup_.arena->stage(lay.capacity);
  const std::optional<StepDraws> d = draw_indexes(draws);
  ahead_->patch(fresh_rows_, tokens, d ? &*d : nullptr, lay, out);
  setup_.arena->upload(bucket_of(s.T), lay.bytes, setup_.stream);
  (inside ? stats_.in_place : stats_.copied)++;
  return true;
}

void StepProgrammer::speculate(std::span<const int> slots, const StepProgram& s, const DeviceDraws* draws) {
  if (!ahead_) return;
  try {
    spec_rows_.clear(), spec_batch_.clear(), room_slots_.clear(), room_lens_.clear();
    for (std::size_t i = 0; i < s.batch.size(); ++i) {
      Slot* slot = s.batch[i];
      const Prefix& pre = prefix_at(slot->prefix);
      const int len = slot->kv.len;  // after this step
      // Rows that cannot go on without what a step may not do here are left out (fresh if fed):
      // at the context; unpaged, past their part (growing it synchronizes); paged, needing a block
      // outside their promise (take would refuse it).
      if (pre.kv.len + len >= planner_.config().max_positions) continue;
      if (setup_.paged) {
        const bool needs = len / PagedKv::kBlockTokens >= static_cast<int>(slot->paged.blocks.size());
        if (needs && slot->paged.budget_left == 0) continue;
        if (needs) room_slots_.push_back(&slot->paged), room_lens_.push_back(len);
      } else if (len + 1 > slot->kv.capacity) {
        continue;
      }
      StepRow r = row_of(slots[i], *slot, 0, 0);
      r.suffix_kv = setup_.paged ? setup_.paged->layout() : slot->kv.layout();
      spec_rows_.push_back(r), spec_batch_.push_back(slot);
    }
    if (!room_slots_.empty()) setup_.paged->take(room_slots_, room_lens_);  // the block tables grown ahead
    if (setup_.paged)
      for (std::size_t j = 0; j < spec_rows_.size(); ++j) spec_rows_[j].blocks = spec_batch_[j]->paged.blocks;
    if (spec_rows_.empty()) return ahead_->drop();
    const StepLayout lay = planner_.layout(static_cast<int>(spec_rows_.size()), draws != nullptr, false, planner_.table_entries(spec_rows_));
    ahead_->speculate(spec_rows_, draws != nullptr, setup_.arena->stage(lay.capacity));
  } catch (const Error&) {
    ahead_->drop();  // a speculation never fails a step: the next one plans in full
    return;
  }
  setup_.attention->speculate(spec_batch_, planner_.padded(static_cast<int>(spec_batch_.size())));
}

}  // namespace bestofn::cuda
