#pragma once
// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11). A draw depends only on (seed, prompt, candidate, step), never on batch
// composition, thread count or slot order; the CUDA sampler computes the same function.
#include <array>
#include <cstdint>

namespace bestofn {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key);

// A uniform float in [0, 1) with 24 random bits, for token `step` of candidate `candidate` of
// prompt `prompt` under `seed`.
float uniform01(std::uint64_t seed, std::uint64_t prompt, std::uint64_t candidate, std::uint64_t step);

}  // namespace bestofn
