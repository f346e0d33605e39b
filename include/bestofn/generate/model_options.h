#pragma once
// The model settings that `generate`, `eval` and `bench` share (model, device, sampling, stop
// strings, chat; src/cli declares them as flags), and what they turn into: a tokenizer, weights,
// an engine, prompt ids and GenerationOptions.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/tokenizer/tokenizer.h"

namespace bestofn {

struct ModelOptions {
  std::string model, tokenizer, device = "auto", quantize = "none", chat_format = "auto", system;
  std::string chat_template;  // --chat-template: a Jinja file (else chat_format chooses)
  int max_new_tokens = 256, top_k = -1, threads = 0, batch = 64;
  int prefill_tokens = kDefaultPrefillTokens;  // --prefill-tokens (GenerationOptions::prefill_tokens)
  int speculate = 0;  // --speculate (GenerationOptions::speculate)
  float temperature = -1.0f, top_p = -1.0f, min_p = 0.0f;  // < 0: from generation_config.json
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  bool chat = false;
  int device_index = 0;  // the CUDA engine's device (eval --devices: the first of them)
  // CUDA part-2 paths (EngineOptions)
  bool cuda_prefix_gemm = false, fused_qkv = false, gemm_autotune = false, paged_kv = false, device_sampling = false, split_attention = false, quantize_lm_head = false,
       cuda_graphs = false, cascade_attention = false, small_m_linear = false, small_m_split = false, small_m_pdl = false;
  int kv_blocks = 0, small_m_blocks_per_sm = 0;
  std::string kv_cache = "auto";  // --kv-cache
};

// The engine's KV cache kind of a --kv-cache value (auto, f32, bf16, fp8).
EngineOptions::Kv kv_cache_kind(const std::string& value);
// The --kv-cache name of a resolved kind: "f32", "bf16" or "fp8".
const char* kv_cache_name(EngineOptions::Kv kind);

struct LoadedModel {
  Tokenizer tokenizer;
  std::shared_ptr<const Weights> weights;
  std::unique_ptr<Engine> engine;
  ChatTemplate chat_template;  // with --chat
};

// The engine's settings among the options: threads, the CUDA device and paths, the KV cache.
EngineOptions engine_options(const ModelOptions& f);

// Loads the tokenizer and weights, checks they fit together, and starts the engine.
LoadedModel load_model_options(const ModelOptions& f);

// Sampling parameters: set options win, unset ones come from generation_config.json, else
// temperature 1 and no truncation.
SamplingParams sampling_params(const ModelOptions& f, const ModelConfig& c);

// GenerationOptions from the options (EOS ids from the config, else the tokenizer's).
GenerationOptions generation_options(const ModelOptions& f, const LoadedModel& m);

// A prompt's ids: the chat template around it with --chat, else BOS (when the model has one)
// and the text. `where` names the prompt in an error, as when it leaves no room in the context.
std::vector<int> encode_prompt(const ModelOptions& f, const LoadedModel& m, const std::string& text, const std::string& where);

}  // namespace bestofn
