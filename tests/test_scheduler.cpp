// The best-of-N scheduler on a synthetic tiny model with the real Llama 3 tokenizer: stops,
// reproducibility whatever the batch, and the context limit.
#include <gtest/gtest.h>

#include <map>

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/model/weights.h"
#include "cuda/step_plan.h"
#include "forwarding_engine.h"
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

// The candidates of a run on `e`, in (prompt, index) order; its stats to `stats` when given.
std::vector<Candidate> run_on(Engine& e, const std::vector<GenerationRequest>& reqs, const GenerationOptions& o,
                              GenerationStats* stats = nullptr) {
  std::vector<Candidate> out;
  const GenerationStats s = generate(e, *fx().tok, reqs, o, [&](Candidate&& c) { out.push_back(std::move(c)); });
  if (stats) *stats = s;
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return std::pair(a.prompt, a.index) < std::pair(b.prompt, b.index); });
  return out;
}

std::vector<Candidate> run(const std::vector<GenerationRequest>& reqs, GenerationOptions o, int threads = 0) {
  EngineOptions eo;
  eo.threads = threads;
  auto e = make_cpu_engine(fx().w, eo);
  return run_on(*e, reqs, o);
}

GenerationRequest req(const std::string& text, int n) { return {"p", fx().tok->encode(text, true), n, {}}; }

GenerationOptions sampled(std::uint64_t seed, int max_new_tokens) {
  GenerationOptions o;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = seed;
  o.max_new_tokens = max_new_tokens;
  return o;
}

}  // namespace

TEST(Scheduler, CandidatesAreReproducibleWhateverBatchAndThreads) {
  GenerationOptions o = sampled(1, 12);
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
  // Prompt + generated tokens are at most the context, as HF's max_length and vLLM's
  // max_model_len count them: ctx - 3 prompt tokens leave room for 3.
  EXPECT_EQ(out[0].finish_reason, "length");
  EXPECT_EQ(out[0].token_ids.size(), 3u);
  // A prompt one short of the context gets one token.
  r.prompt_ids.resize(static_cast<std::size_t>(ctx) - 1);
  const auto one = run({r}, o);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].finish_reason, "length");
  EXPECT_EQ(one[0].token_ids.size(), 1u);
  r.prompt_ids.resize(static_cast<std::size_t>(ctx));
  EXPECT_THROW(run({r}, o), Error);
  r.prompt_ids = {1, fx().w->config.vocab_size + 5};
  EXPECT_THROW(run({r}, o), Error);
}

namespace {

// An engine with room for `room` live candidates at a time (as paged KV admits by free blocks):
// try_add_slot refuses beyond it; everything else is the CPU engine's.
class RoomLimitedEngine final : public test::ForwardingEngine {
 public:
  RoomLimitedEngine(std::unique_ptr<Engine> e, int room) : ForwardingEngine("limited", std::move(e)), room_(room) {}
  std::optional<int> try_add_slot(int p, int max_tokens) override {
    EXPECT_GT(max_tokens, 0);
    if (live_ >= room_) return std::nullopt;
    most_ = std::max(most_, ++live_);
    return e_->add_slot(p);
  }
  void release_slot(int s) override {
    live_--;
    e_->release_slot(s);
  }
  void run_step(const DecodeStep& s) override {
    batches_.push_back(static_cast<int>(s.slots.size()));
    e_->step(s);
  }
  int most() const { return most_; }
  const std::vector<int>& batches() const { return batches_; }  // each decode step's rows

 private:
  int room_, live_ = 0, most_ = 0;
  std::vector<int> batches_;
};

}  // namespace

