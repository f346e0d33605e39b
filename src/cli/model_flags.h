#pragma once
// The flags that `generate`, `eval` and `bench` share (model, device, sampling, stop strings,
// chat), declared into bestofn/generate/model_options.h's ModelOptions.
#include <CLI/CLI.hpp>
#include <string>

#include "bestofn/eval/evalplus_rules.h"
#include "bestofn/generate/model_options.h"

namespace bestofn::cli {

// --chat-format auto|llama3|llama3.1|llama2 and --chat-template FILE (one or the other), both
// needing --chat: without it they would change nothing, a usage error rather than a silent no-op.
void add_chat_template_flags(CLI::App* sub, CLI::Option* chat, std::string& format, std::string& file);

// --kv-cache auto|f32|bf16|fp8 into `value` (checked by CLI11); kv_cache_kind reads it.
void add_kv_cache_flag(CLI::App* sub, std::string& value);

// --model --tokenizer --quantize --quantize-lm-head --device --threads --batch --prefill-tokens
// --speculate, the CUDA flags (add_cuda_flags, --device's default auto) and --kv-cache.
void add_model_flags(CLI::App* sub, ModelOptions& f);
// The CUDA flags of generate, eval and bench, declared once: --cuda-path (auto or a path of
// cuda_paths()), every switch of cuda_switches() with its help, --kv-blocks and
// --small-m-blocks-per-sm, into f. Checked when sub's flags are parsed (its parse-complete
// callback, which sub must not set otherwise): refuse_cuda_flags_on_cpu; --kv-blocks needs paged
// KV (--paged-kv, or a path that pages), the small-m knobs --small-m-linear (or --cuda-path
// small-m): each a usage error rather than a silent no-op. default_device: --device's default.
void add_cuda_flags(CLI::App* sub, CudaFlags& f, const std::string& default_device);
// Any CUDA flag (--cuda-path too, even auto) with --device cpu (given, or `default_device` when
// not) changes nothing: throws CLI::ValidationError naming it.
void refuse_cuda_flags_on_cpu(const CLI::App* sub, const std::string& default_device);
// --max-new-tokens --temperature --top-p --top-k --min-p --seed --stop --chat --chat-format --system
// (the --max-new-tokens default shown is f.max_new_tokens as given)
void add_sampling_flags(CLI::App* sub, ModelOptions& f, const std::string& stop_help);

// --shard I/N (bestofn/generate/shard.h), validated at parse time: a bad value is a usage error.
CLI::Option* add_shard_flag(CLI::App* sub, std::string& text);

// --select STRATEGY (repeatable) for eval and score: selection.h's strategies, "none" for none;
// a bad one is a usage error.
CLI::Option* add_select_flag(CLI::App* sub, std::vector<std::string>& select, const std::string& when_absent);

// --rules, --min-time-limit, --time-limit-factor, --reference-times (eval, score): whose rules
// judge the samples (evalplus_rules.h).
void add_rules_flags(CLI::App* sub, RulesOptions& o);
// A --select value: selection.h's parse_strategy accepts it (and, with none_too, "none").
CLI::Validator strategy_validator(bool none_too);

// --allow-processes (SandboxLimits::new_processes): `prefix` starts its help ("--verify: " on generate).
CLI::Option* add_allow_processes_flag(CLI::App* sub, bool& allow, const std::string& prefix = "");

}  // namespace bestofn::cli
