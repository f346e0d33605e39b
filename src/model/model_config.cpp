#include "bestofn/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "bestofn/util/error.h"
#include "util/json_file.h"

namespace bestofn {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Reader {
  const json& j;
  const std::string& file;

  Error fail(const std::string& key, const std::string& what) const { return Error(file, "field '" + key + "' " + what); }

  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }

  int get_int(const std::string& key, std::optional<int> fallback = std::nullopt, int min = 1) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw fail(key, "is missing");
    }
    const json& v = j[key];
    double d = v.is_number() ? v.get<double>() : NAN;
    if (!v.is_number() || d != std::floor(d) || d < min || d > 1e9)
      throw fail(key, "must be an integer from " + std::to_string(min) + " to 1000000000, got " + v.dump());
    return static_cast<int>(d);
  }

  double get_float(const std::string& key, std::optional<double> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw fail(key, "is missing");
    }
    const json& v = j[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
      throw fail(key, "must be a positive number, got " + v.dump());
    return v.get<double>();
  }

  bool get_bool(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) throw fail(key, "must be true or false, got " + j[key].dump());
    return j[key].get<bool>();
  }

  std::string get_string(const std::string& key, const std::string& fallback = "") const {
    if (!has(key)) return fallback;
    if (!j[key].is_string()) throw fail(key, "must be a string, got " + j[key].dump());
    return j[key].get<std::string>();
  }

  // An id, or a list of ids.
  std::vector<int> get_ids(const std::string& key) const {
    if (!has(key)) return {};
    const json& v = j[key];
    std::vector<int> ids;
    auto one = [&](const json& x) {
      if (!x.is_number_integer() || x.get<long long>() < 0) throw fail(key, "must be a token id or a list of ids, got " + v.dump());
      ids.push_back(x.get<int>());
    };
    if (v.is_array())
      for (const auto& x : v) one(x);
    else
      one(v);
    return ids;
  }
};

// BOS and EOS ids inside the vocabulary (from config.json or generation_config.json).
void check_special_ids(const ModelConfig& c, const std::string& file) {
  for (int id : c.eos_token_ids)
    if (id >= c.vocab_size) throw Error(file, "eos_token_id " + std::to_string(id) + " is outside the vocabulary");
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size)
    throw Error(file, "bos_token_id " + std::to_string(*c.bos_token_id) + " is outside the vocabulary");
}

// `rope_scaling`, or transformers 5's `rope_parameters` (which also holds rope_theta).
RopeScaling parse_rope_scaling(const json& j, const std::string& file) {
  RopeScaling r;
  const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling" : "rope_parameters";
  if (!j.contains(key) || j[key].is_null()) return r;
  const json& s = j[key];
  if (!s.is_object()) throw Error(file, std::string("field '") + key + "' must be an object or null, got " + s.dump());
  Reader rd{s, file};
  std::string type = rd.get_string("rope_type", rd.get_string("type"));
  if (type.empty() || type == "default") return r;
  if (type == "linear") {
    r.type = RopeScalingType::Linear;
    r.factor = rd.get_float("factor");
  } else if (type == "llama3") {
    r.type = RopeScalingType::Llama3;
    r.factor = rd.get_float("factor");
    r.low_freq_factor = rd.get_float("low_freq_factor");
    r.high_freq_factor = rd.get_float("high_freq_factor");
    r.original_max_position_embeddings = rd.get_int("original_max_position_embeddings");
    if (r.high_freq_factor <= r.low_freq_factor)
      throw Error(file, "rope_scaling: high_freq_factor must be greater than low_freq_factor");
  } else {
    throw Error(file, "unsupported rope_scaling type '" + type + "'; supported: default, linear, llama3");
  }
  return r;
}

