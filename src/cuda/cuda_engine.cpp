// The CUDA engine: the same forward as src/cpu/cpu_engine.cpp, step comment for step comment, on
// the device. Weights are uploaded once; linear layers are cuBLASLt GEMMs (FP8 E4M3 with the
// activation/weight scales applied in an epilogue, or BF16 / F32); the KV cache is BF16.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bestofn/engine.h"
#include "bestofn/error.h"
#include "bestofn/numeric.h"
#include "bestofn/weights.h"
#include "handle_table.h"
#include "cpu/ops.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_check.h"
#include "cuda/dev_weights.h"
#include "cuda/device_buffer.h"
#include "cuda/ceilings.h"
#include "cuda/gemm.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"
#include "cuda/paged_kv.h"
#include "cuda/phase_timer.h"
#include "cuda/plan.h"
#include "cuda/prefix_attention.h"
#include "cuda/step_arena.h"

namespace bestofn::cuda {
namespace {

// --cuda-prefix-gemm: the fewest rows of one prefix in a step for the prefix GEMMs to be used.
constexpr int kMinPrefixGemmRows = 2;

// K and V of one sequence part (a prefix, or a slot's suffix): per layer, rows of kv_dim BF16.
struct KvPart {
  std::vector<DeviceBuffer> k, v;
  int len = 0, capacity = 0;
};

struct Prefix {
  KvPart kv;
  int slots = 0;
  std::vector<DeviceBuffer> kf, vf;  // --cuda-prefix-gemm: per layer, the K/V widened to F32 (len, kv_dim)
};

struct Slot {
  int prefix = -1;
  KvPart kv;        // part 1: the suffix rows; --paged-kv: kv.len only (the rows are in blocks)
  PagedSlot paged;  // --paged-kv: the block table and the promise
};

class CudaEngine final : public Engine {
 public:
  CudaEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt);
  ~CudaEngine() override {
    cudaSetDevice(device_);  // the buffers below are freed on the device they live on
    cudaStreamSynchronize(stream_);
  }
  const ModelConfig& config() const override { return c_; }
  std::string name() const override { return "cuda"; }
  int prefill(std::span<const int> tokens, std::span<float> last_logits) override;
  void release_prefix(int p) override {
    use_device();
    Prefix& pre = prefix_at(p);
    if (pre.slots > 0) throw Error("release_prefix: prefix " + std::to_string(p) + " still has slots");
    prefixes_.erase(p);
  }
  int add_slot(int p) override {
    prefix_at(p).slots++;
    auto s = std::make_unique<Slot>();
    s->prefix = p;
    return slots_.put(std::move(s));
  }
  // --paged-kv: admitted when the free blocks cover this slot's max_tokens positions on top of
  // what the admitted slots may still take; without paging every slot fits.
  std::optional<int> try_add_slot(int p, int max_tokens) override {
    if (!paged_) return add_slot(p);
    // No more than the context leaves after the prompt (throws for an unknown prefix first).
    const int room = c_.max_position_embeddings - prefix_at(p).kv.len;
    PagedSlot promise;
    if (!paged_->admit(promise, std::min(max_tokens, room))) return std::nullopt;
    const int s = add_slot(p);
    slot_at(s).paged = std::move(promise);
    return s;
  }
  void release_slot(int s) override {
    use_device();
    Slot& slot = slot_at(s);
    if (paged_) paged_->release(slot.paged);
    prefix_at(slot.prefix).slots--;
    slots_.erase(s);
  }
  int slot_length(int s) const override {
    const Slot& slot = slots_.at(s);
    return prefixes_.at(slot.prefix).kv.len + slot.kv.len;
  }
  void decode(std::span<const int> slots, std::span<const int> tokens, std::span<float> logits) override {
    if (tokens.size() != slots.size() || logits.size() != slots.size() * static_cast<std::size_t>(c_.vocab_size))
      throw Error("decode: slots, tokens and logits sizes disagree");
    step(slots, tokens, logits.data(), nullptr);
  }
  bool decode_sample(std::span<const int> slots, std::span<const int> tokens, const SamplingParams& params,
                     std::span<const std::uint64_t> prompt, std::span<const std::uint64_t> candidate,
                     std::span<const std::uint64_t> step_index, std::span<Sample> out) override {
    if (!device_sampling_) return false;
    const std::size_t T = slots.size();
    if (tokens.size() != T || prompt.size() != T || candidate.size() != T || step_index.size() != T || out.size() != T)
      throw Error("decode_sample: slots, tokens, draw indexes and samples sizes disagree");
    const Draws d{params, prompt, candidate, step_index, out};
    step(slots, tokens, nullptr, &d);
    return true;
  }
  PhaseTimes take_phase_times() override { return timer_.take(); }
  void profile_phases(bool on) override {
    use_device();
    timer_.enable(on);
  }
  Ceilings measure_ceilings() override;
  GraphStats graph_stats() const override {
    return graphs_ ? GraphStats{graphs_->launches(), graphs_->disabled_reason()} : GraphStats{};
  }

