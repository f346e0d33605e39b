// The CUDA engine: the same forward as src/cpu/cpu_engine.cpp, step comment for step comment, on
// the device. Weights are uploaded once; linear layers are cuBLASLt GEMMs (FP8 E4M3 with the
// activation/weight scales applied in an epilogue, or BF16 / F32); the KV cache is BF16, or FP8
// with a scale per position and KV head (FP8 KV cache).
// The class is in cuda_engine.h; a decode step is in cuda_step.cpp.
#include "cuda/cuda_engine.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "bestofn/model/rope.h"
#include "cuda/ceilings.h"
#include "cuda/cuda_api.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {

CudaEngine::CudaEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt)
    : w_(std::move(w)), c_(w_->config), options_(opt.cuda) {
  if (opt.kv == EngineOptions::Kv::F32) throw Error("an F32 KV cache: the CUDA engine keeps its KV cache in BF16 or FP8");
  if (opt.kv == EngineOptions::Kv::FP8) {
    // Every path reads FP8 rows: the decode kernels (plain, split, tiled), prefill, paged KV's
    // blocks, and the prefix GEMMs (their K/V widened to F32 from the FP8 rows).
    if (!rope_kv_fp8_fits(c_.n_kv_heads, c_.head_dim))
      throw Error("an FP8 KV cache needs n_kv_heads x head_dim a multiple of 4 (the scales after the codes) and at most " +
                  std::to_string(kMaxFp8KvDim) + ", got " + std::to_string(c_.kv_dim()));
    kv_ = KvFormat::FP8;
  }
  std::string why;
  const std::size_t visible = list_devices(&why).size();
  if (visible == 0) throw Error("no CUDA device is visible (" + why + ")");
  if (opt.cuda.device_index < 0 || static_cast<std::size_t>(opt.cuda.device_index) >= visible)
    throw Error("CUDA device " + std::to_string(opt.cuda.device_index) + " is not visible: this process sees " + std::to_string(visible) +
                " device(s), numbered from 0 within CUDA_VISIBLE_DEVICES");
  device_ = opt.cuda.device_index;
  use_device();
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  stream_owner_.reset(stream_);
  if (opt.cuda.gemm_autotune) algo_cache_ = std::make_unique<GemmAlgoCache>(GemmAlgoCache::default_file());
  gemm_ = std::make_unique<Gemm>(stream_, algo_cache_.get());
  timer_.set_stream(stream_);
  device_sampling_ = opt.cuda.device_sampling;
  if (opt.cuda.graphs) graphs_ = std::make_unique<GraphCache>();
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  if (opt.cuda.paged_kv && opt.cuda.kv_blocks < 0) throw Error("paged KV's pool: expected >= 0 blocks, got " + std::to_string(opt.cuda.kv_blocks));
  // Upload every weight once.
  embed_ = upload(w_->token_embedding);
  final_norm_ = upload(w_->final_norm);
  // A tied lm_head is the embedding: uploaded once.
  const bool tied = w_->lm_head.weight.data == w_->token_embedding.data;
  lm_head_ = tied ? DevLinear{} : upload(w_->lm_head);
  if (tied) {
    lm_head_.out = c_.vocab_size, lm_head_.in = c_.dim;
    lm_head_.type = embed_.dtype == DType::BF16 ? GemmInput::BF16 : GemmInput::F32;
  }
  for (const LayerWeights& L : w_->layers) layers_.push_back(upload(L, opt.cuda.fused_qkv));
  LinearSetup linear;
  linear.stream = stream_, linear.gemm = gemm_.get(), linear.timer = &timer_, linear.sm_count = sm_count_;
  linear.layers = layers_, linear.lm_head = &lm_head_;
  linear.dim = c_.dim, linear.hidden = c_.hidden_dim, linear.n_heads = c_.n_heads, linear.n_kv = c_.n_kv_heads, linear.hd = c_.head_dim;
  linear.kv = kv_;
  linear_ = make_linear_path(opt.cuda, linear);
  // CUDA graphs pad batches to their bucket: the paged pool keeps one block aside for the
  // padding rows' writes (on top of the blocks asked for).
  if (opt.cuda.paged_kv) paged_ = std::make_unique<PagedKv>(c_.n_layers, kv_row_bytes(), opt.cuda.kv_blocks, opt.cuda.graphs);
  AttentionSetup attention;
  attention.stream = stream_;
  attention.n_layers = c_.n_layers, attention.n_heads = c_.n_heads, attention.n_kv = c_.n_kv_heads, attention.hd = c_.head_dim;
  attention.kv = kv_, attention.sm_count = sm_count_;
  // With small-M linear's fused layer the split attention's chunk states are merged in the
  // attention launch by its last block per row, not by a second launch.
  attention.split = opt.cuda.split_attention, attention.merge_inline = opt.cuda.small_m_linear && !opt.cuda.small_m_split;
  attention.graphs = graphs_ != nullptr;
  attention.paged = paged_.get();
  attention.prefix_of = [this](int p) -> const Prefix& { return p == kPaddingPrefix ? *padding_ : prefix_at(p); };
  attention_ = make_attention_path(opt.cuda, attention);
  capabilities_.runs = attention_->can().runs;
  if (!capabilities_.runs) capabilities_.why_no_runs = std::string("the cuda engine does not verify drafted tokens with ") + attention_->name();
  capabilities_.device_sampling = device_sampling_;
  const std::vector<float> inv = rope_inv_freq(c_);
  inv_freq_.resize(inv.size() * 4);
  inv_freq_.upload(inv.data(), inv.size() * 4);
  StepPlanConfig plan;
  plan.n_layers = c_.n_layers, plan.vocab = c_.vocab_size, plan.max_positions = c_.max_position_embeddings;
  plan.row_bytes = kv_row_bytes();
  if (paged_) plan.block_tokens = PagedKv::kBlockTokens, plan.table_capacity = static_cast<std::size_t>(paged_->blocks()) + 1;
  if (graphs_) {
    padding_ = std::make_unique<Prefix>();
    reserve(padding_->kv, 2);
    CUDA_CHECK(cudaMemsetAsync(padding_->kv.buf.get(), 0, padding_->kv.buf.size(), stream_));
    padding_->kv.len = 1;
    attention_->add_prefix(*padding_);
    plan.pad = true;
    plan.padding_prefix = padding_->kv.layout();
    const KvLayout one_row = {plan.padding_prefix.k + plan.row_bytes, plan.padding_prefix.v + plan.row_bytes, plan.padding_prefix.layer_stride};
    plan.padding_suffix = paged_ ? paged_->layout() : one_row;
    plan.scratch_block = paged_ ? paged_->scratch_block() : -1;
    sync_stream(stream_);
  }
  planner_ = std::make_unique<StepPlanner>(plan);
  // Step t+1 prepared while step t runs, where the attention's plan does not hang on the prompts' groups.
  if (attention_->can().ahead) ahead_ = std::make_unique<StepAhead>(*planner_);
}

