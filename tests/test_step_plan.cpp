// The host's part of a CUDA decode step (src/cuda/step_plan.h), without a GPU: the batch-size
// buckets, the batch checks, the prefix groups, the staged arrays and their layout per bucket, the
// padding rows, and the per-layer pointers expanded from the row descriptors against the arrays the
// decode step built on the host before (a reference copy of that loop, over per-layer addresses
// computed from each allocation's layout).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/plan.h"
#include "cuda/step_plan.h"
#include "test_util.h"

namespace bestofn::cuda {
namespace {

constexpr int kLayers = 3;
constexpr std::size_t kRowBytes = 48;
constexpr int kBlockTokens = 16;

// A fake device allocation holding a KV part as the engine lays one out: per layer, `cap` K rows
// then `cap` V rows (the layer stride 2 cap row_bytes).
struct FakePart {
  std::uint64_t base = 0;
  int cap = 0;
  KvLayout layout() const {
    const std::uint64_t half = static_cast<std::uint64_t>(cap) * kRowBytes;
    return {base, base + half, 2 * half};
  }
  // The old engine's pre.kv.k[l] / v[l]: computed from the allocation, not from layout().
  std::uint64_t k(int l) const { return base + static_cast<std::uint64_t>(2 * l) * static_cast<std::uint64_t>(cap) * kRowBytes; }
  std::uint64_t v(int l) const { return base + static_cast<std::uint64_t>(2 * l + 1) * static_cast<std::uint64_t>(cap) * kRowBytes; }
};

// A random batch of `T` slots over `P` prefixes: each prefix and slot its own part, or (paged) a
// block table drawn from a shared pool.
struct Batch {
  std::vector<FakePart> prefix_part, slot_part;
  std::vector<int> prefix_of, prefix_len, suffix_len, token, slot_handle;
  std::vector<std::vector<int>> blocks;
  FakePart pool;  // paged: K of layer l at base + 2 l cap rb, V after (cap = pool rows)
  std::vector<StepRow> rows;

  Batch(int T, int P, bool paged, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uint64_t next = 0x7f0000000000ull;
    auto alloc = [&](int cap) {
      FakePart part{next, cap};
      next += static_cast<std::uint64_t>(2 * kLayers) * static_cast<std::uint64_t>(cap) * kRowBytes + 4096;
      return part;
    };
    for (int p = 0; p < P; ++p) prefix_part.push_back(alloc(16 + static_cast<int>(rng() % 500))), prefix_len.push_back(0);
    for (int p = 0; p < P; ++p) prefix_len[static_cast<std::size_t>(p)] = 1 + static_cast<int>(rng() % 16);
    pool = alloc(1024 * kBlockTokens);
    std::vector<int> free_blocks(1023);  // block 1023: the scratch block of config()
    for (int b = 0; b < 1023; ++b) free_blocks[static_cast<std::size_t>(b)] = b;
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
    for (int t = 0; t < T; ++t) {
      prefix_of.push_back(static_cast<int>(rng() % static_cast<std::uint64_t>(P)));
      const int len = static_cast<int>(rng() % 40);
      suffix_len.push_back(len);
      token.push_back(static_cast<int>(rng() % 1000));
      slot_handle.push_back(3 * t + 1);  // sparse handles
      slot_part.push_back(alloc(std::max(16, len + 1)));
      std::vector<int> b;
      for (int i = 0; i <= len / kBlockTokens; ++i) b.push_back(free_blocks.back()), free_blocks.pop_back();
      blocks.push_back(b);
    }
    for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t) {
      StepRow r;
      r.slot = slot_handle[t];
      r.prefix = prefix_of[t];
      r.prefix_len = prefix_len[static_cast<std::size_t>(r.prefix)];
      r.suffix_len = suffix_len[t];
      r.token = token[t];
      r.prefix_kv = prefix_part[static_cast<std::size_t>(r.prefix)].layout();
      r.suffix_kv = paged ? pool.layout() : slot_part[t].layout();
      if (paged) r.blocks = blocks[t];
      rows.push_back(r);
    }
  }
};

// What the decode step built on the host before this planner (cuda_step.cpp at c6ba6a2), over the
// per-layer addresses of each allocation.
struct Reference {
  std::vector<int> tokens, pos, lens, starts, tables;
  std::vector<std::uint64_t> rows, ptrs;
};
Reference reference(const Batch& b, bool paged) {
  Reference r;
  const std::size_t n = b.rows.size(), L = kLayers;
  for (std::size_t i = 0; i < n; ++i) {
    r.tokens.push_back(b.token[i]);
    r.pos.push_back(b.prefix_len[static_cast<std::size_t>(b.prefix_of[i])] + b.suffix_len[i]);
  }
  r.lens.resize(2 * n);
  for (std::size_t i = 0; i < n; ++i) r.lens[i] = b.prefix_len[static_cast<std::size_t>(b.prefix_of[i])], r.lens[n + i] = b.suffix_len[i] + 1;
  r.rows.resize(2 * L * n), r.ptrs.resize(4 * L * n);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < n; ++i) {
      const int li = static_cast<int>(l);
      const FakePart& pre = b.prefix_part[static_cast<std::size_t>(b.prefix_of[i])];
      const std::uint64_t ks = paged ? b.pool.k(li) : b.slot_part[i].k(li);
      const std::uint64_t vs = paged ? b.pool.v(li) : b.slot_part[i].v(li);
      const int j = b.suffix_len[i];
      const std::size_t row_index =
          paged ? static_cast<std::size_t>(b.blocks[i][static_cast<std::size_t>(j / kBlockTokens)]) * kBlockTokens + static_cast<std::size_t>(j % kBlockTokens)
                : static_cast<std::size_t>(j);
      const std::size_t row = row_index * kRowBytes;
      r.rows[2 * l * n + i] = ks + row;
      r.rows[(2 * l + 1) * n + i] = vs + row;
      const std::size_t at = 4 * l * n;
      r.ptrs[at + i] = pre.k(li);
      r.ptrs[at + n + i] = pre.v(li);
      r.ptrs[at + 2 * n + i] = ks;
      r.ptrs[at + 3 * n + i] = vs;
    }
  if (paged)
    for (const auto& t : b.blocks) r.starts.push_back(static_cast<int>(r.tables.size())), r.tables.insert(r.tables.end(), t.begin(), t.end());
  return r;
}

