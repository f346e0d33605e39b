#pragma once
// Synthetic models: complete, loadable Hugging Face model directories with seeded random weights
// of realistic scale, in F32, BF16 or FP8 (compressed-tensors layout). Tests and benchmarks use them.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bestofn/model/model_config.h"

namespace bestofn {

struct SyntheticOptions {
  std::string shape = "tiny";  // a preset name, or the path of a config.json
  std::string dtype = "bf16";  // f32 | f16 | bf16 | fp8
  // fp8 only: "channel" = per-output-channel weight scales, dynamic per-token activations;
  // "tensor" = per-tensor weight scales and a static input_scale (the RedHatAI FP8 layout).
  std::string fp8_scheme = "channel";
  std::uint64_t seed = 0;
  std::filesystem::path out;
  std::optional<std::filesystem::path> tokenizer;  // tokenizer.json, or a directory holding it
  std::uint64_t max_shard_bytes = 5'000'000'000;   // as huggingface_hub's default "5GB"
};

// "tiny", "llama-3.1-8b", "bench-100m".
std::vector<std::string> synthetic_presets();
// How --shape is read: a name without '/' and not ending in ".json" names a preset, anything else
// a config.json file.
bool names_a_preset(const std::string& shape);
// Throws bestofn::Error listing the presets for an unknown name.
ModelConfig synthetic_preset(const std::string& name);

struct SyntheticResult {
  std::uint64_t bytes = 0;   // safetensors bytes written
  int shards = 0;
  std::int64_t parameters = 0;
};

// Writes the model directory `opt.out`, which must not exist or be empty. Everything is written
// into a sibling "<out>.partial-*" directory first and renamed into place at the end.
SyntheticResult make_synthetic(const SyntheticOptions& opt);

}  // namespace bestofn
