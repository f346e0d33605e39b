// The bootstrap over problems (intervals.h): a golden from an independent Python computation on a
// real run's verdicts, and properties that hold whatever the draws: it holds the mean, narrows as
// 1/sqrt(P), matches the bootstrap's own spread, is degenerate for equal values, and is seeded.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "bestofn/eval/intervals.h"
#include "bestofn/eval/passk.h"
#include "bestofn/util/error.h"

using namespace bestofn;

namespace {

// Passes out of n = 20 per HumanEval problem (in task order) of a real run: SmolLM2-135M-Instruct,
// FP8, chat template, temperature 0.8 (benchmarks/results/2026-12-06-cpu-selection-smollm2-n20.jsonl;
// pass@1 0.0323, pass@20 0.1098). Golden intervals below from
//   /tmp/he-venv/bin/python tools/gen_bootstrap_golden.py .models/runs/smollm2-he-n20-fp8/results.jsonl 20
// (its own Philox4x32-10 in Python integers, checked against Random123's known answer; pass@k by
// math.comb; numpy.quantile's linear method).
const std::vector<int> kSmolPasses = {
    0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 15, 0, 0, 0, 1, 12, 4, 3, 1, 0, 0, 1, 16, 0, 0, 0, 0, 0,
    0, 3, 0, 0, 0, 0, 0, 8, 6, 0, 0, 4, 13, 0, 1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

struct Golden {
  IntervalSettings settings;
  Interval pass1, pass10, pass20, diff;  // diff: pass@20 - pass@1, paired over the problems
};
const Golden kGoldens[] = {
    {{2000, 47, 0.95},
     {0.015548780487804883, 0.0524390243902439},
     {0.05592229603157548, 0.13848142378557032},
     {0.06707317073170732, 0.15853658536585366},
     {0.045114329268292695, 0.1164634146341463}},
    {{1000, 12345678901ull, 0.95},
     {0.015243902439024393, 0.05122713414634147},
     {0.05478289691506109, 0.13814379984491082},
     {0.06707317073170732, 0.15853658536585366},
     {0.04359756097560976, 0.11586128048780488}},
};

std::vector<PassAtK> smol_pass_at_k(const IntervalSettings& s) {
  std::vector<std::pair<int, int>> nc;
  for (const int c : kSmolPasses) nc.emplace_back(20, c);
  std::vector<PassAtK> r = pass_at_k(nc, {1, 10, 20});
  add_intervals(r, s);
  return r;
}

std::vector<double> values(const PassAtK& p) {
  std::vector<double> v;
  for (const auto& x : p.per_problem) v.push_back(x.value());
  return v;
}

// Seeded values in [0, 1] (a mix of 0/1 and fractions, as pass@k's are).
std::vector<double> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = u(gen);
    v.push_back(x < 0.4 ? 0.0 : x > 0.8 ? 1.0 : u(gen));
  }
  return v;
}

double width(const std::optional<Interval>& i) { return i->hi - i->lo; }

