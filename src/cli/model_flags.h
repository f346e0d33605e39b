#pragma once
// The flags that `generate` and `eval` share (model, device, sampling, stop strings, chat), and
// what they turn into: a tokenizer, weights, an engine, prompt ids and GenerationOptions.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/engine/engine.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/model/weights.h"

namespace bestofn::cli {

struct ModelFlags {
  std::string model, tokenizer, device = "auto", quantize = "none", chat_format = "auto", system;
  int max_new_tokens = 256, top_k = -1, threads = 0, batch = 64;
  float temperature = -1.0f, top_p = -1.0f, min_p = 0.0f;  // < 0: from generation_config.json
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  bool chat = false;
  int device_index = 0;  // the CUDA engine's device (eval --devices: the first of them)
  // CUDA part-2 paths (EngineOptions)
  bool cuda_prefix_gemm = false, fused_qkv = false, gemm_autotune = false, paged_kv = false, device_sampling = false, split_attention = false, quantize_lm_head = false,
       cuda_graphs = false;
  int kv_blocks = 0;
  std::string kv_cache = "auto";  // --kv-cache
};

// --kv-cache auto|f32|bf16|fp8 into `value` (checked by CLI11); kv_cache_kind reads it.
void add_kv_cache_flag(CLI::App* sub, std::string& value);
EngineOptions::Kv kv_cache_kind(const std::string& value);
// The --kv-cache name of a resolved kind: "f32", "bf16" or "fp8".
const char* kv_cache_name(EngineOptions::Kv kind);

// --model --tokenizer --quantize --device --threads --batch --cuda-prefix-gemm --fused-qkv
// --gemm-autotune --paged-kv --kv-blocks --device-sampling --split-attention --cuda-graphs --kv-cache
void add_model_flags(CLI::App* sub, ModelFlags& f);
// The CUDA engine's flags (--cuda-prefix-gemm ... --cuda-graphs, --kv-blocks) with --device cpu
// (given, or `default_device` when not) change nothing: a usage error, checked when sub's flags
// are parsed (its parse-complete callback, which sub must not set otherwise).
void refuse_cuda_flags_on_cpu(CLI::App* sub, const std::string& default_device);
// --max-new-tokens --temperature --top-p --top-k --min-p --seed --stop --chat --chat-format --system
// (the --max-new-tokens default shown is f.max_new_tokens as given)
void add_sampling_flags(CLI::App* sub, ModelFlags& f, const std::string& stop_help);

struct LoadedModel {
  Tokenizer tokenizer;
  std::shared_ptr<const Weights> weights;
  std::unique_ptr<Engine> engine;
  ChatFormat chat_format = ChatFormat::Llama3;
};

// Loads the tokenizer and weights, checks they fit together, and starts the engine.
LoadedModel load_model_flags(const ModelFlags& f);

// Sampling parameters: set flags win, unset ones come from generation_config.json, else
// temperature 1 and no truncation.
SamplingParams sampling_params(const ModelFlags& f, const ModelConfig& c);

// GenerationOptions from the flags (EOS ids from the config, else the tokenizer's).
GenerationOptions generation_options(const ModelFlags& f, const LoadedModel& m);

// A prompt's ids: the chat template around it with --chat, else BOS (when the model has one)
// and the text. `where` names the prompt in an error, as when it leaves no room in the context.
std::vector<int> encode_prompt(const ModelFlags& f, const LoadedModel& m, const std::string& text, const std::string& where);

}  // namespace bestofn::cli
