#pragma once
// The model settings that `generate`, `eval` and `bench` share (model, device, sampling, stop
// strings, chat; src/cli declares them as flags), and what they turn into: a tokenizer, weights,
// an engine, prompt ids and GenerationOptions.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bestofn/backends/cuda_paths.h"
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
  bool quantize_lm_head = false;  // --quantize-lm-head
  CudaFlags cuda;  // --cuda-path and the CUDA switches (bestofn/backends/cuda_paths.h)
  std::string kv_cache = "auto";  // --kv-cache
};

// The engine's KV cache kind of a --kv-cache value (auto, f32, bf16, fp8).
EngineOptions::Kv kv_cache_kind(const std::string& value);
// The --kv-cache name of a resolved kind: "f32", "bf16" or "fp8".
const char* kv_cache_name(EngineOptions::Kv kind);

struct LoadedModel {
  Tokenizer tokenizer;
  std::shared_ptr<const Weights> weights;
  std::unique_ptr<Engine> engine;  // null until start_engine
  ChatTemplate chat_template;  // with --chat
};

// The engine's settings among the options: threads, the CUDA device, the KV cache (the CUDA path
// is chosen when the engine starts: start_engine).
EngineOptions engine_options(const ModelOptions& f);

// Loads the tokenizer and weights and checks they fit together; the engine is started once the
// run's shape is known (start_engine).
LoadedModel load_model_options(const ModelOptions& f);

// The shape of a run whose prompt i gets candidates[i] candidates (its longest prompt in tokens,
// 0 when not known), as each of `engines` engines sees it (generate_data_parallel deals each
// prompt's candidates to them in turn), with --batch and --speculate from f: what the CUDA
// defaults choose a path by (bestofn/backends/cuda_paths.h).
CudaShape cuda_shape(const std::vector<int>& candidates, int longest_prompt, const ModelOptions& f, int engines = 1);

// Starts m.engine on f.device: on CUDA with the path f.cuda asks for (named, or the defaults'
// choice for `shape`), logged with the reason (-v).
void start_engine(LoadedModel& m, const ModelOptions& f, const CudaShape& shape);

// The options m.engine started with, as one more engine of the run takes them (eval --devices):
// engine_options(f) and, on CUDA, the path it runs.
EngineOptions started_options(const ModelOptions& f, const Engine& engine);

// Sampling parameters: set options win, unset ones come from generation_config.json, else
// temperature 1 and no truncation.
SamplingParams sampling_params(const ModelOptions& f, const ModelConfig& c);

// GenerationOptions from the options (EOS ids from the config, else the tokenizer's); the stop
// checks overlap the next step where m.engine (when started) samples on the device.
GenerationOptions generation_options(const ModelOptions& f, const LoadedModel& m);

// A prompt's ids: the chat template around it with --chat, else BOS (when the model has one)
// and the text. `where` names the prompt in an error, as when it leaves no room in the context.
std::vector<int> encode_prompt(const ModelOptions& f, const LoadedModel& m, const std::string& text, const std::string& where);

}  // namespace bestofn