 private:
  // Several engines may run on several threads, one device each: every call that touches the
  // device first makes this engine's current on the calling thread (cheap when it already is).
  void use_device() const { CUDA_CHECK(cudaSetDevice(device_)); }
  Prefix& prefix_at(int p) const { return prefixes_.at(p); }
  Slot& slot_at(int s) const { return slots_.at(s); }
  std::size_t kv_row_bytes() const { return static_cast<std::size_t>(c_.kv_dim()) * 2; }
  void reserve(KvPart& part, int rows);
  void scratch(int T);
  void linear(const DevLinear& l, const float* x, int T, float* y);
  // An FP8 linear on activations already quantized into act_q_ / act_s_ (by a fused kernel).
  void linear_quantized(const DevLinear& l, int T, float* y);
  // One layer for T rows; k_rows / v_rows: the T cache rows this layer writes (device arrays).
  // pos: the T positions (device).
  void layer(int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
             const std::function<void(int l)>& attend);
  // logits_ (T, vocab) = lm_head(rmsnorm(x rows [first, first + T))), on the device.
  void logits(int first, int T);
  // --device-sampling: what decode_sample asks for.
  struct Draws {
    const SamplingParams& params;
    std::span<const std::uint64_t> prompt, candidate, step;
    std::span<Sample> out;
  };
  // One decode step; the logits to host_logits, or (draws) sampled on the device and only the
  // samples copied back.
  void step(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const Draws* draws);
  // --cuda-graphs: everything host-side the launches of a step depend on (graph_cache.h).
  GraphKey graph_key(int T, int splits, bool use_prefix, const Draws* draws, const std::vector<std::size_t>& offsets,
                     const PrefixStateMap& plan, const std::vector<std::vector<PrefixAttention::Group>>& groups) const;
  // Copies the column blocks of y (T, sum of widths) row-major into their own (T, width) arrays.
  void split_columns(const float* y, int T, std::initializer_list<std::pair<float*, int>> parts);
  void widen_prefix(Prefix& p);

  struct StreamDeleter {
    void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
  };
  std::shared_ptr<const Weights> w_;
  const ModelConfig& c_;
  int device_ = 0;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_owner_;  // destroyed on every path out
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GemmAlgoCache> algo_cache_;  // --gemm-autotune (outlives gemm_)
  std::unique_ptr<Gemm> gemm_;
  DevTensor embed_, final_norm_;
  DevLinear lm_head_;
  std::vector<DevLayer> layers_;
  DeviceBuffer inv_freq_;
  HandleTable<Prefix> prefixes_{"prefix"};
  HandleTable<Slot> slots_{"slot"};

