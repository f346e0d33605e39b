#pragma once
// One decode step as the CUDA engine runs it: its rows (the batch, padded to its bucket with CUDA
// graphs), their index arrays uploaded into the step arena, and the device addresses of those
// arrays, which the forward's launches read. Made on the host by CudaEngine::prepare_step
// (src/cuda/cuda_step.cpp); the attention path keeps its own part of the step (attention_paths.h).
#include <cstdint>
#include <vector>

#include "cuda/kv_parts.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {

// With CUDA graphs the batch is padded to its bucket (step_plan.h): every launch runs T rows, the
// first `real` of them the batch's, the rest padding rows that touch only the padding prefix's
// scratch rows.
struct StepProgram {
  int T = 0;                                   // rows of every launch (padded)
  int real = 0;                                // the batch's rows, first
  std::vector<Slot*> batch;
  StepLayout layout;                           // the arrays' offsets in the arena (fixed per bucket)
  bool grouped = false;                        // the arrays hold a state-row map (prefix-GEMM attention)
  const int* tokens = nullptr;                 // (T)
  const int* pos = nullptr;                    // (T) each row's position
  const int* lens = nullptr;                   // (2 T) prefix lengths, then suffix lengths with this token
  const std::uint64_t* draws = nullptr;        // (3 T) device sampling: prompt, candidate, step indexes
  const int* map = nullptr;                    // (3 T) grouped: the state-row map
  const StepRowDesc* desc = nullptr;           // (T) each row's KV parts, expanded by forward into:
  std::uint16_t* const* rows = nullptr;        // (layers, 2, T) the cache rows this step writes: k, then v
  const std::uint16_t* const* ptrs = nullptr;  // (layers, 4, T) k_prefix, v_prefix, k_suffix, v_suffix
  const int* starts = nullptr;                 // (T) paged KV: row t's block table at tables + starts[t]
  const int* tables = nullptr;                 // Paged KV: the block tables
  int block = 0;                               // Paged KV: positions per block
};

}  // namespace bestofn::cuda
