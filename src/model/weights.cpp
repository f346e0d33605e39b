#include "bestofn/model/weights.h"

#include <cmath>
#include <cstring>
#include <set>
#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "bestofn/util/parallel.h"
#include "bestofn/model/quantize.h"
#include "bestofn/model/safetensors.h"

namespace bestofn {
namespace {

float load_float(DType t, const std::uint8_t* p) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::BF16: { std::uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
    case DType::F16: { std::uint16_t h; std::memcpy(&h, p, 2); return f16_to_float(h); }
    case DType::F8_E4M3: return fp8_e4m3_to_float(*p);
    case DType::F8_E5M2: return fp8_e5m2_to_float(*p);
    default: throw Error("no float conversion for dtype " + std::string(dtype_name(t)));
  }
}

class Loader {
 public:
  Loader(const ModelFiles& files, Weights& w, const LoadOptions& opt) : files_(files), w_(w), opt_(opt) {}

  // A tensor that must exist, with this exact shape, in one of `dtypes`.
  Tensor tensor(const std::string& name, const std::vector<std::int64_t>& shape, std::initializer_list<DType> dtypes) {
    TensorView v = files_.find(name);
    if (!v.info) throw Error(files_.dir(), "missing tensor '" + name + "' (expected shape " + shape_string(shape) + ")");
    used_.insert(name);
    const TensorInfo& info = *v.info;
    if (info.shape != shape)
      throw Error(*v.file, "tensor '" + name + "': expected shape " + shape_string(shape) + " from config.json, found " +
                               shape_string(info.shape));
    bool ok = false;
    std::string allowed;
    for (DType d : dtypes) {
      ok |= d == info.dtype;
      if (!allowed.empty()) allowed += '/';
      allowed += dtype_name(d);
    }
    if (!ok)
      throw Error(*v.file, "tensor '" + name + "': dtype " + std::string(dtype_name(info.dtype)) + " is not supported here; expected " + allowed);
    Tensor t{name, info.dtype, info.shape, v.data, info.nbytes};
    if (reinterpret_cast<std::uintptr_t>(t.data) % dtype_size(t.dtype) != 0) t.data = own_copy(t.data, t.nbytes);
    return t;
  }

  // E4M3FN has no infinities, and its NaN codes (0x7f, 0xff) would be read as finite values by
  // the GEMMs (which take the code table's finite rule): a checkpoint holding one is refused.
  // Eight codes at a time: a byte of (x & 0x7f..) ^ 0x7f.. is zero exactly where x holds a NaN.
  static void check_no_nan_codes(const Tensor& t, const std::string& file) {
    constexpr std::uint64_t low7 = 0x7f7f7f7f7f7f7f7full, ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    std::size_t i = 0;
    for (; i + 8 <= t.nbytes; i += 8) {
      std::uint64_t x;
      std::memcpy(&x, t.data + i, 8);
      const std::uint64_t z = (x & low7) ^ low7;
      if (((z - ones) & ~z & highs) != 0) break;  // a NaN among these 8: found below
    }
    for (; i < t.nbytes; ++i)
      if ((t.data[i] & 0x7f) == 0x7f)
        throw Error(file, "tensor '" + t.name + "': element " + std::to_string(i) + " is an FP8 E4M3 NaN (code 0x" +
                              (t.data[i] == 0x7f ? "7f" : "ff") + "); the checkpoint is damaged");
  }

  // A scale tensor as floats: `count` values (shapes [], [1], [count], [count, 1] accepted).
  std::vector<float> scales(const std::string& name, std::int64_t count, const char* what) {
    TensorView v = files_.find(name);
    if (!v.info) throw Error(files_.dir(), "missing tensor '" + name + "' (" + what + ")");
    used_.insert(name);
    const TensorInfo& info = *v.info;
    const bool shape_ok = info.numel() == count &&
                          (info.shape.size() <= 1 || (info.shape.size() == 2 && info.shape[1] == 1 && info.shape[0] == count));
    if (!shape_ok)
      throw Error(*v.file, "tensor '" + name + "': expected " + (count == 1 ? std::string("a single scale (shape [] or [1])")
                                                                            : "shape [" + std::to_string(count) + ", 1]") +
                               ", found " + shape_string(info.shape));
    if (info.dtype != DType::F32 && info.dtype != DType::BF16 && info.dtype != DType::F16)
      throw Error(*v.file, "tensor '" + name + "': scale dtype must be F32/BF16/F16, found " + std::string(dtype_name(info.dtype)));
    std::vector<float> out(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      out[static_cast<std::size_t>(i)] = load_float(info.dtype, v.data + static_cast<std::size_t>(i) * dtype_size(info.dtype));
      if (!std::isfinite(out[static_cast<std::size_t>(i)]) || out[static_cast<std::size_t>(i)] <= 0)
        throw Error(*v.file, "tensor '" + name + "': scale " + std::to_string(i) + " must be positive and finite");
    }
    return out;
  }