StepPlanConfig config(bool paged, bool pad) {
  StepPlanConfig c;
  c.n_layers = kLayers;
  c.vocab = 1000;
  c.max_positions = 64;
  c.row_bytes = kRowBytes;
  c.block_tokens = paged ? kBlockTokens : 0;
  c.table_capacity = paged ? 1025 : 0;
  c.pad = pad;
  c.padding_prefix = {0x1000000, 0x1000000 + 16 * kRowBytes, 32 * kRowBytes};
  c.padding_suffix = paged ? KvLayout{0x7f0000000000ull, 0x7f0000000000ull + 1, 2} : KvLayout{0x2000000, 0x2000000 + 16 * kRowBytes, 32 * kRowBytes};
  c.scratch_block = paged ? 1023 : -1;
  return c;
}

// The planner's staged bytes of a batch (with draws and a map when asked), checked and grouped first.
struct Staged {
  StepLayout lay;
  std::vector<char> bytes;
  template <typename T>
  std::vector<T> get(std::size_t off, std::size_t count) const {
    std::vector<T> v(count);
    std::memcpy(v.data(), bytes.data() + off, count * sizeof(T));
    return v;
  }
  std::vector<StepRowDesc> desc() const { return get<StepRowDesc>(lay.desc, static_cast<std::size_t>(lay.padded)); }
};
Staged stage(StepPlanner& planner, const Batch& b, const StepDraws* draws = nullptr, std::span<const int> map = {}) {
  planner.check(b.rows);
  Staged s;
  const int T = static_cast<int>(b.rows.size());
  s.lay = planner.layout(T, draws != nullptr, !map.empty(), planner.table_entries(b.rows));
  s.bytes.assign(s.lay.bytes, '\x5a');
  planner.write(b.rows, s.lay, draws, map, s.bytes.data());
  return s;
}

