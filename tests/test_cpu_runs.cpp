// The CPU engine's runs (Engine::decode_runs, --speculate's verification): k positions of a slot
// in one step give the logits of k single steps bit for bit, and truncate_slot's rollback leaves
// the slot as if the dropped tokens had never been fed.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "bestofn/engine/engine.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/error.h"
#include "forwarding_engine.h"
#include "runs_util.h"
#include "test_util.h"

using namespace bestofn;

std::shared_ptr<const Weights> synthetic(const test::TempDir& dir, const std::string& dtype);  // test_cpu_engine.cpp

namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// Three slots on one prefix and one on another, 40 tokens each (past a 16-position KV tile). The
// reference feeds one token per slot per step; the other engine feeds runs of 1..6 true tokens
// followed by 0..3 wrong ones (rejected drafts), all slots in one step, and rolls each slot back
// to its true tokens. Every true token's logits are the reference's, bit for bit.
TEST(CpuEngine, RunsGiveTheLogitsOfSingleStepsAndRollBack) {
  test::TempDir dir;
  const auto fp8 = synthetic(dir, "fp8");
  for (const char* kind : {"f32", "bf16", "fp8", "fp8 + fp8 kv"}) {
    SCOPED_TRACE(kind);
    const bool fp8_kv = std::string(kind).ends_with("kv");
    const auto w = std::string(kind).starts_with("fp8") ? fp8 : synthetic(dir, kind);
    EngineOptions o;
    if (fp8_kv) o.kv = EngineOptions::Kv::FP8;
    const auto V = static_cast<std::size_t>(w->config.vocab_size);
    constexpr std::size_t kSlots = 4, kLen = 40;
    std::mt19937 rng(3);
    std::vector<std::vector<int>> streams(kSlots, std::vector<int>(kLen));
    for (auto& s : streams)
      for (int& t : s) t = static_cast<int>(rng() % V);
    const std::vector<int> prompt_a = {1, 17, 300, 42, 99, 7}, prompt_b = {5, 6};
    std::vector<float> first(V);

    auto ref = make_cpu_engine(w, o);
    const int ra = ref->prefill(prompt_a, first), rb = ref->prefill(prompt_b, first);
    std::vector<int> rslots;
    for (std::size_t s = 0; s < kSlots; ++s) rslots.push_back(ref->add_slot(s == 3 ? rb : ra));
    std::vector<std::vector<float>> want(kSlots);  // (kLen x V) per slot
    std::vector<float> step(kSlots * V);
    for (std::size_t i = 0; i < kLen; ++i) {
      std::vector<int> toks;
      for (std::size_t s = 0; s < kSlots; ++s) toks.push_back(streams[s][i]);
      ref->decode(rslots, toks, step);
      for (std::size_t s = 0; s < kSlots; ++s) want[s].insert(want[s].end(), step.begin() + static_cast<std::ptrdiff_t>(s * V), step.begin() + static_cast<std::ptrdiff_t>((s + 1) * V));
    }

    auto e = make_cpu_engine(w, o);
    ASSERT_TRUE(e->capabilities().runs);
    const int ea = e->prefill(prompt_a, first), eb = e->prefill(prompt_b, first);
    std::vector<int> slots;
    for (std::size_t s = 0; s < kSlots; ++s) slots.push_back(e->add_slot(s == 3 ? eb : ea));
    int mismatches = 0, rows = 0;
    test::feed_runs(*e, slots, streams, rng, [&](std::size_t s, std::size_t pos, std::span<const float> got) {
      mismatches += !same_bits(got, std::span<const float>(want[s].data() + pos * V, V));
      ++rows;
    });
    EXPECT_EQ(mismatches, 0) << "of " << rows << " rows";
  }
}

TEST(CpuEngine, RunsRefuseBadInput) {
  test::TempDir dir;
  auto e = make_cpu_engine(synthetic(dir, "bf16"), {});
  test::expect_runs_refuse_bad_input(*e);
}

namespace {

// An engine with the default capabilities (no runs, no device sampling) that steps a CPU engine.
class NoRunsEngine final : public test::ForwardingEngine {
 public:
  explicit NoRunsEngine(std::unique_ptr<Engine> e) : ForwardingEngine("no-runs", std::move(e)) {}
  void run_step(const DecodeStep& s) override {
    EXPECT_TRUE(s.counts.empty()) << "runs reached an engine that takes none";
    EXPECT_FALSE(s.draws) << "draws reached an engine that does not sample";
    e_->step(s);
  }
};

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Engine::step checks a request against capabilities() once, before the engine sees it: runs of
// one token each are a plain step, longer ones are refused in one line naming the engine; draws
// go only to an engine that samples on its device (decode_sample answers false elsewhere).
TEST(EngineStep, RequestsAreCheckedAgainstTheCapabilitiesInOnePlace) {
  test::TempDir dir;
  const auto w = synthetic(dir, "bf16");
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  std::vector<float> first(V), plain(2 * V), via_runs(2 * V);
  auto cpu = make_cpu_engine(w, {});
  EXPECT_TRUE(cpu->capabilities().runs);
  EXPECT_FALSE(cpu->capabilities().device_sampling);
  NoRunsEngine e(make_cpu_engine(w, {}));
  EXPECT_FALSE(e.capabilities().runs);
  const int p = e.prefill(std::vector<int>{1, 2, 3}, first), q = cpu->prefill(std::vector<int>{1, 2, 3}, first);
  const std::vector<int> slots = {e.add_slot(p), e.add_slot(p)}, cpu_slots = {cpu->add_slot(q), cpu->add_slot(q)};
  const std::vector<int> tokens = {4, 5}, ones = {1, 1};
  e.decode_runs(slots, ones, tokens, via_runs);
  cpu->decode(cpu_slots, tokens, plain);
  EXPECT_TRUE(same_bits(plain, via_runs));  // runs of one: the plain step's logits
  std::vector<float> three(3 * V);
  const std::string refused = thrown([&] { e.decode_runs(slots, std::vector<int>{2, 1}, std::vector<int>{6, 7, 8}, three); });
  EXPECT_EQ(refused, "the no-runs engine does not verify drafted tokens yet (several positions per slot in one step): use --speculate 0");
  EXPECT_EQ(e.slot_length(slots[0]), 4);  // refused before any work
  EXPECT_EQ(thrown([&] { e.decode_runs(slots, std::vector<int>{1}, tokens, via_runs); }), "decode: slots and counts sizes disagree");
  EXPECT_EQ(thrown([&] { e.decode_runs(slots, std::vector<int>{}, tokens, via_runs); }), "decode: slots and counts sizes disagree");
  // Draws: decode_sample answers false, doing nothing; a step with draws is refused.
  std::vector<Sample> out(2);
  const std::vector<std::uint64_t> zeros(2, 0);
  EXPECT_FALSE(cpu->decode_sample(cpu_slots, tokens, SamplingParams{}, zeros, zeros, zeros, out));
  EXPECT_EQ(cpu->slot_length(cpu_slots[0]), 4);
  const SamplingParams params;
  DecodeStep sampled{cpu_slots, tokens, {}, {}, DecodeStep::Draws{&params, zeros, zeros, zeros, out}};
  EXPECT_EQ(thrown([&] { cpu->step(sampled); }), "the cpu engine does not sample on its device");
}
