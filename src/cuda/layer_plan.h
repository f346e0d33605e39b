#pragma once
// Small-M linear's fused decoder layer: what one layer enqueues, launch by launch, on
// a step of 1..8 rows. CudaEngine::layer_fused runs exactly this list (one launcher call per entry,
// src/cuda/cuda_forward.cpp), so the count asserted on the host (tests/test_layer_plan.cpp) is the
// count the device runs; tests/test_gpu_engine.cpp counts the kernel nodes of a captured step.
//
// The six launches of a Llama layer with a BF16 KV cache:
//   qkv        RMSNorm + quantization in the prologue; RoPE and the K/V cache write in the
//              epilogue (q rotated, F32; no column copies)
//   attention  the decode attention (one launch for the default kernel)
//   o          quantization in the prologue; the residual add in the epilogue (x += W_o a)
//   gate/up    RMSNorm + quantization in the prologue; the gate | up rows out
//   swiglu     silu(gate) * up and its quantization (the down input's per-token scale needs the
//              whole row: one more launch, not a prologue that every block would repeat over 14k)
//   down       the residual add in the epilogue
// Qwen3's q/k norms need a whole head before RoPE, and an FP8 cache row quantizes a whole head: on
// those the qkv launch writes q, k, v apart and RoPE / the cache write run as their own launch.
// Plain C++ (bestofn_core): tested without a GPU.
#include <array>
#include <cstdint>
#include <string>

namespace bestofn::cuda {

enum class LayerLaunch : std::uint8_t {
  QkvNormRope,  // small-m: NormQuant prologue, Heads epilogue with rope
  QkvNorm,      // small-m: NormQuant prologue, Heads epilogue: q, k, v apart (F32)
  QNorm,        // rmsnorm_cuda over q's heads (Qwen3)
  KNorm,        // rmsnorm_cuda over k's heads (Qwen3)
  RopeKv,       // rope_kv_write_cuda
  Attention,    // the decode attention
  OutResidual,  // small-m: Quant prologue, Rows epilogue added to x
  GateUpNorm,   // small-m: NormQuant prologue, Rows epilogue (gate | up)
  SwigluQuant,  // swiglu_quant_fp8_cuda
  DownResidual, // small-m on the SwiGLU codes, Rows epilogue added to x
};
const char* launch_name(LayerLaunch l);

// What decides the path, from the model and the engine's options.
struct FusedLayerShape {
  int T = 0;  // rows of the step
  int dim = 0, hidden = 0, n_heads = 0, n_kv = 0, hd = 0;
  bool small_m = false;       // Small-M linear
  bool split = false;         // Small-M split: the unfused layer (A/B)
  bool fused_fp8 = false;     // q/k/v and gate/up fused (fused q/k/v), and those, o and down all FP8
  bool qk_norm = false;       // Qwen3
  bool kv_bf16 = false;       // the KV cache's rows are BF16 (else FP8)
};

struct FusedLayerPlan {
  std::array<LayerLaunch, 12> launch{};
  int n = 0;
  std::string why;  // n == 0: why the layer runs unfused
  const LayerLaunch* begin() const { return launch.data(); }
  const LayerLaunch* end() const { return launch.data() + n; }
};

// The fused layer's launches, or n == 0 and why not (a step of more than 8 rows, a shape the
// kernel or its prologue refuses, a model that is not FP8 with fused q/k/v and gate/up, the flags).
FusedLayerPlan plan_fused_layer(const FusedLayerShape& s);

}  // namespace bestofn::cuda
