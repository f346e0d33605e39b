#include "cuda/dev_weights.h"

#include <optional>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/plan.h"

namespace bestofn::cuda {
namespace {

// An FP8 operand's scales; Hopper FP8 GEMMs need 16-aligned leading dimensions
// (benchmarks/GPU_TODO.md).
void set_fp8(DevLinear& d, const std::vector<float>& weight_scale, float input_scale, const std::string& name) {
  if (d.in % 16 != 0 || d.out % 16 != 0)
    throw Error("tensor '" + name + "': FP8 on the GPU needs both dimensions to be multiples of 16, got [" + std::to_string(d.out) +
                ", " + std::to_string(d.in) + "]");
  d.type = GemmInput::FP8;
  d.scale.resize(weight_scale.size() * 4);
  d.scale.upload(weight_scale.data(), weight_scale.size() * 4);
  d.per_channel = weight_scale.size() > 1;
  d.input_scale = input_scale;
}

// A bias (out floats), when the layer has one.
void set_bias(DevLinear& d, const std::vector<float>& bias) {
  if (bias.empty()) return;
  d.bias.resize(bias.size() * 4);
  d.bias.upload(bias.data(), bias.size() * 4);
}

// Fused q/k/v: the shards of a fused linear uploaded as one.
DevLinear upload(const FusedLinear& f, const std::string& name) {
  DevLinear d;
  d.in = f.in;
  for (int o : f.outs) d.out += o;
  d.w.dtype = f.dtype;
  d.w.buf.resize(f.weight.size());
  d.w.buf.upload(f.weight.data(), f.weight.size());
  if (f.dtype == DType::F8_E4M3) set_fp8(d, f.weight_scale, f.input_scale, "fused " + name);
  else d.type = f.dtype == DType::BF16 ? GemmInput::BF16 : GemmInput::F32;
  set_bias(d, f.bias);
  return d;
}

}  // namespace

DevTensor upload(const Tensor& t) {
  DevTensor d;
  if (t.dtype == DType::F16) {
    std::vector<float> f(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = t.at(static_cast<std::int64_t>(i));
    d.buf.resize(f.size() * 4);
    d.buf.upload(f.data(), f.size() * 4);
    return d;
  }
  d.dtype = t.dtype;
  d.buf.resize(t.nbytes);
  d.buf.upload(t.data, t.nbytes);
  return d;
}

DevLinear upload(const Linear& l) {
  DevLinear d;
  d.out = static_cast<int>(l.out_features());
  d.in = static_cast<int>(l.in_features());
  d.w = upload(l.weight);
  if (l.is_fp8()) set_fp8(d, l.weight_scale, l.input_scale.value_or(0.0f), l.weight.name);
  else d.type = d.w.dtype == DType::BF16 ? GemmInput::BF16 : GemmInput::F32;
  set_bias(d, l.bias);
  return d;
}

DevLayer upload(const LayerWeights& L, bool fused) {
  DevLayer d;
  d.attn_norm = upload(L.attn_norm);
  d.ffn_norm = upload(L.ffn_norm);
  if (L.q_norm.data) d.q_norm = upload(L.q_norm), d.k_norm = upload(L.k_norm);
  // Shards that cannot share a GEMM (fuse_linears) are uploaded apart.
  const Linear* qkv[] = {&L.wq, &L.wk, &L.wv};
  const Linear* gate_up[] = {&L.w_gate, &L.w_up};
  std::optional<FusedLinear> f_qkv, f_gate_up;
  if (fused) f_qkv = fuse_linears(qkv), f_gate_up = fuse_linears(gate_up);
  if (f_qkv) d.wqkv = upload(*f_qkv, L.wq.weight.name);
  else d.wq = upload(L.wq), d.wk = upload(L.wk), d.wv = upload(L.wv);
  if (f_gate_up) d.w_gate_up = upload(*f_gate_up, L.w_gate.weight.name);
  else d.w_gate = upload(L.w_gate), d.w_up = upload(L.w_up);
  d.wo = upload(L.wo), d.w_down = upload(L.w_down);
  return d;
}

}  // namespace bestofn::cuda
