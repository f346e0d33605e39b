#include "bestofn/model/synthetic.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>
#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "bestofn/util/temp_paths.h"
#include "bestofn/util/numeric.h"
#include "bestofn/util/parallel.h"
#include "bestofn/model/quantize.h"
#include "bestofn/model/safetensors_writer.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "util/json_file.h"

namespace bestofn {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Activations into every FP8 linear layer of a synthetic model stay within about +-8: static
// input_scale for the "tensor" scheme (larger values saturate, as with any static scale).
constexpr float kSyntheticInputAmax = 8.0f;

std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Counter-based: element i of a tensor depends only on (seed, tensor name, i), never on threads,
// chunks, dtype or the other tensors: the same seed gives the same weights in f32, f16, bf16 and fp8.
// Irwin-Hall sum of four 16-bit uniforms, scaled to unit variance: near-normal, bounded by +-2*sqrt(3).
constexpr float kSyntheticBound = 3.4641016f;

std::uint64_t tensor_key(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return mix64(seed ^ mix64(h));
}

float synth_value(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t h = mix64(key + i * 0x9e3779b97f4a7c15ull);
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) s += (static_cast<float>((h >> (16 * k)) & 0xffff) + 0.5f) / 65536.0f - 0.5f;
  return s * 1.7320508f;
}

enum class Role { Embedding, Norm, Linear, Scale };

struct Planned {
  TensorSpec spec;
  Role role;
  float stddev = 1.0f;     // Embedding / Linear / Norm (noise around 1)
  int group = 0;           // a weight and its scales share a shard
  std::string weight;      // Scale: the weight it belongs to
  bool input_scale = false;
};

// What the presets share: a Llama 3 architecture (RMSNorm eps 1e-5, rope theta 500000, llama3
// rope scaling with factor 8, low 1, high 4; only original_max_position_embeddings differs).
ModelConfig llama3_preset(int original_max_positions) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.rms_norm_eps = 1e-5, c.rope_theta = 500000.0;
  c.rope_scaling = {RopeScalingType::Llama3, 8.0, 1.0, 4.0, original_max_positions};
  return c;
}

ModelConfig preset_tiny() {
  // original_max_position_embeddings is small so that the llama3 scaling changes real frequencies.
  ModelConfig c = llama3_preset(256);
  c.dim = 64, c.hidden_dim = 176, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 512, c.max_position_embeddings = 2048;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

ModelConfig preset_8b() {  // meta-llama/Llama-3.1-8B config.json
  ModelConfig c = llama3_preset(8192);
  c.dim = 4096, c.hidden_dim = 14336, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128;
  c.vocab_size = 128256, c.max_position_embeddings = 131072;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001};
  return c;
}

ModelConfig preset_bench() {  // ~100M parameters: 12 x 6.3M + 24.6M tied embedding
  ModelConfig c = llama3_preset(1024);
  c.dim = 768, c.hidden_dim = 2048, c.n_layers = 12, c.n_heads = 12, c.n_kv_heads = 4, c.head_dim = 64;
  c.vocab_size = 32000, c.max_position_embeddings = 4096;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// The tokenizer files to copy (source, name in the model directory), the vocabulary size they
// need, and their BOS/EOS ids.
struct TokenizerInfo {
  std::vector<std::pair<fs::path, std::string>> files;
  int vocab_size = 0;
  std::optional<int> bos;
  std::vector<int> eos;
};

// The tokenizer is loaded as generate will load it (a broken one is an error here, not a model
// directory that cannot be used), and its tokenizer.json is copied under that name whatever the
// given file is called, with the tokenizer_config.json and special_tokens_map.json beside it.
TokenizerInfo read_tokenizer(const fs::path& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path dir = is_dir ? path : path.parent_path();
  const fs::path tj = is_dir ? path / "tokenizer.json" : path;
  const Tokenizer tokenizer = Tokenizer::load(path);
  TokenizerInfo t;
  t.files.emplace_back(tj, "tokenizer.json");
  t.vocab_size = tokenizer.vocab_size();
  t.bos = tokenizer.bos_id();
  if (auto e = tokenizer.eos_id()) t.eos.push_back(*e);
  for (const char* extra : {"<|end_of_text|>", "<|eot_id|>"})
    if (auto id = tokenizer.token_id(extra); id && std::find(t.eos.begin(), t.eos.end(), *id) == t.eos.end()) t.eos.push_back(*id);
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(dir / name, ec)) t.files.emplace_back(dir / name, name);
  return t;
}

