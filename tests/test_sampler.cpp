// The sampler and its counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bestofn/rng.h"
#include "bestofn/sampler.h"

using namespace bestofn;

TEST(Philox, KnownAnswers) {
  // Random123's published known-answer vectors for philox4x32-10.
  using A4 = std::array<std::uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformDependsOnEveryKeyPart) {
  const float u = uniform01(1, 2, 3, 4);
  EXPECT_GE(u, 0.0f);
  EXPECT_LT(u, 1.0f);
  EXPECT_EQ(u, uniform01(1, 2, 3, 4));
  EXPECT_NE(u, uniform01(2, 2, 3, 4));
  EXPECT_NE(u, uniform01(1, 3, 3, 4));
  EXPECT_NE(u, uniform01(1, 2, 4, 4));
  EXPECT_NE(u, uniform01(1, 2, 3, 5));
  EXPECT_NE(uniform01(1, 1ull << 32, 0, 0), uniform01(1, 0, 0, 0));  // the prompt's high word counts
}

namespace {
// Frequencies of each token over `draws` candidates.
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  SamplerScratch s;
  for (int c = 0; c < draws; ++c) f[static_cast<std::size_t>(sample_token(logits, p, 7, static_cast<std::uint64_t>(c), 0, s).token)] += 1.0 / draws;
  return f;
}
const std::vector<float> kLogits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
}  // namespace

TEST(Sampler, GreedyIsTheFirstMaximumWithItsLogprob) {
  SamplingParams p;
  p.temperature = 0.0f;
  SamplerScratch s;
  const Sample g = sample_token(std::vector<float>{1.0f, 3.0f, 3.0f, -2.0f}, p, 0, 0, 0, s);
  EXPECT_EQ(g.token, 1);
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-2.0));
  EXPECT_NEAR(g.logprob, 3.0 - lse, 1e-6);
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  const auto f = frequencies(kLogits, p, 40000);
  const double want[] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[static_cast<std::size_t>(i)], want[i], 0.012) << i;  // ~5 sigma
}

TEST(Sampler, TopKTopPAndMinPTruncate) {
  SamplingParams p;
  p.top_k = 2;
  auto f = frequencies(kLogits, p, 20000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.015);
  p.top_k = 0;
  p.top_p = 0.6f;  // 0.5 < 0.6 <= 0.8: the two best
  f = frequencies(kLogits, p, 20000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  p.top_p = 0.81f;  // needs the third
  f = frequencies(kLogits, p, 20000);
  EXPECT_GT(f[2], 0.1);
  EXPECT_EQ(f[3], 0.0);
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // keeps p >= 0.25: the two best
  f = frequencies(kLogits, p, 20000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_GT(f[1], 0.3);
}

TEST(Sampler, LogprobIsUnderTheTemperatureScaledDistribution) {
  SamplingParams p;
  p.temperature = 0.5f;
  SamplerScratch s;
  const Sample x = sample_token(kLogits, p, 1, 2, 3, s);
  double z = 0;
  for (float l : kLogits) z += std::exp(l / 0.5);
  EXPECT_NEAR(x.logprob, kLogits[static_cast<std::size_t>(x.token)] / 0.5 - std::log(z), 1e-5);
  EXPECT_EQ(sample_token(kLogits, p, 1, 2, 3, s).token, x.token);  // a pure function of its inputs
}

TEST(Sampler, NonFiniteLogitsGiveNoToken) {
  // A NaN anywhere, a +Inf, or no logit above -Inf: token -1 (the scheduler's error), never an
  // index into nothing, whatever the truncations.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {{nan, nan, nan}, {1.0f, nan, 2.0f}, {1.0f, inf, 2.0f}, {-inf, -inf, -inf}};
  SamplerScratch s;
  for (float t : {0.0f, 0.7f, 1.0f})
    for (const auto& row : rows) {
      SamplingParams p;
      p.temperature = t;
      p.top_p = 0.9f;
      p.min_p = 0.05f;
      const Sample x = sample_token(row, p, 0, 0, 0, s);
      EXPECT_EQ(x.token, -1) << "T=" << t << " row " << row[0] << "," << row[1] << "," << row[2];
      EXPECT_FALSE(std::isfinite(x.logprob));
      p.top_p = 1.0f, p.min_p = 0.0f, p.top_k = 2;
      EXPECT_EQ(sample_token(row, p, 0, 0, 0, s).token, -1);
    }
  // -Inf for some tokens is a distribution over the others.
  SamplingParams p;
  p.temperature = 1.0f;
  EXPECT_EQ(sample_token(std::vector<float>{-inf, 0.0f, -inf}, p, 0, 0, 0, s).token, 1);
}
