// The host sampler (bestofn::sample_token, src/engine/sampler.cpp) alone, one thread: the time of one
// draw over a vocabulary row, for the row sizes of Llama 2 (32000) and Llama 3 (128256) and three
// rows: "peaked" (logits 2.5 N(0, 1) with five tokens at 12..16, which then hold nearly all the
// mass, as a confident model's next token does), "spread" (2.5 N(0, 1) alone: top-p 0.95 needs
// thousands of tokens) and "flat" (0.05 N(0, 1): random synthetic weights, every token a
// candidate), with no truncation and with top-p 0.95. One JSON line per configuration:
//   bench_sampler [--seconds S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bestofn/engine/sampler.h"
#include "bestofn_version.h"

int main(int argc, char** argv) {
  double seconds = 0.5;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--seconds") seconds = std::stod(argv[i + 1]);
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  using Clock = std::chrono::steady_clock;
  for (std::size_t vocab : {std::size_t{32000}, std::size_t{128256}})
    for (const std::string row : {"peaked", "spread", "flat"})
      for (float top_p : {1.0f, 0.95f}) {
        std::vector<float> logits(vocab);
        std::mt19937 rng(1);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& l : logits) l = (row == "flat" ? 0.05f : 2.5f) * normal(rng);
        if (row == "peaked")
          for (int k = 0; k < 5; ++k) logits[rng() % vocab] = 12.0f + static_cast<float>(k);
        bestofn::SamplingParams p;
        p.temperature = 1.0f, p.top_p = top_p, p.seed = 1;
        bestofn::SamplerScratch scratch;
        long draws = 0, sink = 0;
        const auto t0 = Clock::now();
        double elapsed = 0.0;
        do {
          sink += bestofn::sample_token(logits, p, 0, static_cast<std::uint64_t>(draws), 0, scratch).token;
          ++draws;
          elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        } while (elapsed < seconds);
        const double us = elapsed * 1e6 / static_cast<double>(draws);
        const nlohmann::json line = {{"bench", "sampler"}, {"vocab", vocab}, {"row", row},
                                    {"temperature", 1.0}, {"top_p", top_p}, {"us_per_draw", us},
                                    {"ns_per_token", us * 1e3 / static_cast<double>(vocab)}, {"draws", draws},
                                    {"token_sum", sink}, {"threads", 1}, {"commit", BESTOFN_COMMIT}, {"command", command}};
        std::printf("%s\n", line.dump().c_str());
      }
  return 0;
}
