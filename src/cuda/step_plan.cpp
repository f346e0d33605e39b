#include "cuda/step_plan.h"

#include <algorithm>
#include <cstring>

#include "bestofn/util/error.h"

namespace bestofn::cuda {
namespace {

std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

// Next epoch; at wrap-around every stamp is cleared first, so an old stamp never matches.
std::uint32_t next_epoch(std::uint32_t& epoch, std::vector<std::uint32_t>& a, std::vector<std::uint32_t>& b) {
  if (++epoch == 0) {
    std::fill(a.begin(), a.end(), 0u), std::fill(b.begin(), b.end(), 0u);
    epoch = 1;
  }
  return epoch;
}

// The stamp of handle h, the table grown to cover it (handles are small and dense: HandleTable).
std::uint32_t& stamp_of(std::vector<std::uint32_t>& stamps, int h) {
  const auto i = static_cast<std::size_t>(h);
  if (i >= stamps.size()) stamps.resize(std::max(i + 1, 2 * stamps.size()), 0u);
  return stamps[i];
}

template <typename T>
T* at(char* out, std::size_t off) {
  return reinterpret_cast<T*>(out + off);
}

}  // namespace

int bucket_of(int T) {
  if (T <= 0) throw Error("bucket_of: a batch of " + std::to_string(T) + " rows");
  if (T > kBucketStep) return (T + kBucketStep - 1) / kBucketStep * kBucketStep;
  int b = 1;
  while (b < T) b *= 2;
  return b;
}

std::size_t prefill_arena_bytes(int rows, int prompts, int pass_rows, int n_layers) {
  const auto R = static_cast<std::size_t>(std::max(rows, 1)), L = static_cast<std::size_t>(std::max(n_layers, 1));
  const std::size_t passes = (R + static_cast<std::size_t>(std::max(pass_rows, 1)) - 1) / static_cast<std::size_t>(std::max(pass_rows, 1));
  const std::size_t segments = static_cast<std::size_t>(std::max(prompts, 1)) + passes - 1;
  return 3 * 4 * R + 2 * L * R * 8 + 2 * L * segments * 8 + 5 * 16 * passes;
}

void expand_step_pointers(std::span<const StepRowDesc> desc, int n_layers, std::uint64_t* rows, std::uint64_t* ptrs) {
  const std::size_t T = desc.size();
  for (std::size_t l = 0; l < static_cast<std::size_t>(n_layers); ++l)
    for (std::size_t t = 0; t < T; ++t) {
      const StepRowDesc& d = desc[t];
      const std::uint64_t ps = l * d.prefix_stride, ss = l * d.suffix_stride;
      rows[2 * l * T + t] = d.k_suffix + ss + d.write;
      rows[(2 * l + 1) * T + t] = d.v_suffix + ss + d.write;
      std::uint64_t* p = ptrs + 4 * l * T + t;
      p[0] = d.k_prefix + ps, p[T] = d.v_prefix + ps, p[2 * T] = d.k_suffix + ss, p[3 * T] = d.v_suffix + ss;
    }
}

StepPlanner::StepPlanner(const StepPlanConfig& c) : c_(c) {
  if (c_.n_layers < 1 || c_.vocab < 1 || c_.max_positions < 1 || c_.row_bytes == 0)
    throw Error("StepPlanner: layers, vocabulary, context and row bytes must be positive");
  if (c_.pad && c_.block_tokens > 0 && c_.scratch_block < 0) throw Error("StepPlanner: padding paged rows needs a scratch block");
}

void StepPlanner::check(std::span<const StepRow> rows) {
  if (rows.empty()) throw Error("decode: an empty batch");
  const std::uint32_t e = next_epoch(epoch_, slot_seen_, prefix_seen_);
  for (std::size_t t = 0; t < rows.size(); ++t) {
    const StepRow& r = rows[t];
    std::uint32_t& seen = stamp_of(slot_seen_, r.slot);
    if (r.run > 0) {  // the next position of the run in the row before, nothing else
      const StepRow* prev = t > 0 ? &rows[t - 1] : nullptr;
      if (!prev || prev->slot != r.slot || prev->run != r.run - 1 || prev->suffix_len + 1 != r.suffix_len ||
          prev->prefix != r.prefix)
        throw Error("decode: row " + std::to_string(t) + " (slot " + std::to_string(r.slot) + ", run position " + std::to_string(r.run) +
                    ") does not follow its run's previous position");
    } else if (seen == e) {
      throw Error("decode: slot " + std::to_string(r.slot) + " appears twice in one step");
    } else if (r.run < 0) {
      throw Error("decode: row " + std::to_string(t) + " has run position " + std::to_string(r.run));
    }
    seen = e;
    if (r.prefix_len + r.suffix_len >= c_.max_positions)
      throw Error("slot " + std::to_string(r.slot) + " is at the context limit (" + std::to_string(c_.max_positions) + ")");
    if (r.token < 0 || r.token >= c_.vocab) throw Error("token id " + std::to_string(r.token) + " is outside the vocabulary");
  }
}

const StepGroups& StepPlanner::group(std::span<const StepRow> rows) {
  const std::uint32_t e = next_epoch(epoch_, slot_seen_, prefix_seen_);
  const int T = static_cast<int>(rows.size()), P = padded(T);
  StepGroups& g = groups_;
  g.prefix.clear(), g.first.clear(), g.rows.assign(static_cast<std::size_t>(P), 0);
  counts_.clear();
  std::vector<int> row_group(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) {
    const int p = rows[static_cast<std::size_t>(t)].prefix;
    std::uint32_t& seen = stamp_of(prefix_seen_, p);
    if (static_cast<std::size_t>(p) >= prefix_group_.size()) prefix_group_.resize(prefix_seen_.size());
    if (seen != e) {
      seen = e;
      prefix_group_[static_cast<std::size_t>(p)] = static_cast<int>(g.prefix.size());
      g.prefix.push_back(p), counts_.push_back(0);
    }
    const int gi = prefix_group_[static_cast<std::size_t>(p)];
    row_group[static_cast<std::size_t>(t)] = gi;
    counts_[static_cast<std::size_t>(gi)]++;
  }
  if (P > T) g.prefix.push_back(kPaddingPrefix), counts_.push_back(P - T);
  // Counting sort of the rows by group, batch order kept within a group.
  g.first.assign(counts_.size() + 1, 0);
  for (std::size_t i = 0; i < counts_.size(); ++i) g.first[i + 1] = g.first[i] + counts_[i];
  std::vector<int> fill(g.first.begin(), g.first.end() - 1);
  for (int t = 0; t < T; ++t) g.rows[static_cast<std::size_t>(fill[static_cast<std::size_t>(row_group[static_cast<std::size_t>(t)])]++)] = t;
  for (int t = T; t < P; ++t) g.rows[static_cast<std::size_t>(fill.back()++)] = t;
  return g;
}

StepLayout StepPlanner::layout(int T, bool with_draws, bool with_map, std::size_t table_entries) const {
  StepLayout s;
  s.T = T;
  s.padded = padded(T);
  const auto n = static_cast<std::size_t>(s.padded);
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t off = at;
    at = align16(at + bytes);
    return off;
  };
  s.tokens = take(n * 4);
  s.pos = take(n * 4);
  s.lens = take(2 * n * 4);
  if (with_draws) s.draws = take(3 * n * 8);
  if (with_map) s.map = take(3 * n * 4);
  s.desc = take(n * sizeof(StepRowDesc));
  const bool paged = c_.block_tokens > 0;
  if (paged) s.starts = take(n * 4);
  s.tables = paged ? at : StepLayout::kAbsent;
  s.bytes = std::max<std::size_t>(paged ? at + table_entries * 4 : at, 16);
  // The tables at their most for this many rows: each row's the blocks of a whole context (and one
  // for the padding rows' scratch table), and no more than the pool's blocks, unless the rows of
  // a run repeat their slot's table: then what this step holds.
  std::size_t most = 0;
  if (paged) {
    const auto per_row = static_cast<std::size_t>((c_.max_positions + c_.block_tokens - 1) / c_.block_tokens + 1);
    most = std::max(std::min(c_.table_capacity, n * per_row + 1), table_entries);
  }
  s.capacity = std::max<std::size_t>(paged ? at + most * 4 : at, 16);
  return s;
}

