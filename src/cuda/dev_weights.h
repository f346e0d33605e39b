#pragma once
// The model's weights on the device, uploaded once: norms as F32/BF16 tensors, linear layers as
// GEMM operands with their FP8 scales and biases (F32), and (fused q/k/v) q/k/v and gate/up as
// one operand each.
#include <string>

#include "bestofn/model/weights.h"
#include "cuda/device_buffer.h"
#include "cuda/gemm.h"

namespace bestofn::cuda {

// A tensor on the device, F32 or BF16 (F16 is widened to F32 on upload).
struct DevTensor {
  DeviceBuffer buf;
  DType dtype = DType::F32;
};

struct DevLinear {
  DevTensor w;               // (out, in): FP8 codes, BF16 or F32
  GemmInput type = GemmInput::F32;
  DeviceBuffer scale;        // FP8: (1) or (out) floats
  bool per_channel = false;
  float input_scale = 0.0f;  // FP8 static activation scale; 0: dynamic per token
  DeviceBuffer bias;         // (out) F32, added after the GEMM (and its scales); empty: none
  int out = 0, in = 0;
  const float* bias_or_null() const { return bias.size() > 0 ? bias.get<float>() : nullptr; }
};

struct DevLayer {
  DevTensor attn_norm, ffn_norm;
  DevTensor q_norm, k_norm;  // Qwen3: (head_dim), each query / key head's RMSNorm before RoPE; empty buf: none
  DevLinear wq, wk, wv, wo, w_gate, w_up, w_down;
  // Fused q/k/v (out 0: that group is not fused, its separate linears are uploaded instead)
  DevLinear wqkv, w_gate_up;
};

DevTensor upload(const Tensor& t);
DevLinear upload(const Linear& l);
// fused: q/k/v and gate/up as one weight each where fuse_linears allows (src/cuda/plan.h).
DevLayer upload(const LayerWeights& L, bool fused);

}  // namespace bestofn::cuda
