#pragma once
// A run as the CUDA engine sees it (its shape, the device, the model) and the refusals of CUDA
// options on it. Plain C++ in bestofn_core (src/engine/cuda_run.cpp): the path policy and the
// CUDA engine both read it, and it is tested without a GPU (tests/test_cuda_paths.cpp).
#include <string>

#include "bestofn/engine/engine.h"

namespace bestofn {

// The shape of a run as one engine sees it (cuda_shape in bestofn/generate/model_options.h makes
// it from generate's requests; bench from --n).
struct CudaShape {
  int candidates_per_prompt = 1;  // candidates of one prompt decoding together (at most --batch)
  int prompts_per_step = 1;       // prompts decoding together
  int prompts = 1;                // prompts of the run
  int longest_prompt = 0;         // tokens (0: not known); logged, not a dimension of the table
  int speculate = 0;              // --speculate K
};

// What the choice reads: the run's shape, the device and the model.
struct CudaRun {
  CudaShape shape;
  int capability = 0;  // the device's compute capability, major * 10 + minor (90: 9.0)
  // The linear layers' weights as the engine computes them: "fp8", "bf16" or "f32" (F16 weights
  // are widened to F32 at upload, src/cuda/dev_weights.cpp).
  std::string weights = "fp8";
  EngineOptions::Kv kv = EngineOptions::Kv::Auto;  // Auto: BF16 on CUDA
  // --cascade-attention's needs: a build with FlashInfer's headers, head_dim 128, n_heads a
  // multiple of n_kv_heads (src/cuda/cascade_attention.cpp).
  bool cascade_built = false;
  int head_dim = 0, n_heads = 0, n_kv_heads = 0;
};

// "9.0" for 90.
std::string capability_text(int capability);

// The run of `w` on a device of that compute capability: the shape, the weights' kind and head
// shape from w, the KV cache asked for.
CudaRun cuda_run(const Weights& w, EngineOptions::Kv kv, const CudaShape& shape, int capability, bool cascade_built);

// Why the CUDA engine refuses `options` on `run`, in one line naming the flag; empty when it
// would not. The one place a combination that cannot run is refused: the path policy
// (bestofn/backends/cuda_paths.h) passes over the paths it refuses, and the CUDA engine asks it
// first when it is made. The refusals: an F32 KV cache; --cascade-attention with
// --cuda-prefix-gemm, without FlashInfer or on another head shape; --speculate with either;
// --small-m-pdl below compute capability 9.0; a negative --kv-blocks or --small-m-blocks-per-sm.
// (What only the device's kernels know stays with them: an FP8 KV cache's row width, PDL code
// built for the device.)
std::string cuda_refusal(const CudaOptions& options, const CudaRun& run);

}  // namespace bestofn