TEST(StepPlan, BucketsArePowersOfTwoThenMultiplesOf64) {
  const std::map<int, int> want = {{1, 1}, {2, 2}, {3, 4}, {5, 8}, {17, 32}, {33, 64}, {64, 64}, {65, 128}, {128, 128},
                                   {129, 192}, {1312, 1344}, {2047, 2048}, {2048, 2048}, {2049, 2112}};
  for (const auto& [T, b] : want) EXPECT_EQ(bucket_of(T), b) << "T " << T;
  std::set<int> buckets;
  int last = 0;
  for (int T = 1; T <= 4096; ++T) {
    const int b = bucket_of(T);
    EXPECT_GE(b, T);
    EXPECT_LT(b - T, std::min(T, kBucketStep)) << "T " << T;  // under half the bucket, and under 64 rows
    EXPECT_GE(b, last);
    EXPECT_EQ(bucket_of(b), b);
    last = b;
    if (T <= 2048) buckets.insert(b);
  }
  EXPECT_EQ(buckets.size(), 7u + 31u);  // graphs up to B = 2048
  EXPECT_THROW(bucket_of(0), Error);
}

TEST(StepPlan, ChecksTheBatchInOnePass) {
  StepPlanner planner(config(false, false));
  Batch b(6, 2, false, 1);
  planner.check(b.rows);
  Batch dup = b;
  dup.rows[4].slot = dup.rows[1].slot;
  try {
    planner.check(dup.rows);
    ADD_FAILURE() << "a slot twice passed";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "decode: slot " + std::to_string(b.rows[1].slot) + " appears twice in one step");
  }
  planner.check(b.rows);  // a failed check leaves nothing behind
  Batch full = b;
  full.rows[2].prefix_len = 30, full.rows[2].suffix_len = 34;
  EXPECT_THROW(planner.check(full.rows), Error);
  Batch bad = b;
  bad.rows[0].token = 1000;
  EXPECT_THROW(planner.check(bad.rows), Error);
  bad.rows[0].token = -1;
  EXPECT_THROW(planner.check(bad.rows), Error);
  EXPECT_THROW(planner.check(std::span<const StepRow>()), Error);
  // The same slots again, in other steps: no false duplicate from an earlier step's stamps.
  for (int i = 0; i < 5; ++i) planner.check(b.rows);
}

// --speculate's runs (Engine::decode_runs): a slot's consecutive positions as consecutive rows,
// each written at its own cache row (through the block table, across a block boundary when paged)
// and attending to its slot up to itself; a row that does not continue its run is refused.
TEST(StepPlan, RunsAreConsecutiveRowsOneCacheRowEach) {
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "unpaged");
    StepPlanner planner(config(paged, false));
    Batch b(4, 2, paged, 11);
    // Row 1's slot takes a run of 4: positions suffix 14..17 (rows 15 and 16 straddle a block).
    StepRow head = b.rows[1];
    head.suffix_len = 14;
    if (paged) {
      b.blocks[1] = {40, 7};
      head.blocks = b.blocks[1];
    } else {
      b.slot_part[1].cap = 32;
      head.suffix_kv = b.slot_part[1].layout();
    }
    std::vector<StepRow> rows = {b.rows[0]};
    for (int j = 0; j < 4; ++j) {
      StepRow r = head;
      r.run = j, r.suffix_len = 14 + j, r.token = 100 + j;
      rows.push_back(r);
    }
    rows.push_back(b.rows[2]), rows.push_back(b.rows[3]);
    planner.check(rows);
    const StepLayout lay = planner.layout(7, false, false, planner.table_entries(rows));
    std::vector<char> out(lay.bytes);
    planner.write(rows, lay, nullptr, {}, out.data());
    std::vector<int> pos(7), lens(14);
    std::memcpy(pos.data(), out.data() + lay.pos, 7 * 4);
    std::memcpy(lens.data(), out.data() + lay.lens, 14 * 4);
    std::vector<StepRowDesc> desc(7);
    std::memcpy(desc.data(), out.data() + lay.desc, 7 * sizeof(StepRowDesc));
    for (int j = 0; j < 4; ++j) {
      const auto t = static_cast<std::size_t>(1 + j);
      EXPECT_EQ(pos[t], head.prefix_len + 14 + j);
      EXPECT_EQ(lens[t], head.prefix_len);
      EXPECT_EQ(lens[7 + t], 14 + j + 1) << "row " << t << " attends to its slot up to itself";
      const int suffix_row = 14 + j;
      const std::uint64_t want = paged ? static_cast<std::uint64_t>(b.blocks[1][static_cast<std::size_t>(suffix_row / kBlockTokens)]) * kBlockTokens +
                                             static_cast<std::uint64_t>(suffix_row % kBlockTokens)
                                       : static_cast<std::uint64_t>(suffix_row);
      EXPECT_EQ(desc[t].write, want * kRowBytes) << "row " << t;
    }
    EXPECT_EQ(desc[2].write, (paged ? 40u * kBlockTokens + 15 : 15u) * kRowBytes);
    EXPECT_EQ(desc[3].write, (paged ? 7u * kBlockTokens + 0 : 16u) * kRowBytes);
    auto refused = [&](std::vector<StepRow> bad, const std::string& what) {
      try {
        planner.check(bad);
        ADD_FAILURE() << what << " passed";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not follow its run's previous position"), std::string::npos) << e.what();
      }
    };
    std::vector<StepRow> gap = rows;
    gap[3].suffix_len = 17;  // skips a position
    refused(gap, "a run with a gap");
    std::vector<StepRow> apart = rows;
    std::swap(apart[4], apart[5]);  // run position 3 after another slot's row
    refused(apart, "a run split by another row");
    std::vector<StepRow> alone = {rows[2]};  // run position 1 without position 0
    refused(alone, "a run without its start");
    std::vector<StepRow> twice = rows;
    twice[6] = rows[1];  // the slot again, as a new run
    EXPECT_THROW(planner.check(twice), Error);
    planner.check(rows);
  }
}