EngineDescription CudaEngine::describe() const {
  use_device();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  return {"cuda", prop.name, std::nullopt, options_};
}

void CudaEngine::scratch(int T) {
  if (T <= scratch_T_) return;
  const auto t = static_cast<std::size_t>(T);
  const auto d = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.q_dim()), kd = static_cast<std::size_t>(c_.kv_dim()),
             h = static_cast<std::size_t>(c_.hidden_dim);
  const std::size_t widest = std::max({d, qd, h});
  x_.resize(t * d * 4), xn_.resize(t * d * 4), o_.resize(t * d * 4);
  q_.resize(t * qd * 4), att_.resize(t * qd * 4), k_.resize(t * kd * 4), v_.resize(t * kd * 4);
  gate_.resize(t * h * 4), up_.resize(t * h * 4);
  act_q_.resize(t * widest), act_s_.resize(t * 4), act_bf16_.resize(t * widest * 2);
  fused_.resize(t * std::max(qd + 2 * kd, 2 * h) * 4);
  attention_->size_rows(T);
  linear_->size_rows(T);
  scratch_T_ = T;
}

void CudaEngine::size_for_bucket(int T) {
  const int n = bucket_of(T);
  if (n <= sized_bucket_T_) return;
  const auto t = static_cast<std::size_t>(n);
  scratch(n);
  logits_.resize(t * static_cast<std::size_t>(c_.vocab_size) * 4);
  if (device_sampling_) samples_.resize(t * 8), pinned_.resize(t * 8);
  step_ptrs_.resize(6 * static_cast<std::size_t>(c_.n_layers) * t * sizeof(void*));
  arena_.reserve(planner_->layout(n, device_sampling_, attention_->can().grouped, 0).capacity);
  sized_bucket_T_ = n;
}

