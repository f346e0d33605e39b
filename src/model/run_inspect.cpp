// bestofn inspect MODEL_DIR [--json] [--quantize fp8]: what a model directory holds and what it
// costs to run: architecture and its extras (Qwen2's q/k/v biases, Qwen3's q/k norms), shapes, rope,
// quantization, bytes per dtype, bytes per decode step, KV per token.
#include "bestofn/model/run_inspect.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "bestofn/model/safetensors.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/exit_codes.h"
#include "util/json_file.h"

namespace bestofn {
namespace {

nlohmann::ordered_json rope_json(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  nlohmann::ordered_json j = {{"theta", c.rope_theta}, {"scaling", to_string(r.type)}};
  if (r.type != RopeScalingType::None) j["factor"] = r.factor;
  if (r.type == RopeScalingType::Llama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  return j;
}

nlohmann::ordered_json describe(const Weights& w, const std::string& dir) {
  const ModelConfig& c = w.config;
  std::map<std::string, std::uint64_t> by_dtype;
  std::uint64_t total = 0;
  for (const auto& v : w.files->all()) {
    by_dtype[std::string(dtype_name(v.info->dtype))] += v.info->nbytes;
    total += v.info->nbytes;
  }
  const bool fp8 = w.quantization != "none";
  const bool ckpt = c.quant.method != QuantMethod::None;
  nlohmann::ordered_json j;
  j["model_dir"] = dir;
  j["architecture"] = c.architecture;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_layers"] = c.n_layers;
  j["num_heads"] = c.n_heads;
  j["num_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["context_length"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope"] = rope_json(c);
  j["qkv_bias"] = c.qkv_bias;  // Qwen2
  j["qk_norm"] = c.qk_norm;    // Qwen3
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["tied_tensor"] = c.tie_word_embeddings ? nlohmann::ordered_json(w.token_embedding.name) : nlohmann::ordered_json(nullptr);
  j["bos_token_id"] = c.bos_token_id ? nlohmann::ordered_json(*c.bos_token_id) : nlohmann::ordered_json(nullptr);
  j["eos_token_ids"] = c.eos_token_ids;
  j["quantization"] = w.quantization;
  j["weight_scales"] = !fp8 ? "none" : (ckpt && c.quant.weight_strategy == ScaleStrategy::Tensor) ? "per-tensor" : "per-channel";
  j["activation_scales"] = !fp8 ? "none" : (ckpt && c.quant.activations == ActivationScheme::Static) ? "static" : "dynamic-per-token";
  j["parameters"] = w.parameter_count();
  j["tensor_count"] = w.files->tensor_count();
  j["shards"] = w.files->shards().size();
  j["bytes_by_dtype"] = by_dtype;
  j["weight_bytes"] = total;
  j["decode_bytes_per_step"] = w.decode_bytes_per_step();
  j["kv_bytes_per_token"] = w.kv_bytes_per_token();
  j["unused_tensors"] = w.unused_tensors;
  return j;
}

std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(b) / 1e9);
  else if (b >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2f MB", static_cast<double>(b) / 1e6);
  else if (b >= 1000ull) std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(b) / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

void print_text(const nlohmann::ordered_json& j) {
  auto line = [](const char* key, const std::string& value) { std::printf("%-24s %s\n", key, value.c_str()); };
  auto num = [](const nlohmann::ordered_json& v) { return v.dump(); };
  line("model", j["model_dir"].get<std::string>());
  line("architecture", j["architecture"].get<std::string>());
  line("hidden size", num(j["hidden_size"]));
  line("intermediate size", num(j["intermediate_size"]));
  line("layers", num(j["num_layers"]));
  line("heads / kv heads", num(j["num_heads"]) + " / " + num(j["num_kv_heads"]));
  line("head dim", num(j["head_dim"]));
  line("vocab", num(j["vocab_size"]));
  line("context length", num(j["context_length"]));
  std::string rope = "theta " + num(j["rope"]["theta"]) + ", scaling " + j["rope"]["scaling"].get<std::string>();
  if (j["rope"].contains("factor")) rope += " x" + num(j["rope"]["factor"]);
  line("rope", rope);
  std::string extras;
  if (j["qkv_bias"].get<bool>()) extras = "q/k/v biases";
  if (j["qk_norm"].get<bool>()) extras += (extras.empty() ? "" : ", ") + std::string("per-head q/k RMSNorm");
  line("attention extras", extras.empty() ? "none" : extras);
  line("tied embeddings", j["tie_word_embeddings"].get<bool>() ? "yes (" + j["tied_tensor"].get<std::string>() + ")" : "no");
  line("quantization", j["quantization"].get<std::string>() + " (weights " + j["weight_scales"].get<std::string>() +
                           ", activations " + j["activation_scales"].get<std::string>() + ")");
  line("parameters", num(j["parameters"]));
  line("tensors / shards", num(j["tensor_count"]) + " / " + num(j["shards"]));
  std::string dt;
  for (auto& [k, v] : j["bytes_by_dtype"].items()) dt += (dt.empty() ? "" : ", ") + k + " " + human_bytes(v.get<std::uint64_t>());
  line("bytes by dtype", dt);
  line("weight bytes", human_bytes(j["weight_bytes"].get<std::uint64_t>()));
  line("bytes per decode step", human_bytes(j["decode_bytes_per_step"].get<std::uint64_t>()));
  line("KV cache per token", human_bytes(j["kv_bytes_per_token"].get<std::uint64_t>()) + " (BF16)");
  if (!j["unused_tensors"].empty()) line("unused tensors", num(j["unused_tensors"]));
}

}  // namespace

int run_inspect(const InspectOptions& o) {
  LoadOptions lo;
  lo.quantize_fp8 = o.quantize == "fp8";
  const Weights w = load_model(o.model_dir, lo);
  const auto j = describe(w, o.model_dir);
  if (o.json)
    std::cout << json_text(j, 2) << "\n";
  else
    print_text(j);
  return kExitOk;
}

}  // namespace bestofn
