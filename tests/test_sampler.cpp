// The sampler and its counter-based RNG.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bestofn/util/rng.h"
#include "bestofn/engine/sampler.h"

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

// top_p = 0 (the flags and generation_config.json allow it): the shortest prefix reaching 0 still
// holds the best token, so every draw is the best, with or without min-p.
TEST(Sampler, TopPZeroKeepsTheBestToken) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f};
  SamplerScratch s;
  for (float min_p : {0.0f, 0.05f}) {
    SamplingParams p;
    p.temperature = 1.0f, p.top_p = 0.0f, p.min_p = min_p;
    for (std::uint64_t c = 0; c < 50; ++c) EXPECT_EQ(sample_token(logits, p, 0, c, 0, s).token, 3) << "min_p " << min_p;
  }
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

namespace {

// The rule of sampler.h written plainly, as a reference for the vectorized sampler on large
// vocabularies: double exp, a full sort, sequential sums in list order. Also returns how close the
// draw (u * kept) and the top-p cut (top_p * total) came to a cumulative mass, relative to the
// mass: the fast sampler's sums run in other orders (blocks of ids, partial sorts), so a token
// may differ only where one of these margins is at rounding level.
struct Reference {
  int token;
  double logprob, margin;
};
// The candidate list and its cut, once per row and parameters; draw() walks it for one key.
class ReferenceRule {
 public:
  ReferenceRule(const std::vector<float>& logits, const SamplingParams& p) : p_(p) {
    const float inv_t = 1.0f / p.temperature;
    float zmax = -INFINITY;
    for (float l : logits) zmax = std::max(zmax, l * inv_t);
    double all = 0.0;
    for (float l : logits) all += std::exp(static_cast<double>(l * inv_t) - zmax);
    lse_ = zmax + std::log(all);
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] * inv_t >= zmax - 30.0f)
        c_.push_back({logits[i] * inv_t, std::exp(static_cast<double>(logits[i] * inv_t) - zmax), static_cast<int>(i)});
    const bool top_k = p.top_k > 0 && static_cast<std::size_t>(p.top_k) < c_.size();
    if (top_k || p.top_p < 1.0f || p.min_p > 0.0f)
      std::sort(c_.begin(), c_.end(), [](const C& a, const C& b) { return a.z != b.z ? a.z > b.z : a.id < b.id; });
    if (top_k) c_.resize(static_cast<std::size_t>(p.top_k));
    double total = 0.0;
    for (const C& x : c_) total += x.w;
    keep_ = c_.size();
    if (p.top_p < 1.0f) {
      double cum = 0.0;
      for (std::size_t i = 0; i < c_.size(); ++i) {
        cum += c_[i].w;
        cut_margin_ = std::min(cut_margin_, std::fabs(cum - p.top_p * total) / total);
        if (cum >= p.top_p * total) {
          keep_ = i + 1;
          break;
        }
      }
    }
    while (keep_ > 1 && c_[keep_ - 1].w < p.min_p) --keep_;
    for (std::size_t i = 0; i < keep_; ++i) kept_ += c_[i].w;
  }
  Reference draw(std::uint64_t prompt, std::uint64_t cand) const {
    const double r = static_cast<double>(uniform01(p_.seed, prompt, cand, 0)) * kept_;
    double cum = 0.0, margin = cut_margin_;
    for (std::size_t i = 0; i < keep_; ++i) {
      cum += c_[i].w;
      margin = std::min(margin, std::fabs(cum - r) / kept_);
      if (cum > r) return {c_[i].id, c_[i].z - lse_, margin};
    }
    return {c_[keep_ - 1].id, c_[keep_ - 1].z - lse_, margin};
  }

 private:
  struct C {
    float z;
    double w;
    int id;
  };
  SamplingParams p_;
  std::vector<C> c_;
  std::size_t keep_ = 0;
  double lse_ = 0.0, kept_ = 0.0, cut_margin_ = 1.0;
};

}  // namespace

// Vocabularies of 50001 and 128256 (not multiples of the sampler's 16 lanes nor of its blocks),
// peaked like a language model's (a few tokens hold most of the mass, a long flat tail) or flat
// (every token a candidate), under each truncation: every draw is the reference's token (unless
// the reference itself was within 1e-6 of a boundary: exp_poly's weights are within ~1e-7 of the
// reference's), with the logprob within 1e-5.
TEST(Sampler, LargeVocabulariesDrawTheReferenceTokens) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    const char* name;
    float temperature, top_p, min_p;
    int top_k;
  };
  const Case cases[] = {{"T=0.8", 0.8f, 1.0f, 0.0f, 0}, {"T=0.8 top-p 0.95", 0.8f, 0.95f, 0.0f, 0},
                        {"T=1 top-k 40", 1.0f, 1.0f, 0.0f, 40}, {"T=1 min-p 0.05", 1.0f, 1.0f, 0.05f, 0},
                        {"T=0.6 top-k 200 top-p 0.9 min-p 0.01", 0.6f, 0.9f, 0.01f, 200}, {"T=1.2 top-p 0.5", 1.2f, 0.5f, 0.0f, 0},
                        {"T=1 top-k 1000000 (more than the candidates: no truncation)", 1.0f, 1.0f, 0.0f, 1000000}};
  for (std::size_t vocab : {std::size_t{50001}, std::size_t{128256}})
    for (bool peaked : {true, false}) {
      std::vector<float> logits(vocab);
      for (auto& l : logits) l = peaked ? 2.5f * normal(rng) : 0.05f * normal(rng);
      if (peaked)
        for (int k = 0; k < 5; ++k) logits[static_cast<std::size_t>(rng() % vocab)] = 12.0f + static_cast<float>(k);
      for (const Case& cs : cases) {
        SCOPED_TRACE(std::string(cs.name) + ", vocab " + std::to_string(vocab) + (peaked ? ", peaked" : ", flat"));
        SamplingParams p;
        p.temperature = cs.temperature, p.top_p = cs.top_p, p.min_p = cs.min_p, p.top_k = cs.top_k, p.seed = 5;
        SamplerScratch s;
        const ReferenceRule rule(logits, p);
        int differ = 0, distinct = 0;
        std::vector<char> seen(vocab, 0);
        const std::uint64_t draws = peaked ? 200 : 40;  // a flat row sorts all its candidates per truncated draw
        for (std::uint64_t cand = 0; cand < draws; ++cand) {
          const Reference want = rule.draw(3, cand);
          const Sample got = sample_token(logits, p, 3, cand, 0, s);
          EXPECT_NEAR(got.logprob, want.logprob, 1e-5) << "candidate " << cand;
          if (got.token != want.token && want.margin > 1e-6) ++differ;
          distinct += !seen[static_cast<std::size_t>(got.token)];
          seen[static_cast<std::size_t>(got.token)] = 1;
        }
        EXPECT_EQ(differ, 0);
        EXPECT_GT(distinct, cs.top_k == 40 ? 5 : 1);  // draws, not one token over and over
      }
    }
}
