// config.json parsing. Expected values are the published configs of the named models
// (meta-llama, codellama, mistralai, RedHatAI on the Hugging Face hub) and ../shared/README.md.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "bestofn/model/model_config.h"
#include "test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";

ModelConfig parse(const std::string& text) { return parse_model_config(json::parse(text), "config.json"); }

json base() { return json::parse(kLlama31_8B); }

// Expects an Error naming config.json and containing `part`.
void expect_error(const json& j, const std::string& part) {
  try {
    parse_model_config(j, "config.json");
    ADD_FAILURE() << "accepted: " << part;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

}  // namespace

TEST(ModelConfig, Llama260kFromShared) {
  const auto dir = test::require_shared("models/llama-260k");
  const ModelConfig c = load_model_config(dir);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::None);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.quant.method, QuantMethod::None);
}

TEST(ModelConfig, Llama31_8B) {
  const ModelConfig c = parse(kLlama31_8B);
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.hidden_dim, 14336);
  EXPECT_EQ(c.n_layers, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // hidden / heads
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfig, GenerationConfigReplacesEosWithTheInstructList) {
  ModelConfig c = parse(kLlama31_8B);
  apply_generation_config(c, json::parse(R"({"bos_token_id":128000,"do_sample":true,"eos_token_id":[128001,128008,128009],
                                            "temperature":0.6,"top_p":0.9})"), "generation_config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c.generation.temperature, 0.6);
  EXPECT_EQ(c.generation.top_p, 0.9);
  EXPECT_EQ(c.generation.do_sample, true);
}

TEST(ModelConfig, GenerationConfigIsCheckedLikeTheFlags) {
  // The ranges of --temperature, --top-p and --top-k, and ids inside the vocabulary; each error
  // names the file and the field.
  for (const char* bad : {R"({"temperature":"hot"})", R"({"temperature":-1})", R"({"temperature":1e9})", R"({"top_p":5})",
                          R"({"top_p":-0.1})", R"({"top_p":"0.9"})", R"({"top_k":-3})", R"({"eos_token_id":[999999999]})",
                          R"({"bos_token_id":128256})", R"({"do_sample":"yes"})", R"({"temperature":1e-30})"}) {
    ModelConfig c = parse(kLlama31_8B);
    try {
      apply_generation_config(c, json::parse(bad), "gen/generation_config.json");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const bestofn::Error& e) {
      EXPECT_NE(std::string(e.what()).find("gen/generation_config.json: "), std::string::npos) << e.what();
    }
  }
  ModelConfig c = parse(kLlama31_8B);
  apply_generation_config(c, json::parse(R"({"temperature":0,"top_p":1,"top_k":0,"temperature_unused":null})"), "g.json");
  EXPECT_EQ(c.generation.temperature, 0.0);
  // A size past the limit says the limit, not only the lower bound.
  json j = base();
  j["vocab_size"] = 1ull << 62;
  try {
    parse_model_config(j, "config.json");
    ADD_FAILURE() << "vocab_size 2^62 was accepted";
  } catch (const bestofn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("from 1 to 1000000000"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, Llama32_1B_TiedWithExplicitHeadDim) {
  json j = base();
  j.update(json::parse(R"({"hidden_size":2048,"intermediate_size":8192,"num_hidden_layers":16,"head_dim":64,
    "tie_word_embeddings":true,"eos_token_id":[128001,128008,128009],
    "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"}})"));
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.eos_token_ids.size(), 3u);
}

TEST(ModelConfig, Llama2AndCodeLlamaDefaults) {
  const ModelConfig l2 = parse(R"({"architectures":["LlamaForCausalLM"],"bos_token_id":1,"eos_token_id":2,"hidden_act":"silu",
    "hidden_size":4096,"intermediate_size":11008,"max_position_embeddings":4096,"model_type":"llama","num_attention_heads":32,
    "num_hidden_layers":32,"num_key_value_heads":32,"pretraining_tp":1,"rms_norm_eps":1e-05,"rope_scaling":null,
    "tie_word_embeddings":false,"torch_dtype":"float16","vocab_size":32000})");
  EXPECT_EQ(l2.n_kv_heads, 32);
  EXPECT_EQ(l2.rope_theta, 10000.0);  // absent: the Llama default
  EXPECT_EQ(l2.rope_scaling.type, RopeScalingType::None);
  const ModelConfig cl = parse(R"({"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,
    "max_position_embeddings":16384,"model_type":"llama","num_attention_heads":32,"num_hidden_layers":32,
    "rms_norm_eps":1e-05,"rope_theta":1000000,"vocab_size":32016})");
  EXPECT_EQ(cl.n_kv_heads, 32);  // absent: equal to the heads
  EXPECT_EQ(cl.rope_theta, 1e6);
  EXPECT_EQ(cl.vocab_size, 32016);
}

