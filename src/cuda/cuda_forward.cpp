// The CUDA engine's forward over a step's rows, as src/cpu/cpu_engine.cpp's: forward (the
// embedding, each layer, the logits, the sampler), layer (the attention half of its launch list,
// src/cuda/layer_plan.h, with the attention path's attend), ffn (the rest), launch (one entry of
// the list), logits_rows; then the linear layers' helpers.
// The class is in cuda_engine.h; the step around the forward is in cuda_step.cpp, its arrays in
// step_program.cpp.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {

// The step's device work: no allocation, no synchronization, no copy from the host (what a CUDA
// graph may capture). The forward of the CPU engine's decode (src/cpu/cpu_engine.cpp), step for step.
void CudaEngine::forward(const StepProgram& s, const DeviceDraws* draws) {
  const int T = s.T;
  const auto n = static_cast<std::size_t>(T);
  // The per-layer cache rows and attention pointers from the rows' descriptors (into step_ptrs_).
  timed("step_pointers", [&] {
    expand_step_pointers_cuda(s.desc, T, c_.n_layers, const_cast<std::uint16_t**>(s.rows), const_cast<const std::uint16_t**>(s.ptrs),
                              stream_);
  });
  timed("embedding", [&] { embedding_cuda(embed_.buf.get(), embed_.dtype, s.tokens, T, c_.dim, x_.get<float>(), stream_); });
  int at = 0;  // the layer whose attention runs: one callback for the step, not one per layer
  const std::function<void()> attend = [&] { attention_->attend(at, s, q_.get<float>(), att_.get<float>()); };
  for (int l = 0; l < c_.n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    at = l;
    layer(l, T, s.pos, s.rows + 2 * li * n, s.rows + (2 * li + 1) * n, attend);
  }
  logits_rows(0, T);
  if (draws) {  // Device sampling: sample_token's draws, on the device
    int* d_out = samples_.get<int>();
    const auto d = timer_.detail("sample");
    SampleOptions so;
    so.workspace = sample_ws_.get(), so.workspace_bytes = sample_ws_.size();
    sample_token_cuda(logits_.get<float>(), T, c_.vocab_size, draws->params, s.draws, s.draws + n, s.draws + 2 * n, d_out,
                      reinterpret_cast<float*>(d_out + n), stream_, so);
  }
}

// One layer: its plan's attention half, then ffn. The plan (src/cuda/layer_plan.h) is small-M
// linear's fused layer where it takes the step, else the layer of its weights' shape.
void CudaEngine::layer(int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
                       const std::function<void()>& attend) {
  // attention: q, k, v = W xn (+ b: Qwen2); q, k = rmsnorm per head (Qwen3); rope(q, k);
  // kv cache <- k, v; x += W_o attend(q, kv)
  const LayerPlan& plan = linear_->layer_plan(l, T);
  for (int i = 0; i < plan.ffn; ++i) launch(plan.launch[static_cast<std::size_t>(i)], l, T, pos, k_rows, v_rows, attend);
  ffn(plan, l, T);
}

void CudaEngine::ffn(const LayerPlan& plan, int l, int T) {
  // ffn: x += W_down (silu(W_gate xn) * W_up xn), xn = rmsnorm(x)
  for (int i = plan.ffn; i < plan.n; ++i) launch(plan.launch[static_cast<std::size_t>(i)], l, T, nullptr, nullptr, nullptr, {});
}