TEST(StepPlan, StagedArraysAndExpandedPointersMatchTheHostLoop) {
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "unpaged");
    for (const int T : {1, 7, 64, 100}) {
      StepPlanner planner(config(paged, false));
      const Batch b(T, 5, paged, static_cast<std::uint64_t>(T));
      const Staged s = stage(planner, b);
      const Reference ref = reference(b, paged);
      const auto n = static_cast<std::size_t>(T);
      EXPECT_EQ(s.lay.padded, T);
      EXPECT_EQ(s.get<int>(s.lay.tokens, n), ref.tokens);
      EXPECT_EQ(s.get<int>(s.lay.pos, n), ref.pos);
      EXPECT_EQ(s.get<int>(s.lay.lens, 2 * n), ref.lens);
      if (paged) {
        EXPECT_EQ(s.get<int>(s.lay.starts, n), ref.starts);
        EXPECT_EQ(s.get<int>(s.lay.tables, ref.tables.size()), ref.tables);
        EXPECT_EQ(s.lay.bytes, s.lay.tables + ref.tables.size() * 4);
      } else {
        EXPECT_EQ(s.lay.starts, StepLayout::kAbsent);
      }
      std::vector<std::uint64_t> rows(2 * kLayers * n), ptrs(4 * kLayers * n);
      expand_step_pointers(s.desc(), kLayers, rows.data(), ptrs.data());
      EXPECT_EQ(rows, ref.rows);
      EXPECT_EQ(ptrs, ref.ptrs);
    }
  }
}

TEST(StepPlan, DrawIndexesAndStateMapAreStagedAsGiven) {
  StepPlanner planner(config(false, true));
  const Batch b(5, 2, false, 3);
  std::vector<std::uint64_t> prompt = {1, 2, 3, 4, 5}, cand = {10, 11, 12, 13, 14}, step = {7, 7, 8, 8, 9};
  const StepDraws draws{prompt, cand, step};
  std::vector<int> map(3 * 8);
  for (std::size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int>(i * 5 + 1);
  const Staged s = stage(planner, b, &draws, map);
  ASSERT_EQ(s.lay.padded, 8);
  EXPECT_EQ(s.get<std::uint64_t>(s.lay.draws, 24), (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 0, 0, 0, 10, 11, 12, 13, 14, 0, 0, 0,
                                                                                 7, 7, 8, 8, 9, 0, 0, 0}));
  EXPECT_EQ(s.get<int>(s.lay.map, 24), map);
  // A map for another row count is refused.
  const StepLayout lay = planner.layout(5, true, true, 0);
  std::vector<char> out(lay.bytes);
  EXPECT_THROW(planner.write(b.rows, lay, &draws, std::span<const int>(map).first(15), out.data()), Error);
}