TEST(ModelConfig, Transformers5RopeParameters) {
  // transformers 5.x writes rope_parameters (with rope_theta inside) and dtype.
  json j = base();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const ModelConfig d = parse_model_config(j, "config.json");
  EXPECT_EQ(d.rope_theta, 1e6);
  EXPECT_EQ(d.rope_scaling.type, RopeScalingType::None);
}

TEST(ModelConfig, LinearRopeScaling) {
  json j = base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Linear);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
}

TEST(ModelConfig, MistralWithoutSlidingWindowIsALlama) {
  const char* v03 = R"({"architectures":["MistralForCausalLM"],"bos_token_id":1,"eos_token_id":2,"hidden_act":"silu",
    "hidden_size":4096,"intermediate_size":14336,"max_position_embeddings":32768,"model_type":"mistral",
    "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"rms_norm_eps":1e-05,
    "rope_theta":1000000.0,"sliding_window":null,"tie_word_embeddings":false,"vocab_size":32768})";
  const ModelConfig c = parse(v03);
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.n_kv_heads, 8);
  json v01 = json::parse(v03);
  v01["sliding_window"] = 4096;
  expect_error(v01, "sliding_window");
}

// The published config.json of Qwen2.5-Coder-1.5B-Instruct and of Qwen3-0.6B.
constexpr const char* kQwen25Coder = R"({"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,"bos_token_id":151643,
  "eos_token_id":151645,"hidden_act":"silu","hidden_size":1536,"initializer_range":0.02,"intermediate_size":8960,
  "max_position_embeddings":32768,"max_window_layers":21,"model_type":"qwen2","num_attention_heads":12,"num_hidden_layers":28,
  "num_key_value_heads":2,"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000.0,"sliding_window":131072,
  "tie_word_embeddings":true,"torch_dtype":"bfloat16","transformers_version":"4.43.1","use_cache":true,
  "use_sliding_window":false,"vocab_size":151936})";
constexpr const char* kQwen3 = R"({"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,
  "bos_token_id":151643,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":1024,"initializer_range":0.02,
  "intermediate_size":3072,"max_position_embeddings":40960,"max_window_layers":28,"model_type":"qwen3","num_attention_heads":16,
  "num_hidden_layers":28,"num_key_value_heads":8,"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000,
  "sliding_window":null,"tie_word_embeddings":true,"torch_dtype":"bfloat16","transformers_version":"4.51.0","use_cache":true,
  "use_sliding_window":false,"vocab_size":151936})";

TEST(ModelConfig, Qwen2HasQkvBiasesAndNoSlidingWindow) {
  const ModelConfig c = parse(kQwen25Coder);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);  // 1536 / 12
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  // sliding_window is read only under use_sliding_window (transformers' rule): true is refused.
  json j = json::parse(kQwen25Coder);
  j["use_sliding_window"] = true;
  expect_error(j, "field 'use_sliding_window' true (sliding-window attention) is not supported; supported: false");
  j["use_sliding_window"] = "no";
  expect_error(j, "field 'use_sliding_window' must be true or false");
  j = json::parse(kQwen25Coder);
  j["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error(j, "field 'layer_types' must list \"full_attention\" for every layer");
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_TRUE(parse_model_config(j, "config.json").qkv_bias);
  // Qwen2's biases are not switchable: attention_bias is not read (as in transformers).
  j["attention_bias"] = false;
  EXPECT_TRUE(parse_model_config(j, "config.json").qkv_bias);
  // The architecture from model_type alone.
  j.erase("architectures");
  EXPECT_EQ(parse_model_config(j, "config.json").architecture, "Qwen2ForCausalLM");
}

TEST(ModelConfig, Qwen3HasPerHeadQkNormAndItsOwnHeadDim) {
  const ModelConfig c = parse(kQwen3);
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);  // not 1024 / 16
  EXPECT_EQ(c.q_dim(), 2048);
  json j = json::parse(kQwen3);
  j["attention_bias"] = true;
  expect_error(j, "field 'attention_bias' true (biases on q/k/v/o_proj) is not supported for Qwen3ForCausalLM; supported: false");
  j = json::parse(kQwen3);
  j["use_sliding_window"] = true;
  expect_error(j, "field 'use_sliding_window'");
  // Round trip through to_config_json.
  const ModelConfig d = parse_model_config(to_config_json(c), "config.json");
  EXPECT_EQ(d.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(d.qk_norm);
  EXPECT_EQ(d.head_dim, 128);
}