void CudaEngine::reserve(const RunShape& shape) {
  use_device();
  const int bucket = bucket_of(std::max(shape.max_batch, 1));
  size_for_bucket(bucket);
  arena_.reserve_staging(planner_->layout(bucket, device_sampling_, attention_->can().grouped, 0).capacity);
  if (device_sampling_ && shape.sampling) sample_ws_.resize(sample_token_workspace_bytes(bucket, c_.vocab_size, *shape.sampling));
  // Prefill: a pass's activations, the logits of one prefill_many, its index arrays (bounded by
  // prefill_arena_bytes) in the prefill staging buffer.
  const int pass = std::min({std::max(shape.prefill_tokens, 1), kMaxPrefillPassRows, std::max(shape.prefill_rows, 1)});
  scratch(std::max(bucket, pass));
  logits_.resize(static_cast<std::size_t>(std::max(bucket, 1)) * static_cast<std::size_t>(c_.vocab_size) * 4);
  prefill_logits_.resize(static_cast<std::size_t>(std::max(shape.prefill_prompts, 1)) * static_cast<std::size_t>(c_.vocab_size) * 4);
  arena_.reserve_prefill(prefill_arena_bytes(std::max(shape.prefill_rows, shape.longest_prompt), shape.prefill_prompts, pass, c_.n_layers));
  reserve_prefix_parts(shape.prompt_lengths);
  attention_->reserve(bucket, shape.longest_prompt);  // after the prompts' parts (cascade attention's layout counts its pages)
  // Unpaged: a part of max_new_tokens rows (what a candidate feeds, and one for the speculation)
  // for each slot of the largest batch.
  if (!paged_) {
    reserved_rows_ = std::min(std::max(shape.max_new_tokens, 1), c_.max_position_embeddings);
    for (auto& part : free_suffix_parts_) reserve(part, reserved_rows_, true);
    while (static_cast<int>(free_suffix_parts_.size()) < shape.max_batch) {
      free_suffix_parts_.emplace_back();
      reserve(free_suffix_parts_.back(), reserved_rows_, true);
    }
  }
}

// A KV part per prompt of the run, each the prompt's length, shortest first within a quarter of the
// device memory free now (a run with more allocates the rest at their prefill, counted); and what
// the attention path keeps ready for them (prefix-GEMM attention's F32 copies, cascade attention's
// pages). Parts of an earlier run are dropped first.
void CudaEngine::reserve_prefix_parts(const std::vector<int>& lengths) {
  prefix_parts_.clear();
  attention_->reserve_prefixes({});
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::size_t row = 2 * static_cast<std::size_t>(c_.n_layers) * kv_row_bytes() + attention_->prefix_bytes_per_position();
  const std::vector<int> reserved = reserved_part_lengths(lengths, static_cast<long long>(free_bytes / 4 / row));
  for (const int len : reserved) {
    KvPart part;
    reserve(part, len, true);
    prefix_parts_.put(len, std::move(part));
  }
  attention_->reserve_prefixes(reserved);
  prefix_parts_on_ = true;
}

KvPart CudaEngine::take_prefix_part(int rows) {
  if (auto part = prefix_parts_.take(rows)) {
    part->len = 0;
    return std::move(*part);
  }
  KvPart part;
  reserve(part, rows);
  return part;
}

// Grows a part keeping its rows: the 2 x layers runs of `len` rows (K and V of each layer) move
// from a stride of the old capacity to one of the new, one 2-D copy.
void CudaEngine::reserve(KvPart& part, int rows, bool exact) {
  if (rows <= part.capacity) return;
  const int cap = exact ? rows : std::max(rows, std::max(16, part.capacity * 2));
  const std::size_t rb = kv_row_bytes();
  DeviceBuffer fresh(2 * static_cast<std::size_t>(c_.n_layers) * static_cast<std::size_t>(cap) * rb);
  if (part.len > 0)
    CUDA_CHECK(cudaMemcpy2DAsync(fresh.get(), static_cast<std::size_t>(cap) * rb, part.buf.get(), static_cast<std::size_t>(part.capacity) * rb,
                                 static_cast<std::size_t>(part.len) * rb, 2 * static_cast<std::size_t>(c_.n_layers),
                                 cudaMemcpyDeviceToDevice, stream_));
  if (part.len > 0) sync_stream(stream_);  // the copy has left the old buffer before it is freed
  part.buf = std::move(fresh);
  part.row_bytes = rb;
  part.capacity = cap;
}

