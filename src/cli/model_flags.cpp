#include "cli/model_flags.h"

#include "bestofn/generate/shard.h"
#include "cli/validators.h"

namespace bestofn::cli {

void add_chat_template_flags(CLI::App* sub, CLI::Option* chat, std::string& format, std::string& file) {
  auto* f = sub->add_option("--chat-format", format,
                            "Chat template: auto (the model's, from tokenizer_config.json), or a built-in one: llama3 (Llama 3 Instruct), "
                            "llama3.1 (Llama 3.1 Instruct), llama2 (Llama 2 chat)")
                ->check(CLI::IsMember({"auto", "llama3", "llama3.1", "llama2"}))
                ->default_str("auto")
                ->needs(chat);
  sub->add_option("--chat-template", file, "A Jinja chat template file (HF's format) to use instead of the model's")
      ->check(CLI::ExistingFile)
      ->needs(chat)
      ->excludes(f);
}

void add_kv_cache_flag(CLI::App* sub, std::string& value) {
  sub->add_option("--kv-cache", value,
                  "KV cache precision: auto (F32 for an F32 model on the CPU, else BF16), f32 (CPU only), bf16, or fp8 "
                  "(E4M3 with a scale per position and KV head: half the memory of bf16)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "fp8"}))
      ->default_str("auto");
}

void add_model_flags(CLI::App* sub, ModelOptions& f) {
  sub->add_option("--model", f.model, "Hugging Face model directory")->required()->check(non_empty());
  sub->add_option("--tokenizer", f.tokenizer, "tokenizer.json or its directory (default: the model directory)")->check(non_empty());
  sub->add_option("--quantize", f.quantize, "Quantize BF16/F16/F32 weights at load")->check(CLI::IsMember({"none", "fp8"}))->default_str("none");
  sub->add_flag("--quantize-lm-head", f.quantize_lm_head,
                "Quantize the lm_head to FP8 E4M3 at load (per output channel; half the bytes of a BF16 lm_head)");
  sub->add_option("--device", f.device, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}))->default_str("auto");
  sub->add_option("--threads", f.threads, "CPU threads (0 or unset: the cores this process may use, or $BESTOFN_THREADS)")->check(CLI::Range(0, 1024));
  sub->add_option("--batch", f.batch, "Candidates decoded together at most")->check(CLI::Range(1, 100000))->default_str("64");
  sub->add_option("--prefill-tokens", f.prefill_tokens,
                  "Prompt tokens prefilled together at most: the next prompts are prefilled with the one that needs it, packed into "
                  "forward passes of this many rows (a longer prompt in chunks). Larger: fewer, fuller passes (faster prefill); more "
                  "activation memory, and more prompts' KV held before their candidates run. The CPU engine's candidates do not depend on it "
                  "(on CUDA a GEMM over more rows may move the logits' low bits, as --batch can)")
      ->check(CLI::Range(1, 1 << 20))
      ->default_str(std::to_string(kDefaultPrefillTokens));
  sub->add_option("--speculate", f.speculate,
                  "Draft up to K next tokens per candidate from its prompt and its siblings' text (n-gram lookup, no draft model) "
                  "and verify them in the same step (not with --cascade-attention or --cuda-prefix-gemm); on the CPU engine the candidates are those of "
                  "--speculate 0, token for token (CUDA: docs/commands.md) (0: off)")
      ->check(CLI::Range(0, 64))
      ->default_str("0");
  sub->add_flag("--cuda-prefix-gemm", f.cuda_prefix_gemm, "CUDA: shared-prefix attention as batched GEMMs (Hydragen), for prompts with 2+ candidates in a step");
  sub->add_flag("--fused-qkv", f.fused_qkv, "CUDA: fused q/k/v and gate/up GEMMs; on FP8 also RMSNorm and SwiGLU fused with the activation quantization");
  sub->add_flag("--gemm-autotune", f.gemm_autotune,
                "CUDA: time GEMM algorithms at first use, cached in ~/.cache/bestofn/gemm_algos.json");
  sub->add_flag("--paged-kv", f.paged_kv, "CUDA: suffix KV in 16-token blocks, candidates admitted by free blocks");
  sub->add_option("--kv-blocks", f.kv_blocks, "CUDA --paged-kv: blocks in the pool (0: half the free device memory)")
      ->check(CLI::Range(0, 1 << 30))
      ->needs("--paged-kv");
  sub->add_flag("--device-sampling", f.device_sampling, "CUDA: sample on the device, only the sampled ids come back; the host checks stop strings during the next step");
  sub->add_flag("--split-attention", f.split_attention,
                "CUDA: tiled decode attention per KV head, each candidate's positions split over blocks when few candidates");
  sub->add_flag("--cuda-graphs", f.cuda_graphs, "CUDA: capture each decode step into a CUDA graph per batch shape, then replay it");
  sub->add_flag("--cascade-attention", f.cascade_attention,
                "CUDA: every prompt's shared-prefix attention in one tensor-core launch per layer (FlashInfer; head_dim 128); "
                "with --paged-kv and BF16 KV the candidates' suffixes in one paged-decode launch (FlashInfer; 4 query heads per KV "
                "head), else by a per-candidate kernel");
  sub->add_flag("--small-m-linear", f.small_m_linear,
                "CUDA: FP8 linear layers of steps with 1-8 rows as one weight-streaming kernel with the scales fused (in place of "
                "cuBLASLt's GEMM and the scale kernel); with --fused-qkv on an FP8 model, a layer in six launches (the norms, "
                "quantizations, RoPE and residual adds inside them). Not yet timed on a GPU");
  add_kv_cache_flag(sub, f.kv_cache);
  refuse_cuda_flags_on_cpu(sub, "auto");
}