  Linear linear(const std::string& module, std::int64_t out, std::int64_t in) {
    const QuantConfig& q = w_.config.quant;
    Linear l;
    if (q.quantizes(module)) {
      l.weight = tensor(module + ".weight", {out, in}, {DType::F8_E4M3});
      check_no_nan_codes(l.weight, *files_.find(module + ".weight").file);
      const std::int64_t n = q.weight_strategy == ScaleStrategy::Channel ? out : 1;
      l.weight_scale = scales(module + ".weight_scale", n, "FP8 weight scale");
      if (q.activations == ActivationScheme::Static)
        l.input_scale = scales(module + ".input_scale", 1, "static FP8 activation scale")[0];
      else if (files_.find(module + ".input_scale").info)
        used_.insert(module + ".input_scale");
      return l;
    }
    l.weight = tensor(module + ".weight", {out, in}, {DType::F32, DType::BF16, DType::F16});
    if (opt_.quantize_fp8 && module != "lm_head") quantize(l);
    return l;
  }

  // A linear layer with a bias (out) in a float dtype, whatever the weights' (FP8 checkpoints keep
  // their biases in BF16 or F32).
  Linear linear_with_bias(const std::string& module, std::int64_t out, std::int64_t in) {
    Linear l = linear(module, out, in);
    const Tensor b = tensor(module + ".bias", {out}, {DType::F32, DType::BF16, DType::F16});
    l.bias.resize(static_cast<std::size_t>(out));
    for (std::int64_t i = 0; i < out; ++i) {
      l.bias[static_cast<std::size_t>(i)] = b.at(i);
      if (!std::isfinite(l.bias[static_cast<std::size_t>(i)]))
        throw Error(*files_.find(b.name).file, "tensor '" + b.name + "': element " + std::to_string(i) + " is not finite");
    }
    return l;
  }

  bool has(const std::string& name) const { return files_.find(name).info != nullptr; }

  // Online FP8: one scale per output channel, the same rule as quantize_fp8_rows.
  void quantize(Linear& l) {
    const std::int64_t out = l.out_features(), in = l.in_features();
    std::uint8_t* q = own_buffer(static_cast<std::size_t>(out * in));
    l.weight_scale.assign(static_cast<std::size_t>(out), 0.0f);
    const Tensor src = l.weight;
    parallel_for(static_cast<std::size_t>(out), [&](std::size_t begin, std::size_t end) {
      std::vector<float> row(static_cast<std::size_t>(in));
      for (std::size_t r = begin; r < end; ++r) {
        src.row_to_float(static_cast<std::int64_t>(r), row.data());
        float amax = 0.0f;
        for (float x : row) {
          if (!std::isfinite(x)) throw Error("tensor '" + src.name + "': non-finite value in row " + std::to_string(r) + ", cannot quantize");
          amax = std::fmax(amax, std::fabs(x));
        }
        l.weight_scale[r] = fp8_row_scale(amax);
        quantize_fp8_row(row.data(), row.size(), l.weight_scale[r], q + r * static_cast<std::size_t>(in));
      }
    });
    l.weight = Tensor{src.name, DType::F8_E4M3, src.shape, q, static_cast<std::size_t>(out * in)};
  }

  std::vector<std::string> unused() const {
    std::vector<std::string> names;
    for (const auto& v : files_.all())
      if (!used_.count(v.info->name)) names.push_back(v.info->name);
    return names;
  }

 private:
  std::uint8_t* own_buffer(std::size_t nbytes) {
    w_.owned.emplace_back((nbytes + 7) / 8);
    return reinterpret_cast<std::uint8_t*>(w_.owned.back().data());
  }
  const std::uint8_t* own_copy(const std::uint8_t* src, std::size_t nbytes) {
    std::uint8_t* dst = own_buffer(nbytes);
    std::memcpy(dst, src, nbytes);
    return dst;
  }

  const ModelFiles& files_;
  Weights& w_;
  const LoadOptions& opt_;
  std::set<std::string> used_;
};

}  // namespace

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

float Tensor::at(std::int64_t i) const { return load_float(dtype, data + static_cast<std::size_t>(i) * dtype_size(dtype)); }

void Tensor::row_to_float(std::int64_t r, float* out) const {
  const std::int64_t cols = shape.at(1);
  for (std::int64_t c = 0; c < cols; ++c) out[c] = at(r * cols + c);
}

