// The best-of-N scheduler on a synthetic tiny model with the real Llama 3 tokenizer: stops,
// reproducibility whatever the batch, and the context limit.
#include <gtest/gtest.h>

#include <map>

#include "bestofn/engine.h"
#include "bestofn/error.h"
#include "bestofn/scheduler.h"
#include "bestofn/synthetic.h"
#include "bestofn/tokenizer.h"
#include "bestofn/weights.h"
#include "test_util.h"

using namespace bestofn;

namespace {

struct Fixture {
  test::TempDir dir;
  std::shared_ptr<const Weights> w;
  std::unique_ptr<Tokenizer> tok;
  Fixture() {
    SyntheticOptions o;
    o.shape = "tiny";
    o.dtype = "fp8";
    o.seed = 3;
    o.out = dir / "m";
    o.tokenizer = test::require_shared("tokenizers/llama3");
    make_synthetic(o);
    w = std::make_shared<const Weights>(load_model(o.out));
    tok = std::make_unique<Tokenizer>(Tokenizer::load(o.out));
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

std::vector<Candidate> run(const std::vector<GenerationRequest>& reqs, GenerationOptions o, int threads = 0) {
  EngineOptions eo;
  eo.threads = threads;
  auto e = make_cpu_engine(fx().w, eo);
  std::vector<Candidate> out;
  generate(*e, *fx().tok, reqs, o, [&](Candidate&& c) { out.push_back(std::move(c)); });
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return std::pair(a.prompt, a.index) < std::pair(b.prompt, b.index); });
  return out;
}

GenerationRequest req(const std::string& text, int n) { return {"p", fx().tok->encode(text, true), n, {}}; }

}  // namespace

TEST(Scheduler, CandidatesAreReproducibleWhateverBatchAndThreads) {
  GenerationOptions o;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = 1;
  o.max_new_tokens = 12;
  const std::vector<GenerationRequest> reqs = {req("def fib(n):", 8), req("import os\n", 3), req("x", 5)};
  o.batch = 64;
  const auto base = run(reqs, o);
  ASSERT_EQ(base.size(), 16u);
  for (int batch : {1, 3, 7}) {
    o.batch = batch;
    for (int threads : {1, 2}) {
      const auto other = run(reqs, o, threads);
      ASSERT_EQ(other.size(), base.size());
      for (std::size_t i = 0; i < base.size(); ++i) {
        EXPECT_EQ(other[i].token_ids, base[i].token_ids) << "batch " << batch << " threads " << threads << " candidate " << i;
        EXPECT_EQ(other[i].cumulative_logprob, base[i].cumulative_logprob);
      }
    }
  }
  // Different candidates of one prompt differ (distinct RNG streams), and the text is the decode.
  EXPECT_NE(base[0].token_ids, base[1].token_ids);
  EXPECT_EQ(base[0].text, fx().tok->decode(base[0].token_ids));
}

TEST(Scheduler, StopStringsEosAndLength) {
  GenerationOptions o;
  o.sampling.temperature = 0.0f;
  o.max_new_tokens = 30;
  const auto plain = run({req("Hello", 1)}, o);
  ASSERT_EQ(plain[0].finish_reason, "length");
  ASSERT_EQ(plain[0].token_ids.size(), 30u);
  const std::string full = plain[0].text;
  ASSERT_GT(full.size(), 12u);

  // A stop string from the middle of the greedy text: cut at its first occurrence, recorded.
  const std::string stop = full.substr(6, 4);
  o.stop = {"never-appears", stop};
  const auto stopped = run({req("Hello", 1)}, o);
  EXPECT_EQ(stopped[0].finish_reason, "stop");
  ASSERT_TRUE(stopped[0].stop);
  EXPECT_EQ(*stopped[0].stop, stop);
  EXPECT_EQ(stopped[0].text, full.substr(0, full.find(stop)));
  EXPECT_LT(stopped[0].token_ids.size(), 30u);

  // Per-request stop strings work too.
  o.stop = {};
  GenerationRequest r = req("Hello", 1);
  r.stop = {stop};
  EXPECT_EQ(run({r}, o)[0].finish_reason, "stop");

  // EOS: the 4th greedy token declared an EOS id ends the candidate there, outside the text.
  o.eos_ids = {plain[0].token_ids[3]};
  const auto eos = run({req("Hello", 1)}, o);
  EXPECT_EQ(eos[0].finish_reason, "eos");
  EXPECT_EQ(eos[0].token_ids.size(), 4u);
  EXPECT_EQ(eos[0].text, fx().tok->decode(std::vector<int>(plain[0].token_ids.begin(), plain[0].token_ids.begin() + 3)));

  o.eos_ids = {};
  o.max_new_tokens = 5;
  const auto len = run({req("Hello", 1)}, o);
  EXPECT_EQ(len[0].finish_reason, "length");
  EXPECT_EQ(len[0].token_ids, std::vector<int>(plain[0].token_ids.begin(), plain[0].token_ids.begin() + 5));
}

TEST(Scheduler, ContextLimitEndsWithLengthAndLongPromptsAreErrors) {
  const int ctx = fx().w->config.max_position_embeddings;
  GenerationOptions o;
  o.sampling.temperature = 0.0f;
  o.max_new_tokens = 100;
  GenerationRequest r{"long", std::vector<int>(static_cast<std::size_t>(ctx) - 3, 100), 2, {}};
  const auto out = run({r}, o);
  ASSERT_EQ(out.size(), 2u);
  // Positions ctx-3, ctx-2 and ctx-1 take three fed tokens; the fourth is drawn but has no place.
  EXPECT_EQ(out[0].finish_reason, "length");
  EXPECT_EQ(out[0].token_ids.size(), 4u);
  r.prompt_ids.resize(static_cast<std::size_t>(ctx));
  EXPECT_THROW(run({r}, o), Error);
  r.prompt_ids = {1, fx().w->config.vocab_size + 5};
  EXPECT_THROW(run({r}, o), Error);
}
