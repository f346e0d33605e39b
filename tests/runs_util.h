#pragma once
// Shared by the engines' runs tests (test_cpu_runs.cpp, test_gpu_runs.cpp, test_speculate.cpp): feeds each slot its
// token stream as --speculate would, in runs of 1..6 true tokens followed by 0..3 wrong ones
// (rejected drafts), every unfinished slot in one decode_runs step, then rolls each slot back to
// its true tokens with truncate_slot; `row(s, position, logits)` sees each true token's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/util/error.h"

namespace bestofn::test {

// The generation both engines' --speculate tests run: 32 tokens, 8 rows a step, seed 7, at T 0
// (greedy) or T > 0 with top-p 0.9 (test_speculate.cpp, test_gpu_runs.cpp).
inline GenerationOptions speculate_test_options(float temperature) {
  GenerationOptions o;
  o.sampling.temperature = temperature;
  o.sampling.top_p = temperature > 0 ? 0.9f : 1.0f;
  o.sampling.seed = 7;
  o.max_new_tokens = 32;
  o.batch = 8;
  return o;
}

inline void feed_runs(Engine& e, const std::vector<int>& slots, const std::vector<std::vector<int>>& streams, std::mt19937& rng,
                      const std::function<void(std::size_t, std::size_t, std::span<const float>)>& row) {
  const auto V = static_cast<std::size_t>(e.config().vocab_size);
  std::vector<std::size_t> at(slots.size(), 0);
  auto unfinished = [&](std::size_t s) { return at[s] < streams[s].size(); };
  while (true) {
    std::vector<int> ids, counts, toks;
    std::vector<std::size_t> who, good;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (!unfinished(s)) continue;
      const std::size_t n = std::min<std::size_t>(1 + rng() % 6, streams[s].size() - at[s]), wrong = rng() % 4;
      ids.push_back(slots[s]), who.push_back(s), good.push_back(n);
      toks.insert(toks.end(), streams[s].begin() + static_cast<std::ptrdiff_t>(at[s]),
                  streams[s].begin() + static_cast<std::ptrdiff_t>(at[s] + n));
      for (std::size_t k = 0; k < wrong; ++k) toks.push_back(static_cast<int>(rng() % V));
      counts.push_back(static_cast<int>(n + wrong));
    }
    if (ids.empty()) return;
    std::vector<int> before;
    for (int id : ids) before.push_back(e.slot_length(id));
    std::vector<float> logits(toks.size() * V);
    e.decode_runs(ids, counts, toks, logits);
    std::size_t first = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::size_t s = who[i];
      for (std::size_t j = 0; j < good[i]; ++j) row(s, at[s] + j, std::span<const float>(logits).subspan((first + j) * V, V));
      EXPECT_EQ(e.slot_length(slots[s]), before[i] + counts[i]) << "a run grows its slot by its length";
      e.truncate_slot(slots[s], before[i] + static_cast<int>(good[i]));
      EXPECT_EQ(e.slot_length(slots[s]), before[i] + static_cast<int>(good[i]));
      first += static_cast<std::size_t>(counts[i]), at[s] += good[i];
    }
  }
}

// A run of 0 tokens, sizes that disagree, a slot twice, a truncation into the prefix or past the
// end: refused; a good run grows the slot, truncate_slot shrinks it. e: a fresh engine.
inline void expect_runs_refuse_bad_input(Engine& e) {
  const auto V = static_cast<std::size_t>(e.config().vocab_size);
  std::vector<float> first(V), logits(3 * V);
  const int p = e.prefill(std::vector<int>{1, 2, 3}, first);
  const int s = e.add_slot(p);
  EXPECT_THROW(e.decode_runs(std::vector<int>{s}, std::vector<int>{0}, std::vector<int>{}, std::span<float>()), Error);
  EXPECT_THROW(e.decode_runs(std::vector<int>{s}, std::vector<int>{2}, std::vector<int>{4, 5, 6}, logits), Error);
  EXPECT_THROW(e.decode_runs(std::vector<int>{s, s}, std::vector<int>{1, 2}, std::vector<int>{4, 5, 6}, logits), Error);
  e.decode_runs(std::vector<int>{s}, std::vector<int>{3}, std::vector<int>{4, 5, 6}, logits);
  EXPECT_EQ(e.slot_length(s), 6);
  EXPECT_THROW(e.truncate_slot(s, 2), Error);  // into the prefix
  EXPECT_THROW(e.truncate_slot(s, 7), Error);  // past its end
  e.truncate_slot(s, 3);
  EXPECT_EQ(e.slot_length(s), 3);
}

}  // namespace bestofn::test