Weights load_weights(std::shared_ptr<const ModelFiles> files, ModelConfig config, const LoadOptions& options) {
  Weights w;
  w.config = std::move(config);
  w.files = files;
  const ModelConfig& c = w.config;
  const bool ckpt_fp8 = c.quant.method != QuantMethod::None;
  if (ckpt_fp8 && options.quantize_fp8) spdlog::info("{}: checkpoint is already FP8; --quantize fp8 has nothing to do", files->dir());
  w.quantization = ckpt_fp8 ? to_string(c.quant.method) : options.quantize_fp8 ? "fp8-online" : "none";

  Loader ld(*files, w, options);
  const std::initializer_list<DType> floats = {DType::F32, DType::BF16, DType::F16};
  const std::int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
  // Tied, with the one matrix stored only as lm_head.weight: transformers loads it for both.
  const bool tied_as_head = c.tie_word_embeddings && !ld.has("model.embed_tokens.weight") && ld.has("lm_head.weight");
  w.token_embedding = ld.tensor(tied_as_head ? "lm_head.weight" : "model.embed_tokens.weight", {vocab, dim}, floats);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = ld.tensor(p + "input_layernorm.weight", {dim}, floats);
    auto qkv = [&](const std::string& module, std::int64_t out) {
      return c.qkv_bias ? ld.linear_with_bias(module, out, dim) : ld.linear(module, out, dim);
    };
    l.wq = qkv(p + "self_attn.q_proj", c.q_dim());
    l.wk = qkv(p + "self_attn.k_proj", c.kv_dim());
    l.wv = qkv(p + "self_attn.v_proj", c.kv_dim());
    if (c.qk_norm) {
      l.q_norm = ld.tensor(p + "self_attn.q_norm.weight", {c.head_dim}, floats);
      l.k_norm = ld.tensor(p + "self_attn.k_norm.weight", {c.head_dim}, floats);
    }
    l.wo = ld.linear(p + "self_attn.o_proj", dim, c.q_dim());
    l.ffn_norm = ld.tensor(p + "post_attention_layernorm.weight", {dim}, floats);
    l.w_gate = ld.linear(p + "mlp.gate_proj", hidden, dim);
    l.w_up = ld.linear(p + "mlp.up_proj", hidden, dim);
    l.w_down = ld.linear(p + "mlp.down_proj", dim, hidden);
    w.layers.push_back(std::move(l));
  }
  w.final_norm = ld.tensor("model.norm.weight", {dim}, floats);
  if (c.tie_word_embeddings)
    w.lm_head.weight = w.token_embedding;
  else
    w.lm_head = ld.linear("lm_head", vocab, dim);
  if (options.quantize_lm_head_fp8 && !w.lm_head.is_fp8()) {
    ld.quantize(w.lm_head);  // into storage of its own: a tied embedding keeps its bytes
    w.quantization += "+fp8-lm-head";
  }

  for (auto& name : ld.unused()) {
    const bool benign = name.ends_with("rotary_emb.inv_freq") || (c.tie_word_embeddings && name == "lm_head.weight");
    if (!benign) w.unused_tensors.push_back(std::move(name));
  }
  if (!w.unused_tensors.empty())
    spdlog::warn("{}: {} tensor(s) not used by the Llama forward, first: '{}'", files->dir(), w.unused_tensors.size(),
                 w.unused_tensors.front());
  return w;
}

Weights load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error(dir.string(), std::filesystem::exists(dir, ec) ? "not a directory" : "no such model directory");
  ModelConfig config = load_model_config(dir);
  return load_weights(std::make_shared<const ModelFiles>(dir), std::move(config), options);
}

std::size_t Weights::decode_bytes_per_step() const {
  std::size_t n = final_norm.nbytes + lm_head.nbytes();
  for (const auto& l : layers)
    n += l.attn_norm.nbytes + l.ffn_norm.nbytes + l.q_norm.nbytes + l.k_norm.nbytes + l.wq.nbytes() + l.wk.nbytes() + l.wv.nbytes() + l.wo.nbytes() +
         l.w_gate.nbytes() + l.w_up.nbytes() + l.w_down.nbytes();
  return n;
}

std::size_t Weights::kv_bytes_per_token() const {
  return 2u * static_cast<std::size_t>(config.n_layers) * static_cast<std::size_t>(config.kv_dim()) * 2u;
}

std::int64_t Weights::parameter_count() const {
  std::int64_t n = token_embedding.numel() + final_norm.numel();
  if (!config.tie_word_embeddings) n += lm_head.weight.numel();
  for (const auto& l : layers)
    n += l.attn_norm.numel() + l.ffn_norm.numel() + (l.q_norm.data ? l.q_norm.numel() + l.k_norm.numel() : 0) +
         static_cast<std::int64_t>(l.wq.bias.size() + l.wk.bias.size() + l.wv.bias.size()) + l.wq.weight.numel() + l.wk.weight.numel() + l.wv.weight.numel() +
         l.wo.weight.numel() + l.w_gate.weight.numel() + l.w_up.weight.numel() + l.w_down.weight.numel();
  return n;
}

}  // namespace bestofn