TEST(ModelConfig, CompressedTensorsFp8LikeRedHat) {
  json j = base();
  j["quantization_config"] = json::parse(R"({"quant_method":"compressed-tensors","format":"float-quantized",
    "config_groups":{"group_0":{"targets":["Linear"],
      "weights":{"num_bits":8,"type":"float","strategy":"tensor","symmetric":true,"dynamic":false},
      "input_activations":{"num_bits":8,"type":"float","strategy":"tensor","symmetric":true,"dynamic":false}}},
    "ignore":["lm_head"]})");
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.quant.method, QuantMethod::CompressedTensors);
  EXPECT_EQ(c.quant.weight_strategy, ScaleStrategy::Tensor);
  EXPECT_EQ(c.quant.activations, ActivationScheme::Static);
  EXPECT_FALSE(c.quant.quantizes("lm_head"));
  EXPECT_TRUE(c.quant.quantizes("model.layers.0.mlp.down_proj"));

  j["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  j["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}};
  j["quantization_config"]["ignore"] = {"lm_head", "re:.*layers\\.0\\..*"};
  const ModelConfig d = parse_model_config(j, "config.json");
  EXPECT_EQ(d.quant.weight_strategy, ScaleStrategy::Channel);
  EXPECT_EQ(d.quant.activations, ActivationScheme::Dynamic);
  EXPECT_FALSE(d.quant.quantizes("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(d.quant.quantizes("model.layers.10.mlp.down_proj"));
  // A pattern std::regex cannot compile is config.json's error, at parse time.
  j["quantization_config"]["ignore"] = {"re:("};
  expect_error(j, "'ignore' pattern 're:(' is not a valid regular expression");
  j["quantization_config"]["ignore"] = {"lm_head"};

  j["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int";
  expect_error(j, "unsupported weight scheme");
}

TEST(ModelConfig, LegacyFp8) {
  json j = base();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"ignored_layers", {"lm_head"}}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.quant.method, QuantMethod::Fp8);
  EXPECT_EQ(c.quant.activations, ActivationScheme::Static);
  EXPECT_FALSE(c.quant.quantizes("lm_head"));
  j["quantization_config"]["weight_block_size"] = {128, 128};
  expect_error(j, "weight_block_size");
  j["quantization_config"] = {{"quant_method", "awq"}};
  expect_error(j, "unsupported quantization 'awq'; supported: compressed-tensors (FP8), fp8");
}

TEST(ModelConfig, ErrorsNameTheFieldAndTheSupportedChoices) {
  json j = base();
  j["architectures"] = {"GPT2LMHeadModel"};
  expect_error(j, "unsupported architecture 'GPT2LMHeadModel'; supported: LlamaForCausalLM");
  j["architectures"] = {"Qwen2MoeForCausalLM"};
  expect_error(j, std::string("unsupported architecture 'Qwen2MoeForCausalLM'; supported: ") + kSupportedArchitectures);
  // A malformed list is not read as "no list, so Llama"; a model_type of another family is refused.
  for (const json& bad : {json::array({5}), json("LlamaForCausalLM"), json::array()}) {
    j["architectures"] = bad;
    expect_error(j, "field 'architectures' must be a non-empty list of class names, got " + bad.dump());
  }
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "gpt2";
  expect_error(j, "unsupported model_type 'gpt2'; supported: llama, mistral, qwen2, qwen3");
  j["model_type"] = "llama";
  j = base();
  j.erase("hidden_size");
  expect_error(j, "field 'hidden_size' is missing");
  j = base();
  j["num_hidden_layers"] = "32";
  expect_error(j, "field 'num_hidden_layers' must be an integer");
  j = base();
  j["num_key_value_heads"] = 5;
  expect_error(j, "must be a multiple of num_key_value_heads");
  j = base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(j, "unsupported rope_scaling type 'yarn'; supported: default, linear, llama3");
  j = base();
  j["rope_scaling"].erase("low_freq_factor");
  expect_error(j, "field 'low_freq_factor' is missing");
  j = base();
  j["eos_token_id"] = 999999;
  expect_error(j, "outside the vocabulary");
  j = base();
  j["hidden_act"] = "gelu";
  expect_error(j, "hidden_act 'gelu'");
  for (const double theta : {1e-300, 0.5, 1.0}) {  // positive, but no RoPE base
    j = base();
    j["rope_theta"] = theta;
    expect_error(j, "field 'rope_theta' must be above 1");
    j.erase("rope_theta");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", theta}};
    expect_error(j, "field 'rope_theta' must be above 1");
  }
  expect_error(json::array(), "must be a JSON object");
}

TEST(ModelConfig, LoadNamesAMissingOrBrokenFile) {
  test::TempDir dir;
  EXPECT_THROW(load_model_config(dir.path()), Error);
  test::write_text(dir / "config.json", "{\"hidden_size\": 64,");
  try {
    load_model_config(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, ToConfigJsonRoundTrips) {
  const ModelConfig c = parse(kLlama31_8B);
  const ModelConfig d = parse_model_config(to_config_json(c), "config.json");
  EXPECT_EQ(d.dim, c.dim);
  EXPECT_EQ(d.n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(d.rope_scaling.type, c.rope_scaling.type);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(d.eos_token_ids, c.eos_token_ids);
}