// Admission by the engine's room: with room for 3, at most 3 candidates run at once, the others
// wait for finishes, and every candidate comes out as in an unlimited run (batch invariance). No
// room at all is an error, not a hang.
TEST(Scheduler, CandidatesWaitForEngineRoom) {
  const GenerationOptions o = sampled(2, 10);
  const std::vector<GenerationRequest> reqs = {req("def add(a, b):", 5), req("print(", 4)};
  const auto base = run(reqs, o);
  RoomLimitedEngine limited(make_cpu_engine(fx().w, {}), 3);
  const auto out = run_on(limited, reqs, o);
  EXPECT_EQ(limited.most(), 3);
  ASSERT_EQ(out.size(), base.size());
  for (std::size_t i = 0; i < base.size(); ++i) EXPECT_EQ(out[i].token_ids, base[i].token_ids) << "candidate " << i;
  RoomLimitedEngine none(make_cpu_engine(fx().w, {}), 0);
  EXPECT_THROW(generate(none, *fx().tok, reqs, o, [](Candidate&&) {}), Error);
}

// Large-batch admission across many prompts (issue 32): while candidates are pending, every decode
// step runs a full batch (the batch size, or the engine's room when that is smaller): a finished
// candidate's slot is refilled before the next step, from the next prompt when its own are all
// admitted. Then the batch drains to nothing. 9 prompts x 7 candidates of 6 tokens through a
// batch of 16, with and without a room of 11.
TEST(Scheduler, BatchStaysFullWhileCandidatesArePending) {
  GenerationOptions o = sampled(5, 6);
  o.eos_ids = {};  // every candidate runs its 6 tokens: the steps are fixed by admission alone
  o.batch = 16;
  std::vector<GenerationRequest> reqs;
  for (int p = 0; p < 9; ++p) reqs.push_back(req("def f" + std::to_string(p) + "(x):", 7));
  const int total = 9 * 7;
  for (const int room : {1000, 11}) {
    RoomLimitedEngine e(make_cpu_engine(fx().w, {}), room);
    const auto out = run_on(e, reqs, o);
    ASSERT_EQ(static_cast<int>(out.size()), total);
    const int full = std::min(o.batch, room);
    // Each candidate's first token comes from its prompt's prefill logits; it is then fed in
    // max_new_tokens - 1 = 5 steps. Rows fed in all: total * 5; steps with a full batch first.
    const std::vector<int>& b = e.batches();
    int rows = 0;
    std::size_t first_short = b.size();
    for (std::size_t i = 0; i < b.size(); ++i) {
      rows += b[i];
      if (b[i] < full && first_short == b.size()) first_short = i;
      if (first_short < i) {
        EXPECT_LE(b[i], b[i - 1]) << "room " << room << ": the batch grew back at step " << i;
      }
    }
    EXPECT_EQ(rows, total * 5) << "room " << room;
    // Short steps only in the drain: after the last admission at most `full` candidates remain,
    // each with at most 5 steps to go.
    EXPECT_GE(first_short, b.size() - 5) << "room " << room << ": a short batch at step " << first_short << " of " << b.size();
    EXPECT_EQ(e.most(), full) << "room " << room;
  }
}

namespace {

// An engine that samples itself (as CUDA --device-sampling does): decode_sample draws each row with
// sample_token and the indexes it is given, so a scheduler that passes the wrong (prompt,
// candidate, step) gives other candidates than the host path.
class SelfSamplingEngine final : public test::ForwardingEngine {
 public:
  explicit SelfSamplingEngine(std::unique_ptr<Engine> e) : ForwardingEngine("self-sampling", std::move(e)) {
    capabilities_ = {false, "self-sampling takes no runs", true};
  }
  void run_step(const DecodeStep& s) override {
    if (!s.draws) {
      ADD_FAILURE() << "the scheduler asked for logits from an engine that samples";
      return e_->step(s);
    }
    const DecodeStep::Draws& d = *s.draws;
    const auto V = static_cast<std::size_t>(config().vocab_size);
    std::vector<float> logits(s.slots.size() * V);
    e_->decode(s.slots, s.tokens, logits);
    SamplerScratch scratch;
    for (std::size_t i = 0; i < s.slots.size(); ++i)
      d.out[i] = sample_token(std::span<const float>(logits).subspan(i * V, V), *d.params, d.prompt[i], d.candidate[i], d.step[i], scratch);
    steps_++;
    rows_ += static_cast<int>(s.slots.size());
  }
  int steps() const { return steps_; }
  int rows() const { return rows_; }  // candidate-steps decoded