// y (T, out) = x (T, in) W^T (+ b): FP8 quantizes x per its scheme and scales (and adds the bias)
// in the epilogue; BF16 and F32 add a bias after the GEMM.
void CudaEngine::linear(const DevLinear& l, const float* x, int T, float* y) {
  const auto phase = timer_.scope(PhaseTimer::Gemm);
  const void* w = l.w.buf.size() > 0 ? l.w.buf.get() : embed_.buf.get();  // empty: the tied lm_head
  switch (l.type) {
    case GemmInput::FP8:
      quantize_input(l, x, T);
      fp8_product(l, w, T, y);
      return;  // the bias, if any, added in the epilogue
    case GemmInput::BF16:
      timed("act_quant", [&] {
        f32_to_bf16_cuda(x, static_cast<std::size_t>(T) * static_cast<std::size_t>(l.in), act_bf16_.get<std::uint16_t>(), stream_);
      });
      timed("gemm", [&] { gemm_->run(GemmInput::BF16, w, act_bf16_.get(), y, l.out, l.in, T); });
      break;
    default:
      timed("gemm", [&] { gemm_->run(GemmInput::F32, w, x, y, l.out, l.in, T); });
  }
  if (const float* b = l.bias_or_null()) timed("bias", [&] { bias_add_cuda(y, T, l.out, b, stream_); });
}

void CudaEngine::linear_quantized(const DevLinear& l, int T, float* y) {
  const auto phase = timer_.scope(PhaseTimer::Gemm);
  fp8_product(l, l.w.buf.get(), T, y);
}

// x_ += l(in) (in null: l's input is already quantized in act_q_ / act_s_): where the linear
// path's kernel adds its result to x_ itself (small-M linear: the residual add fused, the same
// rounded add), that; else the product into o_, then residual_add_cuda.
void CudaEngine::residual_linear(const DevLinear& l, const float* in, int T) {
  if (linear_->adds(l, T)) {
    const auto phase = timer_.scope(PhaseTimer::Gemm);
    if (in) quantize_input(l, in, T);
    fp8_product(l, l.w.buf.get(), T, x_.get<float>(), /*accumulate=*/true);
    return;
  }
  if (in)
    linear(l, in, T, o_.get<float>());
  else
    linear_quantized(l, T, o_.get<float>());
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(c_.dim);
  timed("residual", [&] { residual_add_cuda(x_.get<float>(), o_.get<float>(), n, stream_); });
}

// x (T, l.in) quantized per l's scheme into act_q_ / act_s_ (an FP8 layer's input).
void CudaEngine::quantize_input(const DevLinear& l, const float* x, int T) {
  timed("act_quant", [&] { quantize_act_fp8_cuda(x, T, l.in, l.input_scale, act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_); });
}

// The FP8 product of act_q_ / act_s_ (T rows) and l's weights w, scaled (and biased) into y, by
// the linear path (cuBLASLt's GEMM and the scale kernel, or small-M linear's kernels).
void CudaEngine::fp8_product(const DevLinear& l, const void* w, int T, float* y, bool accumulate) {
  linear_->fp8_product(l, w, act_q_.get<std::uint8_t>(), act_s_.get<float>(), T, y, accumulate);
}

void CudaEngine::layer(int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
                       const std::function<void()>& attend) {
  if (const FusedLayerPlan* plan = linear_->fused_layer(l, T)) {
    layer_fused(*plan, l, T, pos, k_rows, v_rows, attend);
    return;
  }
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // attention: q, k, v = W xn (+ b: Qwen2); q, k = rmsnorm per head (Qwen3); rope(q, k);
  // kv cache <- k, v; x += W_o attend(q, kv)
  // fused q/k/v on FP8: rmsnorm and the activation quantization in one kernel (the same codes).
  const bool fp8_qkv = L.wqkv.out > 0 && L.wqkv.type == GemmInput::FP8;
  timed("norm", [&] {
    if (fp8_qkv)
      rmsnorm_quant_fp8_cuda(x_.get<float>(), L.attn_norm.buf.get(), L.attn_norm.dtype, T, c_.dim, eps, L.wqkv.input_scale,
                             act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_);
    else
      rmsnorm_cuda(x_.get<float>(), L.attn_norm.buf.get(), L.attn_norm.dtype, T, c_.dim, eps, xn_.get<float>(), stream_);
  });
  if (L.wqkv.out > 0) {  // Fused q/k/v: one GEMM, then its (T, q | k | v) columns apart
    if (fp8_qkv)
      linear_quantized(L.wqkv, T, fused_.get<float>());
    else
      linear(L.wqkv, xn_.get<float>(), T, fused_.get<float>());
    split_columns(fused_.get<float>(), T, {{q_.get<float>(), c_.q_dim()}, {k_.get<float>(), c_.kv_dim()}, {v_.get<float>(), c_.kv_dim()}});
  } else {
    linear(L.wq, xn_.get<float>(), T, q_.get<float>());
    linear(L.wk, xn_.get<float>(), T, k_.get<float>());
    linear(L.wv, xn_.get<float>(), T, v_.get<float>());
  }
  if (L.q_norm.buf.size() > 0) {  // Qwen3: each head of q and k normalized in place, before RoPE
    timed("qk_norm", [&] {
      rmsnorm_cuda(q_.get<float>(), L.q_norm.buf.get(), L.q_norm.dtype, T * c_.n_heads, c_.head_dim, eps, q_.get<float>(), stream_);
      rmsnorm_cuda(k_.get<float>(), L.k_norm.buf.get(), L.k_norm.dtype, T * c_.n_kv_heads, c_.head_dim, eps, k_.get<float>(), stream_);
    });
  }
  timed("rope_kv", [&] {
    rope_kv_write_cuda(q_.get<float>(), k_.get<float>(), v_.get<float>(), pos, inv_freq_.get<float>(), T, c_.n_heads,
                       c_.n_kv_heads, c_.head_dim, k_rows, v_rows, stream_, kv_);
  });
  {
    const auto phase = timer_.scope(PhaseTimer::Attention);
    timed("attention", attend);
  }
  residual_linear(L.wo, att_.get<float>(), T);
  ffn(l, T);
}