// The padding rows (--cuda-graphs): token 0 at position 1, one prefix position and one suffix row,
// every pointer into the dummy prefix or the scratch row; the real rows as without padding.
TEST(StepPlan, PaddingRowsTouchOnlyTheScratchRows) {
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "unpaged");
    const StepPlanConfig c = config(paged, true);
    StepPlanner padded(c), plain(config(paged, false));
    const int T = 37;
    const Batch b(T, 4, paged, 9);
    const Staged sp = stage(padded, b), s0 = stage(plain, b);
    ASSERT_EQ(sp.lay.padded, 64);
    const auto n = static_cast<std::size_t>(T), P = static_cast<std::size_t>(sp.lay.padded), L = static_cast<std::size_t>(kLayers);
    const auto tokens = sp.get<int>(sp.lay.tokens, P), pos = sp.get<int>(sp.lay.pos, P), lens = sp.get<int>(sp.lay.lens, 2 * P);
    std::vector<std::uint64_t> rows(2 * L * P), ptrs(4 * L * P), rows0(2 * L * n), ptrs0(4 * L * n);
    expand_step_pointers(sp.desc(), kLayers, rows.data(), ptrs.data());
    expand_step_pointers(s0.desc(), kLayers, rows0.data(), ptrs0.data());
    const std::uint64_t scratch_row = paged ? static_cast<std::uint64_t>(c.scratch_block) * kBlockTokens * kRowBytes : 0;
    for (std::size_t t = 0; t < P; ++t) {
      const bool pad = t >= n;
      if (pad) {
        EXPECT_EQ(tokens[t], 0);
        EXPECT_EQ(pos[t], 1);
        EXPECT_EQ(lens[t], 1);
        EXPECT_EQ(lens[P + t], 1);
      } else {
        EXPECT_EQ(tokens[t], b.token[t]);
        EXPECT_EQ(lens[P + t], b.suffix_len[t] + 1);
      }
      for (std::size_t l = 0; l < L; ++l) {
        const std::uint64_t k_pre = ptrs[4 * l * P + t], v_pre = ptrs[4 * l * P + P + t];
        const std::uint64_t k_suf = ptrs[4 * l * P + 2 * P + t], v_suf = ptrs[4 * l * P + 3 * P + t];
        const std::uint64_t k_row = rows[2 * l * P + t], v_row = rows[(2 * l + 1) * P + t];
        if (pad) {
          EXPECT_EQ(k_pre, c.padding_prefix.k + l * c.padding_prefix.layer_stride);
          EXPECT_EQ(v_pre, c.padding_prefix.v + l * c.padding_prefix.layer_stride);
          EXPECT_EQ(k_suf, c.padding_suffix.k + l * c.padding_suffix.layer_stride);
          EXPECT_EQ(v_suf, c.padding_suffix.v + l * c.padding_suffix.layer_stride);
          EXPECT_EQ(k_row, k_suf + scratch_row);
          EXPECT_EQ(v_row, v_suf + scratch_row);
        } else {
          EXPECT_EQ(k_pre, ptrs0[4 * l * n + t]);
          EXPECT_EQ(v_pre, ptrs0[4 * l * n + n + t]);
          EXPECT_EQ(k_suf, ptrs0[4 * l * n + 2 * n + t]);
          EXPECT_EQ(v_suf, ptrs0[4 * l * n + 3 * n + t]);
          EXPECT_EQ(k_row, rows0[2 * l * n + t]);
          EXPECT_EQ(v_row, rows0[(2 * l + 1) * n + t]);
        }
      }
    }
    if (paged) {  // the padding rows share one table: {scratch_block}
      const auto starts = sp.get<int>(sp.lay.starts, P);
      const std::size_t entries = padded.table_entries(b.rows);
      const auto tables = sp.get<int>(sp.lay.tables, entries);
      EXPECT_EQ(tables.back(), c.scratch_block);
      for (std::size_t t = n; t < P; ++t) EXPECT_EQ(starts[t], static_cast<int>(entries) - 1);
      EXPECT_EQ(std::vector<int>(tables.begin(), tables.end() - 1), s0.get<int>(s0.lay.tables, entries - 1));
    }
  }
}

