#pragma once
// HF tensor names -> Weights: every tensor the Llama forward reads (and Qwen2's q/k/v biases, Qwen3's
// q/k norms), shape-checked against the config. FP8 checkpoints (compressed-tensors, legacy fp8)
// and online FP8 quantization. A tied checkpoint may store its one matrix under either name.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bestofn/util/dtype.h"
#include "bestofn/model/model_config.h"

namespace bestofn {

class ModelFiles;

// A weight's bytes: a view into the mmap'd checkpoint, or into storage the Weights own.
struct Tensor {
  std::string name;  // the checkpoint's name (for errors)
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t nbytes = 0;

  std::int64_t numel() const;
  // Element i as float, whatever the dtype (tests, slow paths). FP8 codes are not scaled.
  float at(std::int64_t i) const;
  // Row r of a 2-D tensor (shape[1] floats) into out.
  void row_to_float(std::int64_t r, float* out) const;
};

// y = x W^T (+ b) with W (out, in). FP8: W_real[o, i] = fp8(W[o, i]) * weight_scale[per-tensor ? 0 : o].
// The bias is added after the product (and after the FP8 scales): y[t, o] = (x W^T)[t, o] + b[o].
struct Linear {
  Tensor weight;
  std::vector<float> weight_scale;   // FP8 only: size 1 (per tensor) or out (per output channel)
  std::optional<float> input_scale;  // FP8 with static activation scale; nullopt: dynamic per token
  std::vector<float> bias;           // (out), widened from the checkpoint's dtype (exact); empty: none (Qwen2's q/k/v have one)
  bool is_fp8() const { return weight.dtype == DType::F8_E4M3; }
  std::int64_t out_features() const { return weight.shape[0]; }
  std::int64_t in_features() const { return weight.shape[1]; }
  std::size_t nbytes() const { return weight.nbytes + (weight_scale.size() + bias.size()) * sizeof(float); }
};

struct LayerWeights {
  Tensor attn_norm;  // (dim)
  Linear wq;         // (n_heads * head_dim, dim)
  Linear wk;         // (n_kv_heads * head_dim, dim)
  Linear wv;         // (n_kv_heads * head_dim, dim)
  Tensor q_norm;     // (head_dim), Qwen3: RMSNorm of each query head after q_proj, before RoPE; else empty (no data)
  Tensor k_norm;     // (head_dim), the same for each key head
  Linear wo;         // (dim, n_heads * head_dim)
  Tensor ffn_norm;   // (dim)
  Linear w_gate;     // (hidden_dim, dim)
  Linear w_up;       // (hidden_dim, dim)
  Linear w_down;     // (dim, hidden_dim)
};

struct LoadOptions {
  // Quantize BF16/F16/F32 linear weights (not lm_head) to FP8 E4M3 at load, one scale per
  // output channel = amax / 448; activations then use dynamic per-token scales.
  bool quantize_fp8 = false;
  // Quantize the lm_head (BF16/F16/F32, tied to the embedding or not; the embedding itself stays)
  // to FP8 E4M3 the same way: half the bytes of a BF16 lm_head per decode step, as llama.cpp's
  // Q8_0 output tensor does. Its activations then take dynamic per-token FP8 scales like every
  // FP8 layer. Checkpoints keep lm_head in BF16, so this is a choice, off by default.
  bool quantize_lm_head_fp8 = false;
};

struct Weights {
  ModelConfig config;
  Tensor token_embedding;  // (vocab_size, dim); tied with only lm_head.weight stored: that tensor
  std::vector<LayerWeights> layers;
  Tensor final_norm;       // (dim)
  Linear lm_head;          // (vocab_size, dim); the embedding's bytes when tied
  std::string quantization;  // "none" | "fp8-compressed-tensors" | "fp8" | "fp8-online"
  std::vector<std::string> unused_tensors;  // in the checkpoint, not read by the forward

  std::shared_ptr<const ModelFiles> files;
  std::vector<std::vector<std::uint64_t>> owned;  // quantized or realigned copies

  // Bytes of weights one decode step reads: every linear layer, norm and lm_head (the embedding
  // gather reads one row per token and is not counted, unless it is the tied lm_head).
  std::size_t decode_bytes_per_step() const;
  // BF16 K and V for every layer and KV head.
  std::size_t kv_bytes_per_token() const;
  std::int64_t parameter_count() const;
};

Weights load_weights(std::shared_ptr<const ModelFiles> files, ModelConfig config, const LoadOptions& options = {});
// config.json (+ generation_config.json) and the safetensors of a model directory.
Weights load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace bestofn