std::vector<Planned> plan(const ModelConfig& c, const SyntheticOptions& opt) {
  const bool fp8 = opt.dtype == "fp8";
  // FP8 keeps embeddings, norms, lm_head in BF16.
  const DType wdt = opt.dtype == "f32" ? DType::F32 : opt.dtype == "f16" ? DType::F16 : DType::BF16;
  const std::int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
  std::vector<Planned> p;
  int group = 0;
  auto add = [&](const std::string& name, Role role, DType dt, std::vector<std::int64_t> shape, float sd) {
    p.push_back({{name, dt, std::move(shape)}, role, sd, group++, "", false});
  };
  auto linear = [&](const std::string& module, std::int64_t out, std::int64_t in, bool quantized) {
    const int g = group++;
    const float sd = 1.0f / std::sqrt(static_cast<float>(in));
    p.push_back({{module + ".weight", quantized ? DType::F8_E4M3 : wdt, {out, in}}, Role::Linear, sd, g, "", false});
    if (!quantized) return;
    const bool per_tensor = opt.fp8_scheme == "tensor";
    p.push_back({{module + ".weight_scale", DType::F32, per_tensor ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{out, 1}},
                 Role::Scale, sd, g, module + ".weight", false});
    if (per_tensor) p.push_back({{module + ".input_scale", DType::F32, {}}, Role::Scale, sd, g, module + ".weight", true});
  };
  add("model.embed_tokens.weight", Role::Embedding, wdt, {vocab, dim}, 0.02f);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    add(pre + "input_layernorm.weight", Role::Norm, wdt, {dim}, 0.1f);
    for (const auto& [proj, out] : {std::pair{"q_proj", c.q_dim()}, {"k_proj", c.kv_dim()}, {"v_proj", c.kv_dim()}}) {
      linear(pre + "self_attn." + proj, out, dim, fp8);
      // Qwen2's biases (in the float dtype, also beside FP8 weights, as llm-compressor keeps them)
      if (c.qkv_bias) add(pre + "self_attn." + proj + ".bias", Role::Embedding, wdt, {out}, 0.1f);
    }
    if (c.qk_norm) {  // Qwen3's per-head q/k norms
      add(pre + "self_attn.q_norm.weight", Role::Norm, wdt, {c.head_dim}, 0.1f);
      add(pre + "self_attn.k_norm.weight", Role::Norm, wdt, {c.head_dim}, 0.1f);
    }
    linear(pre + "self_attn.o_proj", dim, c.q_dim(), fp8);
    add(pre + "post_attention_layernorm.weight", Role::Norm, wdt, {dim}, 0.1f);
    linear(pre + "mlp.gate_proj", hidden, dim, fp8);
    linear(pre + "mlp.up_proj", hidden, dim, fp8);
    linear(pre + "mlp.down_proj", dim, hidden, fp8);
  }
  add("model.norm.weight", Role::Norm, wdt, {dim}, 0.1f);
  if (!c.tie_word_embeddings) linear("lm_head", vocab, dim, false);
  return p;
}

json quantization_config(const std::string& scheme) {
  const bool tensor = scheme == "tensor";
  json group = {{"targets", {"Linear"}},
                {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", tensor ? "tensor" : "channel"},
                             {"symmetric", true}, {"dynamic", false}}},
                {"input_activations", {{"num_bits", 8}, {"type", "float"}, {"strategy", tensor ? "tensor" : "token"},
                                       {"symmetric", true}, {"dynamic", !tensor}}}};
  return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"},
          {"config_groups", {{"group_0", group}}}, {"ignore", {"lm_head"}}};
}

// Writes one tensor's bytes, generated in row blocks (parallel within a block).
class TensorGen {
 public:
  TensorGen(std::uint64_t seed, const SyntheticOptions& opt) : seed_(seed), opt_(opt) {}

