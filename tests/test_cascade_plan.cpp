// Host-side planning of --cascade-attention, without a GPU (src/cuda/cascade_plan.h): the page
// runs of the prefix page pool, each step's grouping of batch rows by prefix (the permutation,
// FlashInfer's qo_indptr and page tables, the merge's state rows), and the whole indexing emulated
// on the host against cpu::decode_attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "cpu/attention.h"
#include "cuda/cascade_plan.h"
#include "cascade_plan_util.h"
#include "test_util.h"

namespace bestofn::cuda {
namespace {

TEST(PageRuns, TakesFirstFitRunsAndCoalescesWhatIsGivenBack) {
  PageRuns runs(10);
  EXPECT_EQ(runs.take(3), 0);
  EXPECT_EQ(runs.take(4), 3);
  EXPECT_EQ(runs.take(3), 7);
  EXPECT_EQ(runs.take(1), -1);  // full: the caller grows the pool
  EXPECT_EQ(runs.free_pages(), 0);
  runs.give(3);
  EXPECT_EQ(runs.run_pages(0), 3);
  EXPECT_EQ(runs.take(5), -1);  // 4 free pages in one run
  EXPECT_EQ(runs.take(2), 3);   // reused, first fit
  runs.give(0);
  runs.give(7);
  EXPECT_EQ(runs.free_pages(), 8);
  runs.give(3);  // 0..2, 3..4, 5..6 and 7..9 coalesce into one run
  EXPECT_EQ(runs.take(10), 0);
}

TEST(PageRuns, GrowsAtTheEndKeepingTakenRuns) {
  PageRuns runs(4);
  EXPECT_EQ(runs.take(3), 0);
  EXPECT_EQ(runs.take(5), -1);
  const int size = runs.grown_size(5);  // one free page at the end counts: 4 + 4, doubled to 8
  EXPECT_EQ(size, 8);
  runs.grow(size);
  EXPECT_EQ(runs.take(5), 3);  // the old free tail and the new pages as one run
  EXPECT_EQ(runs.run_pages(0), 3);
  EXPECT_EQ(PageRuns(0).grown_size(7), 7);
}

TEST(PageRuns, RefusesBadInput) {
  PageRuns runs(4);
  EXPECT_THROW(runs.take(0), Error);
  EXPECT_THROW(runs.give(1), Error);  // no run starts there
  const int first = runs.take(2);
  runs.give(first);
  EXPECT_THROW(runs.give(first), Error);  // given twice
  EXPECT_THROW(runs.grow(3), Error);      // shrinking
}

TEST(PageRuns, ManyRunsTakenAndFreedStayDisjoint) {
  std::mt19937_64 rng(11);
  PageRuns runs(0);
  std::map<int, int> held;  // first -> pages
  for (int i = 0; i < 2000; ++i) {
    if (!held.empty() && rng() % 3 == 0) {
      auto it = held.begin();
      std::advance(it, static_cast<long>(rng() % held.size()));
      runs.give(it->first);
      held.erase(it);
      continue;
    }
    const int n = 1 + static_cast<int>(rng() % 40);
    int first = runs.take(n);
    if (first < 0) {
      runs.grow(runs.grown_size(n));
      first = runs.take(n);
    }
    ASSERT_GE(first, 0);
    held[first] = n;
  }
  int used = 0, end = 0;
  for (const auto& [first, n] : held) {
    EXPECT_GE(first, end) << "runs overlap";
    end = first + n, used += n;
    EXPECT_EQ(runs.run_pages(first), n);
  }
  EXPECT_LE(end, runs.pages());
  EXPECT_EQ(runs.free_pages(), runs.pages() - used);
}

TEST(CascadeStep, GroupsOfOneRow) {
  const Batch b = make_batch(std::vector<int>(37, 1), 1);
  const CascadeStep s = cascade_step(b.rows, 32, 8, kPage, b.pool_pages);
  EXPECT_EQ(s.groups(), 37);
  expect_valid(b, s, 32, 8);
}

TEST(CascadeStep, OneGroupForTheWholeBatch) {
  const Batch b = make_batch({256}, 2);
  const CascadeStep s = cascade_step(b.rows, 32, 8, kPage, b.pool_pages);
  EXPECT_EQ(s.groups(), 1);
  for (std::size_t r = 0; r < s.order.size(); ++r) EXPECT_EQ(s.order[r], static_cast<int>(r));  // batch order kept
  expect_valid(b, s, 32, 8);
}

TEST(CascadeStep, HumanEvalShapedBatches) {
  // 164 prompts of uneven sizes (1..20 candidates left each), and best-of-8 / best-of-100 shapes.
  std::mt19937_64 rng(3);
  std::vector<int> uneven(164);
  for (int& n : uneven) n = 1 + static_cast<int>(rng() % 20);
  for (const auto& sizes : {uneven, std::vector<int>(164, 8), std::vector<int>(164, 100)}) {
    const Batch b = make_batch(sizes, rng());
    const CascadeStep s = cascade_step(b.rows, 32, 8, kPage, b.pool_pages);
    EXPECT_EQ(s.groups(), 164);
    expect_valid(b, s, 32, 8);
  }
}

TEST(CascadeStep, RefusesBadInput) {
  const std::vector<CascadeRow> ok = {{5, 0, 20}, {5, 0, 20}};
  EXPECT_NO_THROW(cascade_step(ok, 32, 8, kPage, 2));
  EXPECT_THROW(cascade_step({}, 32, 8, kPage, 2), Error);                                        // no rows
  EXPECT_THROW(cascade_step(ok, 32, 8, kPage, 1), Error);                                        // pages past the pool
  EXPECT_THROW(cascade_step(ok, 30, 8, kPage, 2), Error);                                        // heads do not divide
  EXPECT_THROW(cascade_step(std::vector<CascadeRow>{{5, 0, 0}}, 32, 8, kPage, 2), Error);        // an empty prefix
  EXPECT_THROW(cascade_step(std::vector<CascadeRow>{{5, -1, 3}}, 32, 8, kPage, 2), Error);       // a negative page
  EXPECT_THROW(cascade_step(std::vector<CascadeRow>{{5, 0, 20}, {5, 1, 20}}, 32, 8, kPage, 4), Error);  // one prefix, two runs
  try {
    cascade_step(std::vector<CascadeRow>{{5, 0, 20}, {5, 0, 21}}, 32, 8, kPage, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
  }
}

// The plan's whole indexing emulated on the host: the prompts copied into a page pool at their
// runs (zeros past each prompt); per group, the prefix state (log-sum-exp in natural units and
// the normalized output, in double) of each of its rows read through page_indices and
// last_page_len at place r of the group order; per batch row, the state at map[t] + h merged with
// the row's suffix by log-sum-exp. Against cpu::decode_attention over the original rows: only
// summation order and exp differ (the twin's exp_poly), so 1e-5 + 1e-4 relative.
TEST(CascadeStep, HostEmulationOfTheIndexingMatchesDecodeAttention) {
  const int n_heads = 8, n_kv = 2, hd = 16, group = n_heads / n_kv;
  const auto kvd = static_cast<std::size_t>(n_kv * hd), HD = static_cast<std::size_t>(hd);
  const Batch b = make_batch({1, 3, 5, 1, 2}, 4);
  const int T = static_cast<int>(b.rows.size());
  const auto Ts = static_cast<std::size_t>(T);
  std::mt19937_64 rng(5);
  // Each prefix's rows (contiguous), and each row's suffix.
  std::map<int, std::vector<std::uint16_t>> pk, pv;
  for (const CascadeRow& r : b.rows)
    if (!pk.count(r.prefix)) {
      pk[r.prefix] = bf16_values(static_cast<std::size_t>(r.len) * kvd, rng());
      pv[r.prefix] = bf16_values(static_cast<std::size_t>(r.len) * kvd, rng());
    }
  std::vector<std::vector<std::uint16_t>> sk, sv;
  std::vector<int> slen;
  for (int t = 0; t < T; ++t) {
    slen.push_back(static_cast<int>(rng() % 20));  // empty suffixes too
    sk.push_back(bf16_values(static_cast<std::size_t>(slen.back()) * kvd + 1, rng()));
    sv.push_back(bf16_values(static_cast<std::size_t>(slen.back()) * kvd + 1, rng()));
  }
  const std::vector<float> q = test::random_floats(Ts * static_cast<std::size_t>(n_heads) * HD, 6, 2.0f);
  // The pools: page p holds positions [16 p', 16 p' + 16) of the prompt whose run it is in.
  const std::size_t page_elems = static_cast<std::size_t>(kPage) * kvd;
  std::vector<std::uint16_t> kpool(static_cast<std::size_t>(b.pool_pages) * page_elems), vpool(kpool.size());
  for (const CascadeRow& r : b.rows) {
    std::copy(pk[r.prefix].begin(), pk[r.prefix].end(), kpool.begin() + static_cast<long>(static_cast<std::size_t>(r.first_page) * page_elems));
    std::copy(pv[r.prefix].begin(), pv[r.prefix].end(), vpool.begin() + static_cast<long>(static_cast<std::size_t>(r.first_page) * page_elems));
  }
  const CascadeStep s = cascade_step(b.rows, n_heads, n_kv, kPage, b.pool_pages);
  // Prefix states at rows r * n_heads + h of the group order, read through the page tables only.
  const double scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<double> lse(Ts * static_cast<std::size_t>(n_heads)), out_p(lse.size() * HD);
  for (int g = 0; g < s.groups(); ++g)
    for (int r = s.qo_indptr[static_cast<std::size_t>(g)]; r < s.qo_indptr[static_cast<std::size_t>(g) + 1]; ++r)
      for (int h = 0; h < n_heads; ++h) {
        const float* qr = q.data() + (static_cast<std::size_t>(s.order[static_cast<std::size_t>(r)]) * static_cast<std::size_t>(n_heads) +
                                      static_cast<std::size_t>(h)) * HD;
        std::vector<double> scores, acc(HD, 0.0);
        const int first = s.page_indptr[static_cast<std::size_t>(g)], pages = s.page_indptr[static_cast<std::size_t>(g) + 1] - first;
        for (int i = 0; i < pages; ++i) {
          const int in_page = i + 1 < pages ? kPage : s.last_page_len[static_cast<std::size_t>(g)];
          for (int j = 0; j < in_page; ++j) {
            const std::size_t at = (static_cast<std::size_t>(s.page_indices[static_cast<std::size_t>(first + i)]) * kPage +
                                    static_cast<std::size_t>(j)) * kvd + static_cast<std::size_t>(h / group) * HD;
            double dot = 0;
            for (std::size_t e = 0; e < HD; ++e) dot += static_cast<double>(qr[e]) * bf16_to_float(kpool[at + e]);
            scores.push_back(dot * scale);
            const double w = std::exp(scores.back());
            for (std::size_t e = 0; e < HD; ++e) acc[e] += w * bf16_to_float(vpool[at + e]);
          }
        }
        double l = 0;
        for (double sc : scores) l += std::exp(sc);
        const std::size_t row = static_cast<std::size_t>(r) * static_cast<std::size_t>(n_heads) + static_cast<std::size_t>(h);
        lse[row] = std::log(l);
        for (std::size_t e = 0; e < HD; ++e) out_p[row * HD + e] = acc[e] / l;
      }
  // The merge, by map, and the reference.
  std::vector<float> got(q.size()), ref(q.size());
  std::vector<const std::uint16_t*> kp, vp, ks, vs;
  std::vector<int> plen;
  for (int t = 0; t < T; ++t) {
    const CascadeRow& r = b.rows[static_cast<std::size_t>(t)];
    kp.push_back(pk[r.prefix].data()), vp.push_back(pv[r.prefix].data()), plen.push_back(r.len);
    ks.push_back(sk[static_cast<std::size_t>(t)].data()), vs.push_back(sv[static_cast<std::size_t>(t)].data());
    for (int h = 0; h < n_heads; ++h) {
      const float* qr = q.data() + (static_cast<std::size_t>(t) * static_cast<std::size_t>(n_heads) + static_cast<std::size_t>(h)) * HD;
      const std::size_t sr = static_cast<std::size_t>(s.map[static_cast<std::size_t>(t)] + (h / group) * s.map[Ts + static_cast<std::size_t>(t)] +
                                                      s.map[2 * Ts + static_cast<std::size_t>(t)] * group + h % group);
      double M = lse[sr], denom = 0;
      std::vector<double> sc;
      for (int j = 0; j < slen[static_cast<std::size_t>(t)]; ++j) {
        double dot = 0;
        for (std::size_t e = 0; e < HD; ++e)
          dot += static_cast<double>(qr[e]) * bf16_to_float(sk[static_cast<std::size_t>(t)][static_cast<std::size_t>(j) * kvd + static_cast<std::size_t>(h / group) * HD + e]);
        sc.push_back(dot * scale);
        M = std::max(M, sc.back());
      }
      std::vector<double> acc(HD);
      const double a = std::exp(lse[sr] - M);
      denom = a;
      for (std::size_t e = 0; e < HD; ++e) acc[e] = a * out_p[sr * HD + e];
      for (int j = 0; j < slen[static_cast<std::size_t>(t)]; ++j) {
        const double w = std::exp(sc[static_cast<std::size_t>(j)] - M);
        denom += w;
        for (std::size_t e = 0; e < HD; ++e)
          acc[e] += w * bf16_to_float(sv[static_cast<std::size_t>(t)][static_cast<std::size_t>(j) * kvd + static_cast<std::size_t>(h / group) * HD + e]);
      }
      for (std::size_t e = 0; e < HD; ++e)
        got[(static_cast<std::size_t>(t) * static_cast<std::size_t>(n_heads) + static_cast<std::size_t>(h)) * HD + e] = static_cast<float>(acc[e] / denom);
    }
  }
  cpu::decode_attention(q.data(), kp.data(), vp.data(), plen.data(), ks.data(), vs.data(), slen.data(), T, n_heads, n_kv, hd, ref.data());
  for (std::size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-5 + 1e-4 * std::fabs(ref[i])) << "element " << i;
}

}  // namespace
}  // namespace bestofn::cuda
