// Data-parallel generation (bestofn/generate/devices.h): the candidates dealt to several engines,
// each on its own thread, are those one engine makes. In test_shard's binary (one link less).
#include <gtest/gtest.h>

#include <map>

#include "bestofn/backends/backends.h"
#include "bestofn/engine/engine.h"
#include "bestofn/generate/devices.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "test_util.h"

using namespace bestofn::test;

// Data parallel: several engines, each on its own thread, give the candidates of one engine.
// Here CPU engines stand in for GPUs (tests/test_gpu_engine.cpp runs CUDA engines).
TEST(Devices, DataParallelEnginesGiveTheCandidatesOfOneEngine) {
  auto weights = std::make_shared<const bestofn::Weights>(bestofn::load_model(tiny_synthetic_model(3), {}));
  const bestofn::Tokenizer tok = bestofn::Tokenizer::load(tiny_synthetic_model(3).string());
  std::vector<bestofn::GenerationRequest> reqs(3);
  const std::vector<std::string> prompts = {"def f(x):", "print(", "import sys\nfor"};
  for (std::size_t p = 0; p < 3; ++p) reqs[p].id = std::to_string(p), reqs[p].prompt_ids = tok.encode(prompts[p], true), reqs[p].n = 5;
  reqs[0].indices = {1, 4};  // subsets, as a resumed run asks for: with 3 engines, the third has none of prompt 0
  reqs[1].indices = {0, 2, 3};
  reqs[2].rng_prompt = 7;
  bestofn::GenerationOptions go;
  go.sampling.temperature = 1.0f;
  go.sampling.seed = 9;
  go.max_new_tokens = 10;
  go.batch = 4;
  auto run = [&](std::size_t engines) {
    std::vector<std::unique_ptr<bestofn::Engine>> own;
    std::vector<bestofn::Engine*> ptrs;
    bestofn::EngineOptions eo;
    eo.threads = 1;
    for (std::size_t e = 0; e < engines; ++e) own.push_back(bestofn::make_cpu_engine(weights, eo)), ptrs.push_back(own.back().get());
    std::map<std::pair<std::size_t, int>, bestofn::Candidate> out;
    const auto st = bestofn::generate_data_parallel(ptrs, tok, reqs, go, [&](bestofn::Candidate&& c) {
      EXPECT_TRUE(out.emplace(std::make_pair(c.prompt, c.index), c).second) << c.prompt << " " << c.index;
    });
    EXPECT_EQ(st.generated_tokens, [&] {
      std::uint64_t t = 0;
      for (const auto& [k, c] : out) t += c.token_ids.size();
      return t;
    }());
    return out;
  };
  const auto one = run(1);
  ASSERT_EQ(one.size(), 10u);
  for (std::size_t engines : {2u, 3u}) {
    const auto many = run(engines);
    ASSERT_EQ(many.size(), one.size()) << engines << " engines";
    for (const auto& [k, c] : one) {
      ASSERT_TRUE(many.count(k)) << k.first << " " << k.second;
      EXPECT_EQ(c.token_ids, many.at(k).token_ids) << engines << " engines, prompt " << k.first << " candidate " << k.second;
      EXPECT_EQ(c.cumulative_logprob, many.at(k).cumulative_logprob);
    }
  }
}
