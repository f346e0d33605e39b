// The CPU engine's runs (Engine::decode_runs, --speculate's verification): k positions of a slot
// in one step give the logits of k single steps bit for bit, and truncate_slot's rollback leaves
// the slot as if the dropped tokens had never been fed.
#include <gtest/gtest.h>

#include <random>

#include "bestofn/engine/engine.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/error.h"
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
    ASSERT_TRUE(e->takes_runs());
    const int ea = e->prefill(prompt_a, first), eb = e->prefill(prompt_b, first);
    std::vector<int> slots;
    for (std::size_t s = 0; s < kSlots; ++s) slots.push_back(e->add_slot(s == 3 ? eb : ea));
    std::vector<std::size_t> at(kSlots, 0);
    int mismatches = 0, rows = 0;
    while (at[0] < kLen || at[1] < kLen || at[2] < kLen || at[3] < kLen) {
      std::vector<int> ids, counts, toks;
      std::vector<std::size_t> good;
      for (std::size_t s = 0; s < kSlots; ++s) {
        if (at[s] == kLen) continue;
        const std::size_t n = std::min<std::size_t>(1 + rng() % 6, kLen - at[s]), wrong = rng() % 4;
        ids.push_back(slots[s]), good.push_back(n);
        toks.insert(toks.end(), streams[s].begin() + static_cast<std::ptrdiff_t>(at[s]), streams[s].begin() + static_cast<std::ptrdiff_t>(at[s] + n));
        for (std::size_t k = 0; k < wrong; ++k) toks.push_back(static_cast<int>(rng() % V));
        counts.push_back(static_cast<int>(n + wrong));
      }
      std::vector<float> logits(toks.size() * V);
      e->decode_runs(ids, counts, toks, logits);
      std::size_t row = 0, i = 0;
      for (std::size_t s = 0; s < kSlots; ++s) {
        if (at[s] == kLen) continue;
        for (std::size_t j = 0; j < good[i]; ++j, ++rows) {
          const std::span<const float> got(logits.data() + (row + j) * V, V), ref_row(want[s].data() + (at[s] + j) * V, V);
          mismatches += !same_bits(got, ref_row);
        }
        const int keep = e->slot_length(slots[s]) - (counts[i] - static_cast<int>(good[i]));
        e->truncate_slot(slots[s], keep);
        ASSERT_EQ(e->slot_length(slots[s]), (s == 3 ? 2 : 6) + static_cast<int>(at[s] + good[i]));
        row += static_cast<std::size_t>(counts[i]), at[s] += good[i], ++i;
      }
    }
    EXPECT_EQ(mismatches, 0) << "of " << rows << " rows";
  }
}

TEST(CpuEngine, RunsRefuseBadInput) {
  test::TempDir dir;
  const auto w = synthetic(dir, "bf16");
  auto e = make_cpu_engine(w, {});
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  std::vector<float> first(V), logits(3 * V);
  const int p = e->prefill(std::vector<int>{1, 2, 3}, first);
  const int s = e->add_slot(p);
  EXPECT_THROW(e->decode_runs(std::vector<int>{s}, std::vector<int>{0}, std::vector<int>{}, std::span<float>()), Error);
  EXPECT_THROW(e->decode_runs(std::vector<int>{s}, std::vector<int>{2}, std::vector<int>{4, 5, 6}, logits), Error);
  e->decode_runs(std::vector<int>{s}, std::vector<int>{3}, std::vector<int>{4, 5, 6}, logits);
  EXPECT_EQ(e->slot_length(s), 6);
  EXPECT_THROW(e->truncate_slot(s, 2), Error);  // into the prefix
  EXPECT_THROW(e->truncate_slot(s, 7), Error);  // past its end
  e->truncate_slot(s, 3);
  EXPECT_EQ(e->slot_length(s), 3);
}
