// bestofn make-synthetic's flags and usage checks; the model is written by run_make_synthetic
// (bestofn/model/run_make_synthetic.h).
#include <memory>

#include "bestofn/model/run_make_synthetic.h"
#include "cli/commands.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_make_synthetic(CLI::App& app) {
  auto opt = std::make_shared<SyntheticOptions>();
  auto shard = std::make_shared<std::string>("5GB");
  auto json_out = std::make_shared<bool>(false);
  auto tokenizer = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("make-synthetic", "Write a model directory with seeded random weights");
  sub->footer(
      "Presets: tiny (3 layers, GQA, llama3 rope scaling), llama-3.1-8b (the exact 8B shapes),\n"
      "bench-100m (~100M parameters, for CPU benchmarks); or give the path of a config.json.\n"
      "FP8 is written in the compressed-tensors layout: F8_E4M3 weights with F32 weight_scale;\n"
      "norms, embeddings and lm_head stay BF16. The same --seed always gives the same bytes.\n"
      "Examples:\n"
      "  bestofn make-synthetic --shape tiny --dtype f32 --seed 1 --out /tmp/tiny\n"
      "  bestofn make-synthetic --shape llama-3.1-8b --dtype fp8 --seed 0 --out /data/synth-8b \\\n"
      "      --tokenizer ~/models/Llama-3.1-8B/tokenizer.json");
  sub->add_option("--shape", opt->shape, "Preset name or path of a config.json")->required()->check(synthetic_shape());
  sub->add_option("--dtype", opt->dtype, "Weight dtype")->check(CLI::IsMember({"f32", "f16", "bf16", "fp8"}))->default_str("bf16");
  sub->add_option("--fp8-scheme", opt->fp8_scheme,
                  "fp8: 'channel' (per-channel weight scales, dynamic activations) or 'tensor' (per-tensor scales, static input_scale)")
      ->check(CLI::IsMember({"channel", "tensor"}))
      ->default_str("channel");
  sub->parse_complete_callback([sub] {
    const CLI::Option* dtype = sub->get_option("--dtype");
    if (sub->count("--fp8-scheme") && (!dtype->count() || dtype->as<std::string>() != "fp8"))
      throw CLI::ValidationError("--fp8-scheme", "needs --dtype fp8");
  });
  sub->add_option("--seed", opt->seed, "Random seed")->transform(seed_value())->default_str("0");
  sub->add_option("--out", opt->out, "Output directory (must not exist, or be empty)")->required()->check(non_empty());
  sub->add_option("--tokenizer", *tokenizer, "tokenizer.json (or its directory) to copy into the model; small presets take its vocabulary")->check(non_empty());
  sub->add_option("--max-shard-size", *shard, "Largest safetensors shard (5GB, 500MB, bytes)")
      ->check(checked_by([](const std::string& s) { parse_size(s); }, "SIZE"))
      ->default_str("5GB");
  sub->add_flag("--json", *json_out, "Print the result as JSON");
  return [opt, shard, json_out, tokenizer] {
    if (!tokenizer->empty()) opt->tokenizer = *tokenizer;
    return run_make_synthetic(*opt, *shard, *json_out);
  };
}

}  // namespace bestofn::cli