  void write(SafetensorsWriter& w, const Planned& t) {
    const std::uint64_t key = tensor_key(seed_, t.spec.name);
    if (t.spec.dtype == DType::F32 && t.role == Role::Scale) return write_scale(w, t);
    const std::int64_t rows = t.spec.shape.size() == 2 ? t.spec.shape[0] : 1;
    const std::int64_t cols = t.spec.shape.back();
    const std::size_t esize = dtype_size(t.spec.dtype);
    const std::int64_t block = std::max<std::int64_t>(1, (16 << 20) / cols);
    std::vector<std::uint8_t> buf;
    if (t.spec.dtype == DType::F8_E4M3) scales_.assign(static_cast<std::size_t>(rows), 1.0f);
    for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
      const std::int64_t nr = std::min(block, rows - r0);
      buf.resize(static_cast<std::size_t>(nr * cols) * esize);
      parallel_for(static_cast<std::size_t>(nr), [&](std::size_t b, std::size_t e) {
        std::vector<float> row(static_cast<std::size_t>(cols));
        for (std::size_t r = b; r < e; ++r) {
          const std::int64_t gr = r0 + static_cast<std::int64_t>(r);
          for (std::int64_t col = 0; col < cols; ++col) {
            const float z = synth_value(key, static_cast<std::uint64_t>(gr * cols + col));
            row[static_cast<std::size_t>(col)] = t.role == Role::Norm ? 1.0f + t.stddev * z : t.stddev * z;
          }
          encode_row(t, gr, row, buf.data() + r * static_cast<std::size_t>(cols) * esize);
        }
      });
      w.write(buf.data(), buf.size());
    }
  }

 private:
  void encode_row(const Planned& t, std::int64_t gr, std::vector<float>& row, std::uint8_t* out) {
    switch (t.spec.dtype) {
      case DType::F32: std::memcpy(out, row.data(), row.size() * 4); break;
      case DType::BF16:
        for (std::size_t i = 0; i < row.size(); ++i) {
          const std::uint16_t h = bf16_from_float(row[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
        break;
      case DType::F16:
        for (std::size_t i = 0; i < row.size(); ++i) {
          const std::uint16_t h = f16_from_float(row[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
        break;
      default: {  // F8_E4M3
        float scale;
        if (opt_.fp8_scheme == "tensor") {
          scale = kSyntheticBound * t.stddev / kFp8E4M3Max;  // the distribution's bound: never saturates
        } else {
          float amax = 0.0f;
          for (float x : row) amax = std::fmax(amax, std::fabs(x));
          scale = fp8_row_scale(amax);
        }
        scales_[static_cast<std::size_t>(gr)] = scale;
        quantize_fp8_row(row.data(), row.size(), scale, out);
      }
    }
  }

  void write_scale(SafetensorsWriter& w, const Planned& t) {
    if (t.input_scale) {
      const float s = kSyntheticInputAmax / kFp8E4M3Max;
      w.write(&s, 4);
    } else if (t.spec.shape.empty()) {
      w.write(scales_.data(), 4);  // per tensor: every row used the same scale
    } else {
      w.write(scales_.data(), scales_.size() * 4);
    }
  }

  std::uint64_t seed_;
  const SyntheticOptions& opt_;
  std::vector<float> scales_;  // of the last FP8 weight written
};

// A sibling "<out>.partial-<pid>" directory, removed unless committed.
class StagingDir {
 public:
  explicit StagingDir(const fs::path& out) : out_(out) {
    std::error_code ec;
    if (fs::exists(out_, ec) && !(fs::is_directory(out_, ec) && fs::is_empty(out_, ec)))
      throw Error(out_.string(), "already exists and is not an empty directory; choose a new --out");
    const fs::path parent = fs::absolute(out_).parent_path();
    if (!fs::is_directory(parent, ec)) throw Error(out_.string(), "parent directory " + parent.string() + " does not exist");
    dir_ = parent / (out_.filename().string() + ".partial-" + std::to_string(getpid()));
    fs::remove_all(dir_, ec);
    fs::create_directory(dir_);
    temp_ = register_temp_path(dir_.string());  // a signal removes it too (its files are flat)
  }
  ~StagingDir() {
    std::error_code ec;
    if (!committed_) fs::remove_all(dir_, ec);
    unregister_temp_path(temp_);
  }
  const fs::path& path() const { return dir_; }
  void commit() {
    std::error_code ec;
    if (fs::exists(out_, ec)) fs::remove(out_, ec);  // the empty directory checked above
    fs::rename(dir_, out_, ec);
    if (ec) throw Error(out_.string(), "cannot move the finished model into place: " + ec.message());
    committed_ = true;
  }

 private:
  fs::path out_, dir_;
  bool committed_ = false;
  int temp_ = -1;
};

void check_options(const SyntheticOptions& opt) {
  if (opt.dtype != "f32" && opt.dtype != "f16" && opt.dtype != "bf16" && opt.dtype != "fp8")
    throw Error("--dtype: '" + opt.dtype + "' is not one of f32, f16, bf16, fp8");
  if (opt.fp8_scheme != "channel" && opt.fp8_scheme != "tensor")
    throw Error("--fp8-scheme: '" + opt.fp8_scheme + "' is not one of channel, tensor");
  if (opt.out.empty()) throw Error("--out: an output directory is required");
}

ModelConfig resolve_config(const SyntheticOptions& opt, const std::optional<TokenizerInfo>& tok) {
  const bool preset = names_a_preset(opt.shape);
  ModelConfig c = preset ? synthetic_preset(opt.shape) : parse_model_config(read_json_file(opt.shape), opt.shape);
  c.quant = {};
  c.torch_dtype = opt.dtype == "f32" ? "float32" : opt.dtype == "f16" ? "float16" : "bfloat16";
  if (!tok) return c;
  if (preset && opt.shape != "llama-3.1-8b") {
    c.vocab_size = tok->vocab_size;  // small presets take the tokenizer's vocabulary
  } else if (tok->vocab_size > c.vocab_size) {
    throw Error(opt.tokenizer->string(), "tokenizer has " + std::to_string(tok->vocab_size) + " ids but the model's vocab_size is " +
                                             std::to_string(c.vocab_size));
  }
  if (tok->bos) c.bos_token_id = tok->bos;
  if (!tok->eos.empty()) c.eos_token_ids = tok->eos;
  return c;
}

void check_disk(const fs::path& dir, std::uint64_t need) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return;
  const std::uint64_t avail = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  if (avail < need + (64u << 20))
    throw Error(dir.string(), "needs " + std::to_string(need >> 20) + " MiB for the model but only " +
                                  std::to_string(avail >> 20) + " MiB are free");
}

}  // namespace

std::vector<std::string> synthetic_presets() { return {"tiny", "llama-3.1-8b", "bench-100m"}; }

bool names_a_preset(const std::string& shape) { return shape.find('/') == std::string::npos && !shape.ends_with(".json"); }

ModelConfig synthetic_preset(const std::string& name) {
  if (name == "tiny") return preset_tiny();
  if (name == "llama-3.1-8b") return preset_8b();
  if (name == "bench-100m") return preset_bench();
  throw Error("--shape: unknown preset '" + name + "'; presets: tiny, llama-3.1-8b, bench-100m, or the path of a config.json");
}

SyntheticResult make_synthetic(const SyntheticOptions& opt) {
  check_options(opt);
  std::optional<TokenizerInfo> tok;
  if (opt.tokenizer) tok = read_tokenizer(*opt.tokenizer);
  ModelConfig c = resolve_config(opt, tok);
  const std::vector<Planned> tensors = plan(c, opt);

  // Shards: whole groups (a weight with its scales), at most max_shard_bytes each unless one
  // group alone is larger.
  std::vector<std::vector<const Planned*>> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::uint64_t group_bytes = 0;
    for (std::size_t k = i; k < tensors.size() && tensors[k].group == tensors[i].group; ++k) group_bytes += tensors[k].spec.nbytes();
    if (i > 0 && tensors[i].group != tensors[i - 1].group && in_shard > 0 && in_shard + group_bytes > opt.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&tensors[i]);
    in_shard += tensors[i].spec.nbytes();
    total += tensors[i].spec.nbytes();
  }

  StagingDir stage(opt.out);
  check_disk(stage.path(), total);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"bestofn_synthetic", opt.shape},
                                                   {"seed", std::to_string(opt.seed)}};
  TensorGen gen(opt.seed, opt);
  json weight_map = json::object();
  std::uint64_t written = 0;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    std::vector<TensorSpec> specs;
    for (const Planned* t : shards[s]) specs.push_back(t->spec);
    SafetensorsWriter w(stage.path() / file, specs, meta);
    for (const Planned* t : shards[s]) {
      gen.write(w, *t);
      weight_map[t->spec.name] = file;
    }
    w.finish();
    written += fs::file_size(stage.path() / file);
    spdlog::info("wrote {} ({} tensors)", file, specs.size());
  }
  if (shards.size() > 1)
    write_json_file(stage.path() / "model.safetensors.index.json",
                    {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});

  json config = to_config_json(c);
  if (opt.dtype == "fp8") config["quantization_config"] = quantization_config(opt.fp8_scheme);
  config["bestofn_synthetic"] = {{"shape", opt.shape}, {"dtype", opt.dtype}, {"seed", opt.seed}};
  write_json_file(stage.path() / "config.json", config);
  json gen_cfg = {{"_from_model_config", true}};
  if (c.bos_token_id) gen_cfg["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_ids.empty()) gen_cfg["eos_token_id"] = c.eos_token_ids;
  write_json_file(stage.path() / "generation_config.json", gen_cfg);
  if (tok)
    for (const auto& [from, name] : tok->files) fs::copy_file(from, stage.path() / name, fs::copy_options::overwrite_existing);
  stage.commit();

  std::int64_t params = 0;
  for (const auto& t : tensors)
    if (t.role != Role::Scale) params += static_cast<std::int64_t>(t.spec.nbytes() / dtype_size(t.spec.dtype));
  return {written, static_cast<int>(shards.size()), params};
}

}  // namespace bestofn