 private:
  int steps_ = 0, rows_ = 0;
};

}  // namespace

// An engine that samples itself gets the draw indexes of the host path: the same candidates.
TEST(Scheduler, EngineSideSamplingGivesTheHostDraws) {
  GenerationOptions o = sampled(3, 9);
  o.batch = 4;
  const std::vector<GenerationRequest> reqs = {req("def add(a, b):", 3), req("print(", 4)};
  const auto base = run(reqs, o);
  SelfSamplingEngine e(make_cpu_engine(fx().w, {}));
  const auto out = run_on(e, reqs, o);
  EXPECT_GT(e.steps(), 0);
  ASSERT_EQ(out.size(), base.size());
  for (std::size_t i = 0; i < base.size(); ++i) {
    EXPECT_EQ(out[i].token_ids, base[i].token_ids) << "candidate " << i;
    EXPECT_EQ(out[i].cumulative_logprob, base[i].cumulative_logprob);
  }
}

// overlap_stop_checks: the text of a step's tokens is checked during the next step, every
// candidate fed speculatively, and one that stopped drops its extra sample. Whatever the engine
// (host sampling, engine-side sampling, admission by room) and the batch, the candidates are the
// ones of the plain schedule, field by field, and so are the token counts; the engine decodes more
// rows (the dropped samples), which shows the speculation happened.
TEST(Scheduler, OverlappedStopChecksGiveTheSameCandidates) {
  GenerationOptions o = sampled(5, 24);
  const std::vector<GenerationRequest> reqs = {req("def add(a, b):", 5), req("print(", 4), req("import", 3)};
  const auto plain = run(reqs, o);
  // Stop strings from the middle of two candidates' texts, and an EOS id from a third: some
  // candidates stop on text, some on EOS, the rest at the length limit.
  ASSERT_GT(plain[0].text.size(), 8u);
  ASSERT_GT(plain[6].text.size(), 8u);
  o.stop = {plain[0].text.substr(4, 2), plain[6].text.substr(5, 3)};
  o.eos_ids = {plain[10].token_ids[5]};
  int by_stop = 0, by_eos = 0, by_length = 0;
  for (int batch : {64, 3}) {
    o.batch = batch;
    o.overlap_stop_checks = false;
    SelfSamplingEngine plain_engine(make_cpu_engine(fx().w, {}));
    GenerationStats plain_stats, over_stats;
    const auto base = run_on(plain_engine, reqs, o, &plain_stats);
    o.overlap_stop_checks = true;
    SelfSamplingEngine overlapped_engine(make_cpu_engine(fx().w, {}));
    const auto over = run_on(overlapped_engine, reqs, o, &over_stats);
    RoomLimitedEngine limited(make_cpu_engine(fx().w, {}), 2);
    const auto host_sampled = run(reqs, o);
    const auto room_limited = run_on(limited, reqs, o);
    ASSERT_EQ(over.size(), base.size());
    ASSERT_EQ(host_sampled.size(), base.size());
    ASSERT_EQ(room_limited.size(), base.size());
    for (std::size_t i = 0; i < base.size(); ++i)
      for (const Candidate* other : std::vector<const Candidate*>{&over[i], &host_sampled[i], &room_limited[i]}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + ", candidate " + std::to_string(i));
        EXPECT_EQ(other->token_ids, base[i].token_ids);
        EXPECT_EQ(other->text, base[i].text);
        EXPECT_EQ(other->finish_reason, base[i].finish_reason);
        EXPECT_EQ(other->stop, base[i].stop);
        EXPECT_EQ(other->cumulative_logprob, base[i].cumulative_logprob);
      }
    EXPECT_EQ(over_stats.generated_tokens, plain_stats.generated_tokens);
    if (batch == 64) {
      for (const Candidate& c : base) (c.finish_reason == "stop" ? by_stop : c.finish_reason == "eos" ? by_eos : by_length)++;
      EXPECT_GT(overlapped_engine.rows(), plain_engine.rows());
    }
  }
  EXPECT_GE(by_stop, 2);
  EXPECT_GE(by_eos, 1);
  EXPECT_GE(by_length, 1);
}

