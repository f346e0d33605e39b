// The CUDA engine's runs (Engine::decode_runs, --speculate's verification), against the CPU engine
// fed one token per step: k positions of a slot in one step, rejected positions rolled back with
// truncate_slot (unpaged and --paged-kv, whose blocks go back into the slot's promise), on every
// path that takes runs; and generate() with --speculate giving the candidates of plain decoding.
// Each skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "cuda/cuda_api.h"
#include "gpu_test_util.h"
#include "runs_util.h"
#include "test_util.h"

using namespace bestofn;

namespace {

constexpr std::size_t kSlots = 4, kLen = 40;

struct Streams {
  std::vector<std::vector<int>> tokens;       // per slot, kLen ids
  std::vector<std::vector<float>> logits;     // per slot, (kLen x V): the CPU engine, one token per step
};

const std::vector<int> kPromptA = {1, 17, 300, 42, 99, 7}, kPromptB = {5, 6};

Streams reference(const std::shared_ptr<const Weights>& w, const EngineOptions& o) {
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  Streams r;
  std::mt19937 rng(3);
  r.tokens.assign(kSlots, std::vector<int>(kLen));
  for (auto& s : r.tokens)
    for (int& t : s) t = static_cast<int>(rng() % V);
  auto e = make_cpu_engine(w, o);
  std::vector<float> first(V);
  const int a = e->prefill(kPromptA, first), b = e->prefill(kPromptB, first);
  std::vector<int> slots;
  for (std::size_t s = 0; s < kSlots; ++s) slots.push_back(e->add_slot(s == 3 ? b : a));
  r.logits.assign(kSlots, {});
  std::vector<float> step(kSlots * V);
  for (std::size_t i = 0; i < kLen; ++i) {
    std::vector<int> toks;
    for (std::size_t s = 0; s < kSlots; ++s) toks.push_back(r.tokens[s][i]);
    e->decode(slots, toks, step);
    for (std::size_t s = 0; s < kSlots; ++s)
      r.logits[s].insert(r.logits[s].end(), step.begin() + static_cast<std::ptrdiff_t>(s * V),
                         step.begin() + static_cast<std::ptrdiff_t>((s + 1) * V));
  }
  return r;
}

}  // namespace

// Runs of 1..6 true tokens followed by 0..3 wrong ones (rejected drafts), every slot in one step,
// each slot rolled back to its true tokens: every true token's logits within the part-1 tolerance
// of the CPU engine's single steps (Llama260kMatchesTheCpuEngine: F32 weights, BF16 KV, only the
// summation order differs; --split-attention its own bound), and each slot's length as fed.
TEST(GpuEngine, RunsMatchTheCpuEnginesSingleSteps) {
  SKIP_WITHOUT_GPU();
  auto w = std::make_shared<const Weights>(load_model(test::require_shared("models/llama-260k")));
  EngineOptions base;
  base.kv = EngineOptions::Kv::BF16;
  const Streams ref = reference(w, base);
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  struct Path {
    const char* name;
    bool paged, split, graphs;
  };
  for (const Path& p : {Path{"part 1", false, false, false}, Path{"--paged-kv", true, false, false}, Path{"--split-attention", false, true, false},
                        Path{"--cuda-graphs", false, false, true}, Path{"--paged-kv --split-attention --cuda-graphs", true, true, true}}) {
    SCOPED_TRACE(p.name);
    EngineOptions o = base;
    o.cuda.paged_kv = p.paged, o.cuda.split_attention = p.split, o.cuda.graphs = p.graphs;
    o.cuda.kv_blocks = 16;  // 16 positions each: a run reaches suffix row 42 at most, 3 blocks per slot
    auto e = cuda::make_cuda_engine(w, o);
    ASSERT_TRUE(e->capabilities().runs);
    std::vector<float> first(V);
    const int a = e->prefill(kPromptA, first), b = e->prefill(kPromptB, first);
    std::vector<int> slots;
    for (std::size_t s = 0; s < kSlots; ++s) {
      const std::optional<int> slot = e->try_add_slot(s == 3 ? b : a, static_cast<int>(kLen) + 4);
      ASSERT_TRUE(slot.has_value());
      slots.push_back(*slot);
    }
    std::mt19937 rng(5);
    const double atol = p.split ? 1e-2 : 2e-3, rtol = 2e-3;
    int bad = 0, rows = 0;
    double worst = 0;
    test::feed_runs(*e, slots, ref.tokens, rng, [&](std::size_t s, std::size_t pos, std::span<const float> got) {
      ++rows;
      for (std::size_t v = 0; v < V; ++v) {
        const float want = ref.logits[s][pos * V + v];
        const double d = std::fabs(static_cast<double>(got[v]) - want);
        worst = std::max(worst, d);
        if (d > atol + rtol * std::fabs(want) && bad++ < 8)
          ADD_FAILURE() << "slot " << s << " position " << pos << " id " << v << ": gpu " << got[v] << " cpu " << want;
      }
    });
    std::printf("[ deviation] runs %s: max |gpu - cpu| %.3g over %d rows\n", p.name, worst, rows);
    EXPECT_EQ(bad, 0);
    for (int s : slots) e->release_slot(s);
  }
}

