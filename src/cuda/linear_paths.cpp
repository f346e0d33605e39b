// The two FP8 linear paths (src/cuda/linear_paths.h): cuBLASLt's GEMM and the scale kernel, or
// small-M linear's kernels for steps of 1-64 rows.
#include "cuda/linear_paths.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"

namespace bestofn::cuda {

LinearPath::LinearPath(std::span<const DevLayer> layers) {
  for (const DevLayer& L : layers) {
    LayerShape s;
    s.qkv_fused = L.wqkv.out > 0, s.qkv_fp8 = L.wqkv.type == GemmInput::FP8;
    s.gate_up_fused = L.w_gate_up.out > 0, s.ffn_fp8 = L.w_gate_up.type == GemmInput::FP8 && L.w_down.type == GemmInput::FP8;
    s.qk_norm = L.q_norm.buf.size() > 0;
    layers_.push_back(plan_layer(s));
  }
}

SmallMFused LinearPath::fused_args(const DevLinear& /*l*/, int /*T*/, float* /*y*/, bool /*accumulate*/) const {
  throw Error(std::string(name()) + " has no fused layer");
}

namespace {

class CublasLinear : public LinearPath {
 public:
  explicit CublasLinear(const LinearSetup& setup) : LinearPath(setup.layers), s_(setup) {}
  const char* name() const override { return "cuBLASLt"; }
  void fp8_product(const DevLinear& l, const void* w, const std::uint8_t* a, const float* sa, int T, float* y, bool accumulate) override {
    if (accumulate) throw Error(std::string(name()) + ": an FP8 product does not add to its output here");
    gemm_and_scale(l, w, a, sa, T, y);
  }

 protected:
  template <class F>
  void timed(const char* group, F&& f) {
    s_.timer->timed(group, std::forward<F>(f));
  }
  void gemm_and_scale(const DevLinear& l, const void* w, const std::uint8_t* a, const float* sa, int T, float* y) {
    timed("gemm", [&] { s_.gemm->run(GemmInput::FP8, w, a, y, l.out, l.in, T); });
    timed("scale", [&] { scale_output_cuda(y, T, l.out, sa, l.scale.get<float>(), l.per_channel, s_.stream, l.bias_or_null()); });
  }
  LinearSetup s_;
};

class SmallMLinear final : public CublasLinear {
 public:
  SmallMLinear(const LinearSetup& setup, const CudaOptions& o) : CublasLinear(setup) {
    blocks_ = s_.sm_count * (o.small_m_blocks_per_sm > 0 ? o.small_m_blocks_per_sm : kSmallMBlocksPerSm);
    pdl_ = o.small_m_pdl;
    mma_ = small_m_mma_supported();
    if (!mma_) spdlog::info("small-M linear: steps of 9-64 rows stay on cuBLASLt (FP8 tensor-core products need compute capability 8.9)");
    plan_layers(o.small_m_split);
  }
  const char* name() const override { return "small-M linear"; }

