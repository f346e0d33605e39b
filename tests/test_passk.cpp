// The pass@k estimator against the combinatorial definition, its edge cases, and a large-n golden.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "bestofn/util/error.h"
#include "bestofn/eval/passk.h"

using namespace bestofn;

namespace {
// C(n, r) for n <= 60 from Pascal's triangle: exact in uint64 (C(60, 30) ~ 1.2e17 < 2^64), and
// exact as a long double (64-bit significand on x86).
struct Binomials {
  static constexpr int kMax = 60;
  std::uint64_t c[kMax + 1][kMax + 1] = {};
  Binomials() {
    for (int n = 0; n <= kMax; ++n) {
      c[n][0] = 1;
      for (int r = 1; r <= n; ++r) c[n][r] = c[n - 1][r - 1] + (r <= n - 1 ? c[n - 1][r] : 0);
    }
  }
  std::uint64_t operator()(int n, int r) const { return r < 0 || r > n ? 0 : c[n][r]; }
};

// The definition: 1 - C(n-c, k) / C(n, k).
long double reference(const Binomials& comb, int n, int c, int k) {
  return 1.0L - static_cast<long double>(comb(n - c, k)) / static_cast<long double>(comb(n, k));
}
}  // namespace

TEST(PassAtK, MatchesTheCombinatorialDefinitionForEveryNCKUpTo60) {
  const Binomials comb;
  EXPECT_EQ(comb(60, 30), 118264581564861424ull);  // the triangle itself, against a known value
  int checked = 0, mismatches = 0;
  for (int n = 1; n <= Binomials::kMax; ++n)
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k) {
        const std::optional<double> got = pass_at_k(n, c, k);
        ASSERT_TRUE(got.has_value()) << n << " " << c << " " << k;
        const long double want = reference(comb, n, c, k);
        // Up to 60 rounded double products: error a few 1e-15. A wrong term or range changes the
        // value by far more than 1e-13 (e.g. one term more at n = 60, k = 1 moves it by ~2e-4).
        if (std::fabs(static_cast<long double>(*got) - want) > 1e-13L && ++mismatches <= 5)
          ADD_FAILURE() << "n=" << n << " c=" << c << " k=" << k << ": got " << *got << ", want " << static_cast<double>(want);
        ++checked;
      }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, 75640);  // sum_{n=1}^{60} n (n + 1)
}

TEST(PassAtK, EdgeCases) {
  EXPECT_EQ(pass_at_k(10, 0, 1), 0.0);   // no pass: 0
  EXPECT_EQ(pass_at_k(10, 0, 10), 0.0);
  EXPECT_EQ(pass_at_k(10, 10, 1), 1.0);  // all pass: 1
  EXPECT_EQ(pass_at_k(10, 10, 10), 1.0);
  EXPECT_EQ(pass_at_k(10, 5, 6), 1.0);   // n - c = 5 < k: every 6-subset holds a pass
  EXPECT_EQ(pass_at_k(10, 1, 10), 1.0);
  EXPECT_FALSE(pass_at_k(5, 2, 10).has_value());  // k > n: not computable
  EXPECT_FALSE(pass_at_k(0, 0, 1).has_value());
  // pass@1 is c / n; the product of c rounded terms is within a few ulps of it.
  EXPECT_NEAR(*pass_at_k(10, 3, 1), 0.3, 1e-15);
  EXPECT_NEAR(*pass_at_k(200, 37, 1), 37.0 / 200.0, 1e-15);
}

TEST(PassAtK, RejectsImpossibleCounts) {
  EXPECT_THROW(pass_at_k(5, 6, 1), Error);
  EXPECT_THROW(pass_at_k(5, -1, 1), Error);
  EXPECT_THROW(pass_at_k(5, 2, 0), Error);
  EXPECT_THROW(pass_at_k(-1, 0, 1), Error);
}

TEST(PassAtK, LargeNIsStable) {
  // python3 -c "from math import comb; from fractions import Fraction as F; print(repr(float(1 - F(comb(997,100), comb(1000,100)))))"
  // -> 0.2712433876762534
  EXPECT_NEAR(*pass_at_k(1000, 3, 100), 0.2712433876762534, 1e-14);
  // python3 -c "from math import comb; from fractions import Fraction as F; print(repr(float(1 - F(comb(9990,1000), comb(10000,1000)))))"
  // -> 0.6514959721207447
  EXPECT_NEAR(*pass_at_k(10000, 10, 1000), 0.6514959721207447, 1e-14);
}

TEST(PassAtK, AggregateMeansOnlyComputableProblemsAndCountsTheRest) {
  // (n, c): pass@1 = 0.3, 0.0, 1.0, and n = 3 for the last, so pass@5 cannot be computed there.
  const std::vector<std::pair<int, int>> nc = {{10, 3}, {10, 0}, {10, 10}, {3, 1}};
  const std::vector<PassAtK> r = pass_at_k(nc, {1, 5, 20});
  ASSERT_EQ(r.size(), 3u);

  EXPECT_EQ(r[0].k, 1);
  EXPECT_EQ(r[0].problems_used, 4);
  EXPECT_EQ(r[0].problems_skipped, 0);
  EXPECT_DOUBLE_EQ(r[0].mean, (0.3 + 0.0 + 1.0 + 1.0 / 3.0) / 4.0);

  EXPECT_EQ(r[1].k, 5);
  EXPECT_EQ(r[1].problems_used, 3);
  EXPECT_EQ(r[1].problems_skipped, 1);
  ASSERT_EQ(r[1].per_problem.size(), 4u);
  EXPECT_FALSE(r[1].per_problem[3].has_value());
  // pass@5 for (10, 3): 1 - C(7,5)/C(10,5) = 1 - 21/252
  EXPECT_NEAR(*r[1].per_problem[0], 1.0 - 21.0 / 252.0, 1e-15);
  EXPECT_NEAR(r[1].mean, ((1.0 - 21.0 / 252.0) + 0.0 + 1.0) / 3.0, 1e-15);

  EXPECT_EQ(r[2].k, 20);  // k above every n: nothing to average, and that is visible
  EXPECT_EQ(r[2].problems_used, 0);
  EXPECT_EQ(r[2].problems_skipped, 4);
  EXPECT_TRUE(std::isnan(r[2].mean));
}
