#include "cli/model_flags.h"

#include <vector>

#include "bestofn/backends/cuda_paths.h"
#include "bestofn/eval/selection.h"
#include "bestofn/generate/shard.h"
#include "bestofn/util/error.h"
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
  add_cuda_flags(sub, f.cuda, "auto");
  add_kv_cache_flag(sub, f.kv_cache);
}

namespace {
// The paths (besides auto) whose options have `feature`: "prefix-gemm or cascade".
std::string paths_with(bool CudaOptions::*feature) {
  std::vector<std::string> names;
  for (const CudaPath& p : cuda_paths())
    if (p.options.*feature) names.emplace_back(p.name);
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

// Whether `feature` is on: its switch given, or the path named has it.
bool feature_on(const CudaFlags& f, bool CudaOptions::*feature) {
  const CudaPath* path = find_cuda_path(f.path);
  return f.added.*feature || (path && path->options.*feature);
}
}  // namespace

void add_cuda_flags(CLI::App* sub, CudaFlags& f, const std::string& default_device) {
  std::vector<std::string> names = {"auto"};
  std::string paths;
  for (const CudaPath& p : cuda_paths()) {
    names.emplace_back(p.name);
    paths += "; " + std::string(p.name) + ": " + std::string(p.description);
  }
  sub->add_option("--cuda-path", f.path,
                  "CUDA engine path: auto (the fastest path that passed its tests on the device run the defaults come from, "
                  "`bestofn --version`, chosen for this run's candidates per prompt, prompts, device and weights; else reference)" +
                      paths + ". The switches below add their feature to it (docs/gpu.md)")
      ->check(CLI::IsMember(names))
      ->default_str("auto");
  for (const CudaSwitch& s : cuda_switches()) sub->add_flag(std::string(s.flag), f.added.*s.feature, std::string(s.help));
  sub->add_option("--kv-blocks", f.added.kv_blocks, "CUDA --paged-kv: blocks in the pool (0: half the free device memory)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--small-m-blocks-per-sm", f.added.small_m_blocks_per_sm,
                  "CUDA, with --small-m-linear: blocks per SM of the kernels that make their own activation codes (0: 2)")
      ->check(CLI::Range(0, 32))
      ->default_str("0");
  sub->parse_complete_callback([sub, &f, default_device] {
    refuse_cuda_flags_on_cpu(sub, default_device);
    if (sub->count("--kv-blocks") && !feature_on(f, &CudaOptions::paged_kv))
      throw CLI::ValidationError("--kv-blocks", "sizes --paged-kv's block pool: add --paged-kv (or --cuda-path " +
                                                    paths_with(&CudaOptions::paged_kv) + ", which page the KV)");
    for (const char* knob : {"--small-m-split", "--small-m-blocks-per-sm", "--small-m-pdl"})
      if (sub->count(knob) && !feature_on(f, &CudaOptions::small_m_linear))
        throw CLI::ValidationError(knob, "changes --small-m-linear's path: add --small-m-linear (or --cuda-path " +
                                             paths_with(&CudaOptions::small_m_linear) + ")");
  });
}

void refuse_cuda_flags_on_cpu(const CLI::App* sub, const std::string& default_device) {
  const CLI::Option* device = sub->get_option("--device");
  if ((device->count() ? device->as<std::string>() : default_device) != "cpu") return;
  std::vector<std::string> flags = {"--cuda-path", "--kv-blocks", "--small-m-blocks-per-sm"};
  for (const CudaSwitch& s : cuda_switches()) flags.emplace_back(s.flag);
  for (const std::string& flag : flags)
    if (sub->count(flag)) throw CLI::ValidationError(flag, "selects a path of the CUDA engine, and --device is cpu");
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

CLI::Option* add_select_flag(CLI::App* sub, std::vector<std::string>& select, const std::string& when_absent) {
  return sub
      ->add_option("--select", select,
                   "Pick one candidate per problem without the hidden tests and report selected@1 (repeatable): public (the "
                   "prompt's own examples), cluster (agreement of outputs on those inputs and variations of them), logprob (the "
                   "model's confidence), or a chain such as public,cluster,logprob (filter, group, break ties); none for none. " +
                       when_absent)
      ->check(strategy_validator(true));
}

void add_rules_flags(CLI::App* sub, RulesOptions& o) {
  sub->add_option("--rules", o.rules,
                  "Whose rules judge the samples: evalplus (EvalPlus 0.3.1's evaluator: outputs on base_input and plus_input "
                  "compared with the canonical solution's, per-input time limits from its measured times, float tolerance, "
                  "special oracles, 4 GiB; the default for humaneval+ and mbpp+) or human-eval (HumanEval's check() or MBPP's "
                  "asserts with --timeout, then the plus tests with --plus-timeout; the default for humaneval and mbpp)")
      ->check(CLI::IsMember({"evalplus", "human-eval"}));
  sub->add_option("--min-time-limit", o.min_time_limit, "--rules evalplus: the least seconds an input may take (EvalPlus 0.3.1: 1; later: 4)")
      ->check(finite_range(0.001, kMaxTimeoutSeconds))
      ->default_str("1");
  sub->add_option("--time-limit-factor", o.time_limit_factor,
                  "--rules evalplus: an input may take this many times the canonical solution's time on it (EvalPlus: 4)")
      ->check(finite_range(0.001, 1000))
      ->default_str("4");
  sub->add_option("--reference-times", o.reference_times,
                  "--rules evalplus: the file of the canonical solutions' times on this machine (measured once, then read; default "
                  "~/.cache/bestofn/reference-times/DATASET.HOST.json)")
      ->check(non_empty());
}

CLI::Validator strategy_validator(bool none_too) {
  return CLI::Validator(
      [none_too](std::string& s) {
        if (none_too && s == "none") return std::string();
        try {
          parse_strategy(s);
        } catch (const Error& e) {
          const std::string why = e.what();  // CLI11 names the option itself
          return why.starts_with("--select: ") ? why.substr(10) : why;
        }
        return std::string();
      },
      "STRATEGY");
}

CLI::Option* add_allow_processes_flag(CLI::App* sub, bool& allow, const std::string& prefix) {
  return sub->add_flag("--allow-processes", allow,
                       prefix + "Let candidates start processes (fork, subprocess, multiprocessing) while they run, for tests that "
                                "need them. Off by default: a program that tries fails, since a child could learn the tests' answers "
                                "for it (docs/security.md)");
}

}  // namespace bestofn::cli