  // Activations for T tokens (device).
  DeviceBuffer x_, xn_, q_, k_, v_, att_, o_, gate_, up_, logits_;  // fp32: (T, dim) ... (T, vocab)
  DeviceBuffer act_q_, act_s_, act_bf16_;                             // GEMM inputs: E4M3 codes + scales, or BF16
  StepArena arena_;                                                   // a step's index arrays, one upload
  DeviceBuffer fused_;                                                // --fused-qkv: (T, q + 2 kv) or (T, 2 hidden)
  DeviceBuffer attn_work_;                                            // --split-attention: the chunk states
  int scratch_T_ = 0;
  int sm_count_ = 1;
  bool split_attention_ = false;
  std::unique_ptr<GraphCache> graphs_;  // --cuda-graphs
  bool prefix_gemm_ = false;
  std::unique_ptr<PrefixAttention> prefix_attn_;
  std::unique_ptr<PagedKv> paged_;  // --paged-kv
  // --device-sampling: the samples (T ids, T logprobs) on the device, and a pinned host buffer
  // they come back to.
  bool device_sampling_ = false;
  DeviceBuffer samples_;
  struct PinnedDeleter {
    void operator()(void* p) const { cudaFreeHost(p); }
  };
  std::unique_ptr<void, PinnedDeleter> pinned_;
  std::size_t pinned_bytes_ = 0;
  PhaseTimer timer_;
};

CudaEngine::CudaEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt) : w_(std::move(w)), c_(w_->config) {
  if (opt.kv == EngineOptions::Kv::F32) throw Error("--device cuda: the CUDA engine keeps its KV cache in BF16 only");
  std::string why;
  const std::size_t visible = list_devices(&why).size();
  if (visible == 0) throw Error("--device cuda: no CUDA device is visible (" + why + ")");
  if (opt.device_index < 0 || static_cast<std::size_t>(opt.device_index) >= visible)
    throw Error("CUDA device " + std::to_string(opt.device_index) + " is not visible: this process sees " + std::to_string(visible) +
                " device(s), numbered from 0 within CUDA_VISIBLE_DEVICES");
  device_ = opt.device_index;
  use_device();
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  stream_owner_.reset(stream_);
  if (opt.gemm_autotune) algo_cache_ = std::make_unique<GemmAlgoCache>(GemmAlgoCache::default_file());
  gemm_ = std::make_unique<Gemm>(stream_, algo_cache_.get());
  timer_.set_stream(stream_);
  prefix_gemm_ = opt.cuda_prefix_gemm;
  if (prefix_gemm_) prefix_attn_ = std::make_unique<PrefixAttention>(stream_);
  device_sampling_ = opt.device_sampling;
  split_attention_ = opt.split_attention;
  if (opt.cuda_graphs) graphs_ = std::make_unique<GraphCache>();
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  if (opt.paged_kv && opt.kv_blocks < 0) throw Error("--kv-blocks: expected >= 0, got " + std::to_string(opt.kv_blocks));
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
  for (const LayerWeights& L : w_->layers) layers_.push_back(upload(L, opt.fused_qkv));
  if (opt.paged_kv) paged_ = std::make_unique<PagedKv>(c_.n_layers, kv_row_bytes(), opt.kv_blocks);
  const std::vector<float> inv = cpu::rope_inv_freq(c_);
  inv_freq_.resize(inv.size() * 4);
  inv_freq_.upload(inv.data(), inv.size() * 4);
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
  // --split-attention: with B blocks per row (query heads, or KV heads for the tiled kernel),
  // T' x B x splits(T') <= 2 sm_count + T' B (decode_attention_splits), so the chunk states,
  // T' x n_heads x splits(T'), number at most 2 sm_count x group + T' x n_heads, for every T' <= T.
  if (split_attention_) {
    const std::size_t group = static_cast<std::size_t>(c_.n_heads / c_.n_kv_heads);
    attn_work_.resize((2 * static_cast<std::size_t>(sm_count_) * group + t * static_cast<std::size_t>(c_.n_heads)) *
                      (static_cast<std::size_t>(c_.head_dim) + 2) * 4);
  }
  scratch_T_ = T;
}

void CudaEngine::reserve(KvPart& part, int rows) {
  if (rows <= part.capacity) return;
  const int cap = std::max(rows, std::max(16, part.capacity * 2));
  part.k.resize(static_cast<std::size_t>(c_.n_layers));
  part.v.resize(static_cast<std::size_t>(c_.n_layers));
  for (int l = 0; l < c_.n_layers; ++l) {
    part.k[static_cast<std::size_t>(l)].grow(static_cast<std::size_t>(cap) * kv_row_bytes(), static_cast<std::size_t>(part.len) * kv_row_bytes(), stream_);
    part.v[static_cast<std::size_t>(l)].grow(static_cast<std::size_t>(cap) * kv_row_bytes(), static_cast<std::size_t>(part.len) * kv_row_bytes(), stream_);
  }
  part.capacity = cap;
}

// y (T, out) = x (T, in) W^T: FP8 quantizes x per its scheme and scales in the epilogue.
void CudaEngine::linear(const DevLinear& l, const float* x, int T, float* y) {
  const auto phase = timer_.scope(PhaseTimer::Gemm);
  const void* w = l.w.buf.size() > 0 ? l.w.buf.get() : embed_.buf.get();  // empty: the tied lm_head
  switch (l.type) {
    case GemmInput::FP8:
      quantize_act_fp8_cuda(x, T, l.in, l.input_scale, act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_);
      gemm_->run(GemmInput::FP8, w, act_q_.get(), y, l.out, l.in, T);
      scale_output_cuda(y, T, l.out, act_s_.get<float>(), l.scale.get<float>(), l.per_channel, stream_);
      break;
    case GemmInput::BF16:
      f32_to_bf16_cuda(x, static_cast<std::size_t>(T) * static_cast<std::size_t>(l.in), act_bf16_.get<std::uint16_t>(), stream_);
      gemm_->run(GemmInput::BF16, w, act_bf16_.get(), y, l.out, l.in, T);
      break;
    default:
      gemm_->run(GemmInput::F32, w, x, y, l.out, l.in, T);
  }
}