namespace {

// The CPU engine, recording each prefill_many call: the prompts it was given (as their ids) and
// its budget, and every release of a prefix.
class PrefillRecordingEngine final : public test::ForwardingEngine {
 public:
  explicit PrefillRecordingEngine(std::unique_ptr<Engine> e) : ForwardingEngine("recording", std::move(e)) {}
  int prefill(std::span<const int> t, std::span<float> l) override {
    ADD_FAILURE() << "the scheduler prefilled one prompt alone, not through prefill_many";
    return e_->prefill(t, l);
  }
  std::vector<int> prefill_many(std::span<const std::span<const int>> prompts, std::span<float> l, int budget) override {
    auto& call = calls_.emplace_back();
    for (const auto& p : prompts) call.emplace_back(p.begin(), p.end());
    budgets_.push_back(budget);
    return e_->prefill_many(prompts, l, budget);
  }
  // The prompts of each call, as indexes into reqs.
  std::vector<std::vector<std::size_t>> calls(const std::vector<GenerationRequest>& reqs) const {
    std::vector<std::vector<std::size_t>> out;
    for (const auto& call : calls_) {
      auto& o = out.emplace_back();
      for (const auto& ids : call)
        o.push_back(static_cast<std::size_t>(
            std::find_if(reqs.begin(), reqs.end(), [&](const GenerationRequest& r) { return r.prompt_ids == ids; }) - reqs.begin()));
    }
    return out;
  }
  const std::vector<int>& budgets() const { return budgets_; }

 private:
  std::vector<std::vector<std::vector<int>>> calls_;
  std::vector<int> budgets_;
};

}  // namespace

// Prompts are prefilled together up to --prefill-tokens: the first admission takes the prompts in
// pending order while their tokens fit (at least one), later admissions the next ones; the
// candidates are the ones of one prompt per prefill, field by field, whatever the budget (1 token:
// every prompt alone, in 1-row passes), and the prompt tokens are counted once each.
TEST(Scheduler, PromptsArePrefilledTogetherWithTheSameCandidates) {
  GenerationOptions o = sampled(6, 10);
  o.batch = 4;
  const std::vector<GenerationRequest> reqs = {req("def add(a, b):", 3), req("print(", 2), req("import os\nimport sys\n", 3),
                                               req("x", 1), req("class Stack:\n    def push(self, x):", 2)};
  std::size_t all_tokens = 0;
  std::vector<std::size_t> sizes;
  for (const auto& r : reqs) all_tokens += r.prompt_ids.size(), sizes.push_back(r.prompt_ids.size());
  std::vector<Candidate> base;
  for (int budget : {1, static_cast<int>(sizes[0] + sizes[1]), static_cast<int>(sizes[0] + sizes[1] + sizes[2] + sizes[3]), 8192}) {
    SCOPED_TRACE("--prefill-tokens " + std::to_string(budget));
    o.prefill_tokens = budget;
    PrefillRecordingEngine e(make_cpu_engine(fx().w, {}));
    GenerationStats stats;
    const auto out = run_on(e, reqs, o, &stats);
    EXPECT_EQ(stats.prompt_tokens, all_tokens);
    // Every prompt once, in admission order, each call within the budget or a single prompt.
    std::vector<std::size_t> order;
    for (const auto& call : e.calls(reqs)) {
      std::size_t tokens = 0;
      for (std::size_t p : call) order.push_back(p), tokens += sizes[p];
      EXPECT_TRUE(call.size() == 1 || tokens <= static_cast<std::size_t>(budget));
    }
    EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 3, 4}));
    for (int b : e.budgets()) EXPECT_EQ(b, budget);
    const auto calls = e.calls(reqs);
    if (budget == 1) {
      EXPECT_EQ(calls.size(), 5u);
    } else if (budget == 8192) {
      EXPECT_EQ(calls, (std::vector<std::vector<std::size_t>>{{0, 1, 2, 3, 4}}));
    } else if (budget == static_cast<int>(sizes[0] + sizes[1])) {
      EXPECT_EQ(calls.front(), (std::vector<std::size_t>{0, 1}));
    }
    if (base.empty()) {
      base = out;
      ASSERT_EQ(base.size(), 11u);
      continue;
    }
    ASSERT_EQ(out.size(), base.size());
    for (std::size_t i = 0; i < base.size(); ++i) {
      EXPECT_EQ(out[i].token_ids, base[i].token_ids) << "candidate " << i;
      EXPECT_EQ(out[i].text, base[i].text);
      EXPECT_EQ(out[i].cumulative_logprob, base[i].cumulative_logprob);
    }
  }
  o.prefill_tokens = 0;
  EXPECT_THROW(run(reqs, o), Error);
}

