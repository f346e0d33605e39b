#include "cuda/step_ahead.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "bestofn/util/error.h"

namespace bestofn::cuda {
namespace {

// The next stamp; at wrap-around the stamps are cleared first, so an old one never matches.
std::uint32_t next_stamp(std::uint32_t& epoch, std::vector<std::uint32_t>& stamps) {
  if (++epoch == 0) std::fill(stamps.begin(), stamps.end(), 0u), epoch = 1;
  return epoch;
}

template <typename T>
void grow_to(std::vector<T>& v, std::size_t i) {
  if (i >= v.size()) v.resize(std::max(i + 1, 2 * v.size()), T{});
}

// Moves `count` elements of `bytes` each from row j of the array at `from` (in `in`) to row i of
// the array at `to` (in `out`); the two may overlap (in place).
void move_rows(char* out, std::size_t to, std::size_t i, const char* in, std::size_t from, std::size_t j, std::size_t count,
               std::size_t bytes) {
  std::memmove(out + to + i * bytes, in + from + j * bytes, count * bytes);
}

}  // namespace

void StepAhead::speculate(std::span<const StepRow> rows, bool with_draws, char* out) {
  valid_ = false;
  if (rows.empty()) return;
  const std::uint32_t e = next_stamp(epoch_, row_stamp_);
  const StepLayout lay = planner_.layout(static_cast<int>(rows.size()), with_draws, false, planner_.table_entries(rows));
  zeros_.assign(rows.size(), 0);
  const StepDraws none{zeros_, zeros_, zeros_};
  planner_.write(rows, lay, with_draws ? &none : nullptr, {}, out);
  table_at_.resize(rows.size()), table_len_.resize(rows.size());
  int at = 0;
  for (std::size_t j = 0; j < rows.size(); ++j) {
    const auto slot = static_cast<std::size_t>(rows[j].slot);
    grow_to(row_stamp_, slot), grow_to(row_of_, slot);
    row_stamp_[slot] = e, row_of_[slot] = static_cast<int>(j);
    table_at_[j] = at, table_len_[j] = static_cast<int>(rows[j].blocks.size());
    at += table_len_[j];
  }
  spec_ = lay, buf_ = out, valid_ = true, spec_rows_ = rows.size();
}

bool StepAhead::match(std::span<const int> slots, std::span<const int> tokens) {
  if (slots.empty()) throw Error("decode: an empty batch");
  const std::uint32_t e = next_stamp(seen_epoch_, seen_);
  const int vocab = planner_.config().vocab;
  src_.resize(slots.size());
  fresh_ = 0, matched_entries_ = 0, exact_ = false;
  bool in_order = valid_ && slots.size() == spec_rows_;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const int s = slots[i];
    int j = -1;
    if (s >= 0) {
      const auto h = static_cast<std::size_t>(s);
      grow_to(seen_, h);
      if (seen_[h] == e) throw Error("decode: slot " + std::to_string(s) + " appears twice in one step");
      seen_[h] = e;
      if (valid_ && h < row_stamp_.size() && row_stamp_[h] == epoch_) j = row_of_[h];
    }
    if (tokens[i] < 0 || tokens[i] >= vocab) throw Error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
    src_[i] = j;
    in_order = in_order && j == static_cast<int>(i);
    if (j < 0) ++fresh_;
    else matched_entries_ += static_cast<std::size_t>(table_len_[static_cast<std::size_t>(j)]);
  }
  exact_ = in_order;
  return valid_ && 2 * static_cast<std::size_t>(fresh_) <= slots.size();
}

StepLayout StepAhead::layout(std::span<const StepRow> fresh, bool with_draws) const {
  std::size_t entries = 0;
  if (planner_.config().block_tokens > 0) {
    entries = matched_entries_;
    for (const StepRow& r : fresh) entries += r.blocks.size();
    const int T = static_cast<int>(src_.size());
    if (planner_.padded(T) > T) entries += 1;  // the padding rows' table
  }
  return planner_.layout(static_cast<int>(src_.size()), with_draws, false, entries);
}

bool StepAhead::in_place(std::span<const StepRow> fresh, const StepLayout& lay) const {
  if (lay.padded != spec_.padded || lay.draws != spec_.draws || lay.map != spec_.map || lay.capacity > spec_.capacity) return false;
  const bool paged = planner_.config().block_tokens > 0;
  std::size_t k = 0;
  int cursor = 0;
  for (std::size_t i = 0; i < src_.size(); ++i) {
    const int j = src_[i];
    if (j < 0) {
      cursor += static_cast<int>(fresh[k++].blocks.size());
      continue;
    }
    const auto sj = static_cast<std::size_t>(j);
    if (sj < i || (paged && cursor > table_at_[sj])) return false;  // would overwrite what a later row still reads
    cursor += table_len_[sj];
  }
  return true;
}

void StepAhead::patch(std::span<const StepRow> fresh, std::span<const int> tokens, const StepDraws* draws, const StepLayout& lay,
                      char* out) {
  if (!valid_ || tokens.size() != src_.size() || static_cast<int>(src_.size()) != lay.T)
    throw Error("StepAhead::patch: the batch is not the one matched");
  const char* in = buf_;
  const bool same = out == buf_, paged = planner_.config().block_tokens > 0;
  const auto T = src_.size(), n = static_cast<std::size_t>(lay.padded), ns = static_cast<std::size_t>(spec_.padded);
  std::size_t k = 0;
  int cursor = 0;
  for (std::size_t i = 0; i < T;) {
    const int j = src_[i];
    if (j < 0) {
      if (k >= fresh.size()) throw Error("StepAhead::patch: fewer fresh rows than the batch has");
      cursor += planner_.write_row(fresh[k++], lay, i, cursor, out);
      ++i;
      continue;
    }
    const auto sj = static_cast<std::size_t>(j);
    std::size_t len = 1;
    while (i + len < T && src_[i + len] == j + static_cast<int>(len)) ++len;
    const int entries = table_at_[sj + len - 1] + table_len_[sj + len - 1] - table_at_[sj];
    if (!(same && i == sj && cursor == table_at_[sj])) {  // a run that moved: its rows, then its tables
      move_rows(out, lay.pos, i, in, spec_.pos, sj, len, 4);
      move_rows(out, lay.lens, i, in, spec_.lens, sj, len, 4);
      move_rows(out, lay.lens, n + i, in, spec_.lens, ns + sj, len, 4);
      move_rows(out, lay.desc, i, in, spec_.desc, sj, len, sizeof(StepRowDesc));
      if (paged) {
        move_rows(out, lay.tables, static_cast<std::size_t>(cursor), in, spec_.tables, static_cast<std::size_t>(table_at_[sj]),
                  static_cast<std::size_t>(entries), 4);
        int* starts = reinterpret_cast<int*>(out + lay.starts) + i;
        for (std::size_t m = 0; m < len; ++m) starts[m] = table_at_[sj + m] - table_at_[sj] + cursor;
      }
    }
    cursor += paged ? entries : 0;
    i += len;
  }
  planner_.write_padding(lay, cursor, out);
  std::memcpy(out + lay.tokens, tokens.data(), T * 4);
  if (draws) StepPlanner::write_draws(lay, *draws, out);
  valid_ = false;
}

}  // namespace bestofn::cuda