QuantConfig parse_compressed_tensors(const json& q, const std::string& file) {
  QuantConfig c;
  c.method = QuantMethod::CompressedTensors;
  Reader rd{q, file};
  const std::string format = rd.get_string("format", "float-quantized");
  if (format != "float-quantized" && format != "naive-quantized")
    throw Error(file, "unsupported compressed-tensors format '" + format + "'; supported: float-quantized (FP8 E4M3)");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    throw Error(file, "compressed-tensors quantization_config has no config_groups");
  if (q["config_groups"].size() != 1)
    throw Error(file, "compressed-tensors: only one config group is supported, found " + std::to_string(q["config_groups"].size()));
  const auto first_group = q["config_groups"].begin();
  const json& g = first_group.value();
  const std::string scheme = "; supported: FP8 E4M3 weights (num_bits 8, type float, strategy tensor|channel, symmetric)";
  if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object())
    throw Error(file, "compressed-tensors: config group has no 'weights'" + scheme);
  const json& w = g["weights"];
  Reader wr{w, file};
  const std::string strategy = wr.get_string("strategy");
  if (wr.get_int("num_bits") != 8 || wr.get_string("type") != "float" || !wr.get_bool("symmetric", true) ||
      (strategy != "tensor" && strategy != "channel"))
    throw Error(file, "compressed-tensors: unsupported weight scheme " + w.dump() + scheme);
  c.weight_strategy = strategy == "tensor" ? ScaleStrategy::Tensor : ScaleStrategy::Channel;
  if (g.contains("targets") && g["targets"].is_array()) {
    bool linear = false;
    for (const auto& t : g["targets"]) linear |= t == "Linear";
    if (!linear) throw Error(file, "compressed-tensors: config group must target \"Linear\", got " + g["targets"].dump());
  }
  if (g.contains("input_activations") && g["input_activations"].is_object()) {
    const json& a = g["input_activations"];
    Reader ar{a, file};
    if (ar.get_int("num_bits") != 8 || ar.get_string("type") != "float")
      throw Error(file, "compressed-tensors: unsupported input_activations " + a.dump() + "; supported: FP8 E4M3");
    const bool dynamic = ar.get_bool("dynamic", false);
    if (!dynamic && ar.get_string("strategy", "tensor") != "tensor")
      throw Error(file, "compressed-tensors: static input_activations must use strategy \"tensor\", got " + a.dump());
    c.activations = dynamic ? ActivationScheme::Dynamic : ActivationScheme::Static;
  }
  if (q.contains("ignore") && !q["ignore"].is_null()) {
    if (!q["ignore"].is_array()) throw Error(file, "compressed-tensors: 'ignore' must be a list of module names");
    for (const auto& m : q["ignore"]) {
      if (!m.is_string()) throw Error(file, "compressed-tensors: 'ignore' must be a list of module names");
      c.ignore.push_back(m.get<std::string>());
      if (c.ignore.back().starts_with("re:")) {
        try {
          (void)std::regex(c.ignore.back().substr(3));
        } catch (const std::regex_error& e) {
          throw Error(file, "compressed-tensors: 'ignore' pattern '" + c.ignore.back() + "' is not a valid regular expression (" + e.what() + ")");
        }
      }
    }
  }
  return c;
}

QuantConfig parse_legacy_fp8(const json& q, const std::string& file) {
  QuantConfig c;
  c.method = QuantMethod::Fp8;
  c.weight_strategy = ScaleStrategy::Tensor;
  Reader rd{q, file};
  if (rd.has("weight_block_size"))
    throw Error(file, "fp8 quantization with weight_block_size (block-wise scales) is not supported; supported: per-tensor fp8");
  const std::string scheme = rd.get_string("activation_scheme", "dynamic");
  if (scheme != "static" && scheme != "dynamic")
    throw Error(file, "fp8: activation_scheme must be \"static\" or \"dynamic\", got \"" + scheme + "\"");
  c.activations = scheme == "static" ? ActivationScheme::Static : ActivationScheme::Dynamic;
  for (const char* key : {"ignored_layers", "modules_to_not_convert"})
    if (q.contains(key) && q[key].is_array())
      for (const auto& m : q[key])
        if (m.is_string()) c.ignore.push_back(m.get<std::string>());
  return c;
}

QuantConfig parse_quant(const json& j, const std::string& file) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return {};
  const json& q = j["quantization_config"];
  if (!q.is_object()) throw Error(file, "field 'quantization_config' must be an object");
  const std::string method = Reader{q, file}.get_string("quant_method");
  if (method == "compressed-tensors") return parse_compressed_tensors(q, file);
  if (method == "fp8") return parse_legacy_fp8(q, file);
  throw Error(file, "unsupported quantization '" + method + "'; supported: compressed-tensors (FP8), fp8");
}

// The architectures this engine runs, and what each adds to the Llama forward.
struct Family {
  const char* model_type;
  const char* architecture;
  bool qkv_bias;  // biases on q_proj, k_proj, v_proj (Qwen2's are always there: its config has no switch)
  bool qk_norm;   // RMSNorm of each query and key head before RoPE (Qwen3)
};
constexpr Family kFamilies[] = {{"llama", "LlamaForCausalLM", false, false},
                                {"mistral", "MistralForCausalLM", false, false},
                                {"qwen2", "Qwen2ForCausalLM", true, false},
                                {"qwen3", "Qwen3ForCausalLM", false, true}};

