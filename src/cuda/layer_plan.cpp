// The fused decoder layer's launch list (src/cuda/layer_plan.h).
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
  }
  return "?";
}

FusedLayerPlan plan_fused_layer(const FusedLayerShape& s) {
  FusedLayerPlan p;
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
  add(LayerLaunch::GateUpNorm);
  add(LayerLaunch::SwigluQuant);
  add(LayerLaunch::DownResidual);
  return p;
}

}  // namespace bestofn::cuda