void CudaEngine::linear_quantized(const DevLinear& l, int T, float* y) {
  const auto phase = timer_.scope(PhaseTimer::Gemm);
  gemm_->run(GemmInput::FP8, l.w.buf.get(), act_q_.get(), y, l.out, l.in, T);
  scale_output_cuda(y, T, l.out, act_s_.get<float>(), l.scale.get<float>(), l.per_channel, stream_);
}

void CudaEngine::layer(int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows, const std::function<void(int)>& attend) {
  const DevLayer& L = layers_[static_cast<std::size_t>(l)];
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(c_.dim);
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // attention: q, k, v = W xn; rope(q, k); kv cache <- k, v; x += W_o attend(q, kv)
  // --fused-qkv on FP8: rmsnorm and the activation quantization in one kernel (the same codes).
  const bool fp8_qkv = L.wqkv.out > 0 && L.wqkv.type == GemmInput::FP8;
  if (fp8_qkv)
    rmsnorm_quant_fp8_cuda(x_.get<float>(), L.attn_norm.buf.get(), L.attn_norm.dtype, T, c_.dim, eps, L.wqkv.input_scale,
                           act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_);
  else
    rmsnorm_cuda(x_.get<float>(), L.attn_norm.buf.get(), L.attn_norm.dtype, T, c_.dim, eps, xn_.get<float>(), stream_);
  if (L.wqkv.out > 0) {  // --fused-qkv: one GEMM, then its (T, q | k | v) columns apart
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
  rope_kv_write_cuda(q_.get<float>(), k_.get<float>(), v_.get<float>(), pos, inv_freq_.get<float>(), T, c_.n_heads,
                     c_.n_kv_heads, c_.head_dim, k_rows, v_rows, stream_);
  {
    const auto phase = timer_.scope(PhaseTimer::Attention);
    attend(l);
  }
  linear(L.wo, att_.get<float>(), T, o_.get<float>());
  residual_add_cuda(x_.get<float>(), o_.get<float>(), n, stream_);
  // ffn: x += W_down (silu(W_gate xn) * W_up xn), xn = rmsnorm(x)
  // --fused-qkv on FP8: rmsnorm + quantization, the gate/up GEMM, then SwiGLU + quantization
  // straight from its output (the same codes as the separate kernels, no column copies).
  if (L.w_gate_up.out > 0 && L.w_gate_up.type == GemmInput::FP8 && L.w_down.type == GemmInput::FP8) {
    rmsnorm_quant_fp8_cuda(x_.get<float>(), L.ffn_norm.buf.get(), L.ffn_norm.dtype, T, c_.dim, eps, L.w_gate_up.input_scale,
                           act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_);
    linear_quantized(L.w_gate_up, T, fused_.get<float>());
    swiglu_quant_fp8_cuda(fused_.get<float>(), fused_.get<float>() + c_.hidden_dim, T, c_.hidden_dim, L.w_down.input_scale,
                          act_q_.get<std::uint8_t>(), act_s_.get<float>(), stream_, 2 * c_.hidden_dim);
    linear_quantized(L.w_down, T, o_.get<float>());
    residual_add_cuda(x_.get<float>(), o_.get<float>(), n, stream_);
    return;
  }
  rmsnorm_cuda(x_.get<float>(), L.ffn_norm.buf.get(), L.ffn_norm.dtype, T, c_.dim, eps, xn_.get<float>(), stream_);
  if (L.w_gate_up.out > 0) {
    linear(L.w_gate_up, xn_.get<float>(), T, fused_.get<float>());
    split_columns(fused_.get<float>(), T, {{gate_.get<float>(), c_.hidden_dim}, {up_.get<float>(), c_.hidden_dim}});
  } else {
    linear(L.w_gate, xn_.get<float>(), T, gate_.get<float>());
    linear(L.w_up, xn_.get<float>(), T, up_.get<float>());
  }
  swiglu_cuda(gate_.get<float>(), up_.get<float>(), T, c_.hidden_dim, stream_);
  linear(L.w_down, gate_.get<float>(), T, o_.get<float>());
  residual_add_cuda(x_.get<float>(), o_.get<float>(), n, stream_);
}

// logits = lm_head(rmsnorm(x)) for rows [first, first + T), left in logits_ (sized by the caller).
void CudaEngine::logits(int first, int T) {
  const float* x = x_.get<float>() + static_cast<std::size_t>(first) * static_cast<std::size_t>(c_.dim);
  rmsnorm_cuda(x, final_norm_.buf.get(), final_norm_.dtype, T, c_.dim, static_cast<float>(c_.rms_norm_eps), xn_.get<float>(), stream_);
  linear(lm_head_, xn_.get<float>(), T, logits_.get<float>());
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
  reserve(p->kv, T);
  scratch(T);
  logits_.resize(static_cast<std::size_t>(c_.vocab_size) * 4);
  // The index arrays: ids, positions, then per layer the cache rows of each position.
  const auto n = static_cast<std::size_t>(T), kd = static_cast<std::size_t>(c_.kv_dim());
  std::vector<int> pos(n);
  for (int t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = t;
  std::vector<std::uint16_t*> rows(2 * n * static_cast<std::size_t>(c_.n_layers));  // layer l: k rows at 2 l T, v rows after
  for (std::size_t l = 0; l < static_cast<std::size_t>(c_.n_layers); ++l)
    for (std::size_t t = 0; t < n; ++t) {
      rows[2 * l * n + t] = p->kv.k[l].get<std::uint16_t>() + t * kd;
      rows[(2 * l + 1) * n + t] = p->kv.v[l].get<std::uint16_t>() + t * kd;
    }
  arena_.clear();
  const std::size_t o_tokens = arena_.add(tokens.data(), n), o_pos = arena_.add(pos), o_rows = arena_.add(rows);
  arena_.upload(stream_);
  const int* d_pos = arena_.at<int>(o_pos);
  std::uint16_t* const* d_rows = arena_.at<std::uint16_t*>(o_rows);
  embedding_cuda(embed_.buf.get(), embed_.dtype, arena_.at<int>(o_tokens), T, c_.dim, x_.get<float>(), stream_);
  for (int l = 0; l < c_.n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    layer(l, T, d_pos, d_rows + 2 * li * n, d_rows + (2 * li + 1) * n, [&](int) {
      prefill_attention_cuda(q_.get<float>(), p->kv.k[li].get<std::uint16_t>(), p->kv.v[li].get<std::uint16_t>(), T, c_.n_heads,
                             c_.n_kv_heads, c_.head_dim, att_.get<float>(), stream_);
    });
  }
  p->kv.len = T;
  if (prefix_gemm_) widen_prefix(*p);
  logits(T - 1, 1);
  CUDA_CHECK(cudaMemcpyAsync(last_logits.data(), logits_.get(), last_logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return prefixes_.put(std::move(p));
}

void CudaEngine::step(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const Draws* draws) {
  use_device();
  const int T = static_cast<int>(slots.size());
  if (T == 0) return;
  std::vector<Slot*> batch;
  std::vector<int> pos;
  for (int i = 0; i < T; ++i) {
    Slot& s = slot_at(slots[static_cast<std::size_t>(i)]);
    if (std::find(batch.begin(), batch.end(), &s) != batch.end())
      throw Error("decode: slot " + std::to_string(slots[static_cast<std::size_t>(i)]) + " appears twice in one step");
    const int p = slot_length(slots[static_cast<std::size_t>(i)]);
    if (p >= c_.max_position_embeddings)
      throw Error("slot " + std::to_string(slots[static_cast<std::size_t>(i)]) + " is at the context limit (" + std::to_string(c_.max_position_embeddings) + ")");
    const int t = tokens[static_cast<std::size_t>(i)];
    if (t < 0 || t >= c_.vocab_size) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
    if (!paged_) reserve(s.kv, s.kv.len + 1);
    batch.push_back(&s);
    pos.push_back(p);
  }
  std::vector<int> tables, starts;  // --paged-kv
  if (paged_) {
    std::vector<PagedSlot*> paged;
    std::vector<int> lens;
    for (Slot* s : batch) paged.push_back(&s->paged), lens.push_back(s->kv.len);
    paged_->take(paged, lens, tables, starts);
  }
  const auto n = static_cast<std::size_t>(T), V = static_cast<std::size_t>(c_.vocab_size);
  scratch(T);
  logits_.resize(n * V * 4);
  if (draws) samples_.resize(n * 8);

  // The step's index arrays, laid out in the arena and copied in one go. Offsets, in order:
  // tokens, positions, lengths, draw indexes, the state-row map, per-layer cache rows and
  // attention pointers, then the paged tables (the one variable-size part, last).
  arena_.clear();
  std::vector<std::size_t> off;
  off.push_back(arena_.add(tokens.data(), n));
  off.push_back(arena_.add(pos));
  std::vector<int> lens(2 * n);  // prefix lengths, then suffix lengths (with this token)
  for (std::size_t i = 0; i < n; ++i) lens[i] = prefixes_.at(batch[i]->prefix).kv.len, lens[n + i] = batch[i]->kv.len + 1;
  off.push_back(arena_.add(lens));
  if (draws) {
    std::vector<std::uint64_t> ids(draws->prompt.begin(), draws->prompt.end());
    ids.insert(ids.end(), draws->candidate.begin(), draws->candidate.end());
    ids.insert(ids.end(), draws->step.begin(), draws->step.end());
    off.push_back(arena_.add(ids));
  }
  // --cuda-prefix-gemm: the batch rows of each prefix, once per step (src/cuda/plan.h). A step in
  // which no prefix has kMinPrefixGemmRows rows (one candidate left per prompt) gains nothing from
  // matrix products and takes the decode kernel instead.
  PrefixStateMap plan;
  std::vector<const Prefix*> group_prefix;
  bool use_prefix = false;
  if (prefix_gemm_) {
    std::map<int, std::vector<int>> by_prefix;
    for (int i = 0; i < T; ++i) by_prefix[batch[static_cast<std::size_t>(i)]->prefix].push_back(i);
    std::vector<std::vector<int>> rows;
    for (auto& [p, r] : by_prefix) {
      use_prefix = use_prefix || static_cast<int>(r.size()) >= kMinPrefixGemmRows;
      group_prefix.push_back(&prefixes_.at(p)), rows.push_back(std::move(r));
    }
    if (use_prefix) {
      plan = prefix_state_map(rows, T, c_.n_heads, c_.n_kv_heads);
      off.push_back(arena_.add(plan.map));
    } else {
      group_prefix.clear();
    }
  }
  // Per layer: the cache rows this step writes (k, then v), and k_prefix, v_prefix, k_suffix,
  // v_suffix per row: the suffix is a slot's own rows (part 1) or the layer's block pools (--paged-kv).
  const auto L = static_cast<std::size_t>(c_.n_layers), kd = static_cast<std::size_t>(c_.kv_dim());
  std::vector<std::uint16_t*> rows(2 * L * n);
  std::vector<const std::uint16_t*> ptrs(4 * L * n);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < n; ++i) {
      Slot& s = *batch[i];
      const Prefix& pre = prefixes_.at(s.prefix);
      std::uint16_t* ks = paged_ ? paged_->k(static_cast<int>(l)) : s.kv.k[l].get<std::uint16_t>();
      std::uint16_t* vs = paged_ ? paged_->v(static_cast<int>(l)) : s.kv.v[l].get<std::uint16_t>();
      const std::size_t row = paged_ ? paged_->row(s.paged, s.kv.len) : static_cast<std::size_t>(s.kv.len);
      rows[2 * l * n + i] = ks + row * kd;
      rows[(2 * l + 1) * n + i] = vs + row * kd;
      const std::size_t at = 4 * l * n;
      ptrs[at + i] = pre.kv.k[l].get<std::uint16_t>();
      ptrs[at + n + i] = pre.kv.v[l].get<std::uint16_t>();
      ptrs[at + 2 * n + i] = ks;
      ptrs[at + 3 * n + i] = vs;
    }
  off.push_back(arena_.add(rows));
  off.push_back(arena_.add(ptrs));
  if (paged_) {  // row t's block table at d_tables + d_starts[t]
    starts.insert(starts.end(), tables.begin(), tables.end());
    off.push_back(arena_.add(starts));
  }
  arena_.upload(stream_);
  std::size_t next = 0;
  const int* d_tokens = arena_.at<int>(off[next++]);
  const int* d_pos = arena_.at<int>(off[next++]);
  const int* d_lens = arena_.at<int>(off[next++]);
  const std::uint64_t* d_ids = draws ? arena_.at<std::uint64_t>(off[next++]) : nullptr;
  const int* d_map = use_prefix ? arena_.at<int>(off[next++]) : nullptr;
  std::uint16_t* const* d_rows = arena_.at<std::uint16_t*>(off[next++]);
  const std::uint16_t* const* d_ptrs = arena_.at<const std::uint16_t*>(off[next++]);
  const int* d_starts = paged_ ? arena_.at<int>(off[next++]) : nullptr;
  const int* d_tables = paged_ ? d_starts + T : nullptr;
  const int block = paged_ ? PagedKv::kBlockTokens : 0;
  // The prefix groups' F32 K/V per layer (--cuda-prefix-gemm).
  std::vector<std::vector<PrefixAttention::Group>> groups(use_prefix ? L : 0);
  for (std::size_t l = 0; l < groups.size(); ++l)
    for (const Prefix* p : group_prefix) groups[l].push_back({p->kf[l].get<float>(), p->vf[l].get<float>(), p->kv.len});
  if (use_prefix) prefix_attn_->reserve(plan, groups[0], c_.n_kv_heads, c_.head_dim);
  // --split-attention: the tiled kernel (blocks per KV head) where the shape allows it, else the
  // part-1 kernel split over positions; chunks when few rows leave the GPU idle.
  const bool tiled = split_attention_ && decode_attention_tiled_supported(c_.n_heads, c_.n_kv_heads, c_.head_dim);
  const int splits = split_attention_ ? decode_attention_splits(T, tiled ? c_.n_kv_heads : c_.n_heads, sm_count_) : 1;
  float* partial = splits > 1 ? attn_work_.get<float>() : nullptr;

  // The step's device work: no allocation, no synchronization, no copy from the host (what a CUDA
  // graph may capture).
  auto enqueue = [&] {
    embedding_cuda(embed_.buf.get(), embed_.dtype, d_tokens, T, c_.dim, x_.get<float>(), stream_);
    for (std::size_t l = 0; l < L; ++l) {
      const std::uint16_t* const* d = d_ptrs + 4 * l * n;
      layer(static_cast<int>(l), T, d_pos, d_rows + 2 * l * n, d_rows + (2 * l + 1) * n, [&](int) {
        if (use_prefix) {
          prefix_attn_->run(q_.get<float>(), plan, d_map, groups[l], d + 2 * n, d + 3 * n, d_lens + T, T, c_.n_heads, c_.n_kv_heads,
                            c_.head_dim, att_.get<float>(), d_tables, d_starts, block, tiled ? splits : 0, partial);
          return;
        }
        if (tiled) {
          TiledAttentionArgs a;
          a.q = q_.get<float>(), a.k_prefix = d, a.v_prefix = d + n, a.prefix_len = d_lens;
          a.k_suffix = d + 2 * n, a.v_suffix = d + 3 * n, a.suffix_len = d_lens + T;
          a.T = T, a.n_heads = c_.n_heads, a.n_kv = c_.n_kv_heads, a.hd = c_.head_dim, a.out = att_.get<float>();
          a.suffix_table = d_tables, a.suffix_table_start = d_starts, a.block_tokens = block;
          a.splits = splits, a.partial = partial;
          decode_attention_tiled_cuda(a, stream_);
          return;
        }
        decode_attention_cuda(q_.get<float>(), d, d + n, d_lens, d + 2 * n, d + 3 * n, d_lens + T, T, c_.n_heads, c_.n_kv_heads,
                              c_.head_dim, att_.get<float>(), stream_, d_tables, d_starts, block, splits, partial);
      });
    }
    logits(0, T);
    if (draws) {  // --device-sampling: sample_token's draws, on the device
      int* d_out = samples_.get<int>();
      sample_cuda(logits_.get<float>(), T, c_.vocab_size, draws->params, d_ids, d_ids + n, d_ids + 2 * n, d_out,
                  reinterpret_cast<float*>(d_out + n), stream_);
    }
  };
  timer_.begin_step();
  std::optional<PhaseTimer::Scope> total;
  total.emplace(&timer_, PhaseTimer::Total);
  if (graphs_ && !timer_.enabled()) {  // profiling records events between the phases: eager
    const bool was_enabled = graphs_->enabled();
    graphs_->run(graph_key(T, splits, use_prefix, draws, off, plan, groups), stream_, enqueue);
    if (was_enabled && !graphs_->enabled())
      spdlog::warn("--cuda-graphs: capture failed, decode steps run without graphs from now on ({})", graphs_->disabled_reason());
  } else {
    enqueue();
  }
  for (Slot* s : batch) s->kv.len++;
  total.reset();
  // The step's one synchronization: the logits, or (--device-sampling) only the samples, back.
  if (draws) {
    if (pinned_bytes_ < n * 8) {
      void* p = nullptr;
      CUDA_CHECK(cudaMallocHost(&p, n * 8));
      pinned_.reset(p);
      pinned_bytes_ = n * 8;
    }
    CUDA_CHECK(cudaMemcpyAsync(pinned_.get(), samples_.get(), n * 8, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto* tok = static_cast<const int*>(pinned_.get());
    const auto* lp = reinterpret_cast<const float*>(tok + n);
    for (std::size_t i = 0; i < n; ++i) draws->out[i] = {tok[i], lp[i]};
  } else {
    CUDA_CHECK(cudaMemcpyAsync(host_logits, logits_.get(), n * V * 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  timer_.end_step();
}

GraphKey CudaEngine::graph_key(int T, int splits, bool use_prefix, const Draws* draws, const std::vector<std::size_t>& offsets, const PrefixStateMap& plan,
                               const std::vector<std::vector<PrefixAttention::Group>>& groups) const {
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  auto bits = [](float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint64_t>(u);
  };
  GraphKey key{static_cast<std::uint64_t>(T), static_cast<std::uint64_t>(splits), use_prefix ? 1u : 0u, draws ? 1u : 0u,
               addr(arena_.device_base())};
  key.insert(key.end(), offsets.begin(), offsets.end());
  for (const DeviceBuffer* b : {&x_, &xn_, &q_, &k_, &v_, &att_, &o_, &gate_, &up_, &logits_, &act_q_, &act_s_, &act_bf16_, &fused_,
                                &attn_work_, &samples_})
    key.push_back(addr(b->get()));
  if (draws) {
    const SamplingParams& p = draws->params;
    key.insert(key.end(), {bits(p.temperature), static_cast<std::uint64_t>(p.top_k), bits(p.top_p), bits(p.min_p), p.seed});
  }
  if (use_prefix) {
    prefix_attn_->add_to_key(key);
    key.push_back(static_cast<std::uint64_t>(plan.rows));
    for (std::size_t g = 0; g < plan.R.size(); ++g) key.insert(key.end(), {static_cast<std::uint64_t>(plan.R[g]), static_cast<std::uint64_t>(plan.base[g])});
    for (const auto& layer_groups : groups)
      for (const PrefixAttention::Group& g : layer_groups) key.insert(key.end(), {addr(g.k), addr(g.v), static_cast<std::uint64_t>(g.len)});
  }
  return key;
}

// The BF16 cache rows of a prompt widened to F32 once, for the prefix GEMMs (exact).
void CudaEngine::widen_prefix(Prefix& p) {
  const std::size_t n = static_cast<std::size_t>(p.kv.len) * static_cast<std::size_t>(c_.kv_dim());
  p.kf.resize(static_cast<std::size_t>(c_.n_layers));
  p.vf.resize(static_cast<std::size_t>(c_.n_layers));
  for (std::size_t l = 0; l < p.kf.size(); ++l) {
    p.kf[l].resize(n * 4), p.vf[l].resize(n * 4);
    bf16_to_f32_cuda(p.kv.k[l].get<std::uint16_t>(), n, p.kf[l].get<float>(), stream_);
    bf16_to_f32_cuda(p.kv.v[l].get<std::uint16_t>(), n, p.vf[l].get<float>(), stream_);
  }
}

void CudaEngine::split_columns(const float* y, int T, std::initializer_list<std::pair<float*, int>> parts) {
  std::size_t width = 0;
  for (const auto& part : parts) width += static_cast<std::size_t>(part.second);
  std::size_t col = 0;
  for (const auto& [dst, w] : parts) {
    const std::size_t wb = static_cast<std::size_t>(w) * 4;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, wb, y + col, width * 4, wb, static_cast<std::size_t>(T), cudaMemcpyDeviceToDevice, stream_));
    col += static_cast<std::size_t>(w);
  }
}

Engine::Ceilings CudaEngine::measure_ceilings() {
  use_device();
  const bool fp8 = layers_.empty() || layers_.front().wo.type == GemmInput::FP8;
  return measure_device_ceilings(*gemm_, fp8 ? GemmInput::FP8 : GemmInput::BF16, stream_);
}

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
  return std::make_unique<CudaEngine>(std::move(weights), options);
}

}  // namespace bestofn::cuda