// The fused layer: the launches of src/cuda/layer_plan.h in order, each one launcher call.
void CudaEngine::layer_fused(const FusedLayerPlan& plan, int l, int T, const int* pos, std::uint16_t* const* k_rows,
                             std::uint16_t* const* v_rows, const std::function<void()>& attend) {
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const float eps = static_cast<float>(c_.rms_norm_eps);
  auto normed = [&](SmallMFused& f, const DevTensor& norm) {
    f.prologue = SmallMPrologue::NormQuant, f.x = x_.get<float>(), f.norm = norm.buf.get(), f.norm_bf16 = norm.dtype == DType::BF16;
    f.eps = eps;
  };
  auto product = [&](const char* name, const SmallMFused& f) {
    const auto phase = timer_.scope(PhaseTimer::Gemm);
    timed(name, [&] { linear_fp8_small_m_fused_cuda(f, stream_); });
  };
  for (const LayerLaunch op : plan) {
    switch (op) {
      case LayerLaunch::QkvNormRope:
      case LayerLaunch::QkvNorm: {
        SmallMFused f = linear_->fused_args(L.wqkv, T, nullptr, false);
        normed(f, L.attn_norm);
        f.epilogue = SmallMEpilogue::Heads, f.n_heads = c_.n_heads, f.n_kv = c_.n_kv_heads, f.hd = c_.head_dim, f.q = q_.get<float>();
        if (op == LayerLaunch::QkvNormRope)
          f.rope = true, f.pos = pos, f.inv_freq = inv_freq_.get<float>(), f.k_rows = k_rows, f.v_rows = v_rows;
        else
          f.k = k_.get<float>(), f.v = v_.get<float>();
        product("qkv", f);
        break;
      }
      case LayerLaunch::QNorm:
        timed("qk_norm", [&] {
          rmsnorm_cuda(q_.get<float>(), L.q_norm.buf.get(), L.q_norm.dtype, T * c_.n_heads, c_.head_dim, eps, q_.get<float>(), stream_);
        });
        break;
      case LayerLaunch::KNorm:
        timed("qk_norm", [&] {
          rmsnorm_cuda(k_.get<float>(), L.k_norm.buf.get(), L.k_norm.dtype, T * c_.n_kv_heads, c_.head_dim, eps, k_.get<float>(), stream_);
        });
        break;
      case LayerLaunch::RopeKv:
        timed("rope_kv", [&] {
          rope_kv_write_cuda(q_.get<float>(), k_.get<float>(), v_.get<float>(), pos, inv_freq_.get<float>(), T, c_.n_heads, c_.n_kv_heads,
                             c_.head_dim, k_rows, v_rows, stream_, kv_);
        });
        break;
      case LayerLaunch::Attention: {
        const auto phase = timer_.scope(PhaseTimer::Attention);
        timed("attention", attend);
        break;
      }
      case LayerLaunch::OutResidual: {
        SmallMFused f = linear_->fused_args(L.wo, T, x_.get<float>(), true);
        f.prologue = SmallMPrologue::Quant, f.x = att_.get<float>();
        product("o", f);
        break;
      }
      case LayerLaunch::GateUpNorm: {
        SmallMFused f = linear_->fused_args(L.w_gate_up, T, fused_.get<float>(), false);
        normed(f, L.ffn_norm);
        product("gate_up", f);
        break;
      }
      case LayerLaunch::SwigluQuant:
        timed("swiglu", [&] {
          swiglu_quant_fp8_cuda(fused_.get<float>(), fused_.get<float>() + c_.hidden_dim, T, c_.hidden_dim, L.w_down.input_scale,
                                act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_, 2 * c_.hidden_dim);
        });
        break;
      case LayerLaunch::DownResidual: {
        SmallMFused f = linear_->fused_args(L.w_down, T, x_.get<float>(), true);
        f.a = act_q_.get<std::uint8_t>(), f.sx = act_s_.get<float>();
        product("down", f);
        break;
      }
    }
  }
}

