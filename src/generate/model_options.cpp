#include "bestofn/generate/model_options.h"

#include <algorithm>

#include "bestofn/backends/backends.h"
#include "bestofn/util/error.h"

namespace bestofn {

EngineOptions::Kv kv_cache_kind(const std::string& value) {
  if (value == "f32") return EngineOptions::Kv::F32;
  if (value == "bf16") return EngineOptions::Kv::BF16;
  if (value == "fp8") return EngineOptions::Kv::FP8;
  return EngineOptions::Kv::Auto;
}

const char* kv_cache_name(EngineOptions::Kv kind) {
  switch (kind) {
    case EngineOptions::Kv::F32: return "f32";
    case EngineOptions::Kv::FP8: return "fp8";
    default: return "bf16";
  }
}

EngineOptions engine_options(const ModelOptions& f) {
  EngineOptions eo;
  eo.threads = f.threads;
  eo.cuda.device_index = f.device_index;
  eo.kv = kv_cache_kind(f.kv_cache);
  return eo;
}

LoadedModel load_model_options(const ModelOptions& f) {
  LoadedModel m{Tokenizer::load(f.tokenizer.empty() ? f.model : f.tokenizer), nullptr, nullptr, {}};
  LoadOptions lo;
  lo.quantize_fp8 = f.quantize == "fp8";
  lo.quantize_lm_head_fp8 = f.quantize_lm_head;
  m.weights = std::make_shared<const Weights>(load_model(f.model, lo));
  const ModelConfig& cfg = m.weights->config;
  if (m.tokenizer.vocab_size() > cfg.vocab_size)
    throw Error(m.tokenizer.path(), "tokenizer has " + std::to_string(m.tokenizer.vocab_size()) + " ids, more than the model's vocab_size " +
                                        std::to_string(cfg.vocab_size));
  if (f.chat) m.chat_template = chat_template(m.tokenizer, f.chat_format, f.chat_template);
  return m;
}

CudaShape cuda_shape(const std::vector<int>& candidates, int longest_prompt, const ModelOptions& f, int engines) {
  CudaShape s;
  const long long E = std::max(engines, 1);
  long long total = 0, prompts = 0;
  for (int c : candidates)
    if (c > 0) total += (c + E - 1) / E, ++prompts;  // one engine's share of the prompt's candidates
  const long long batch = std::clamp<long long>(std::min<long long>(f.batch, total), 1, 1 << 30);
  s.prompts = static_cast<int>(std::max(prompts, 1LL));
  // Candidates of one prompt in a step: a prompt's share on average, at most a batch; and the
  // prompts that fill the batch with that many each.
  s.candidates_per_prompt = static_cast<int>(std::clamp<long long>((total + s.prompts - 1) / s.prompts, 1, batch));
  s.prompts_per_step = static_cast<int>(std::clamp<long long>((batch + s.candidates_per_prompt - 1) / s.candidates_per_prompt, 1, s.prompts));
  s.longest_prompt = longest_prompt;
  s.speculate = f.speculate;
  return s;
}

void start_engine(LoadedModel& m, const ModelOptions& f, const CudaShape& shape) {
  m.engine = make_engine(m.weights, f.device, engine_options(f), f.cuda, shape);
}

EngineOptions started_options(const ModelOptions& f, const Engine& engine) {
  EngineOptions eo = engine_options(f);
  if (const std::optional<CudaOptions> cuda = engine.describe().cuda) eo.cuda = *cuda;
  return eo;
}

SamplingParams sampling_params(const ModelOptions& f, const ModelConfig& c) {
  SamplingParams s;
  s.temperature = f.temperature >= 0 ? f.temperature : static_cast<float>(c.generation.temperature.value_or(1.0));
  s.top_p = f.top_p >= 0 ? f.top_p : static_cast<float>(c.generation.top_p.value_or(1.0));
  s.top_k = f.top_k >= 0 ? f.top_k : c.generation.top_k.value_or(0);
  s.min_p = f.min_p;
  s.seed = f.seed;
  if (c.generation.do_sample == false && f.temperature < 0) s.temperature = 0.0f;
  return s;
}

GenerationOptions generation_options(const ModelOptions& f, const LoadedModel& m) {
  GenerationOptions go;
  go.sampling = sampling_params(f, m.weights->config);
  go.max_new_tokens = f.max_new_tokens;
  go.batch = f.batch;
  go.prefill_tokens = f.prefill_tokens;
  go.speculate = f.speculate;
  // The host waits on the device's samples: check text meanwhile.
  if (m.engine)
    if (const std::optional<CudaOptions> cuda = m.engine->describe().cuda) go.overlap_stop_checks = cuda->device_sampling;
  go.stop = f.stop;
  go.eos_ids = m.weights->config.eos_token_ids;
  if (go.eos_ids.empty() && m.tokenizer.eos_id()) go.eos_ids.push_back(*m.tokenizer.eos_id());
  return go;
}

std::vector<int> encode_prompt(const ModelOptions& f, const LoadedModel& m, const std::string& text, const std::string& where) {
  std::vector<int> ids;
  try {
    ids = f.chat ? encode_chat(m.tokenizer, m.chat_template, f.system, text)
                 : m.tokenizer.encode(text, /*add_bos=*/true);  // what HF's tokenizer adds by default, possibly nothing
  } catch (const Error& e) {
    throw Error(where, e.what());
  }
  const int context = m.weights->config.max_position_embeddings;
  if (static_cast<long long>(ids.size()) >= context)
    throw Error(where, "has " + std::to_string(ids.size()) + " tokens; the model's context is " + std::to_string(context) +
                           " and leaves no room to generate");
  return ids;
}

}  // namespace bestofn
