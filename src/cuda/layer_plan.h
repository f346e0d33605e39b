#pragma once
// A decoder layer as a launch list: what one layer enqueues, step by step, in order. The CUDA
// engine's layer runs a LayerPlan's entries one launcher call (or linear) each, the attention
// half, then from `ffn` on the FFN (src/cuda/cuda_forward.cpp), so the list asserted on the host
// (tests/test_layer_plan.cpp) is what the device runs. Two plans:
// - plan_layer: the layer of any step, by the shape of its weights (q/k/v and gate/up fused or
//   not, FP8 or not, Qwen3's q/k norms); its linears are the linear path's (cuBLASLt's GEMM and the
//   scale kernel, or small-M linear's kernel where it takes the rows), its norms and column copies
//   their own launches;
// - plan_fused_layer: small-M linear's fused layer of a step of 1..8 rows, launch for launch
//   (tests/test_gpu_engine.cpp counts the kernel nodes of a captured step), below.
//
// Small-M linear's fused layer:
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
  // The layer of any step (plan_layer):
  AttnNormQuant,          // rmsnorm_quant_fp8_cuda: x's RMSNorm as the fused FP8 q/k/v's codes
  AttnNorm,               // rmsnorm_cuda: x's RMSNorm into xn
  QkvQuantized,           // the fused q/k/v product on those codes, then its q | k | v columns apart
  QkvLinear,              // the fused q/k/v linear of xn, then its columns apart
  QLinear,                // q = W_q xn
  KLinear,                // k = W_k xn
  VLinear,                // v = W_v xn
  OutLinearResidual,      // x += W_o att
  FfnNormQuant,           // rmsnorm_quant_fp8_cuda: x's RMSNorm as the fused FP8 gate/up's codes
  FfnNorm,                // rmsnorm_cuda: x's RMSNorm into xn
  GateUpQuantized,        // the fused gate/up product on those codes (gate | up, read by SwigluQuant)
  GateUpLinear,           // the fused gate/up linear of xn, then its gate | up columns apart
  GateLinear,             // gate = W_gate xn
  UpLinear,               // up = W_up xn
  Swiglu,                 // swiglu_cuda: gate = silu(gate) * up
  DownQuantizedResidual,  // x += W_down on SwigluQuant's codes
  DownLinearResidual,     // x += W_down gate
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

struct LayerPlan {
  std::array<LayerLaunch, 16> launch{};
  int n = 0;
  int ffn = 0;      // the FFN's first entry: [0, ffn) the attention half, [ffn, n) the FFN
  std::string why;  // n == 0: why there is no such plan
  const LayerLaunch* begin() const { return launch.data(); }
  const LayerLaunch* end() const { return launch.data() + n; }
};

// The fused layer's launches, or n == 0 and why not (a step of more than 8 rows, a shape the
// kernel or its prologue refuses, a model that is not FP8 with fused q/k/v and gate/up, the flags).
LayerPlan plan_fused_layer(const FusedLayerShape& s);

// What the layer of any step reads of its weights (src/cuda/dev_weights.h).
struct LayerShape {
  bool qkv_fused = false;      // q/k/v as one weight (fused q/k/v)
  bool qkv_fp8 = false;        // that weight FP8
  bool gate_up_fused = false;  // gate/up as one weight
  bool ffn_fp8 = false;        // that weight and down FP8
  bool qk_norm = false;        // Qwen3
};
LayerPlan plan_layer(const LayerShape& s);

}  // namespace bestofn::cuda
