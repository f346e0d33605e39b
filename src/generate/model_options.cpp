#include "bestofn/generate/model_options.h"

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
  eo.cuda.prefix_gemm = f.cuda_prefix_gemm;
  eo.cuda.fused_qkv = f.fused_qkv;
  eo.cuda.gemm_autotune = f.gemm_autotune;
  eo.cuda.paged_kv = f.paged_kv;
  eo.cuda.kv_blocks = f.kv_blocks;
  eo.cuda.device_sampling = f.device_sampling;
  eo.cuda.split_attention = f.split_attention;
  eo.cuda.graphs = f.cuda_graphs;
  eo.cuda.cascade_attention = f.cascade_attention;
  eo.cuda.small_m_linear = f.small_m_linear;
  eo.cuda.small_m_split = f.small_m_split;
  eo.cuda.small_m_blocks_per_sm = f.small_m_blocks_per_sm;
  eo.cuda.small_m_pdl = f.small_m_pdl;
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
  m.engine = make_engine(m.weights, f.device, engine_options(f));
  return m;
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
  go.overlap_stop_checks = f.device_sampling;  // the host waits on the device's samples: check text meanwhile
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
