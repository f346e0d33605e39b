#pragma once
// config.json (+ generation_config.json) of a Llama-family Hugging Face model -> ModelConfig:
// Llama, Mistral, Qwen2 (biases on q/k/v) and Qwen3 (RMSNorm of each q and k head before RoPE).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bestofn {

// The smallest temperature above 0 (greedy) the samplers take: below it, 1 / T times a logit can
// overflow a float and no distribution is left. The flags and generation_config.json check it.
inline constexpr double kMinTemperature = 1e-20;

enum class RopeScalingType { None, Linear, Llama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  double factor = 1.0;
  // llama3 only (Llama 3.1 / 3.2): frequency-dependent scaling.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

enum class QuantMethod { None, CompressedTensors, Fp8 };
enum class ScaleStrategy { Tensor, Channel };       // weight_scale: one per tensor, or per output channel
enum class ActivationScheme { Dynamic, Static };    // per-token at run time, or the checkpoint's input_scale

struct QuantConfig {
  QuantMethod method = QuantMethod::None;
  ScaleStrategy weight_strategy = ScaleStrategy::Tensor;
  ActivationScheme activations = ActivationScheme::Dynamic;
  std::vector<std::string> ignore;  // module names, or "re:<regex>" patterns, left unquantized

  // True when the linear module `module` (e.g. "model.layers.0.mlp.down_proj") is quantized.
  bool quantizes(const std::string& module) const;
};

// Defaults from generation_config.json, when present.
struct GenerationDefaults {
  std::optional<double> temperature, top_p;
  std::optional<int> top_k;
  std::optional<bool> do_sample;
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM" | "MistralForCausalLM" | "Qwen2ForCausalLM" | "Qwen3ForCausalLM"
  std::string model_type;
  bool qkv_bias = false;       // Qwen2: q_proj, k_proj and v_proj have biases (o_proj and the MLP none)
  bool qk_norm = false;        // Qwen3: q_norm / k_norm (head_dim) on each query and key head, before RoPE
  int dim = 0;                 // hidden_size
  int hidden_dim = 0;          // intermediate_size
  int n_layers = 0;            // num_hidden_layers
  int n_heads = 0;             // num_attention_heads
  int n_kv_heads = 0;          // num_key_value_heads (default n_heads)
  int head_dim = 0;            // default dim / n_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;  // config, replaced by generation_config's when it has them
  std::string torch_dtype;
  QuantConfig quant;
  GenerationDefaults generation;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

inline constexpr const char* kSupportedArchitectures =
    "LlamaForCausalLM, MistralForCausalLM (without sliding window), Qwen2ForCausalLM (use_sliding_window false), "
    "Qwen3ForCausalLM (use_sliding_window false, attention_bias false)";

// `file` names the source in errors.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& file);
void apply_generation_config(ModelConfig& c, const nlohmann::json& j, const std::string& file);
// <dir>/config.json and, when present, <dir>/generation_config.json.
ModelConfig load_model_config(const std::filesystem::path& dir);
// config.json for a ModelConfig, as a Hugging Face checkpoint has it.
nlohmann::json to_config_json(const ModelConfig& c);

std::string to_string(RopeScalingType t);
std::string to_string(QuantMethod m);

}  // namespace bestofn