// One entry of a layer's plan: one launcher call (the fused forms: small-M linear's fused kernel),
// or a linear through the linear path.
void CudaEngine::launch(LayerLaunch op, int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
                        const std::function<void()>& attend) {
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const float eps = static_cast<float>(c_.rms_norm_eps);
  float* const x = x_.get<float>();
  auto normed = [&](SmallMFused& f, const DevTensor& norm) {
    f.prologue = SmallMPrologue::NormQuant, f.x = x, f.norm = norm.buf.get(), f.norm_bf16 = norm.dtype == DType::BF16;
    f.eps = eps;
  };
  auto product = [&](const char* name, const SmallMFused& f) {
    const auto phase = timer_.scope(PhaseTimer::Gemm);
    timed(name, [&] { linear_fp8_small_m_fused_cuda(f, stream_); });
  };
  // x's RMSNorm with `norm` into xn_, or as the codes and scales of l's FP8 input (the same codes
  // as the norm then quantize_input).
  auto norm_into_xn = [&](const DevTensor& norm) {
    timed("norm", [&] { rmsnorm_cuda(x, norm.buf.get(), norm.dtype, T, c_.dim, eps, xn_.get<float>(), stream_); });
  };
  auto norm_quantized = [&](const DevTensor& norm, const DevLinear& next) {
    timed("norm", [&] {
      rmsnorm_quant_fp8_cuda(x, norm.buf.get(), norm.dtype, T, c_.dim, eps, next.input_scale, act_q_.get<std::uint8_t>(), act_s_.get<float>(),
                             stream_);
    });
  };
  // The fused q/k/v's (T, q | k | v) columns apart.
  auto split_qkv = [&] {
    split_columns(fused_.get<float>(), T, {{q_.get<float>(), c_.q_dim()}, {k_.get<float>(), c_.kv_dim()}, {v_.get<float>(), c_.kv_dim()}});
  };
  switch (op) {
    // The layer of any step.
    case LayerLaunch::AttnNormQuant: return norm_quantized(L.attn_norm, L.wqkv);
    case LayerLaunch::AttnNorm: return norm_into_xn(L.attn_norm);
    case LayerLaunch::QkvQuantized:
      linear_quantized(L.wqkv, T, fused_.get<float>());
      return split_qkv();
    case LayerLaunch::QkvLinear:
      linear(L.wqkv, xn_.get<float>(), T, fused_.get<float>());
      return split_qkv();
    case LayerLaunch::QLinear: return linear(L.wq, xn_.get<float>(), T, q_.get<float>());
    case LayerLaunch::KLinear: return linear(L.wk, xn_.get<float>(), T, k_.get<float>());
    case LayerLaunch::VLinear: return linear(L.wv, xn_.get<float>(), T, v_.get<float>());
    case LayerLaunch::OutLinearResidual: return residual_linear(L.wo, att_.get<float>(), T);
    case LayerLaunch::FfnNormQuant: return norm_quantized(L.ffn_norm, L.w_gate_up);
    case LayerLaunch::FfnNorm: return norm_into_xn(L.ffn_norm);
    case LayerLaunch::GateUpQuantized: return linear_quantized(L.w_gate_up, T, fused_.get<float>());
    case LayerLaunch::GateUpLinear:
      linear(L.w_gate_up, xn_.get<float>(), T, fused_.get<float>());
      return split_columns(fused_.get<float>(), T, {{gate_.get<float>(), c_.hidden_dim}, {up_.get<float>(), c_.hidden_dim}});
    case LayerLaunch::GateLinear: return linear(L.w_gate, xn_.get<float>(), T, gate_.get<float>());
    case LayerLaunch::UpLinear: return linear(L.w_up, xn_.get<float>(), T, up_.get<float>());
    case LayerLaunch::Swiglu:
      return timed("swiglu", [&] { swiglu_cuda(gate_.get<float>(), up_.get<float>(), T, c_.hidden_dim, stream_); });
    case LayerLaunch::DownQuantizedResidual: return residual_linear(L.w_down, nullptr, T);
    case LayerLaunch::DownLinearResidual: return residual_linear(L.w_down, gate_.get<float>(), T);
    // Both plans: Qwen3's per-head norms, RoPE and the cache write, the attention, SwiGLU and the
    // down input's quantization straight from the gate/up output (the same codes as the separate
    // kernels, no column copies).
    case LayerLaunch::QNorm:
      return timed("qk_norm", [&] {
        rmsnorm_cuda(q_.get<float>(), L.q_norm.buf.get(), L.q_norm.dtype, T * c_.n_heads, c_.head_dim, eps, q_.get<float>(), stream_);
      });
    case LayerLaunch::KNorm:
      return timed("qk_norm", [&] {
        rmsnorm_cuda(k_.get<float>(), L.k_norm.buf.get(), L.k_norm.dtype, T * c_.n_kv_heads, c_.head_dim, eps, k_.get<float>(), stream_);
      });
    case LayerLaunch::RopeKv:
      return timed("rope_kv", [&] {
        rope_kv_write_cuda(q_.get<float>(), k_.get<float>(), v_.get<float>(), pos, inv_freq_.get<float>(), T, c_.n_heads, c_.n_kv_heads,
                           c_.head_dim, k_rows, v_rows, stream_, kv_format());
      });
    case LayerLaunch::Attention: {
      const auto phase = timer_.scope(PhaseTimer::Attention);
      return timed("attention", attend);
    }
    case LayerLaunch::SwigluQuant:
      return timed("swiglu", [&] {
        swiglu_quant_fp8_cuda(fused_.get<float>(), fused_.get<float>() + c_.hidden_dim, T, c_.hidden_dim, L.w_down.input_scale,
                              act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_, 2 * c_.hidden_dim);
      });
    // Small-M linear's fused layer: its kernel with the norm and quantization in the prologue, the
    // heads (RoPE and the cache write) or the residual add in the epilogue.
    case LayerLaunch::QkvNormRope:
    case LayerLaunch::QkvNorm: {
      SmallMFused f = linear_->fused_args(L.wqkv, T, nullptr, false);
      normed(f, L.attn_norm);
      f.epilogue = SmallMEpilogue::Heads, f.n_heads = c_.n_heads, f.n_kv = c_.n_kv_heads, f.hd = c_.head_dim, f.q = q_.get<float>();
      if (op == LayerLaunch::QkvNormRope)
        f.rope = true, f.pos = pos, f.inv_freq = inv_freq_.get<float>(), f.k_rows = k_rows, f.v_rows = v_rows;
      else
        f.k = k_.get<float>(), f.v = v_.get<float>();
      return product("qkv", f);
    }
    case LayerLaunch::OutResidual: {
      SmallMFused f = linear_->fused_args(L.wo, T, x, true);
      f.prologue = SmallMPrologue::Quant, f.x = att_.get<float>();
      return product("o", f);
    }
    case LayerLaunch::GateUpNorm: {
      SmallMFused f = linear_->fused_args(L.w_gate_up, T, fused_.get<float>(), false);
      normed(f, L.ffn_norm);
      return product("gate_up", f);
    }
    case LayerLaunch::DownResidual: {
      SmallMFused f = linear_->fused_args(L.w_down, T, x, true);
      f.a = act_q_.get<std::uint8_t>(), f.sx = act_s_.get<float>();
      return product("down", f);
    }
  }
  throw Error(std::string("a layer's plan holds an unknown launch: ") + launch_name(op));
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

}  // namespace bestofn::cuda
