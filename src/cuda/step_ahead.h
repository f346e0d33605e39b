#pragma once
// Step t+1's staged arrays prepared while step t runs on the GPU (plain C++ in bestofn_core, tested
// and benchmarked without a device). After launching step t the engine speculates that every row of
// step t is fed again, in the same order, one position further (its block table grown ahead where
// the next row starts a block; a row that cannot continue, at the context or at the end of its
// promise, is left out), and writes that batch with the step planner into a staging buffer; tokens
// and draw indexes are not known yet. When step t+1 comes, `match` finds each of its rows in the
// speculation (a per-slot stamp: one lookup per row) and `patch` turns the speculated arrays into
// exactly the arrays a fresh StepPlanner::write of the batch gives:
//   - the tokens and draw indexes: copied from the call (the step's data, 4 + 24 bytes a row);
//   - rows at their speculated place: nothing (in place);
//   - runs of rows that moved (rows before them finished; reordered): their position, lengths,
//     descriptor and block table moved by memmove, one per run and array, the table starts shifted;
//   - rows that were not speculated (admitted since, or left out): written fresh by the planner;
//   - the padding rows up to the bucket: written again.
// In place when the layout is the speculation's (the same bucket, or the same T unpadded) and no
// row moves right (every row's source at or after it, tables likewise: finishes and admissions at
// the end, the scheduler's pattern); otherwise the runs are copied into another buffer. `match`
// says no (a full plan, StepPlanner::write) when fewer than half the rows were speculated.
//
// The speculated rows' lengths and tables stay true until the slot is fed again or released:
// release_slot calls forget(slot) (a handle may come back as another slot), and the engine drops
// the speculation at any step that does not consume it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/step_plan.h"

namespace bestofn::cuda {

class StepAhead {
 public:
  explicit StepAhead(const StepPlanner& planner) : planner_(planner) {}

  // The speculated batch `rows` (tokens arbitrary) written into `out`, which holds at least
  // layout().capacity bytes: planner.layout(rows.size(), with_draws, no map, its tables).
  void speculate(std::span<const StepRow> rows, bool with_draws, char* out);
  void forget(int slot) {
    if (static_cast<std::size_t>(slot) < row_stamp_.size()) row_stamp_[static_cast<std::size_t>(slot)] = 0;
  }
  void drop() { valid_ = false; }
  bool valid() const { return valid_; }
  const char* buffer() const { return buf_; }
  const StepLayout& speculated_layout() const { return spec_; }

  // Each row of the batch `slots` found in the speculation (source(): its speculated row, -1 when
  // it is not there), its token checked. Throws a one-line bestofn::Error, nothing changed, for a
  // slot twice or a token outside the vocabulary (StepPlanner::check's words). false, with the
  // speculation kept, where a full plan is the better way: none, or fewer than half the rows found.
  bool match(std::span<const int> slots, std::span<const int> tokens);
  std::span<const int> source() const { return src_; }
  int fresh_rows() const { return fresh_; }
  // The last match found the speculated batch itself: the same rows in the same order, none fresh,
  // none left out. Everything else derived from the speculated rows (cascade attention's groups
  // and FlashInfer's schedules, made while step t ran) then holds for the step as it is.
  bool exact() const { return exact_; }

  // The layout of the matched batch: `fresh` holds the rows with source -1, in batch order.
  StepLayout layout(std::span<const StepRow> fresh, bool with_draws) const;
  // Whether patch may write into buffer() itself for this layout (see above).
  bool in_place(std::span<const StepRow> fresh, const StepLayout& lay) const;
  // Writes the matched batch's arrays into `out` (buffer(), when in_place, or another buffer of
  // lay.capacity bytes). The speculation is consumed (invalid after).
  void patch(std::span<const StepRow> fresh, std::span<const int> tokens, const StepDraws* draws, const StepLayout& lay, char* out);

 private:
  const StepPlanner& planner_;
  bool valid_ = false;
  char* buf_ = nullptr;
  StepLayout spec_;
  std::uint32_t epoch_ = 0, seen_epoch_ = 0;
  std::vector<std::uint32_t> row_stamp_;   // per slot handle: epoch_ when it is row row_of_[slot] of the speculation
  std::vector<int> row_of_;
  std::vector<std::uint32_t> seen_;        // per slot handle: seen_epoch_ when match saw it
  std::vector<int> table_at_, table_len_;  // per speculated row: its table in the staged tables
  std::vector<int> src_;
  int fresh_ = 0;
  std::size_t spec_rows_ = 0;  // the speculated batch's rows
  bool exact_ = false;
  std::size_t matched_entries_ = 0;        // the table entries of the rows match found
  std::vector<std::uint64_t> zeros_;       // the speculation's draw indexes (the call's replace them)
};

}  // namespace bestofn::cuda