// Refusals: a run that is not one (a count of 0), sizes that disagree, a slot twice, a truncation
// into the prefix or past the end; and the paths that do not take runs say so in one line.
TEST(GpuEngine, RunsRefuseBadInputAndThePathsWithoutThem) {
  SKIP_WITHOUT_GPU();
  auto w = std::make_shared<const Weights>(load_model(test::require_shared("models/llama-260k")));
  auto e = cuda::make_cuda_engine(w, {});
  test::expect_runs_refuse_bad_input(*e);
  EngineOptions o;
  o.cuda.prefix_gemm = true;
  auto pg = cuda::make_cuda_engine(w, o);
  EXPECT_FALSE(pg->capabilities().runs);
  EXPECT_NE(pg->capabilities().why_no_runs.find("prefix-GEMM attention"), std::string::npos);
}

// generate() with --speculate on the CUDA engine: the candidates of plain decoding, token for
// token, at T 0 and 0.8. This holds where a row's logits do not depend on the other rows of its
// step (a drafted position is computed in a step of other shape than plain decoding computes it);
// benchmarks/GPU_TODO.md lists it for the next device run.
TEST(GpuEngine, SpeculateGivesThePlainCandidates) {
  SKIP_WITHOUT_GPU();
  auto w = std::make_shared<const Weights>(load_model(test::require_shared("models/llama-260k")));
  const Tokenizer tok = Tokenizer::load(test::require_shared("tokenizers/llama3"));
  const std::vector<GenerationRequest> reqs = {{"a", {1}, 8, {}}, {"b", {1, 461, 401, 378}, 8, {}}};
  for (const float temperature : {0.0f, 0.8f}) {
    GenerationOptions o = test::speculate_test_options(temperature);
    o.speculate_rows = 1000;
    auto run = [&](int k, GenerationStats* stats) {
      o.speculate = k;
      EngineOptions eo;
      eo.kv = EngineOptions::Kv::BF16;
      auto e = cuda::make_cuda_engine(w, eo);
      std::vector<std::string> out(16);
      const GenerationStats st = generate(*e, tok, reqs, o, [&](Candidate&& c) {
        std::string row = c.finish_reason + " |";
        for (int t : c.token_ids) row += " " + std::to_string(t);
        out.at(c.prompt * 8 + static_cast<std::size_t>(c.index)) = row;
      });
      if (stats) *stats = st;
      return out;
    };
    const auto plain = run(0, nullptr);
    for (const int k : {2, 4}) {
      GenerationStats s;
      EXPECT_EQ(run(k, &s), plain) << "T " << temperature << " --speculate " << k;
      EXPECT_GT(s.accepted_tokens, 0u) << "no draft taken: the test would not test verification";
    }
  }
}
