#pragma once
// The batches of the --cascade-attention host tests (tests/test_cascade_plan.cpp,
// tests/test_cascade_layout.cpp): prompts in runs of a PageRuns pool, rows shuffled over them, and
// the invariants every step plan must keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cuda/cascade_plan.h"
#include "test_util.h"

namespace bestofn::cuda {

inline constexpr int kPage = 16;

inline std::vector<std::uint16_t> bf16_values(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint16_t> out;
  for (float f : test::random_floats(n, seed)) out.push_back(bf16_from_float(f));
  return out;
}


// A batch over `group_sizes.size()` prefixes of random lengths, rows shuffled; each prefix in its
// own run of a PageRuns pool.
struct Batch {
  std::vector<CascadeRow> rows;
  std::vector<int> prefix_of_row;
  int pool_pages = 0;
};
inline Batch make_batch(const std::vector<int>& group_sizes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  PageRuns runs(0);
  Batch b;
  std::vector<CascadeRow> prefixes;
  for (std::size_t p = 0; p < group_sizes.size(); ++p) {
    const int len = 1 + static_cast<int>(rng() % 300);  // mostly not multiples of 16
    const int n = pages_for(len, kPage);
    int first = runs.take(n);
    if (first < 0) {
      runs.grow(runs.grown_size(n));
      first = runs.take(n);
    }
    prefixes.push_back({static_cast<int>(1000 + 7 * p), first, len});
    for (int i = 0; i < group_sizes[p]; ++i) b.prefix_of_row.push_back(static_cast<int>(p));
  }
  std::shuffle(b.prefix_of_row.begin(), b.prefix_of_row.end(), rng);
  for (int p : b.prefix_of_row) b.rows.push_back(prefixes[static_cast<std::size_t>(p)]);
  b.pool_pages = runs.pages();
  return b;
}

// The invariants of a step plan: every batch row once in the permutation, in a group of its own
// prefix, groups in order of first appearance and rows in batch order within them; every position
// of every group's prefix covered once by its pages (the run's pages in order, the last one
// holding 1..16 positions); the merge map pointing at the row's place. Padded plans
// (cascade_step's pad_groups): the groups after the prompts' are empty, each over the one page
// `padding_page` with 1 position.
inline void expect_valid(const Batch& b, const CascadeStep& s, int n_heads, int n_kv, int padding_page = -1) {
  const int T = static_cast<int>(b.rows.size());
  const auto Ts = static_cast<std::size_t>(T);
  ASSERT_EQ(s.order.size(), Ts);
  std::vector<int> seen(Ts, 0);
  for (int t : s.order) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, T);
    seen[static_cast<std::size_t>(t)]++;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), T) << "a batch row is missing or repeated";
  const int G = s.groups();
  ASSERT_EQ(s.page_indptr.size(), static_cast<std::size_t>(G) + 1);
  ASSERT_EQ(s.last_page_len.size(), static_cast<std::size_t>(G));
  EXPECT_EQ(s.qo_indptr.front(), 0);
  EXPECT_EQ(s.qo_indptr.back(), T);
  std::set<int> prefixes_seen, pages_seen;
  int last_first_row = -1;
  const int prompts = static_cast<int>(std::set<int>(b.prefix_of_row.begin(), b.prefix_of_row.end()).size());
  ASSERT_LE(prompts, G);
  if (prompts < G) {
    EXPECT_GE(padding_page, 0) << "padding groups in a plan that expects none";
  }
  for (int g = prompts; g < G; ++g) {
    const auto gs = static_cast<std::size_t>(g);
    EXPECT_EQ(s.qo_indptr[gs], T) << "padding group " << g << " has rows";
    EXPECT_EQ(s.qo_indptr[gs + 1], T) << "padding group " << g << " has rows";
    ASSERT_EQ(s.page_indptr[gs + 1] - s.page_indptr[gs], 1) << "padding group " << g;
    EXPECT_EQ(s.page_indices[static_cast<std::size_t>(s.page_indptr[gs])], padding_page);
    EXPECT_EQ(s.last_page_len[gs], 1);
  }
  for (int g = 0; g < prompts; ++g) {
    const auto gs = static_cast<std::size_t>(g);
    ASSERT_LT(s.qo_indptr[gs], s.qo_indptr[gs + 1]) << "an empty group";
    const CascadeRow& head = b.rows[static_cast<std::size_t>(s.order[static_cast<std::size_t>(s.qo_indptr[gs])])];
    EXPECT_TRUE(prefixes_seen.insert(head.prefix).second) << "prefix " << head.prefix << " in two groups";
    EXPECT_GT(s.order[static_cast<std::size_t>(s.qo_indptr[gs])], last_first_row) << "groups not in order of first appearance";
    last_first_row = s.order[static_cast<std::size_t>(s.qo_indptr[gs])];
    for (int r = s.qo_indptr[gs]; r < s.qo_indptr[gs + 1]; ++r) {
      const int t = s.order[static_cast<std::size_t>(r)];
      EXPECT_EQ(b.rows[static_cast<std::size_t>(t)].prefix, head.prefix);
      if (r > s.qo_indptr[gs]) {
        EXPECT_GT(t, s.order[static_cast<std::size_t>(r) - 1]) << "rows not in batch order";
      }
      EXPECT_EQ(s.map[static_cast<std::size_t>(t)], r * n_heads);
      EXPECT_EQ(s.map[Ts + static_cast<std::size_t>(t)], n_heads / n_kv);
      EXPECT_EQ(s.map[2 * Ts + static_cast<std::size_t>(t)], 0);
    }
    // Pages: the run's, in order; positions (pages - 1) * 16 + last = len, each once.
    const int n = s.page_indptr[gs + 1] - s.page_indptr[gs];
    ASSERT_GE(n, 1);
    for (int i = 0; i < n; ++i) {
      const int page = s.page_indices[static_cast<std::size_t>(s.page_indptr[gs] + i)];
      EXPECT_EQ(page, head.first_page + i);
      EXPECT_TRUE(pages_seen.insert(page).second) << "page " << page << " in two prompts' groups";
      EXPECT_LT(page, b.pool_pages);
    }
    const int last = s.last_page_len[gs];
    EXPECT_GE(last, 1);
    EXPECT_LE(last, kPage);
    EXPECT_EQ((n - 1) * kPage + last, head.len) << "group " << g << "'s pages do not cover its prefix exactly";
  }
  EXPECT_EQ(s.page_indices.size(), static_cast<std::size_t>(s.page_indptr.back()));
  EXPECT_EQ(prefixes_seen.size(), std::set<int>(b.prefix_of_row.begin(), b.prefix_of_row.end()).size());
}

}  // namespace bestofn::cuda