void CudaEngine::ffn(int l, int T) {
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // ffn: x += W_down (silu(W_gate xn) * W_up xn), xn = rmsnorm(x)
  // fused q/k/v on FP8: rmsnorm + quantization, the gate/up GEMM, then SwiGLU + quantization
  // straight from its output (the same codes as the separate kernels, no column copies).
  if (L.w_gate_up.out > 0 && L.w_gate_up.type == GemmInput::FP8 && L.w_down.type == GemmInput::FP8) {
    timed("norm", [&] {
      rmsnorm_quant_fp8_cuda(x_.get<float>(), L.ffn_norm.buf.get(), L.ffn_norm.dtype, T, c_.dim, eps, L.w_gate_up.input_scale,
                             act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_);
    });
    linear_quantized(L.w_gate_up, T, fused_.get<float>());
    timed("swiglu", [&] {
      swiglu_quant_fp8_cuda(fused_.get<float>(), fused_.get<float>() + c_.hidden_dim, T, c_.hidden_dim, L.w_down.input_scale,
                            act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_, 2 * c_.hidden_dim);
    });
    residual_linear(L.w_down, nullptr, T);
    return;
  }
  timed("norm", [&] { rmsnorm_cuda(x_.get<float>(), L.ffn_norm.buf.get(), L.ffn_norm.dtype, T, c_.dim, eps, xn_.get<float>(), stream_); });
  if (L.w_gate_up.out > 0) {
    linear(L.w_gate_up, xn_.get<float>(), T, fused_.get<float>());
    split_columns(fused_.get<float>(), T, {{gate_.get<float>(), c_.hidden_dim}, {up_.get<float>(), c_.hidden_dim}});
  } else {
    linear(L.w_gate, xn_.get<float>(), T, gate_.get<float>());
    linear(L.w_up, xn_.get<float>(), T, up_.get<float>());
  }
  timed("swiglu", [&] { swiglu_cuda(gate_.get<float>(), up_.get<float>(), T, c_.hidden_dim, stream_); });
  residual_linear(L.w_down, gate_.get<float>(), T);
}

// Rows [first, first + T), left in out, or logits_ (sized by the caller).
void CudaEngine::logits_rows(int first, int T, float* out) {
  // logits = lm_head(rmsnorm(x))
  const float* x = x_.get<float>() + static_cast<std::size_t>(first) * static_cast<std::size_t>(c_.dim);
  timer_.set_detail_prefix("lm_head.");
  // Small-M linear with an FP8 lm_head (lm_head quantization): the final norm and the quantization
  // in the kernel's prologue, one launch (the codes of the three launches below, bit for bit).
  if (linear_->fuses_lm_head(T)) {
    SmallMFused f = linear_->fused_args(lm_head_, T, out ? out : logits_.get<float>(), false);
    f.prologue = SmallMPrologue::NormQuant, f.x = x, f.norm = final_norm_.buf.get(), f.norm_bf16 = final_norm_.dtype == DType::BF16;
    f.eps = static_cast<float>(c_.rms_norm_eps);
    const auto phase = timer_.scope(PhaseTimer::Gemm);
    timed("gemm", [&] { linear_fp8_small_m_fused_cuda(f, stream_); });
    timer_.set_detail_prefix("");
    return;
  }
  timed("norm", [&] {
    rmsnorm_cuda(x, final_norm_.buf.get(), final_norm_.dtype, T, c_.dim, static_cast<float>(c_.rms_norm_eps), xn_.get<float>(), stream_);
  });
  linear(lm_head_, xn_.get<float>(), T, out ? out : logits_.get<float>());
  timer_.set_detail_prefix("");
}