std::size_t StepPlanner::table_entries(std::span<const StepRow> rows) const {
  if (c_.block_tokens <= 0) return 0;
  std::size_t n = 0;
  for (const StepRow& r : rows) n += r.blocks.size();
  return n + (padded(static_cast<int>(rows.size())) > static_cast<int>(rows.size()) ? 1 : 0);
}

int StepPlanner::write_row(const StepRow& r, const StepLayout& lay, std::size_t t, int table_at, char* out) const {
  const auto n = static_cast<std::size_t>(lay.padded);
  at<int>(out, lay.tokens)[t] = r.token;
  at<int>(out, lay.pos)[t] = r.prefix_len + r.suffix_len;
  int* lens = at<int>(out, lay.lens);
  lens[t] = r.prefix_len, lens[n + t] = r.suffix_len + 1;
  std::uint64_t row = static_cast<std::uint64_t>(r.suffix_len);
  if (c_.block_tokens > 0) {
    const auto j = static_cast<std::size_t>(r.suffix_len), bt = static_cast<std::size_t>(c_.block_tokens);
    if (j / bt >= r.blocks.size()) throw Error("StepPlanner::write: slot " + std::to_string(r.slot) + " has no block for its next row");
    row = static_cast<std::uint64_t>(r.blocks[j / bt]) * bt + j % bt;
    at<int>(out, lay.starts)[t] = table_at;
    if (!r.blocks.empty()) std::memcpy(at<int>(out, lay.tables) + table_at, r.blocks.data(), r.blocks.size() * 4);
  }
  at<StepRowDesc>(out, lay.desc)[t] = {r.prefix_kv.k, r.prefix_kv.v, r.prefix_kv.layer_stride, r.suffix_kv.k, r.suffix_kv.v,
                                       r.suffix_kv.layer_stride, row * static_cast<std::uint64_t>(c_.row_bytes)};
  return static_cast<int>(r.blocks.size());
}

