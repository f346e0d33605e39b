#pragma once
// Sampling policy on one row of logits. The sampler sees logits, never the model.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "bestofn/model/model_config.h"  // kMinTemperature

namespace bestofn {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  std::uint64_t seed = 0;
};

struct Sample {
  int token = 0;  // -1: the logits were not finite (a NaN, a +Inf, or all -Inf); logprob is then NaN or Inf
  // log p(token) under softmax(logits / T) over the whole vocabulary (T = 1 when greedy),
  // before top-k / top-p / min-p truncation.
  float logprob = 0.0f;
};

// Reused buffers, one per thread.
struct SamplerScratch {
  struct Candidate {
    float z, w;  // logit / T, and exp(z - zmax)
    int id;
  };
  std::vector<Candidate> candidates;
  std::vector<double> block_mass;
};

// Greedy: the first index of the maximum. Otherwise, in this order: z = logits / T; tokens more
// than 30 nats below the best are dropped (probability < 1e-13 of the best); top-k keeps the k
// most probable; when top-k, top-p or min-p is on, tokens are ordered by probability descending
// (ties: lower id first), else by id; top-p keeps the shortest prefix whose mass reaches p; min-p
// keeps p >= min_p * p_max; the token drawn is the first whose cumulative mass exceeds
// u * kept_mass, u = uniform01(seed, prompt, candidate, step). The CUDA sampler (kernels/sample.cu)
// follows the same rule with the same sums in the same order (its host emulation,
// test_sampler_passes, draws these tokens exactly; the device itself is yet to confirm it:
// benchmarks/GPU_TODO.md), so a seed gives the same candidates on both.
Sample sample_token(std::span<const float> logits, const SamplingParams& p, std::uint64_t prompt,
                    std::uint64_t candidate, std::uint64_t step, SamplerScratch& scratch);

}  // namespace bestofn