int CudaEngine::prefill(std::span<const int> tokens, std::span<float> last_logits) {
  use_device();
  const int T = static_cast<int>(tokens.size());
  if (T == 0) throw Error("prefill: empty prompt");
  if (T > c_.max_position_embeddings)
    throw Error("prompt of " + std::to_string(T) + " tokens is longer than the context (" + std::to_string(c_.max_position_embeddings) + ")");
  if (last_logits.size() != static_cast<std::size_t>(c_.vocab_size)) throw Error("prefill: logits buffer has the wrong size");
  for (int t : tokens)
    if (t < 0 || t >= c_.vocab_size) throw Error("token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(c_.vocab_size) + ")");
  auto p = std::make_unique<Prefix>();
  p->kv = take_prefix_part(T);
  scratch(T);
  logits_.resize(static_cast<std::size_t>(c_.vocab_size) * 4);
  // The index arrays: ids, positions, then per layer the cache rows of each position.
  const auto n = static_cast<std::size_t>(T);
  std::vector<int> pos(n);
  for (int t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = t;
  std::vector<std::uint16_t*> rows(2 * n * static_cast<std::size_t>(c_.n_layers));  // layer l: k rows at 2 l T, v rows after
  for (std::size_t l = 0; l < static_cast<std::size_t>(c_.n_layers); ++l)
    for (std::size_t t = 0; t < n; ++t) {
      rows[2 * l * n + t] = kv_row_at(p->kv.k(static_cast<int>(l)), t);
      rows[(2 * l + 1) * n + t] = kv_row_at(p->kv.v(static_cast<int>(l)), t);
    }
  arena_.clear();
  const std::size_t o_tokens = arena_.add(tokens.data(), n), o_pos = arena_.add(pos), o_rows = arena_.add(rows);
  arena_.upload(stream_);
  const int* d_pos = arena_.at<int>(o_pos);
  std::uint16_t* const* d_rows = arena_.at<std::uint16_t*>(o_rows);
  embedding_cuda(embed_.buf.get(), embed_.dtype, arena_.at<int>(o_tokens), T, c_.dim, x_.get<float>(), stream_);
  for (int l = 0; l < c_.n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    layer(l, T, d_pos, d_rows + 2 * li * n, d_rows + (2 * li + 1) * n, [&] {
      prefill_attention_cuda(q_.get<float>(), p->kv.k(l), p->kv.v(l), T, c_.n_heads,
                             c_.n_kv_heads, c_.head_dim, att_.get<float>(), stream_, kv_);
    });
  }
  try {
    finish_prefix(*p, T);
    logits_rows(T - 1, 1);
    CUDA_CHECK(cudaMemcpyAsync(last_logits.data(), logits_.get(), last_logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
  } catch (...) {
    attention_->release_prefix(*p, false);
    throw;
  }
  return prefixes_.put(std::move(p));
}

void CudaEngine::finish_prefix(Prefix& p, int len) {
  p.kv.len = len;
  attention_->add_prefix(p);
}

// Batched, chunked prefill. Each pass's rows are laid out with the last rows of the prompts that
// end in it first (in prompt order), then the other rows (prefill_pass_rows): the logits are then
// those of the pass's first m rows, with no gather, written straight into those prompts' rows of
// prefill_logits_.
// Row order does not matter to the rest of the forward: the GEMMs and the row ops treat rows
// alike, rope_kv_write_cuda writes each row to the cache row it is given, and the attention finds
// each row's prompt and position in its own tables. The index arrays of every pass go up in one
// copy before the first pass; nothing waits on the device until the logits come back.
std::vector<int> CudaEngine::prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                          int max_pass_tokens) {
  use_device();
  check_prefill_many(c_, prompts, last_logits.size(), max_pass_tokens);
  if (prompts.empty()) return {};
  const auto layers = static_cast<std::size_t>(c_.n_layers), V = static_cast<std::size_t>(c_.vocab_size);
  std::vector<int> lengths;
  std::vector<std::unique_ptr<Prefix>> made;  // registered once every pass has run: nothing is left behind by a throw
  for (const auto& tokens : prompts) {
    lengths.push_back(static_cast<int>(tokens.size()));
    made.push_back(std::make_unique<Prefix>());
    made.back()->kv = take_prefix_part(lengths.back());
  }
  // Per pass: ids, positions, segment of each row, then per layer the cache rows of each row (k,
  // then v) and the cache base of each segment (k, then v).
  struct Pass {
    int T = 0, S = 0, m = 0;  // rows, segments, prompts ending in it
    std::size_t first = 0;    // the first of those prompts
    std::size_t tokens = 0, pos = 0, seg = 0, rows = 0, bases = 0;  // offsets in arena_
  };
  std::vector<Pass> passes;
  int most = 0;
  arena_.clear();
  // At most 65535 rows a pass: the attention's grid (a longer prompt goes in chunks).
  for (const auto& plan : plan_prefill_passes(lengths, std::min(max_pass_tokens, kMaxPrefillPassRows))) {
    const PrefillPassRows layout = prefill_pass_rows(plan, lengths);
    Pass pass;
    pass.T = static_cast<int>(layout.segment.size()), pass.S = static_cast<int>(plan.size());
    pass.m = layout.ending, pass.first = layout.first_ending;
    const auto T = layout.segment.size(), S = plan.size();
    std::vector<int> tokens(T);
    std::vector<std::uint16_t*> rows(2 * layers * T);   // layer l: k rows at 2 l T, v rows after
    std::vector<std::uint16_t*> bases(2 * layers * S);  // layer l: k bases at 2 l S, v bases after
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t p = plan[static_cast<std::size_t>(layout.segment[t])].prompt, j = static_cast<std::size_t>(layout.position[t]);
      tokens[t] = prompts[p][j];
      for (std::size_t l = 0; l < layers; ++l) {
        const KvPart& kv = made[p]->kv;
        rows[2 * l * T + t] = kv_row_at(kv.k(static_cast<int>(l)), j);
        rows[(2 * l + 1) * T + t] = kv_row_at(kv.v(static_cast<int>(l)), j);
      }
    }
    for (std::size_t k = 0; k < S; ++k)
      for (std::size_t l = 0; l < layers; ++l) {
        bases[2 * l * S + k] = made[plan[k].prompt]->kv.k(static_cast<int>(l));
        bases[(2 * l + 1) * S + k] = made[plan[k].prompt]->kv.v(static_cast<int>(l));
      }
    pass.tokens = arena_.add(tokens), pass.pos = arena_.add(layout.position), pass.seg = arena_.add(layout.segment);
    pass.rows = arena_.add(rows), pass.bases = arena_.add(bases);
    passes.push_back(pass);
    most = std::max(most, pass.T);
  }
  arena_.upload(stream_);
  scratch(most);
  prefill_logits_.resize(prompts.size() * V * 4);
  for (const Pass& pass : passes) {
    const auto T = static_cast<std::size_t>(pass.T), S = static_cast<std::size_t>(pass.S);
    const int* d_pos = arena_.at<int>(pass.pos);
    const int* d_seg = arena_.at<int>(pass.seg);
    std::uint16_t* const* d_rows = arena_.at<std::uint16_t*>(pass.rows);
    const std::uint16_t* const* d_bases = arena_.at<const std::uint16_t*>(pass.bases);
    embedding_cuda(embed_.buf.get(), embed_.dtype, arena_.at<int>(pass.tokens), pass.T, c_.dim, x_.get<float>(), stream_);
    for (int l = 0; l < c_.n_layers; ++l) {
      const auto li = static_cast<std::size_t>(l);
      layer(l, pass.T, d_pos, d_rows + 2 * li * T, d_rows + (2 * li + 1) * T, [&] {
        prefill_attention_segments_cuda(q_.get<float>(), d_bases + 2 * li * S, d_bases + (2 * li + 1) * S, d_seg, d_pos, pass.T,
                                        c_.n_heads, c_.n_kv_heads, c_.head_dim, att_.get<float>(), stream_, kv_);
      });
    }
    if (pass.m > 0) logits_rows(0, pass.m, prefill_logits_.get<float>() + pass.first * V);
  }
  try {
    for (std::size_t p = 0; p < made.size(); ++p) finish_prefix(*made[p], lengths[p]);
    CUDA_CHECK(cudaMemcpyAsync(last_logits.data(), prefill_logits_.get(), last_logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
  } catch (...) {
    for (auto& p : made) attention_->release_prefix(*p, false);  // a prompt dropped before it was registered
    throw;
  }
  std::vector<int> ids;
  for (auto& p : made) ids.push_back(prefixes_.put(std::move(p)));
  return ids;
}

void CudaEngine::split_columns(const float* y, int T, std::initializer_list<std::pair<float*, int>> parts) {
  const auto d = timer_.detail("split_columns");
  std::size_t width = 0;
  for (const auto& part : parts) width += static_cast<std::size_t>(part.second);
  std::size_t col = 0;
  for (const auto& [dst, w] : parts) {
    const std::size_t wb = static_cast<std::size_t>(w) * 4;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, wb, y + col, width * 4, wb, static_cast<std::size_t>(T), cudaMemcpyDeviceToDevice, stream_));
    col += static_cast<std::size_t>(w);
  }
}

EngineStatistics::Ceilings CudaEngine::measure_ceilings() {
  use_device();
  const bool fp8 = layers_.empty() || layers_.front().wo.type == GemmInput::FP8;
  return measure_device_ceilings(*gemm_, fp8 ? GemmInput::FP8 : GemmInput::BF16, stream_);
}

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
  return std::make_unique<CudaEngine>(std::move(weights), options);
}

}  // namespace bestofn::cuda