void StepPlanner::write_padding(const StepLayout& lay, int table_at, char* out) const {
  const auto T = static_cast<std::size_t>(lay.T), n = static_cast<std::size_t>(lay.padded);
  if (n == T) return;
  // The padding rows: the dummy prefix position and the scratch row, nothing else.
  const KvLayout& pp = c_.padding_prefix;
  const KvLayout& ps = c_.padding_suffix;
  const bool paged = c_.block_tokens > 0;
  std::uint64_t row = 0;
  if (paged) {
    row = static_cast<std::uint64_t>(c_.scratch_block) * static_cast<std::uint64_t>(c_.block_tokens);
    at<int>(out, lay.tables)[table_at] = c_.scratch_block;
  }
  int* tokens = at<int>(out, lay.tokens);
  int* pos = at<int>(out, lay.pos);
  int* lens = at<int>(out, lay.lens);
  auto* desc = at<StepRowDesc>(out, lay.desc);
  for (std::size_t t = T; t < n; ++t) {
    tokens[t] = 0, pos[t] = 1, lens[t] = 1, lens[n + t] = 1;
    if (paged) at<int>(out, lay.starts)[t] = table_at;
    desc[t] = {pp.k, pp.v, pp.layer_stride, ps.k, ps.v, ps.layer_stride, row * static_cast<std::uint64_t>(c_.row_bytes)};
  }
}

void StepPlanner::write_draws(const StepLayout& lay, const StepDraws& draws, char* out) {
  const auto T = static_cast<std::size_t>(lay.T), n = static_cast<std::size_t>(lay.padded);
  auto* d = at<std::uint64_t>(out, lay.draws);
  for (const auto& [i, src] : {std::pair{0u, draws.prompt}, std::pair{1u, draws.candidate}, std::pair{2u, draws.step}}) {
    if (src.size() != T) throw Error("StepPlanner::write: draw indexes for another batch");
    std::memcpy(d + i * n, src.data(), T * 8);
    std::memset(d + i * n + T, 0, (n - T) * 8);
  }
}

void StepPlanner::write(std::span<const StepRow> rows, const StepLayout& lay, const StepDraws* draws, std::span<const int> map,
                        char* out) const {
  const auto T = rows.size(), n = static_cast<std::size_t>(lay.padded);
  if (static_cast<int>(T) != lay.T) throw Error("StepPlanner::write: the layout is for another batch");
  if ((lay.draws != StepLayout::kAbsent) != (draws != nullptr) || (lay.map != StepLayout::kAbsent) != (map.size() == 3 * n))
    throw Error("StepPlanner::write: the layout and the staged arrays disagree");
  int next_table = 0;
  for (std::size_t t = 0; t < T; ++t) next_table += write_row(rows[t], lay, t, next_table, out);
  write_padding(lay, next_table, out);
  if (draws) write_draws(lay, *draws, out);
  if (!map.empty()) std::memcpy(at<int>(out, lay.map), map.data(), map.size() * 4);
}

}  // namespace bestofn::cuda
