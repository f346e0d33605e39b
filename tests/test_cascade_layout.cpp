// Host-side planning of --cascade-attention's suffix side and of its CUDA-graph layout, without a
// GPU (src/cuda/cascade_plan.h): the suffixes' page table for FlashInfer's paged decode over the
// --paged-kv pool (every position once, full and partial last pages, empty and padding rows), a
// step's ints at offsets fixed by its bucket with the groups padded to the rows (two steps with
// different prompts in flight give one graph key), and the whole step read back from its upload
// and emulated on the host against cpu::decode_attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "cascade_plan_util.h"
#include "cpu/attention.h"
#include "cuda/cascade_plan.h"
#include "test_util.h"

namespace bestofn::cuda {
namespace {

// Slots' block tables over a shuffled pool of `pool` blocks: row t holds lens[t] positions and
// pages_for(lens[t]) blocks, plus one more where `spare` (a block the slot took ahead).
struct Tables {
  std::vector<std::vector<int>> blocks;
  std::vector<SuffixRow> rows;
  int pool = 0;
};
Tables make_tables(const std::vector<int>& lens, std::uint64_t seed, bool spare = false) {
  std::mt19937_64 rng(seed);
  Tables t;
  for (int len : lens) t.pool += pages_for(len, kPage) + (spare ? 1 : 0);
  std::vector<int> free(static_cast<std::size_t>(t.pool) + 5);  // a few never handed out
  std::iota(free.begin(), free.end(), 0);
  std::shuffle(free.begin(), free.end(), rng);
  t.pool = static_cast<int>(free.size());
  for (std::size_t i = 0; i < lens.size(); ++i) {
    const int n = pages_for(lens[i], kPage) + (spare && i % 2 == 0 ? 1 : 0);
    t.blocks.emplace_back(free.end() - n, free.end());
    free.resize(free.size() - static_cast<std::size_t>(n));
  }
  for (std::size_t i = 0; i < lens.size(); ++i) t.rows.push_back({t.blocks[i], lens[i]});
  return t;
}

// FlashInfer's reading of row t of a page table (paged_kv_t::get_length, then position j in page
// j / page_tokens at entry j % page_tokens): the pool rows it attends, in position order.
std::vector<int> read_row(const int* indptr, const int* indices, const int* last, int t) {
  const int pages = indptr[t + 1] - indptr[t];
  const int len = pages == 0 ? 0 : (pages - 1) * kPage + last[t];
  std::vector<int> rows;
  for (int j = 0; j < len; ++j) rows.push_back(indices[indptr[t] + j / kPage] * kPage + j % kPage);
  return rows;
}

TEST(SuffixPages, CoverEveryPositionOnce) {
  // Empty rows (a padding row), partial and exactly full last pages, one page and many.
  std::vector<int> lens = {0, 1, 15, 16, 17, 31, 32, 33, 0, 200, 48};
  std::mt19937_64 rng(31);
  for (int i = 0; i < 60; ++i) lens.push_back(static_cast<int>(rng() % 90));
  for (const bool spare : {false, true}) {
    SCOPED_TRACE(spare ? "tables with a block taken ahead" : "tables of exactly their pages");
    const Tables t = make_tables(lens, 32, spare);
    const SuffixPages p = suffix_pages(t.rows, kPage, t.pool);
    ASSERT_EQ(p.indptr.size(), lens.size() + 1);
    ASSERT_EQ(p.last_page_len.size(), lens.size());
    EXPECT_EQ(p.indices.size(), static_cast<std::size_t>(p.indptr.back()));
    std::multiset<int> covered;
    for (std::size_t r = 0; r < lens.size(); ++r) {
      const std::vector<int> got = read_row(p.indptr.data(), p.indices.data(), p.last_page_len.data(), static_cast<int>(r));
      ASSERT_EQ(got.size(), static_cast<std::size_t>(lens[r])) << "row " << r;
      for (int j = 0; j < lens[r]; ++j)
        EXPECT_EQ(got[static_cast<std::size_t>(j)], t.blocks[r][static_cast<std::size_t>(j / kPage)] * kPage + j % kPage) << "row " << r;
      covered.insert(got.begin(), got.end());
      const int last = p.last_page_len[r];
      if (lens[r] == 0) {
        EXPECT_EQ(p.indptr[r + 1], p.indptr[r]) << "an empty row with pages";
        EXPECT_EQ(last, 0);
      } else {
        EXPECT_EQ(last, lens[r] % kPage == 0 ? kPage : lens[r] % kPage) << "row " << r;
      }
    }
    EXPECT_EQ(covered.size(), std::set<int>(covered.begin(), covered.end()).size()) << "a pool row read twice";
    EXPECT_EQ(covered.size(), static_cast<std::size_t>(std::accumulate(lens.begin(), lens.end(), 0)));
  }
}

TEST(SuffixPages, RefusesBadInput) {
  const std::vector<int> table = {3, 4};
  EXPECT_NO_THROW(suffix_pages(std::vector<SuffixRow>{{table, 32}}, kPage, 5));
  EXPECT_THROW(suffix_pages(std::vector<SuffixRow>{{table, 33}}, kPage, 5), Error);  // a third page
  EXPECT_THROW(suffix_pages(std::vector<SuffixRow>{{table, -1}}, kPage, 5), Error);
  EXPECT_THROW(suffix_pages(std::vector<SuffixRow>{{table, 17}}, kPage, 4), Error);  // block 4 of a 4-block pool
  try {
    suffix_pages(std::vector<SuffixRow>{{table, 40}}, kPage, 5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
  }
}

// Every array inside the upload, 16-byte aligned, none overlapping another.
TEST(CascadeLayout, ArraysAreAlignedAndDisjoint) {
  for (const int T : {1, 2, 7, 64, 1984, 2048})
    for (const std::size_t suffix : {std::size_t{0}, std::size_t{1}, std::size_t{4097}}) {
      const std::size_t prefix = 3 * static_cast<std::size_t>(T) + 5;
      const CascadeLayout l = cascade_layout(T, prefix, suffix);
      const auto n = static_cast<std::size_t>(T);
      std::vector<std::pair<std::size_t, std::size_t>> spans = {{l.order, n},         {l.map, 3 * n},         {l.qo_indptr, n + 1},
                                                                {l.page_indptr, n + 1}, {l.last_page_len, n}, {l.page_indices, prefix}};
      if (suffix == 0) {
        EXPECT_EQ(l.suffix_indptr, CascadeLayout::kAbsent);
        EXPECT_EQ(l.suffix_indices, CascadeLayout::kAbsent);
      } else {
        spans.insert(spans.end(), {{l.suffix_indptr, n + 1}, {l.suffix_last, n}, {l.suffix_indices, suffix}});
      }
      std::sort(spans.begin(), spans.end());
      for (std::size_t i = 0; i < spans.size(); ++i) {
        EXPECT_EQ(spans[i].first % 4, 0u);
        EXPECT_LE(spans[i].first + spans[i].second, i + 1 < spans.size() ? spans[i + 1].first : l.size) << "T " << T;
      }
    }
  EXPECT_THROW(cascade_layout(0, 1, 1), Error);
}

// A step as the engine plans it under --cuda-graphs: `real` rows over prompts of `group_sizes`
// rows, padded to the bucket with padding rows over a 1-position padding prompt (the engine's
// padding_), the groups padded to the rows; suffixes paged, the padding rows' empty.
struct GraphStep {
  Batch batch;
  CascadeStep step;
  CascadeShape shape;
  CascadeLayout layout;
  Tables tables;
  SuffixPages suffix;
  std::vector<int> ints;
};
GraphStep graph_step(const std::vector<int>& group_sizes, int bucket, std::uint64_t seed, int pool_blocks_min) {
  GraphStep g;
  g.batch = make_batch(group_sizes, seed);
  const int real = static_cast<int>(g.batch.rows.size());
  const CascadeRow padding{-1, g.batch.pool_pages, 1};  // the padding prompt's page, after the prompts'
  for (int t = real; t < bucket; ++t) g.batch.rows.push_back(padding), g.batch.prefix_of_row.push_back(-1);
  g.batch.pool_pages++;
  const int padding_page = g.batch.rows.front().first_page;
  g.step = cascade_step(g.batch.rows, 32, 8, kPage, g.batch.pool_pages, bucket, padding_page);
  g.shape = cascade_shape(bucket, g.step.groups(), true);
  std::vector<int> lens;
  std::mt19937_64 rng(seed + 1);
  for (int t = 0; t < bucket; ++t) lens.push_back(t < real ? 1 + static_cast<int>(rng() % 200) : 0);
  g.tables = make_tables(lens, seed + 2);
  g.tables.pool = std::max(g.tables.pool, pool_blocks_min);
  g.suffix = suffix_pages(g.tables.rows, kPage, g.tables.pool);
  // The capacities the engine gives: the prefix pool's pages plus one per padding group, the
  // suffix pool's blocks (fixed for the run).
  g.layout = cascade_layout(bucket, static_cast<std::size_t>(4096 + bucket), static_cast<std::size_t>(pool_blocks_min));
  g.ints.assign(g.layout.size, -7);
  write_cascade_ints(g.step, &g.suffix, g.layout, g.ints.data());
  return g;
}

// Two steps of the 64-row bucket, 3 prompts (and 14 padding rows) and 17 prompts (no padding
// rows): the same groups for FlashInfer, the same bound, the same offsets (so the same pointers
// into the upload, the same sizes), i.e. one graph key; each plan still covers every real position
// of every prompt and every suffix exactly once.
TEST(CascadeLayout, TwoStepsOfOneBucketGiveOneKey) {
  const GraphStep a = graph_step({20, 1, 29}, 64, 41, 6000);
  const GraphStep b = graph_step({5, 3, 4, 4, 2, 6, 1, 8, 3, 3, 4, 5, 2, 4, 3, 4, 3}, 64, 42, 6000);
  ASSERT_NE(a.step.qo_indptr[3], b.step.qo_indptr[3]);  // different prompts in flight
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.shape.groups, 64);
  EXPECT_EQ(a.shape.row_bound, 127);
  EXPECT_EQ(a.layout, b.layout);
  for (const GraphStep* g : {&a, &b}) {
    EXPECT_EQ(g->step.groups(), 64);
    EXPECT_EQ(g->step.qo_indptr.size(), a.step.qo_indptr.size());
    expect_valid(g->batch, g->step, 32, 8, g->batch.rows.front().first_page);
    // The suffixes through the uploaded page table: each real row's positions, in order, once.
    std::multiset<int> covered;
    for (int t = 0; t < 64; ++t) {
      const std::vector<int> got = read_row(g->ints.data() + g->layout.suffix_indptr, g->ints.data() + g->layout.suffix_indices,
                                            g->ints.data() + g->layout.suffix_last, t);
      EXPECT_EQ(got.size(), static_cast<std::size_t>(g->tables.rows[static_cast<std::size_t>(t)].len)) << "row " << t;
      covered.insert(got.begin(), got.end());
    }
    EXPECT_EQ(covered.size(), std::set<int>(covered.begin(), covered.end()).size()) << "a suffix position read twice";
  }
  // Without graphs the groups are the prompts: the shape follows them.
  EXPECT_NE(cascade_shape(64, 3, false), cascade_shape(64, 17, false));
  EXPECT_EQ(cascade_shape(64, 17, false), (CascadeShape{64, 17, 64}));
  EXPECT_THROW(cascade_shape(64, 65, true), Error);
  EXPECT_THROW(cascade_step(a.batch.rows, 32, 8, kPage, a.batch.pool_pages, 3, 0), Error);    // fewer than the groups
  EXPECT_THROW(cascade_step(a.batch.rows, 32, 8, kPage, a.batch.pool_pages, 65, 0), Error);   // more than the rows
  EXPECT_THROW(cascade_step(a.batch.rows, 32, 8, kPage, a.batch.pool_pages, 64, -1), Error);  // no padding page
}

TEST(CascadeLayout, WriteRefusesWhatDoesNotFit) {
  const GraphStep a = graph_step({20, 1, 29}, 64, 43, 6000);
  std::vector<int> out(a.layout.size);
  EXPECT_THROW(write_cascade_ints(a.step, nullptr, a.layout, out.data()), Error);  // the layout has a suffix table
  const CascadeLayout small = cascade_layout(64, 10, 6000);                      // room for 10 prefix pages
  out.resize(small.size);
  EXPECT_THROW(write_cascade_ints(a.step, &a.suffix, small, out.data()), Error);
  const CascadeLayout other = cascade_layout(128, 8192, 6000);
  out.resize(other.size);
  EXPECT_THROW(write_cascade_ints(a.step, &a.suffix, other, out.data()), Error);
}

// The step read back from its upload only (the offsets of the layout), as the device reads it:
// each group's prefix state through its page table, as FlashInfer's prefill gives it (base-2
// log-sum-exp, normalized output); each row's suffix state through the suffix page table over a
// paged pool, as FlashInfer's decode gives it (an empty suffix: lse -inf); the two merged at the
// map's state row by log-sum-exp, as cascade_state_merge_cuda does. Against cpu::decode_attention
// over the original rows, padding rows included (their 1-position prompt, no suffix): only the
// summation order and exp differ, so 1e-5 + 1e-4 relative.
TEST(CascadeLayout, HostEmulationThroughTheUploadMatchesDecodeAttention) {
  const int n_heads = 8, n_kv = 2, hd = 16, group = n_heads / n_kv, bucket = 16;
  const auto kvd = static_cast<std::size_t>(n_kv * hd), HD = static_cast<std::size_t>(hd), H = static_cast<std::size_t>(n_heads);
  Batch b = make_batch({1, 4, 2, 5}, 51);
  const int real = static_cast<int>(b.rows.size());
  for (int t = real; t < bucket; ++t) b.rows.push_back({-1, b.pool_pages, 1}), b.prefix_of_row.push_back(-1);
  b.pool_pages++;
  std::mt19937_64 rng(52);
  std::vector<int> lens;
  for (int t = 0; t < bucket; ++t) lens.push_back(t < real ? static_cast<int>(rng() % 40) : 0);  // empty suffixes too
  const Tables tab = make_tables(lens, 53, true);
  const std::size_t page_elems = static_cast<std::size_t>(kPage) * kvd;
  // The pools: prompts at their runs (zeros past each), suffixes at their slots' blocks.
  std::vector<std::uint16_t> kpool(static_cast<std::size_t>(b.pool_pages) * page_elems), vpool(kpool.size());
  std::vector<std::uint16_t> sk_pool(static_cast<std::size_t>(tab.pool) * page_elems), sv_pool(sk_pool.size());
  std::map<int, std::pair<std::vector<std::uint16_t>, std::vector<std::uint16_t>>> prompt;
  for (const CascadeRow& r : b.rows)
    if (!prompt.count(r.prefix)) {
      auto& [k, v] = prompt[r.prefix];
      k = bf16_values(static_cast<std::size_t>(r.len) * kvd, rng()), v = bf16_values(k.size(), rng());
      std::copy(k.begin(), k.end(), kpool.begin() + static_cast<long>(static_cast<std::size_t>(r.first_page) * page_elems));
      std::copy(v.begin(), v.end(), vpool.begin() + static_cast<long>(static_cast<std::size_t>(r.first_page) * page_elems));
    }
  std::vector<std::vector<std::uint16_t>> sk(static_cast<std::size_t>(bucket)), sv(sk.size());  // each suffix, contiguous
  for (std::size_t t = 0; t < sk.size(); ++t) {
    sk[t] = bf16_values(static_cast<std::size_t>(lens[t]) * kvd + 1, rng()), sv[t] = bf16_values(sk[t].size(), rng());
    for (int j = 0; j < lens[t]; ++j) {
      const std::size_t at = (static_cast<std::size_t>(tab.blocks[t][static_cast<std::size_t>(j / kPage)]) * kPage +
                              static_cast<std::size_t>(j % kPage)) * kvd;
      std::copy_n(sk[t].begin() + static_cast<long>(static_cast<std::size_t>(j) * kvd), kvd, sk_pool.begin() + static_cast<long>(at));
      std::copy_n(sv[t].begin() + static_cast<long>(static_cast<std::size_t>(j) * kvd), kvd, sv_pool.begin() + static_cast<long>(at));
    }
  }
  const CascadeStep step = cascade_step(b.rows, n_heads, n_kv, kPage, b.pool_pages, bucket, b.rows.front().first_page);
  const SuffixPages sp = suffix_pages(tab.rows, kPage, tab.pool);
  const CascadeLayout lay = cascade_layout(bucket, static_cast<std::size_t>(b.pool_pages + bucket), static_cast<std::size_t>(tab.pool));
  std::vector<int> ints(lay.size, -7);
  write_cascade_ints(step, &sp, lay, ints.data());
  const int* up = ints.data();
  const std::vector<float> q = test::random_floats(static_cast<std::size_t>(bucket) * H * HD, 54, 2.0f);
  const double scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Softmax state (base-2 lse, normalized output) of query qr over positions read at pool rows.
  auto state = [&](const float* qr, const std::vector<int>& at, const std::vector<std::uint16_t>& K, const std::vector<std::uint16_t>& V,
                   std::size_t off, std::vector<double>& o) -> double {
    o.assign(HD, 0.0);
    if (at.empty()) return -INFINITY;
    std::vector<double> s;
    for (int r : at) {
      double dot = 0;
      for (std::size_t e = 0; e < HD; ++e) dot += static_cast<double>(qr[e]) * bf16_to_float(K[static_cast<std::size_t>(r) * kvd + off + e]);
      s.push_back(dot * scale);
    }
    const double m = *std::max_element(s.begin(), s.end());
    double l = 0;
    for (std::size_t j = 0; j < at.size(); ++j) {
      const double w = std::exp(s[j] - m);
      l += w;
      for (std::size_t e = 0; e < HD; ++e) o[e] += w * bf16_to_float(V[static_cast<std::size_t>(at[j]) * kvd + off + e]);
    }
    for (double& x : o) x /= l;
    return (m + std::log(l)) / std::log(2.0);
  };
  // Prefix states at place r of the group order, from the uploaded group tables.
  std::vector<double> lse2(static_cast<std::size_t>(bucket) * H), out_p(lse2.size() * HD), o;
  const int G = static_cast<int>(step.qo_indptr.size()) - 1;
  for (int g = 0; g < G; ++g) {
    std::vector<int> at;
    const int first = up[lay.page_indptr + static_cast<std::size_t>(g)], pages = up[lay.page_indptr + static_cast<std::size_t>(g) + 1] - first;
    for (int j = 0; j < (pages - 1) * kPage + up[lay.last_page_len + static_cast<std::size_t>(g)]; ++j)
      at.push_back(up[lay.page_indices + static_cast<std::size_t>(first + j / kPage)] * kPage + j % kPage);
    for (int r = up[lay.qo_indptr + static_cast<std::size_t>(g)]; r < up[lay.qo_indptr + static_cast<std::size_t>(g) + 1]; ++r)
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t row = static_cast<std::size_t>(r) * H + h;
        lse2[row] = state(q.data() + (static_cast<std::size_t>(up[lay.order + static_cast<std::size_t>(r)]) * H + h) * HD, at, kpool, vpool,
                          (h / static_cast<std::size_t>(group)) * HD, o);
        std::copy(o.begin(), o.end(), out_p.begin() + static_cast<long>(row * HD));
      }
  }
  // Each row's suffix through the uploaded suffix table, merged at its state row.
  std::vector<float> got(q.size()), ref(q.size());
  for (int t = 0; t < bucket; ++t) {
    const std::vector<int> at = read_row(up + lay.suffix_indptr, up + lay.suffix_indices, up + lay.suffix_last, t);
    const auto ts = static_cast<std::size_t>(t);
    for (std::size_t h = 0; h < H; ++h) {
      const double ls = state(q.data() + (ts * H + h) * HD, at, sk_pool, sv_pool, (h / static_cast<std::size_t>(group)) * HD, o);
      const std::size_t sr = static_cast<std::size_t>(up[lay.map + ts] + static_cast<int>(h) / group * up[lay.map + bucket + ts] +
                                                      up[lay.map + 2 * bucket + ts] * group + static_cast<int>(h) % group);
      const double M = std::max(lse2[sr], ls), a = std::exp2(lse2[sr] - M), w = ls == -INFINITY ? 0.0 : std::exp2(ls - M);
      for (std::size_t e = 0; e < HD; ++e) got[(ts * H + h) * HD + e] = static_cast<float>((a * out_p[sr * HD + e] + w * o[e]) / (a + w));
    }
  }
  std::vector<const std::uint16_t*> kp, vp, ks, vs;
  std::vector<int> plen;
  for (std::size_t t = 0; t < b.rows.size(); ++t) {
    kp.push_back(prompt[b.rows[t].prefix].first.data()), vp.push_back(prompt[b.rows[t].prefix].second.data());
    plen.push_back(b.rows[t].len), ks.push_back(sk[t].data()), vs.push_back(sv[t].data());
  }
  cpu::decode_attention(q.data(), kp.data(), vp.data(), plen.data(), ks.data(), vs.data(), lens.data(), bucket, n_heads, n_kv, hd, ref.data());
  for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 + 1e-4 * std::fabs(ref[i])) << "element " << i;
}

}  // namespace
}  // namespace bestofn::cuda