  // 1-8 rows: the weight-streaming kernel; 9-64: the tensor-core kernel; else cuBLASLt.
  void fp8_product(const DevLinear& l, const void* w, const std::uint8_t* a, const float* sa, int T, float* y, bool accumulate) override {
    if (adds(l, T) && T > kSmallMMaxRows) {
      const int slices = small_m_mma_slices(l.out, l.in, s_.sm_count);
      timed("gemm", [&] {
        linear_fp8_mma_cuda(static_cast<const std::uint8_t*>(w), a, sa, l.scale.get<float>(), l.per_channel, l.bias_or_null(), T, l.out, l.in,
                            y, s_.stream, accumulate, slices, mma_work_.get<float>(), mma_counters_.get<int>());
      });
      return;
    }
    if (adds(l, T)) {
      timed("gemm", [&] {
        linear_fp8_small_m_cuda(static_cast<const std::uint8_t*>(w), a, sa, l.scale.get<float>(), l.per_channel, l.bias_or_null(), T, l.out,
                                l.in, y, s_.stream, accumulate);
      });
      return;
    }
    CublasLinear::fp8_product(l, w, a, sa, T, y, accumulate);
  }
  bool adds(const DevLinear& l, int T) const override {
    return l.type == GemmInput::FP8 && (small_m_linear_fits(T, l.out, l.in) || (mma_ && small_m_mma_fits(T, l.out, l.in)));
  }
  // 9-64 rows: the tensor-core kernel's slice sums and counters, for the widest FP8 layer at
  // min(T, 64) rows.
  void size_rows(int T) override {
    if (!mma_ || T <= kSmallMMaxRows) return;
    std::size_t floats = 0, groups = 0;
    auto need = [&](const DevLinear& l) {
      if (l.type != GemmInput::FP8 || !small_m_mma_fits(kMmaMinRows, l.out, l.in)) return;
      floats = std::max(floats, small_m_mma_workspace_floats(std::min(T, kMmaMaxRows), l.out, small_m_mma_slices(l.out, l.in, s_.sm_count)));
      groups = std::max(groups, static_cast<std::size_t>(l.out / kMmaRowsPerWarp));
    };
    for (const DevLayer& L : s_.layers)
      for (const DevLinear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.wqkv, &L.w_gate_up}) need(*l);
    need(*s_.lm_head);
    mma_work_.resize(std::max<std::size_t>(floats, 1) * 4);
    if (groups * 4 > mma_counters_.size()) {
      mma_counters_.resize(groups * 4);
      CUDA_CHECK(cudaMemsetAsync(mma_counters_.get(), 0, mma_counters_.size(), s_.stream));
    }
  }
  void add_to_key(GraphKey& key) const override { key.insert(key.end(), {key_address(mma_work_.get()), key_address(mma_counters_.get())}); }
  const LayerPlan* fused_layer(int l, int T) const override {
    if (T < 1 || T > kSmallMMaxRows) return nullptr;
    const LayerPlan& p = plans_[static_cast<std::size_t>(l) * (kSmallMMaxRows + 1) + static_cast<std::size_t>(T)];
    return p.n > 0 ? &p : nullptr;
  }
  bool fuses_lm_head(int T) const override {
    return fused_lm_head_ && small_m_linear_fits(T, s_.lm_head->out, s_.lm_head->in) && small_m_prologue_fits(T, s_.dim);
  }
  SmallMFused fused_args(const DevLinear& l, int T, float* y, bool accumulate) const override {
    SmallMFused f;
    f.w = static_cast<const std::uint8_t*>(l.w.buf.get()), f.sw = l.scale.get<float>(), f.per_channel = l.per_channel, f.bias = l.bias_or_null();
    f.T = T, f.out = l.out, f.in = l.in, f.static_scale = l.input_scale;
    f.y = y, f.accumulate = accumulate;
    f.max_blocks = blocks_;
    f.pdl = pdl_;
    return f;
  }

 private:
  // Each layer's fused plan for 1..8 rows, and why not where a layer runs unfused; an FP8 lm_head
  // (lm_head quantization) takes the final norm in its prologue, unless split.
  void plan_layers(bool split) {
    const int per_layer = kSmallMMaxRows + 1;
    plans_.assign(s_.layers.size() * static_cast<std::size_t>(per_layer), LayerPlan{});
    fused_lm_head_ = !split && s_.lm_head->type == GemmInput::FP8 && s_.lm_head->w.buf.size() > 0;
    for (std::size_t l = 0; l < s_.layers.size(); ++l) {
      const DevLayer& L = s_.layers[l];
      auto fp8 = [](const DevLinear& d) { return d.out > 0 && d.type == GemmInput::FP8; };
      FusedLayerShape shape;
      shape.dim = s_.dim, shape.hidden = s_.hidden, shape.n_heads = s_.n_heads, shape.n_kv = s_.n_kv, shape.hd = s_.hd;
      shape.small_m = true, shape.split = split;
      shape.fused_fp8 = fp8(L.wqkv) && fp8(L.w_gate_up) && fp8(L.wo) && fp8(L.w_down);
      shape.qk_norm = L.q_norm.buf.size() > 0;
      shape.kv_bf16 = s_.kv == KvFormat::BF16;
      for (int T = 1; T < per_layer; ++T) {
        shape.T = T;
        LayerPlan& p = plans_[l * static_cast<std::size_t>(per_layer) + static_cast<std::size_t>(T)];
        p = plan_fused_layer(shape);
        if (l == 0 && T == 1) {
          if (p.n > 0)
            spdlog::info("small-M linear: a layer of 1-{} rows in {} launches", kSmallMMaxRows, p.n);
          else
            spdlog::info("small-M linear: the layers run unfused ({})", p.why);
        }
      }
    }
  }
  int blocks_ = 0;  // the fused kernels' grid cap (sm_count x the grid cap per SM)
  bool pdl_ = false;
  bool mma_ = false;  // 9-64 rows on the tensor-core kernel (a compute capability 8.9 device)
  DeviceBuffer mma_work_, mma_counters_;  // its slices' partial sums and their counters (0 between launches)
  // The fused layer's plan of layer l for T rows at [l * (kSmallMMaxRows + 1) + T] (n == 0: unfused).
  std::vector<LayerPlan> plans_;
  bool fused_lm_head_ = false;
};

}  // namespace

std::unique_ptr<LinearPath> make_linear_path(const CudaOptions& o, const LinearSetup& setup) {
  if (o.small_m_pdl && !small_m_pdl_supported())
    throw Error("small-M linear's programmatic dependent launch needs a compute capability 9.0 device (and bestofn built for sm_90)");
  if (o.small_m_linear) return std::make_unique<SmallMLinear>(setup, o);
  return std::make_unique<CublasLinear>(setup);
}

}  // namespace bestofn::cuda