// A prompt cancelled before its candidates are admitted is not prefilled, neither when it comes up
// nor along with an earlier prompt; the others are, and come out as in a run without it.
TEST(Scheduler, CancelledPromptsAreNotPrefilled) {
  GenerationOptions o = sampled(7, 6);
  o.batch = 2;
  const std::vector<GenerationRequest> reqs = {req("def add(a, b):", 2), req("print(", 3), req("import", 2)};
  const auto base = run(reqs, o);
  o.cancelled = [](std::size_t p) { return p == 1; };
  for (int budget : {1, 8192}) {
    o.prefill_tokens = budget;
    PrefillRecordingEngine e(make_cpu_engine(fx().w, {}));
    GenerationStats stats;
    const auto out = run_on(e, reqs, o, &stats);
    std::vector<std::size_t> order;
    for (const auto& call : e.calls(reqs)) order.insert(order.end(), call.begin(), call.end());
    EXPECT_EQ(order, (std::vector<std::size_t>{0, 2})) << "budget " << budget;
    EXPECT_EQ(stats.cancelled, 3u);
    EXPECT_EQ(stats.prompt_tokens, reqs[0].prompt_ids.size() + reqs[2].prompt_ids.size());
    ASSERT_EQ(out.size(), 4u);
    for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(out[i].token_ids, base[i].token_ids);
    for (std::size_t i = 2; i < 4; ++i) EXPECT_EQ(out[i].token_ids, base[i + 3].token_ids);
  }
}

namespace {

// Records what a run asks of the engine against what generate told reserve() at its start.
class ShapeRecordingEngine final : public test::ForwardingEngine {
 public:
  explicit ShapeRecordingEngine(std::unique_ptr<Engine> e) : ForwardingEngine("shape-recording", std::move(e)) {}
  void reserve(const RunShape& s) override { shape = s, reserved++; }
  std::vector<int> prefill_many(std::span<const std::span<const int>> prompts, std::span<float> l, int max_pass) override {
    int rows = 0;
    for (const auto& p : prompts) rows += static_cast<int>(p.size()), longest = std::max(longest, static_cast<int>(p.size()));
    most_prompts = std::max(most_prompts, static_cast<int>(prompts.size())), most_rows = std::max(most_rows, rows);
    most_pass = std::max(most_pass, max_pass);
    return e_->prefill_many(prompts, l, max_pass);
  }
  int add_slot(int p) override {
    const int s = e_->add_slot(p);
    fed[s] = 0;
    return s;
  }
  void run_step(const DecodeStep& s) override {
    most_batch = std::max(most_batch, static_cast<int>(s.slots.size()));
    for (int slot : s.slots) most_fed = std::max(most_fed, ++fed[slot]);
    e_->step(s);
  }
  RunShape shape;
  int reserved = 0, most_prompts = 0, most_rows = 0, most_pass = 0, longest = 0, most_batch = 0, most_fed = 0;
  std::map<int, int> fed;
};

}  // namespace