double mean(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

TEST(BootstrapInterval, MatchesAnIndependentPythonComputationOnARealRun) {
  ASSERT_EQ(kSmolPasses.size(), 164u);
  for (const Golden& g : kGoldens) {
    SCOPED_TRACE("seed " + std::to_string(g.settings.seed));
    const std::vector<PassAtK> r = smol_pass_at_k(g.settings);
    ASSERT_EQ(r.size(), 3u);
    EXPECT_NEAR(r[0].mean, 0.03231707317073171, 1e-15);  // the run's summary.json
    EXPECT_NEAR(r[2].mean, 0.10975609756097561, 1e-15);
    // The same draws, the same sums: equal up to the quantile's last-bit arithmetic.
    const Interval* want[] = {&g.pass1, &g.pass10, &g.pass20};
    for (std::size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(r[i].interval) << "k = " << r[i].k;
      EXPECT_NEAR(r[i].interval->lo, want[i]->lo, 1e-12) << "k = " << r[i].k;
      EXPECT_NEAR(r[i].interval->hi, want[i]->hi, 1e-12) << "k = " << r[i].k;
    }
    const auto d = paired_difference_interval(values(r[0]), values(r[2]), g.settings);
    ASSERT_TRUE(d);
    EXPECT_NEAR(d->lo, g.diff.lo, 1e-12);
    EXPECT_NEAR(d->hi, g.diff.hi, 1e-12);
  }
}

TEST(BootstrapInterval, HoldsTheMeanAndMatchesTheBootstrapSpread) {
  // The bootstrap's means have variance sigma^2 / P (sigma^2 the values' variance with divisor P):
  // with many resamples, the 95% percentile interval is close to mean +- 1.96 sigma / sqrt(P).
  // This holds for any uniform draw of problems, so it checks the draws too.
  for (const unsigned seed : {1u, 2u, 3u}) {
    const std::vector<double> v = random_values(400, seed);
    const double m = mean(v);
    double var = 0;
    for (const double x : v) var += (x - m) * (x - m);
    var /= static_cast<double>(v.size());
    const double half = 1.959964 * std::sqrt(var / static_cast<double>(v.size()));
    const auto i = bootstrap_interval(v, {20000, seed, 0.95});
    ASSERT_TRUE(i);
    EXPECT_LT(i->lo, m);
    EXPECT_GT(i->hi, m);
    EXPECT_NEAR(width(i), 2 * half, 0.05 * 2 * half) << "seed " << seed;
    EXPECT_NEAR((i->lo + i->hi) / 2, m, 0.1 * half) << "seed " << seed;  // nearly symmetric for P = 400
    // The default settings: the same, within the noise of 2000 resamples.
    EXPECT_NEAR(width(bootstrap_interval(v)), 2 * half, 0.1 * 2 * half);
  }
  for (const PassAtK& p : smol_pass_at_k({})) {
    EXPECT_LT(p.interval->lo, p.mean) << p.k;
    EXPECT_GT(p.interval->hi, p.mean) << p.k;
  }
}

TEST(BootstrapInterval, NarrowsAsOneOverSqrtOfTheProblems) {
  // The same values, each problem 4 and 16 times: the interval is 1/2 and 1/4 as wide.
  const std::vector<double> v = random_values(50, 7);
  const double w1 = width(bootstrap_interval(v, {8000, 1, 0.95}));
  for (const int times : {4, 16}) {
    std::vector<double> rep;
    for (int t = 0; t < times; ++t) rep.insert(rep.end(), v.begin(), v.end());
    const double ratio = width(bootstrap_interval(rep, {8000, 1, 0.95})) / w1;
    EXPECT_NEAR(ratio, 1.0 / std::sqrt(times), 0.08 / std::sqrt(times)) << times << " times";
  }
}

TEST(BootstrapInterval, DegenerateForEqualValuesAndAbsentBelowTwoProblems) {
  EXPECT_FALSE(bootstrap_interval({}));
  EXPECT_FALSE(bootstrap_interval({0.7}));
  for (const double x : {0.0, 1.0, 0.1}) {
    const std::vector<double> v(164, x);
    const auto i = bootstrap_interval(v);
    ASSERT_TRUE(i);
    EXPECT_EQ(i->lo, i->hi);
    EXPECT_EQ(i->lo, mean(v));  // the mean as summed, even where 164 x 0.1 / 164 is not 0.1
  }
  // pass@k where every problem fails, or where only one problem has n >= k.
  std::vector<PassAtK> r = pass_at_k({{10, 0}, {10, 0}, {10, 0}, {30, 5}}, {1, 20});
  add_intervals(r);
  EXPECT_EQ(r[0].interval->lo, 0.0);  // (3/4)^4 of the resamples miss (30, 5), the one that passes
  EXPECT_GT(r[0].interval->hi, 0.0);
  EXPECT_EQ(r[1].problems_used, 1);
  EXPECT_FALSE(r[1].interval);
  // Two identical runs: the paired difference is exactly 0.
  const std::vector<double> v = random_values(164, 9);
  const auto d = paired_difference_interval(v, v);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->lo, 0.0);
  EXPECT_EQ(d->hi, 0.0);
}

TEST(BootstrapInterval, ReproducibleWithItsSeedAndMovedByAnother) {
  const std::vector<double> v = random_values(164, 11);
  const auto a = bootstrap_interval(v, {2000, 47, 0.95}), b = bootstrap_interval(v, {2000, 47, 0.95});
  EXPECT_EQ(a->lo, b->lo);
  EXPECT_EQ(a->hi, b->hi);
  const auto c = bootstrap_interval(v, {2000, 48, 0.95});
  EXPECT_TRUE(c->lo != a->lo || c->hi != a->hi);
  EXPECT_NEAR(c->lo, a->lo, 0.1 * width(a));  // another draw of the same distribution
  EXPECT_NEAR(c->hi, a->hi, 0.1 * width(a));
  // A wider level, a wider interval.
  const auto wide = bootstrap_interval(v, {2000, 47, 0.99});
  EXPECT_LT(wide->lo, a->lo);
  EXPECT_GT(wide->hi, a->hi);
}

TEST(BootstrapInterval, PairingRemovesWhatTheRunsShare) {
  // B = A plus a small improvement on a few problems: apart, the two intervals overlap widely;
  // paired, the difference is clearly above 0 (the problems' own difficulty cancels).
  std::vector<double> a = random_values(164, 13), b = a;
  for (std::size_t i = 0; i < b.size(); i += 8) b[i] = std::min(1.0, b[i] + 0.5);
  const auto ia = bootstrap_interval(a), ib = bootstrap_interval(b);
  EXPECT_LT(ib->lo, ia->hi) << "the runs' own intervals overlap";
  const auto d = paired_difference_interval(a, b);
  ASSERT_TRUE(d);
  EXPECT_GT(d->lo, 0.0);
  EXPECT_LT(width(d), 0.5 * width(ia));
  // A constant shift: every difference equal, so the interval is that shift.
  std::vector<double> shifted = a;
  for (double& x : shifted) x += 0.25;
  const auto s = paired_difference_interval(a, shifted);
  EXPECT_NEAR(s->lo, 0.25, 1e-12);
  EXPECT_NEAR(s->hi, 0.25, 1e-12);
}

TEST(BootstrapInterval, BadSettingsAndMismatchedRunsThrow) {
  const std::vector<double> v = random_values(10, 5);
  EXPECT_THROW(bootstrap_interval(v, {0, 1, 0.95}), Error);
  EXPECT_THROW(bootstrap_interval(v, {100, 1, 1.0}), Error);
  EXPECT_THROW(bootstrap_interval(v, {100, 1, 0.0}), Error);
  EXPECT_THROW(paired_difference_interval(v, std::vector<double>(9, 0.5)), Error);
}
