// A decoder layer's launch list (src/cuda/layer_plan.h): the layer of any step, and small-M
// linear's fused layer.
#include "cuda/layer_plan.h"

#include "cuda/small_m_linear.h"

namespace bestofn::cuda {

const char* launch_name(LayerLaunch l) {
  switch (l) {
    case LayerLaunch::QkvNormRope: return "qkv_norm_rope";
    case LayerLaunch::QkvNorm: return "qkv_norm";
    case LayerLaunch::QNorm: return "q_norm";
    case LayerLaunch::KNorm: return "k_norm";
    case LayerLaunch::RopeKv: return "rope_kv";
    case LayerLaunch::Attention: return "attention";
    case LayerLaunch::OutResidual: return "o_residual";
    case LayerLaunch::GateUpNorm: return "gate_up_norm";
    case LayerLaunch::SwigluQuant: return "swiglu_quant";
    case LayerLaunch::DownResidual: return "down_residual";
    case LayerLaunch::AttnNormQuant: return "attn_norm_quant";
    case LayerLaunch::AttnNorm: return "attn_norm";
    case LayerLaunch::QkvQuantized: return "qkv_quantized";
    case LayerLaunch::QkvLinear: return "qkv_linear";
    case LayerLaunch::QLinear: return "q_linear";
    case LayerLaunch::KLinear: return "k_linear";
    case LayerLaunch::VLinear: return "v_linear";
    case LayerLaunch::OutLinearResidual: return "o_linear_residual";
    case LayerLaunch::FfnNormQuant: return "ffn_norm_quant";
    case LayerLaunch::FfnNorm: return "ffn_norm";
    case LayerLaunch::GateUpQuantized: return "gate_up_quantized";
    case LayerLaunch::GateUpLinear: return "gate_up_linear";
    case LayerLaunch::GateLinear: return "gate_linear";
    case LayerLaunch::UpLinear: return "up_linear";
    case LayerLaunch::Swiglu: return "swiglu";
    case LayerLaunch::DownQuantizedResidual: return "down_quantized_residual";
    case LayerLaunch::DownLinearResidual: return "down_linear_residual";
  }
  return "?";
}

LayerPlan plan_layer(const LayerShape& s) {
  LayerPlan p;
  auto add = [&](LayerLaunch l) { p.launch[static_cast<std::size_t>(p.n++)] = l; };
  // attention: q, k, v = W xn (+ b: Qwen2); q, k = rmsnorm per head (Qwen3); rope(q, k);
  // kv cache <- k, v; x += W_o attend(q, kv). Fused q/k/v on FP8: the RMSNorm and the activation
  // quantization in one kernel (the same codes), the product on them.
  if (s.qkv_fused && s.qkv_fp8)
    add(LayerLaunch::AttnNormQuant), add(LayerLaunch::QkvQuantized);
  else if (s.qkv_fused)
    add(LayerLaunch::AttnNorm), add(LayerLaunch::QkvLinear);
  else
    add(LayerLaunch::AttnNorm), add(LayerLaunch::QLinear), add(LayerLaunch::KLinear), add(LayerLaunch::VLinear);
  if (s.qk_norm) add(LayerLaunch::QNorm), add(LayerLaunch::KNorm);
  add(LayerLaunch::RopeKv);
  add(LayerLaunch::Attention);
  add(LayerLaunch::OutLinearResidual);
  // ffn: x += W_down (silu(W_gate xn) * W_up xn), xn = rmsnorm(x). Fused gate/up on FP8: the
  // RMSNorm and the quantization in one kernel, the product, then SwiGLU and the down input's
  // quantization straight from its output (the same codes as the separate kernels).
  p.ffn = p.n;
  if (s.gate_up_fused && s.ffn_fp8) {
    add(LayerLaunch::FfnNormQuant), add(LayerLaunch::GateUpQuantized), add(LayerLaunch::SwigluQuant);
    add(LayerLaunch::DownQuantizedResidual);
    return p;
  }
  add(LayerLaunch::FfnNorm);
  if (s.gate_up_fused)
    add(LayerLaunch::GateUpLinear);
  else
    add(LayerLaunch::GateLinear), add(LayerLaunch::UpLinear);
  add(LayerLaunch::Swiglu);
  add(LayerLaunch::DownLinearResidual);
  return p;
}

LayerPlan plan_fused_layer(const FusedLayerShape& s) {
  LayerPlan p;
  const int q_dim = s.n_heads * s.hd, kv_dim = s.n_kv * s.hd;
  auto refuse = [&](std::string why) {
    p.n = 0;
    p.why = std::move(why);
    return p;
  };
  if (!s.small_m) return refuse("small-M linear is off");
  if (s.split) return refuse("small-M split asks for the unfused layer");
  if (!s.fused_fp8) return refuse("the fused layer needs an FP8 model with fused q/k/v (q/k/v and gate/up fused)");
  if (s.hd <= 0 || s.hd % 2 != 0) return refuse("head_dim " + std::to_string(s.hd) + " is not even");
  struct Product {
    const char* name;
    int out, in;
    bool prologue;
  };
  for (const Product& m : {Product{"qkv", q_dim + 2 * kv_dim, s.dim, true}, Product{"o", s.dim, q_dim, true},
                           Product{"gate_up", 2 * s.hidden, s.dim, true}, Product{"down", s.dim, s.hidden, false}}) {
    if (!small_m_linear_fits(s.T, m.out, m.in))
      return refuse(std::string(m.name) + ": " + std::to_string(s.T) + " rows of " + std::to_string(m.in) + " (1-" +
                    std::to_string(kSmallMMaxRows) + " rows, inputs a multiple of " + std::to_string(kSmallMCodes) + ")");
    if (m.prologue && !small_m_prologue_fits(s.T, m.in))
      return refuse(std::string(m.name) + ": the prologue's codes of " + std::to_string(s.T) + " rows of " + std::to_string(m.in) +
                    " exceed a block's shared memory");
  }
  auto add = [&](LayerLaunch l) { p.launch[static_cast<std::size_t>(p.n++)] = l; };
  const bool rope_fused = s.kv_bf16 && !s.qk_norm;
  add(rope_fused ? LayerLaunch::QkvNormRope : LayerLaunch::QkvNorm);
  if (s.qk_norm) add(LayerLaunch::QNorm), add(LayerLaunch::KNorm);
  if (!rope_fused) add(LayerLaunch::RopeKv);
  add(LayerLaunch::Attention);
  add(LayerLaunch::OutResidual);
  p.ffn = p.n;
  add(LayerLaunch::GateUpNorm);
  add(LayerLaunch::SwigluQuant);
  add(LayerLaunch::DownResidual);
  return p;
}

}  // namespace bestofn::cuda