std::string model_types() {
  std::string s;
  for (const Family& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s;
}

// What transformers reads beyond the Llama forward: biases, sliding windows. Each variant this
// engine does not run is refused naming its field.
void check_attention_variant(const ModelConfig& c, const Reader& rd) {
  const std::string& file = rd.file;
  if (c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM") {
    if (rd.get_bool("attention_bias", false) || rd.get_bool("mlp_bias", false))
      throw Error(file, "attention_bias / mlp_bias are not supported (Llama has no biases)");
    if (c.architecture == "MistralForCausalLM" && rd.has("sliding_window") && rd.get_int("sliding_window") < c.max_position_embeddings)
      throw Error(file, "sliding_window attention (" + std::to_string(rd.get_int("sliding_window")) +
                            ") is not supported; supported: " + kSupportedArchitectures);
    return;
  }
  // Qwen2 / Qwen3: transformers reads sliding_window only where use_sliding_window (and then
  // layer_types) says so; Qwen2 ignores attention_bias (its q/k/v always have biases), Qwen3 puts
  // biases on q, k, v and o with it.
  if (rd.get_bool("use_sliding_window", false))
    throw rd.fail("use_sliding_window", "true (sliding-window attention) is not supported; supported: false");
  if (rd.has("layer_types")) {
    const json& t = rd.j["layer_types"];
    if (!t.is_array() || !std::all_of(t.begin(), t.end(), [](const json& x) { return x == "full_attention"; }))
      throw rd.fail("layer_types", "must list \"full_attention\" for every layer (sliding-window attention is not supported), got " +
                                       t.dump());
  }
  if (c.architecture == "Qwen3ForCausalLM" && rd.get_bool("attention_bias", false))
    throw rd.fail("attention_bias", "true (biases on q/k/v/o_proj) is not supported for Qwen3ForCausalLM; supported: false");
}

}  // namespace

bool QuantConfig::quantizes(const std::string& module) const {
  if (method == QuantMethod::None) return false;
  for (const auto& pattern : ignore) {
    if (pattern.rfind("re:", 0) == 0) {
      try {
        if (std::regex_match(module, std::regex(pattern.substr(3)))) return false;
      } catch (const std::regex_error&) {
        throw Error("quantization_config: bad ignore pattern '" + pattern + "'");
      }
    } else if (pattern == module) {
      return false;
    }
  }
  return true;
}

ModelConfig parse_model_config(const json& j, const std::string& file) {
  if (!j.is_object()) throw Error(file, "must be a JSON object");
  Reader rd{j, file};
  ModelConfig c;
  c.model_type = rd.get_string("model_type");
  const Family* by_type = nullptr;
  for (const Family& f : kFamilies) by_type = c.model_type == f.model_type ? &f : by_type;
  if (!c.model_type.empty() && !by_type) throw Error(file, "unsupported model_type '" + c.model_type + "'; supported: " + model_types());
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_string(); }))
      throw Error(file, "field 'architectures' must be a non-empty list of class names, got " + a.dump());
    c.architecture = a[0].get<std::string>();
  } else if (by_type) {
    c.architecture = by_type->architecture;
  }
  const Family* family = nullptr;
  for (const Family& f : kFamilies) family = c.architecture == f.architecture ? &f : family;
  if (!family)
    throw Error(file, "unsupported architecture '" + (c.architecture.empty() ? c.model_type : c.architecture) +
                          "'; supported: " + kSupportedArchitectures);
  c.qkv_bias = family->qkv_bias;
  c.qk_norm = family->qk_norm;
  c.dim = rd.get_int("hidden_size");
  c.hidden_dim = rd.get_int("intermediate_size");
  c.n_layers = rd.get_int("num_hidden_layers");
  c.n_heads = rd.get_int("num_attention_heads");
  c.n_kv_heads = rd.get_int("num_key_value_heads", c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    throw Error(file, "num_attention_heads (" + std::to_string(c.n_heads) + ") must be a multiple of num_key_value_heads (" +
                          std::to_string(c.n_kv_heads) + ")");
  if (!rd.has("head_dim") && c.dim % c.n_heads != 0)
    throw Error(file, "hidden_size must be a multiple of num_attention_heads when head_dim is absent");
  c.head_dim = rd.get_int("head_dim", c.dim / c.n_heads);
  if (c.head_dim % 2 != 0) throw Error(file, "head_dim must be even for RoPE, got " + std::to_string(c.head_dim));
  c.vocab_size = rd.get_int("vocab_size");
  c.max_position_embeddings = rd.get_int("max_position_embeddings", 2048);
  c.rms_norm_eps = rd.get_float("rms_norm_eps", 1e-6);
  // The RoPE base: frequencies theta^(-2i/d) are 1 at i = 0 and fall from there only for a base
  // above 1; a base as small as 1e-300 gave infinite frequencies, reported as non-finite logits.
  auto rope_base = [](const Reader& r) {
    const double theta = r.get_float("rope_theta", 10000.0);
    if (theta <= 1.0) throw r.fail("rope_theta", "must be above 1 (the RoPE base, e.g. 10000 or 500000), got " + r.j["rope_theta"].dump());
    return theta;
  };
  c.rope_theta = rope_base(rd);
  if (!rd.has("rope_theta") && j.contains("rope_parameters") && j["rope_parameters"].is_object())
    c.rope_theta = rope_base(Reader{j["rope_parameters"], file});
  c.rope_scaling = parse_rope_scaling(j, file);
  c.tie_word_embeddings = rd.get_bool("tie_word_embeddings", false);
  const auto bos = rd.get_ids("bos_token_id");
  if (!bos.empty()) c.bos_token_id = bos.front();
  c.eos_token_ids = rd.get_ids("eos_token_id");
  check_special_ids(c, file);
  c.torch_dtype = rd.get_string("torch_dtype", rd.get_string("dtype"));  // transformers 5 says "dtype"
  const std::string act = rd.get_string("hidden_act", "silu");
  if (act != "silu") throw Error(file, "hidden_act '" + act + "' is not supported; supported: silu");
  check_attention_variant(c, rd);
  c.quant = parse_quant(j, file);
  return c;
}