// Engine::reserve (issue 32: no allocation inside a run): generate tells the engine once, before
// anything else, the most it will ask, and no call of the run asks for more: every decode batch
// (so every bucket), every prefill_many's prompts and rows, every slot's fed tokens (its part).
// Prompts of ~5 to ~30 tokens through prefill budgets that batch several, one, or split them.
TEST(Scheduler, ReserveCoversEveryCallOfTheRun) {
  std::vector<GenerationRequest> reqs;
  for (int p = 0; p < 5; ++p) {
    std::string text = "def f" + std::to_string(p) + "(x):";
    for (int k = 0; k < p; ++k) text += " return x + " + std::to_string(k) + " * x";
    reqs.push_back(req(text, 1 + p % 2));
  }
  for (const auto& [batch, budget] : std::vector<std::pair<int, int>>{{4, 8192}, {3, 30}, {100, 12}, {2, 1}}) {
    GenerationOptions o = sampled(7, 4);
    o.batch = batch, o.prefill_tokens = budget;
    ShapeRecordingEngine e(make_cpu_engine(fx().w, {}));
    run_on(e, reqs, o);
    const std::string where = "batch " + std::to_string(batch) + ", budget " + std::to_string(budget);
    EXPECT_EQ(e.reserved, 1) << where;
    EXPECT_LE(e.most_batch, e.shape.max_batch) << where;
    EXPECT_LE(bestofn::cuda::bucket_of(e.most_batch), bestofn::cuda::bucket_of(e.shape.max_batch)) << where;
    EXPECT_LE(e.most_prompts, e.shape.prefill_prompts) << where;
    EXPECT_LE(e.most_rows, e.shape.prefill_rows) << where;
    EXPECT_LE(e.longest, e.shape.longest_prompt) << where;
    EXPECT_LE(e.most_pass, e.shape.prefill_tokens) << where;
    EXPECT_LE(e.most_fed, e.shape.max_new_tokens - 1) << where;  // a candidate feeds all its tokens but the last
    EXPECT_GT(e.most_batch, 0) << where;
  }
  // The shape itself, by hand: prompts of 3, 5, 9 and 20 tokens, 2 + 1 + 4 + 1 candidates.
  std::vector<GenerationRequest> by_hand;
  for (const auto& [len, n] : std::vector<std::pair<int, int>>{{9, 2}, {3, 1}, {20, 4}, {5, 1}})
    by_hand.push_back({"p", std::vector<int>(static_cast<std::size_t>(len), 1), n, {}});
  GenerationOptions o;
  o.batch = 6, o.max_new_tokens = 11, o.prefill_tokens = 17;
  const RunShape s = run_shape(by_hand, o);
  EXPECT_EQ(s.max_batch, 6);
  EXPECT_EQ(s.longest_prompt, 20);
  EXPECT_EQ(s.prefill_prompts, 3);  // 3 + 5 + 9 = 17 fit, 3 + 5 + 9 + 20 do not
  EXPECT_EQ(s.prefill_rows, 20);    // the longest prompt alone, past the budget
  EXPECT_EQ(s.prompt_lengths, (std::vector<int>{3, 5, 9, 20}));  // the prompt KV parts reserve() makes
  o.batch = 100, o.prefill_tokens = 1000;
  EXPECT_EQ(run_shape(by_hand, o).max_batch, 8);  // every candidate
  EXPECT_EQ(run_shape(by_hand, o).prefill_rows, 37);
}
