// bestofn inspect's flags; the report is run_inspect (bestofn/model/run_inspect.h).
#include <memory>

#include "bestofn/model/run_inspect.h"
#include "cli/commands.h"

namespace bestofn::cli {

Runner add_inspect(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  auto* sub = app.add_subcommand("inspect", "Show a model directory's shapes, quantization and memory traffic");
  sub->footer(
      "Reads config.json, generation_config.json and the safetensors (sharded through\n"
      "model.safetensors.index.json) of a Hugging Face model directory, validates every tensor\n"
      "against the config, and reports. Example:\n"
      "  bestofn inspect ~/models/Llama-3.1-8B-Instruct-FP8 --json");
  sub->add_option("MODEL_DIR", opt->model_dir, "Hugging Face model directory")->required();
  sub->add_flag("--json", opt->json, "Print one JSON object (keys documented in docs/commands.md)");
  sub->add_option("--quantize", opt->quantize, "Report as loaded with online quantization")
      ->check(CLI::IsMember({"none", "fp8"}))
      ->default_str("none");
  return [opt] { return run_inspect(*opt); };
}

}  // namespace bestofn::cli