void apply_generation_config(ModelConfig& c, const json& j, const std::string& file) {
  if (!j.is_object()) throw Error(file, "must be a JSON object");
  Reader rd{j, file};
  if (auto eos = rd.get_ids("eos_token_id"); !eos.empty()) c.eos_token_ids = eos;
  if (auto bos = rd.get_ids("bos_token_id"); !bos.empty()) c.bos_token_id = bos.front();
  check_special_ids(c, file);
  // The ranges the command-line flags take (--temperature, --top-p, --top-k).
  auto number_in = [&](const char* key, double lo, double hi, const char* range) {
    const json& v = j[key];
    const double d = v.is_number() ? v.get<double>() : NAN;
    if (!std::isfinite(d) || d < lo || d > hi)
      throw rd.fail(key, std::string("must be a number in ") + range + ", got " + v.dump());
    return d;
  };
  if (rd.has("temperature")) {
    c.generation.temperature = number_in("temperature", 0.0, 100.0, "[0, 100]");
    if (*c.generation.temperature > 0 && *c.generation.temperature < kMinTemperature)
      throw rd.fail("temperature", "must be 0 (greedy) or from 1e-20 to 100, got " + j["temperature"].dump());
  }
  if (rd.has("top_p")) c.generation.top_p = number_in("top_p", 0.0, 1.0, "[0, 1]");
  if (rd.has("top_k")) c.generation.top_k = rd.get_int("top_k", std::nullopt, 0);
  if (rd.has("do_sample")) c.generation.do_sample = rd.get_bool("do_sample", false);
}

ModelConfig load_model_config(const fs::path& dir) {
  const fs::path cfg = dir / "config.json";
  std::error_code ec;
  if (!fs::exists(cfg, ec)) throw Error(cfg.string(), "missing (is this a Hugging Face model directory?)");
  ModelConfig c = parse_model_config(read_json_file(cfg), cfg.string());
  const fs::path gen = dir / "generation_config.json";
  if (fs::exists(gen, ec)) apply_generation_config(c, read_json_file(gen), gen.string());
  return c;
}

std::string to_string(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::Linear: return "linear";
    case RopeScalingType::Llama3: return "llama3";
    default: return "none";
  }
}

std::string to_string(QuantMethod m) {
  switch (m) {
    case QuantMethod::CompressedTensors: return "fp8-compressed-tensors";
    case QuantMethod::Fp8: return "fp8";
    default: return "none";
  }
}

json to_config_json(const ModelConfig& c) {
  json j = {
      {"architectures", {c.architecture.empty() ? "LlamaForCausalLM" : c.architecture}},
      {"model_type", c.model_type.empty() ? "llama" : c.model_type},
      {"hidden_size", c.dim},
      {"intermediate_size", c.hidden_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", c.torch_dtype.empty() ? "bfloat16" : c.torch_dtype},
  };
  if (c.rope_scaling.type == RopeScalingType::Linear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  } else if (c.rope_scaling.type == RopeScalingType::Llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  return j;
}

}  // namespace bestofn
