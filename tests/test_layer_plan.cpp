// A decoder layer's launch list (src/cuda/layer_plan.h) without a GPU: the entries a layer
// enqueues, as CudaEngine::layer and ffn run them (one launcher call or linear per entry), for the
// layer of any step (plan_layer, by the shape of the weights) and small-M linear's fused layer, on
// real models' shapes. The device side (tests/test_gpu_engine.cpp) counts the nodes of a captured
// step and checks both against the CPU engine.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "cuda/layer_plan.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {
namespace {

using enum LayerLaunch;

// Llama 3.1 8B's shape with the fused FP8 layer's prerequisites.
FusedLayerShape llama8b(int T) {
  FusedLayerShape s;
  s.T = T, s.dim = 4096, s.hidden = 14336, s.n_heads = 32, s.n_kv = 8, s.hd = 128;
  s.small_m = true, s.fused_fp8 = true, s.kv_bf16 = true;
  return s;
}

std::vector<LayerLaunch> launches(const FusedLayerShape& s) {
  const LayerPlan p = plan_fused_layer(s);
  return {p.begin(), p.end()};
}

std::vector<LayerLaunch> launches(const LayerShape& s) {
  const LayerPlan p = plan_layer(s);
  return {p.begin(), p.end()};
}

// The layer of any step follows the CPU engine's forward (src/cpu/cpu_engine.cpp, layer and ffn):
// norm, q/k/v, Qwen3's head norms, RoPE with the cache write, attention, x += W_o a; then norm,
// gate and up, SwiGLU, x += W_down. Fused weights are one product and a column split, and on FP8
// the norm makes the product's codes and SwiGLU the down product's.
TEST(LayerPlan, TheLayerOfAnyStepFollowsTheWeights) {
  LayerShape fp8;  // Llama 3.1 8B FP8 with fused q/k/v and gate/up (the default paths)
  fp8.qkv_fused = fp8.qkv_fp8 = fp8.gate_up_fused = fp8.ffn_fp8 = true;
  const LayerPlan p = plan_layer(fp8);
  EXPECT_EQ(launches(fp8), (std::vector<LayerLaunch>{AttnNormQuant, QkvQuantized, RopeKv, Attention, OutLinearResidual, FfnNormQuant,
                                                      GateUpQuantized, SwigluQuant, DownQuantizedResidual}));
  EXPECT_EQ(p.ffn, 5);  // the FFN from its norm on
  LayerShape plain;     // nothing fused (the reference path; BF16 or F32 weights, or FP8 unfused)
  EXPECT_EQ(launches(plain), (std::vector<LayerLaunch>{AttnNorm, QLinear, KLinear, VLinear, RopeKv, Attention, OutLinearResidual, FfnNorm,
                                                        GateLinear, UpLinear, Swiglu, DownLinearResidual}));
  EXPECT_EQ(plan_layer(plain).ffn, 7);
  LayerShape bf16;  // fused, not FP8: the products on the normed rows, then their columns apart
  bf16.qkv_fused = bf16.gate_up_fused = true;
  EXPECT_EQ(launches(bf16), (std::vector<LayerLaunch>{AttnNorm, QkvLinear, RopeKv, Attention, OutLinearResidual, FfnNorm, GateUpLinear,
                                                       Swiglu, DownLinearResidual}));
  LayerShape qwen3 = plain;  // the head norms between q/k/v and RoPE
  qwen3.qk_norm = true;
  EXPECT_EQ(launches(qwen3), (std::vector<LayerLaunch>{AttnNorm, QLinear, KLinear, VLinear, QNorm, KNorm, RopeKv, Attention,
                                                        OutLinearResidual, FfnNorm, GateLinear, UpLinear, Swiglu, DownLinearResidual}));
  LayerShape mixed = fp8;  // an FP8 gate/up with a down that is not: SwiGLU on the split columns
  mixed.ffn_fp8 = false;
  EXPECT_EQ(launches(mixed), (std::vector<LayerLaunch>{AttnNormQuant, QkvQuantized, RopeKv, Attention, OutLinearResidual, FfnNorm,
                                                        GateUpLinear, Swiglu, DownLinearResidual}));
}

TEST(LayerPlan, ALlamaLayerIsSixLaunchesAtOneToEightRows) {
  const std::vector<LayerLaunch> six = {QkvNormRope, Attention, OutResidual, GateUpNorm, SwigluQuant, DownResidual};
  for (int T = 1; T <= kSmallMMaxRows; ++T) EXPECT_EQ(launches(llama8b(T)), six) << T << " rows";
  EXPECT_EQ(plan_fused_layer(llama8b(1)).ffn, 3);  // the FFN from gate/up on
  // SmolLM2-135M (9 heads of 64, 3 KV heads, hidden 1536): the same six.
  FusedLayerShape smol = llama8b(4);
  smol.dim = 576, smol.hidden = 1536, smol.n_heads = 9, smol.n_kv = 3, smol.hd = 64;
  EXPECT_EQ(launches(smol), six);
}

TEST(LayerPlan, WholeHeadStepsKeepTheirOwnLaunch) {
  // An FP8 cache row's scale needs its whole head: RoPE and the write stay a launch (7).
  FusedLayerShape s = llama8b(1);
  s.kv_bf16 = false;
  EXPECT_EQ(launches(s), (std::vector<LayerLaunch>{QkvNorm, RopeKv, Attention, OutResidual, GateUpNorm, SwigluQuant, DownResidual}));
  // Qwen3's per-head q/k norms come before RoPE (9).
  s.kv_bf16 = true, s.qk_norm = true;
  EXPECT_EQ(launches(s),
            (std::vector<LayerLaunch>{QkvNorm, QNorm, KNorm, RopeKv, Attention, OutResidual, GateUpNorm, SwigluQuant, DownResidual}));
}

TEST(LayerPlan, UnfusedWithTheReason) {
  auto why = [](const FusedLayerShape& s) {
    const LayerPlan p = plan_fused_layer(s);
    EXPECT_EQ(p.n, 0);
    return p.why;
  };
  FusedLayerShape s = llama8b(9);  // cuBLASLt's GEMMs from 9 rows on
  EXPECT_NE(why(s).find("9 rows"), std::string::npos) << why(s);
  s = llama8b(1), s.split = true;
  EXPECT_NE(why(s).find("small-M split"), std::string::npos);
  s = llama8b(1), s.small_m = false;
  EXPECT_NE(why(s).find("small-M linear is off"), std::string::npos);
  s = llama8b(1), s.fused_fp8 = false;
  EXPECT_NE(why(s).find("fused q/k/v"), std::string::npos);
  s = llama8b(1), s.hd = 127, s.n_heads = 32;
  EXPECT_NE(why(s).find("not even"), std::string::npos);
  // The prologue's codes in shared memory: 8 rows of 8192 do not fit, 4 do.
  s = llama8b(8), s.dim = 8192, s.hidden = 28672, s.n_heads = 64;
  EXPECT_NE(why(s).find("shared memory"), std::string::npos) << why(s);
  s.T = 4;
  EXPECT_EQ(plan_fused_layer(s).n, 6);
}

TEST(LayerPlan, EveryLaunchHasItsOwnName) {
  std::set<std::string> names;
  for (const LayerLaunch l : {QkvNormRope, QkvNorm, QNorm, KNorm, RopeKv, Attention, OutResidual, GateUpNorm, SwigluQuant, DownResidual,
                              AttnNormQuant, AttnNorm, QkvQuantized, QkvLinear, QLinear, KLinear, VLinear, OutLinearResidual, FfnNormQuant,
                              FfnNorm, GateUpQuantized, GateUpLinear, GateLinear, UpLinear, Swiglu, DownQuantizedResidual,
                              DownLinearResidual})
    EXPECT_TRUE(names.insert(launch_name(l)).second) << launch_name(l);
  EXPECT_EQ(names.count("?"), 0u);
}

}  // namespace
}  // namespace bestofn::cuda
