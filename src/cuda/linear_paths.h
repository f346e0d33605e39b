#pragma once
// The FP8 linear layers as one of two paths, chosen once when the engine is made
// (make_linear_path):
// - CublasLinear: cuBLASLt's FP8 GEMM, then the scale kernel (the activations' and the weights'
//   scales, the bias);
// - SmallMLinear: steps of 1-8 rows on bestofn's weight-streaming kernel (the scales, the bias and
//   the residual add fused: src/cuda/small_m_linear.h), 9-64 rows on its tensor-core kernel where
//   the device has FP8 mma (compute capability 8.9), wider steps on cuBLASLt as above; with fused
//   q/k/v on an FP8 model a layer of 1-8 rows is a launch list (src/cuda/layer_plan.h), and an FP8
//   lm_head takes the final norm in its prologue.
// BF16 and F32 layers are cuBLASLt's on either path (CudaEngine::linear). Each path owns its
// workspace and its part of the CUDA graph key.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bestofn/engine/engine.h"
#include "cuda/dev_weights.h"
#include "cuda/device_buffer.h"
#include "cuda/gemm.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"
#include "cuda/layer_plan.h"
#include "cuda/phase_timer.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {

// What a linear path reads of the engine, fixed when it is made.
struct LinearSetup {
  cudaStream_t stream = nullptr;
  Gemm* gemm = nullptr;
  PhaseTimer* timer = nullptr;  // the GEMM's kernel groups ("gemm", "scale")
  int sm_count = 1;
  // The model as uploaded: its layers (the fused layer's plans), its lm_head, its shape.
  std::span<const DevLayer> layers;
  const DevLinear* lm_head = nullptr;
  int dim = 0, hidden = 0, n_heads = 0, n_kv = 0, hd = 0;
  KvFormat kv = KvFormat::BF16;
};

class LinearPath {
 public:
  virtual ~LinearPath() = default;
  virtual const char* name() const = 0;
  // Layer l's launch list for a step of T rows (src/cuda/layer_plan.h): the fused layer where
  // this path has one for T rows, else the layer of its weights' shape.
  const LayerPlan& layer_plan(int l, int T) const {
    if (const LayerPlan* fused = fused_layer(l, T)) return *fused;
    return layers_[static_cast<std::size_t>(l)];
  }
  // y (T, l.out) = the FP8 product of codes a / scales sa (T rows, quantized per l's scheme) and
  // weights w (l's, or the tied table), scaled and biased; accumulate (adds(l, T) only): added to y.
  virtual void fp8_product(const DevLinear& l, const void* w, const std::uint8_t* a, const float* sa, int T, float* y,
                           bool accumulate) = 0;
  // Its kernel adds l's product over T rows to the output itself (the residual add fused).
  virtual bool adds(const DevLinear& l, int T) const { (void)l, (void)T; return false; }
  // Its workspace for steps of up to T rows (before any such step; never inside one).
  virtual void size_rows(int T) { (void)T; }
  virtual void add_to_key(GraphKey& key) const { (void)key; }
  // The lm_head over T rows with the final norm in its prologue.
  virtual bool fuses_lm_head(int T) const { (void)T; return false; }
  // The arguments of the fused kernel for l over T rows, its epilogue Rows into y (small-M linear).
  virtual SmallMFused fused_args(const DevLinear& l, int T, float* y, bool accumulate) const;

 protected:
  // Each layer's plan_layer, from its weights.
  explicit LinearPath(std::span<const DevLayer> layers);
  // The fused layer: layer l's launch list for T rows, nullptr where the layer runs unfused.
  virtual const LayerPlan* fused_layer(int l, int T) const { (void)l, (void)T; return nullptr; }

 private:
  std::vector<LayerPlan> layers_;
};

// Small-M linear when o.small_m_linear, else cuBLASLt's (the options checked by cuda_refusal
// first). Throws bestofn::Error for programmatic dependent launch where the device or the build
// lacks it.
std::unique_ptr<LinearPath> make_linear_path(const CudaOptions& o, const LinearSetup& setup);

}  // namespace bestofn::cuda
