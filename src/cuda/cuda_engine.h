#pragma once
// The CUDA engine's class: src/cuda/cuda_engine.cpp (set-up, sizing, prefill), cuda_step.cpp (a
// decode step and its CUDA graph key), cuda_forward.cpp (the forward, as the CPU engine's), with
// its step programs from step_program.h and its two paths from attention_paths.h and
// linear_paths.h. Internal to bestofn_cuda: the rest of the program reaches it through
// make_cuda_engine (cuda_api.h).
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/error.h"
#include "util/handle_table.h"
#include "cuda/attention_paths.h"
#include "cuda/best_fit_parts.h"
#include "cuda/cuda_check.h"
#include "cuda/dev_weights.h"
#include "cuda/device_buffer.h"
#include "cuda/gemm.h"
#include "cuda/gemm_algo_cache.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"
#include "cuda/kv_parts.h"
#include "cuda/layer_plan.h"
#include "cuda/linear_paths.h"
#include "cuda/paged_kv.h"
#include "cuda/phase_timer.h"
#include "cuda/step_arena.h"
#include "cuda/step_buffers.h"
#include "cuda/step_plan.h"
#include "cuda/step_program.h"

namespace bestofn::cuda {

// It is its own statistics view (bench, the GPU tests).
class CudaEngine final : public Engine, public EngineStatistics {
 public:
  CudaEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt);
  ~CudaEngine() override {
    cudaSetDevice(device_);  // the buffers below are freed on the device they live on
    cudaStreamSynchronize(stream_);
  }
  EngineDescription describe() const override;
  int prefill(std::span<const int> tokens, std::span<float> last_logits) override;
  // One forward per pass of plan_prefill_passes (the GEMMs over all its rows), one attention
  // launch per layer for all its segments, every prompt's last-row logits copied back once.
  std::vector<int> prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                int max_pass_tokens) override;
  void release_prefix(int p) override {
    use_device();
    Prefix& pre = prefix_at(p);
    if (pre.slots > 0) throw Error("release_prefix: prefix " + std::to_string(p) + " still has slots");
    attention_->release_prefix(pre, prefix_parts_on_);
    if (prefix_parts_on_ && pre.kv.capacity > 0) prefix_parts_.put(pre.kv.capacity, std::move(pre.kv));
    prefixes_.erase(p);
  }
  int add_slot(int p) override {
    prefix_at(p).slots++;
    auto s = std::make_unique<Slot>();
    s->prefix = p;
    if (!free_suffix_parts_.empty()) s->kv = std::move(free_suffix_parts_.back()), s->kv.len = 0, free_suffix_parts_.pop_back();
    return slots_.put(std::move(s));
  }
  // Paged KV: admitted when the free blocks cover this slot's max_tokens positions on top of
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
    program_->forget(s);  // the handle may come back as another slot
    if (paged_) paged_->release(slot.paged);
    if (!paged_ && reserved_rows_ > 0 && slot.kv.capacity >= reserved_rows_) free_suffix_parts_.push_back(std::move(slot.kv));
    prefix_at(slot.prefix).slots--;
    slots_.erase(s);
  }
  int slot_length(int s) const override {
    const Slot& slot = slots_.at(s);
    return prefixes_.at(slot.prefix).kv.len + slot.kv.len;
  }
  void truncate_slot(int s, int length) override;
  void reserve(const RunShape& shape) override;
  DeviceCounts device_counts() const override {
    const DeviceCounters& c = device_counters();
    return {c.allocs.load(), c.frees.load(), c.syncs.load()};
  }
  PhaseTimes take_phase_times() override { return timer_.take(); }
  void profile_phases(bool on) override {
    use_device();
    timer_.enable(on);
  }
  Ceilings measure_ceilings() override;
  AheadStats ahead_stats() const override {
    AheadStats a = program_->stats();
    const AttentionPath::Counts c = attention_->counts();
    a.cascade_ahead = c.ahead, a.cascade_planned = c.planned;
    return a;
  }
  GraphStats graph_stats() const override {
    return graphs_ ? GraphStats{graphs_->launches(), graphs_->disabled_reason(), static_cast<long long>(graphs_->last_nodes())} : GraphStats{};
  }

 protected:
  // One decode step: a token per slot (the logits back, or sampled on the device with draws), or
  // runs of drafted tokens (cuda_step.cpp).
  void run_step(const DecodeStep& s) override;

 private:
  // Several engines may run on several threads, one device each: every call that touches the
  // device first makes this engine's current on the calling thread (cheap when it already is).
  void use_device() const { CUDA_CHECK(cudaSetDevice(device_)); }
  Prefix& prefix_at(int p) const { return prefixes_.at(p); }
  Slot& slot_at(int s) const { return slots_.at(s); }
  // The KV cache's format, as the kernels take it (kv_cache_: BF16 or FP8).
  KvFormat kv_format() const { return kv_cache_ == EngineOptions::Kv::FP8 ? KvFormat::FP8 : KvFormat::BF16; }
  std::size_t kv_row_bytes() const { return cuda::kv_row_bytes(kv_format(), static_cast<std::size_t>(c_.kv_dim()), c_.head_dim); }
  // Runs f inside the finer split's kernel group `name` (PhaseTimer::Detail; nothing when off).
  template <class F>
  void timed(const char* name, F&& f) {
    timer_.timed(name, std::forward<F>(f));
  }
  // Row r of a cache part's layer (layer: KvPart::k(l) or v(l); rows of kv_row_bytes()).
  std::uint16_t* kv_row_at(std::uint16_t* layer, std::size_t r) const {
    return reinterpret_cast<std::uint16_t*>(reinterpret_cast<std::uint8_t*>(layer) + r * kv_row_bytes());
  }
  // Set-up, sizing and prompts (cuda_engine.cpp).
  // Grows a KV part to hold `rows` rows (exact: no more), keeping its rows.
  void reserve(KvPart& part, int rows, bool exact = false);
  void scratch(int T);
  // Every buffer a decode step of up to T rows uses, sized for bucket_of(T) at once (activations,
  // logits, samples, the pointer arrays, the arena): a step inside the bucket allocates nothing.
  void size_for_bucket(int T);
  KvPart take_prefix_part(int rows);
  void reserve_prefix_parts(const std::vector<int>& lengths);
  // What follows a prompt's forward, in prefill and prefill_many: its length, and what the
  // attention path keeps of it.
  void finish_prefix(Prefix& p, int len);

  // A decode step (cuda_step.cpp): its program made (program_), the forward enqueued, eagerly or
  // from a CUDA graph, the logits to host_logits or (draws) only the samples copied back.
  void decode_rows(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const DeviceDraws* draws,
                   std::span<const int> runs = {});
  // CUDA graphs: everything host-side the launches of a step depend on (graph_cache.h).
  GraphKey graph_key(const StepProgram& s, const DeviceDraws* draws) const;

  // The forward (cuda_forward.cpp), as the CPU engine's. The step's device work (what a CUDA
  // graph may capture): the forward, then the logits in logits_ or (draws) the samples in samples_.
  void forward(const StepProgram& s, const DeviceDraws* draws);
  // One transformer layer over T rows; row t sits at position pos[t] and its K and V go to the
  // cache rows k_rows[t], v_rows[t] (device arrays); `attend` fills att_ from q_ and the caches.
  void layer(int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
             const std::function<void()>& attend);
  // The FFN half of layer l's plan.
  void ffn(const LayerPlan& plan, int l, int T);
  // One entry of a layer's plan (src/cuda/layer_plan.h).
  void launch(LayerLaunch op, int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
              const std::function<void()>& attend);
  // out (T, vocab) = lm_head(rmsnorm(x rows [first, first + T))), on the device; out: logits_
  // when null.
  void logits_rows(int first, int T, float* out = nullptr);
  void linear(const DevLinear& l, const float* x, int T, float* y);
  // x_ += l(in), the residual add fused into the linear path's kernel where it adds; in null: l's
  // input already quantized in act_q_ / act_s_.
  void residual_linear(const DevLinear& l, const float* in, int T);
  // The FP8 product of the activations in act_q_ / act_s_ and weights w (l's, or the tied table);
  // accumulate (where the linear path adds): added to y.
  void fp8_product(const DevLinear& l, const void* w, int T, float* y, bool accumulate = false);
  void quantize_input(const DevLinear& l, const float* x, int T);
  // An FP8 linear on activations already quantized into act_q_ / act_s_ (by a fused kernel).
  void linear_quantized(const DevLinear& l, int T, float* y);
  // Copies the column blocks of y (T, sum of widths) row-major into their own (T, width) arrays.
  void split_columns(const float* y, int T, std::initializer_list<std::pair<float*, int>> parts);

  struct StreamDeleter {
    void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
  };
  std::shared_ptr<const Weights> w_;
  const ModelConfig& c_;
  CudaOptions options_;  // as given: describe() reports them
  int device_ = 0;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_owner_;  // destroyed on every path out
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GemmAlgoCache> algo_cache_;  // GEMM autotuning (outlives gemm_)
  std::unique_ptr<Gemm> gemm_;
  DevTensor embed_, final_norm_;
  DevLinear lm_head_;
  std::vector<DevLayer> layers_;
  DeviceBuffer inv_freq_;
  HandleTable<Prefix> prefixes_{"prefix"};
  HandleTable<Slot> slots_{"slot"};

  // Every device buffer a decode step's launches touch, registered where declared (StepBuffer):
  // the CUDA graph key holds their addresses (graph_key). The paths' own buffers are in their
  // parts of the key.
  StepBuffers step_buffers_;
  // Activations for T tokens (device), fp32 unless said otherwise.
  StepBuffer x_{step_buffers_};          // (T, dim) the residual stream
  StepBuffer xn_{step_buffers_};         // (T, dim) normed
  StepBuffer q_{step_buffers_};          // (T, n_heads * head_dim)
  StepBuffer k_{step_buffers_};          // (T, n_kv_heads * head_dim)
  StepBuffer v_{step_buffers_};          // (T, n_kv_heads * head_dim)
  StepBuffer att_{step_buffers_};        // (T, n_heads * head_dim)
  StepBuffer o_{step_buffers_};          // (T, dim)
  StepBuffer gate_{step_buffers_};       // (T, hidden_dim)
  StepBuffer up_{step_buffers_};         // (T, hidden_dim)
  StepBuffer logits_{step_buffers_};     // (T, vocab_size)
  DeviceBuffer prefill_logits_;          // (prompts, vocab_size): prefill_many's last-row logits, copied back once
  StepBuffer act_q_{step_buffers_};      // (T, widest input) E4M3 codes: an FP8 GEMM's input
  StepBuffer act_s_{step_buffers_};      // (T) their scales
  StepBuffer act_bf16_{step_buffers_};   // (T, widest input) BF16: a BF16 GEMM's input
  StepBuffer fused_{step_buffers_};      // Fused q/k/v: (T, q + 2 kv) or (T, 2 hidden_dim), a fused GEMM's output
  StepArena arena_;        // a step's index arrays, one upload
  StepBuffer step_ptrs_{step_buffers_};  // (layers, 6, T) a step's cache row and attention pointers, expanded on the device
  std::unique_ptr<StepProgrammer> program_;  // each step's program, and the next one's made during it
  // Unpaged: slot parts of reserved_rows_ rows made by reserve(), handed to new slots and taken
  // back from released ones (no allocation at admission).
  std::vector<KvPart> free_suffix_parts_;
  // The prompts' KV parts made by reserve(), one per prompt of the run at its length, taken at
  // prefill by best fit and put back at release_prefix (src/cuda/best_fit_parts.h).
  BestFitParts<KvPart> prefix_parts_;
  bool prefix_parts_on_ = false;
  int reserved_rows_ = 0;
  // CUDA graphs: what the padding rows read and write, nothing else: a 1-position prefix of
  // zeros (row 0; what the attention path keeps of it) and a scratch suffix row (row 1; with
  // paged KV the pool's scratch block instead).
  std::unique_ptr<Prefix> padding_;
  int sized_bucket_T_ = 0;  // size_for_bucket's bucket
  int scratch_T_ = 0;
  int sm_count_ = 1;
  std::unique_ptr<GraphCache> graphs_;  // CUDA graphs
  // The FP8 linear layers: cuBLASLt's, or small-M linear's kernels (linear_paths.h).
  std::unique_ptr<LinearPath> linear_;
  std::unique_ptr<PagedKv> paged_;  // Paged KV
  // Decode attention: the decode kernel, prefix-GEMM or cascade attention (attention_paths.h).
  std::unique_ptr<AttentionPath> attention_;
  // Device sampling: the samples (T ids, T logprobs) on the device, and a pinned host buffer
  // they come back to.
  StepBuffer samples_{step_buffers_};
  StepBuffer sample_ws_{step_buffers_};  // the sampler's passes (sample_token_workspace_bytes), grown before a step, never inside one
  PinnedBuffer pinned_;
  PhaseTimer timer_;
};

}  // namespace bestofn::cuda