// Every array at the same offset for every T of a bucket (a replayed graph finds them there), the
// arrays apart and 16-byte aligned, and the capacity covering the tables at their most.
TEST(StepPlan, OffsetsAreFixedPerBucket) {
  for (const bool paged : {false, true}) {
    StepPlanner planner(config(paged, true));
    auto offsets = [](const StepLayout& l) {
      const auto o = l.offsets();
      return std::vector<std::size_t>(o.begin(), o.end());
    };
    for (const int bucket : {1, 2, 4, 8, 16, 32, 64, 128, 192, 2048}) {
      const StepLayout top = planner.layout(bucket, true, true, 0);
      EXPECT_EQ(top.padded, bucket);
      for (int T = bucket; T > 0 && bucket_of(T) == bucket; --T) {
        const StepLayout l = planner.layout(T, true, true, std::min<std::size_t>(static_cast<std::size_t>(T) * 3, 1025));
        EXPECT_EQ(offsets(l), offsets(top)) << "T " << T;
        EXPECT_GE(l.capacity, l.bytes);
        EXPECT_EQ(l.capacity, top.capacity);
      }
      std::vector<std::size_t> o = offsets(top);
      o.erase(std::remove(o.begin(), o.end(), StepLayout::kAbsent), o.end());
      for (std::size_t i = 0; i < o.size(); ++i) {
        EXPECT_EQ(o[i] % 16, 0u);
        if (i + 1 < o.size()) {
          EXPECT_LT(o[i], o[i + 1]);
        }
      }
      const auto n = static_cast<std::size_t>(bucket);
      EXPECT_GE(top.pos - top.tokens, n * 4);
      EXPECT_GE(top.draws - top.lens, 2 * n * 4);
      EXPECT_GE(top.map - top.draws, 3 * n * 8);
      EXPECT_GE(top.desc - top.map, 3 * n * 4);
      if (paged) {
        EXPECT_GE(top.starts - top.desc, n * sizeof(StepRowDesc));
        EXPECT_GE(top.tables - top.starts, n * 4);
        // The tables at their most: a whole context's blocks per row (64 positions: 64 / 16 + 1),
        // one for the padding's scratch table, never more than the pool's 1025.
        EXPECT_EQ(top.capacity, top.tables + std::min<std::size_t>(1025, n * (64 / kBlockTokens + 1) + 1) * 4);
      } else {
        EXPECT_EQ(top.capacity, (top.desc + n * sizeof(StepRowDesc) + 15) / 16 * 16);
      }
    }
    EXPECT_NE(offsets(planner.layout(65, false, false, 0)), offsets(planner.layout(64, false, false, 0)));
  }
}

// Rows grouped by prefix in order of first appearance, batch order within a group, every row once,
// the padding rows last; the groups give the state-row map of --cuda-prefix-gemm.
TEST(StepPlan, GroupsRowsByPrefixInOnePass) {
  StepPlanner planner(config(false, true));
  Batch b(6, 3, false, 4);
  const std::vector<int> prefixes = {7, 2, 7, 40, 2, 7};  // sparse handles
  for (std::size_t t = 0; t < 6; ++t) b.rows[t].prefix = prefixes[t];
  const StepGroups& g = planner.group(b.rows);
  EXPECT_EQ(g.prefix, (std::vector<int>{7, 2, 40, kPaddingPrefix}));
  EXPECT_EQ(g.first, (std::vector<int>{0, 3, 5, 6, 8}));
  EXPECT_EQ(g.rows, (std::vector<int>{0, 2, 5, 1, 4, 3, 6, 7}));
  std::vector<std::vector<int>> groups;
  for (std::size_t i = 0; i < g.size(); ++i) groups.emplace_back(g.rows_of(i).begin(), g.rows_of(i).end());
  const PrefixStateMap m = prefix_state_map(groups, 8, 4, 2);
  EXPECT_EQ(m.R, (std::vector<int>{6, 4, 2, 4}));
  // Again, other prefixes: no group carried over from the last step.
  for (std::size_t t = 0; t < 6; ++t) b.rows[t].prefix = 2;
  StepPlanner unpadded(config(false, false));
  const StepGroups& g2 = unpadded.group(b.rows);
  EXPECT_EQ(g2.prefix, (std::vector<int>{2}));
  EXPECT_EQ(g2.rows, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  const StepGroups& g3 = planner.group(b.rows);
  EXPECT_EQ(g3.prefix, (std::vector<int>{2, kPaddingPrefix}));
}

}  // namespace
}  // namespace bestofn::cuda
