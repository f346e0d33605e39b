// Step t+1 speculated while step t runs, then patched to the batch that comes
// (src/cuda/step_ahead.h): over random runs of steps in which rows finish, are admitted (their slot
// handles reused), are reordered and leave the speculation (at the end of their part or promise),
// across bucket changes, padded and not, paged and not, the patched arrays equal byte for byte
// (every staged array, over its rows) what a fresh StepPlanner::write of the same batch stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/step_ahead.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {
namespace {

constexpr std::size_t kRowBytes = 32;
constexpr int kBlock = 16, kContext = 90, kPrefixes = 5, kScratch = 1 << 20;

struct Slot {
  bool live = false;
  int prefix = 0, len = 0, cap = 0, budget = 0;
  std::uint64_t base = 0;
  std::vector<int> blocks;
};

// What the engine keeps and the scheduler does, in miniature.
struct World {
  bool paged;
  std::mt19937_64 rng;
  std::vector<Slot> slots;
  std::vector<int> prefix_len;
  std::uint64_t next_base = 0x10000000;
  int next_block = 0;

  World(bool p, std::uint64_t seed) : paged(p), rng(seed) {
    for (int i = 0; i < kPrefixes; ++i) prefix_len.push_back(1 + static_cast<int>(rng() % 30));
  }
  int pick(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }
  void place(Slot& s, int cap) { s.base = next_base, s.cap = cap, next_base += 2ull * 4 * static_cast<std::uint64_t>(cap) * kRowBytes + 4096; }
  int add() {  // the smallest free handle, as HandleTable::put
    std::size_t h = 0;
    while (h < slots.size() && slots[h].live) ++h;
    if (h == slots.size()) slots.emplace_back();
    Slot& s = slots[h];
    s = Slot{};
    s.live = true, s.prefix = pick(kPrefixes), s.len = pick(8), s.budget = 1 + pick(3);
    place(s, 4 + pick(20));
    for (int b = 0; b <= s.len / kBlock; ++b) s.blocks.push_back(next_block++);
    return static_cast<int>(h);
  }
  bool can_continue(const Slot& s) const { return prefix_len[static_cast<std::size_t>(s.prefix)] + s.len < kContext; }
  bool needs_block(const Slot& s) const { return s.len / kBlock >= static_cast<int>(s.blocks.size()); }
  // The room for the slot's next row, as a step takes it (unpaged: the part grows and moves).
  void make_room(Slot& s) {
    if (paged && needs_block(s)) s.blocks.push_back(next_block++), s.budget = std::max(s.budget - 1, 0);
    if (!paged && s.len + 1 > s.cap) place(s, 2 * s.cap);
  }
  StepRow row(int h, int token) const {
    const Slot& s = slots[static_cast<std::size_t>(h)];
    StepRow r;
    r.slot = h, r.prefix = s.prefix, r.prefix_len = prefix_len[static_cast<std::size_t>(s.prefix)], r.suffix_len = s.len, r.token = token;
    r.prefix_kv = {0x1000u + 64u * static_cast<std::uint64_t>(s.prefix), 0x2000u, 4096};
    const std::uint64_t half = static_cast<std::uint64_t>(s.cap) * kRowBytes;
    r.suffix_kv = paged ? KvLayout{0x900000000ull, 0x980000000ull, 0x100000000ull} : KvLayout{s.base, s.base + half, 2 * half};
    if (paged) r.blocks = s.blocks;
    return r;
  }
};

StepPlanConfig config(bool paged, bool pad) {
  StepPlanConfig c;
  c.n_layers = 4, c.vocab = 1000, c.max_positions = kContext, c.row_bytes = kRowBytes;
  c.block_tokens = paged ? kBlock : 0;
  c.table_capacity = paged ? 4096 : 0;
  c.pad = pad;
  c.padding_prefix = {0x5000, 0x6000, 256}, c.padding_suffix = paged ? KvLayout{0x900000000ull, 0x980000000ull, 0x100000000ull} : KvLayout{0x7000, 0x8000, 256};
  c.scratch_block = paged ? kScratch : -1;
  return c;
}

// Every staged array over its rows (the alignment gaps between them are never read).
void expect_same_arrays(const StepLayout& a, const char* x, const StepLayout& b, const char* y, std::size_t entries, const std::string& where) {
  ASSERT_EQ(a.padded, b.padded) << where;
  const auto n = static_cast<std::size_t>(a.padded);
  auto same = [&](std::size_t oa, std::size_t ob, std::size_t bytes, const char* what) {
    EXPECT_EQ(oa, ob) << where << ": " << what << " offset";
    EXPECT_EQ(std::memcmp(x + oa, y + ob, bytes), 0) << where << ": " << what;
  };
  same(a.tokens, b.tokens, n * 4, "tokens");
  same(a.pos, b.pos, n * 4, "pos");
  same(a.lens, b.lens, 2 * n * 4, "lens");
  same(a.desc, b.desc, n * sizeof(StepRowDesc), "desc");
  ASSERT_EQ(a.draws == StepLayout::kAbsent, b.draws == StepLayout::kAbsent);
  if (a.draws != StepLayout::kAbsent) same(a.draws, b.draws, 3 * n * 8, "draws");
  if (a.starts != StepLayout::kAbsent) same(a.starts, b.starts, n * 4, "starts"), same(a.tables, b.tables, entries * 4, "tables");
  EXPECT_EQ(a.bytes, b.bytes) << where;
  EXPECT_EQ(a.capacity, b.capacity) << where;
}

void run(bool paged, bool pad, std::uint64_t seed) {
  World w(paged, seed);
  StepPlanner fresh_planner(config(paged, pad)), planner(config(paged, pad));
  StepAhead ahead(planner);
  std::vector<char> buf[2] = {std::vector<char>(1 << 20), std::vector<char>(1 << 20)}, want(1 << 20);
  int spec_buf = 0, in_place = 0, copied = 0, full = 0, exact = 0;
  std::vector<int> batch;
  std::vector<StepRow> spec;               // the last speculation's rows
  std::vector<std::vector<int>> spec_tables;  // and their block tables, copied (a slot's table may move)
  for (int i = 0; i < 20; ++i) batch.push_back(w.add());
  for (int step = 0; step < 400; ++step) {
    const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
    const auto T = batch.size();
    std::vector<int> tokens(T);
    std::vector<std::uint64_t> d0(T), d1(T), d2(T);
    for (std::size_t i = 0; i < T; ++i) tokens[i] = w.pick(1000), d0[i] = w.rng(), d1[i] = w.rng(), d2[i] = w.rng();
    const bool with_draws = step % 3 != 0;
    const StepDraws draws{d0, d1, d2};
    // The patch, where the speculation helps: the fresh rows' room taken first, as the engine does.
    const bool matched = ahead.match(batch, tokens);
    std::vector<StepRow> fresh;
    if (matched)
      for (std::size_t i = 0; i < T; ++i)
        if (ahead.source()[i] < 0) w.make_room(w.slots[static_cast<std::size_t>(batch[i])]), fresh.push_back(w.row(batch[i], tokens[i]));
    // The fresh plan of the same batch (every row's room is there now).
    std::vector<StepRow> rows;
    for (std::size_t i = 0; i < T; ++i) w.make_room(w.slots[static_cast<std::size_t>(batch[i])]), rows.push_back(w.row(batch[i], tokens[i]));
    fresh_planner.check(rows);
    const StepLayout want_lay = fresh_planner.layout(static_cast<int>(T), with_draws, false, fresh_planner.table_entries(rows));
    fresh_planner.write(rows, want_lay, with_draws ? &draws : nullptr, {}, want.data());
    // exact(): the batch is the speculated one, row for row (what --cascade-attention's plan made
    // ahead needs), and only then.
    bool same_rows = step > 0 && rows.size() == spec.size();
    for (std::size_t i = 0; same_rows && i < T; ++i) {
      const StepRow &a = rows[i], &b = spec[i];
      same_rows = a.slot == b.slot && a.prefix == b.prefix && a.prefix_len == b.prefix_len && a.suffix_len == b.suffix_len &&
                  std::ranges::equal(a.blocks, spec_tables[i]) && a.suffix_kv.k == b.suffix_kv.k && a.prefix_kv.k == b.prefix_kv.k;
    }
    EXPECT_EQ(ahead.exact(), same_rows) << where;
    exact += ahead.exact() ? 1 : 0;
    if (matched) {
      const StepLayout lay = ahead.layout(fresh, with_draws);
      const bool inside = ahead.in_place(fresh, lay);
      char* out = inside ? buf[spec_buf].data() : buf[1 - spec_buf].data();
      ahead.patch(fresh, tokens, with_draws ? &draws : nullptr, lay, out);
      expect_same_arrays(lay, out, want_lay, want.data(), fresh_planner.table_entries(rows), where);
      (inside ? in_place : copied)++;
      if (::testing::Test::HasFailure()) return;
    } else {
      ++full;
    }
    // The step runs; step t + 1 is speculated: every row that can go on, one further, its block taken ahead.
    for (int h : batch) w.slots[static_cast<std::size_t>(h)].len++;
    spec.clear(), spec_tables.clear();
    for (int h : batch) {
      Slot& s = w.slots[static_cast<std::size_t>(h)];
      if (!w.can_continue(s) || (!paged && s.len + 1 > s.cap) || (paged && w.needs_block(s) && s.budget == 0)) continue;
      w.make_room(s);
      spec.push_back(w.row(h, 0));
      spec_tables.emplace_back(spec.back().blocks.begin(), spec.back().blocks.end());
    }
    spec_buf = 1 - spec_buf;
    ahead.speculate(spec, step % 3 != 2, buf[spec_buf].data());
    // The scheduler: rows end (at the context always, else at random), rows are admitted at the
    // end (sometimes in the middle), sometimes two swap, sometimes most of the batch changes.
    std::vector<int> next;
    const int churn = step % 37 == 36 ? 80 : 6;
    for (int h : batch) {
      Slot& s = w.slots[static_cast<std::size_t>(h)];
      if (!w.can_continue(s) || w.pick(100) < churn) {
        s.live = false, ahead.forget(h);
        continue;
      }
      next.push_back(h);
    }
    const int target = 1 + static_cast<int>(60 + 58 * std::sin(step / 25.0));  // crosses buckets both ways
    while (static_cast<int>(next.size()) < target) {
      const int h = w.add();
      if (w.pick(10) == 0 && !next.empty()) next.insert(next.begin() + w.pick(static_cast<int>(next.size())), h);
      else next.push_back(h);
    }
    if (next.size() > 2 && w.pick(8) == 0) std::swap(next[static_cast<std::size_t>(w.pick(static_cast<int>(next.size())))], next.back());
    if (next.empty()) next.push_back(w.add());
    batch = next;
  }
  EXPECT_GT(in_place, 20) << "seed " << seed;
  EXPECT_GT(copied, 5) << "seed " << seed;
  EXPECT_GT(full, 3) << "seed " << seed;
  EXPECT_GT(exact, 8) << "seed " << seed;  // small batches (the sine's troughs) often keep every row
}

TEST(StepAhead, PatchedPlanEqualsAFreshPlan) {
  for (const bool paged : {false, true})
    for (const bool pad : {false, true})
      for (std::uint64_t seed : {1u, 2u}) {
        SCOPED_TRACE(std::string(paged ? "paged" : "unpaged") + (pad ? ", padded" : ", unpadded"));
        run(paged, pad, seed);
      }
}

// The error's message, or "" when f does not throw.
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// exact(): the speculated rows, all of them, in their order; not a reordering, a subset or a
// superset of them, nor after the speculation was consumed or dropped.
TEST(StepAhead, ExactOnlyForTheSpeculatedBatchInItsOrder) {
  StepPlanner planner(config(false, false));
  StepAhead ahead(planner);
  World w(false, 3);
  const std::vector<int> slots = {w.add(), w.add(), w.add()};
  std::vector<StepRow> spec;
  for (int h : slots) spec.push_back(w.row(h, 0));
  std::vector<char> buf(1 << 20);
  auto check = [&](std::vector<int> batch, bool want) {
    ahead.speculate(spec, false, buf.data());
    ahead.match(batch, std::vector<int>(batch.size(), 1));
    EXPECT_EQ(ahead.exact(), want) << "batch of " << batch.size();
  };
  check(slots, true);
  check({slots[1], slots[0], slots[2]}, false);
  check({slots[0], slots[1]}, false);
  check({slots[0], slots[1], slots[2], w.add()}, false);
  ahead.speculate(spec, false, buf.data());
  ahead.drop();
  ahead.match(slots, std::vector<int>(3, 1));
  EXPECT_FALSE(ahead.exact());
}

TEST(StepAhead, MatchChecksTheBatchAsThePlannerDoes) {
  StepPlanner planner(config(false, false));
  StepAhead ahead(planner);
  const std::vector<int> tokens = {1, 2};
  EXPECT_FALSE(ahead.match(std::vector<int>{3, 4}, tokens));  // nothing speculated: a full plan
  EXPECT_EQ(message_of([&] { ahead.match(std::vector<int>{3, 3}, tokens); }), "decode: slot 3 appears twice in one step");
  EXPECT_EQ(message_of([&] { ahead.match(std::vector<int>{3, 4}, std::vector<int>{1, 1000}); }), "token id 1000 is outside the vocabulary");
  EXPECT_EQ(message_of([&] { ahead.match(std::vector<int>{}, std::vector<int>{}); }), "decode: an empty batch");
}

}  // namespace
}  // namespace bestofn::cuda
