// A CUDA run and the refusals of CUDA options on it (bestofn/engine/cuda_run.h).
#include "bestofn/engine/cuda_run.h"

#include "bestofn/model/weights.h"

namespace bestofn {
std::string capability_text(int capability) { return std::to_string(capability / 10) + "." + std::to_string(capability % 10); }

CudaRun cuda_run(const Weights& w, EngineOptions::Kv kv, const CudaShape& shape, int capability, bool cascade_built) {
  CudaRun run;
  run.shape = shape;
  run.capability = capability;
  const DType d = w.layers.empty() ? DType::F32 : w.layers.front().wq.weight.dtype;
  run.weights = d == DType::F8_E4M3 ? "fp8" : d == DType::BF16 ? "bf16" : "f32";
  run.kv = kv;
  run.cascade_built = cascade_built;
  run.head_dim = w.config.head_dim, run.n_heads = w.config.n_heads, run.n_kv_heads = w.config.n_kv_heads;
  return run;
}

std::string cuda_refusal(const CudaOptions& o, const CudaRun& run) {
  if (o.cascade_attention) {
    if (o.prefix_gemm) return "--cascade-attention and --cuda-prefix-gemm: two paths for the same shared-prefix attention, pick one";
    if (!run.cascade_built)
      return "--cascade-attention: this build has no FlashInfer headers (scripts/fetch_flashinfer.sh stages them; then reconfigure)";
    if (run.head_dim != 128 || run.n_kv_heads <= 0 || run.n_heads % run.n_kv_heads != 0)
      return "--cascade-attention: supports head_dim 128 with n_heads a multiple of n_kv_heads, got head_dim " + std::to_string(run.head_dim) +
             ", heads " + std::to_string(run.n_heads) + "/" + std::to_string(run.n_kv_heads);
  }
  if (run.shape.speculate > 0 && (o.cascade_attention || o.prefix_gemm))
    return "--speculate: the cuda engine does not verify drafted tokens with --cascade-attention or --cuda-prefix-gemm";
  if (run.kv == EngineOptions::Kv::F32) return "--kv-cache f32: the CUDA engine keeps its KV cache in BF16 or FP8";
  if (o.kv_blocks < 0) return "--kv-blocks: expected >= 0, got " + std::to_string(o.kv_blocks);
  if (o.small_m_blocks_per_sm < 0) return "--small-m-blocks-per-sm: expected >= 0, got " + std::to_string(o.small_m_blocks_per_sm);
  if (o.small_m_pdl && run.capability < 90)
    return "--small-m-pdl: programmatic dependent launch needs a compute capability 9.0 or later device, this one is " +
           capability_text(run.capability);
  return "";
}

}  // namespace bestofn
