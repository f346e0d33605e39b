// --speculate on the real llama-260k (llama2.c's TinyStories model, ../shared; its text repeats,
// so sibling drafts are taken): the candidates are those of plain decoding, every field, whatever
// the draft length, batch, threads, temperature, top-p, stop strings, EOS and stop-check mode.
// The prompts are token ids of its own 512-token vocabulary; the Llama 3 tokenizer only turns the
// ids into text (ids below 512 are bytes and short pieces there), where the stop strings look.
#include <gtest/gtest.h>

#include <cstdio>

#include "bestofn/engine/engine.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "runs_util.h"
#include "forwarding_engine.h"
#include "test_util.h"

using namespace bestofn;

namespace {

struct Llama260k {
  std::shared_ptr<const Weights> w = std::make_shared<const Weights>(load_model(test::require_shared("models/llama-260k")));
  Tokenizer tok = Tokenizer::load(test::require_shared("tokenizers/llama3"));
};

Llama260k& model() {
  static Llama260k m;
  return m;
}

// Every field a generate JSONL row carries, the log-probability's bits included (%a).
std::string rows(const std::vector<GenerationRequest>& reqs, const GenerationOptions& o, int threads, GenerationStats* stats,
                 std::vector<Candidate>* keep = nullptr) {
  EngineOptions eo;
  eo.threads = threads;
  auto e = make_cpu_engine(model().w, eo);
  std::vector<std::string> out(64);
  std::size_t n = 0;
  const GenerationStats s = generate(*e, model().tok, reqs, o, [&](Candidate&& c) {
    char lp[64];
    std::snprintf(lp, sizeof lp, "%a", c.cumulative_logprob);
    std::string row = reqs[c.prompt].id + "/" + std::to_string(c.index) + " " + c.finish_reason + " [" + c.stop.value_or("-") + "] " + lp + " " + c.text + " |";
    for (int t : c.token_ids) row += " " + std::to_string(t);
    out.at(c.prompt * 8 + static_cast<std::size_t>(c.index)) = row;
    ++n;
    if (keep) keep->push_back(c);
  });
  if (stats) *stats = s;
  std::string all;
  for (const auto& r : out) all += r + "\n";
  return all + std::to_string(n) + " candidates\n";
}

}  // namespace

TEST(Speculate, CandidatesAreThoseOfPlainDecoding) {
  const std::vector<GenerationRequest> reqs = {{"a", {1}, 8, {}}, {"b", {1, 461, 401, 378}, 8, {}}, {"c", {1, 283, 264, 283, 452}, 8, {}}};
  for (float temperature : {0.0f, 0.8f}) {
    GenerationOptions o = test::speculate_test_options(temperature);
    // A stop string from the middle of a plain candidate's text and an EOS id from late in
    // another's, so that some candidates stop early, some mid-draft.
    std::vector<Candidate> plain;
    rows(reqs, o, 1, nullptr, &plain);
    const Candidate& some = plain.at(plain.size() / 2);
    o.stop = {model().tok.decode(std::vector<int>(some.token_ids.begin() + 12, some.token_ids.begin() + 14))};
    o.eos_ids = {plain.front().token_ids.at(24)};
    GenerationStats base_stats;
    const std::string base = rows(reqs, o, 1, &base_stats);
    ASSERT_NE(base.find(" stop ["), std::string::npos) << base;
    ASSERT_NE(base.find(" eos ["), std::string::npos) << base;
    for (int k : {2, 4, 8})
      for (int batch : {1, 8, 16}) {
          // Two engine threads once (a busy 2-core machine makes them slow; test_cpu_engine checks more).
          const int threads = k == 4 && batch == 16 && temperature > 0 ? 2 : 1;
          o.speculate = k, o.batch = batch;
          o.speculate_rows = batch == 16 && k == 2 ? GenerationOptions{}.speculate_rows : 1000;  // drafts in full batches too, but once
          o.overlap_stop_checks = k == 8;
          GenerationStats s;
          EXPECT_EQ(rows(reqs, o, threads, &s), base) << "T " << temperature << " k " << k << " batch " << batch << " threads " << threads;
          EXPECT_EQ(s.generated_tokens, base_stats.generated_tokens);
          if (o.speculate_rows < batch) continue;  // full batches decoded plainly: few or no drafts
          EXPECT_GT(s.accepted_tokens, 0u) << "no draft taken: the test would not test verification";
          EXPECT_GT(s.generated_tokens - 24, s.candidate_steps) << "tokens per candidate step";
          EXPECT_LE(s.accepted_tokens, s.drafted_tokens);
        }
    o.speculate = 0;
  }
}

TEST(Speculate, RefusedByAnEngineThatDoesNotVerify) {
  // An engine that keeps the default Engine::capabilities(): a one-line error, before any work.
  struct Plain : test::ForwardingEngine {
    Plain() : ForwardingEngine("plain", make_cpu_engine(model().w, {})) {}
  } plain;
  GenerationOptions o;
  o.speculate = 2;
  try {
    generate(plain, model().tok, {{"a", {1}, 2, {}}}, o, [](Candidate&&) {});
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--speculate"), std::string::npos) << err.what();
  }
  o.speculate = -1;
  EXPECT_THROW(generate(*make_cpu_engine(model().w, {}), model().tok, {{"a", {1}, 2, {}}}, o, [](Candidate&&) {}), Error);
}