void refuse_cuda_flags_on_cpu(CLI::App* sub, const std::string& default_device) {
  sub->parse_complete_callback([sub, default_device] {
    const CLI::Option* device = sub->get_option("--device");
    if ((device->count() ? device->as<std::string>() : default_device) != "cpu") return;
    for (const char* flag : {"--cuda-prefix-gemm", "--fused-qkv", "--gemm-autotune", "--paged-kv", "--kv-blocks", "--device-sampling",
                             "--split-attention", "--cuda-graphs", "--cascade-attention", "--small-m-linear",
                             "--small-m-split", "--small-m-blocks-per-sm", "--small-m-pdl"})
      if (sub->get_option_no_throw(flag) && sub->count(flag))
        throw CLI::ValidationError(flag, "selects a path of the CUDA engine, and --device is cpu");
  });
}

void add_sampling_flags(CLI::App* sub, ModelOptions& f, const std::string& stop_help) {
  sub->add_option("--max-new-tokens", f.max_new_tokens, "Tokens per candidate at most")->check(CLI::Range(1, 10000000))->default_str(std::to_string(f.max_new_tokens));
  sub->add_option("--temperature", f.temperature, "0: greedy")->check(temperature_value());
  sub->add_option("--top-p", f.top_p, "Nucleus sampling mass")->check(finite_range(0.0, 1.0));
  sub->add_option("--top-k", f.top_k, "Keep the k most probable tokens (0: off)")->check(CLI::Range(0, 100000000));
  sub->add_option("--min-p", f.min_p, "Drop tokens below min_p x the best probability")->check(finite_range(0.0, 1.0))->default_str("0");
  sub->add_option("--seed", f.seed, "Random seed")->transform(seed_value())->default_str("0");
  sub->add_option("--stop", f.stop, stop_help)->check(utf8_text());
  auto* chat = sub->add_flag("--chat", f.chat, "Wrap each prompt as a user turn in the chat template");
  // Without --chat they would change nothing: a usage error, not a silent no-op.
  add_chat_template_flags(sub, chat, f.chat_format, f.chat_template);
  sub->add_option("--system", f.system, "System message for --chat")->needs(chat)->check(utf8_text());
}

CLI::Option* add_shard_flag(CLI::App* sub, std::string& text) {
  return sub
      ->add_option("--shard", text,
                   "I/N: only shard I of N (0-based) of the (problem, candidate) pairs; pair p*n+c goes to shard (p*n+c) mod N, "
                   "with the draws of the unsharded run")
      ->check(CLI::Validator([](std::string& s) { return shard_error(s); }, "I/N", "shard"));
}

}  // namespace bestofn::cli
