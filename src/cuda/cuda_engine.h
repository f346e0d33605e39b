#pragma once
// The CUDA engine's class (src/cuda/cuda_engine.cpp: set-up, the forward's layers, prefill;
// src/cuda/cuda_step.cpp: a decode step, its index arrays and its CUDA graph key). Internal to
// bestofn_cuda: the rest of the program reaches it through make_cuda_engine (cuda_api.h).
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"
#include "bestofn/model/weights.h"
#include "util/handle_table.h"
#include "cuda/cascade_attention.h"
#include "cuda/cuda_check.h"
#include "cuda/dev_weights.h"
#include "cuda/device_buffer.h"
#include "cuda/gemm.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"
#include "cuda/layer_plan.h"
#include "cuda/paged_kv.h"
#include "cuda/best_fit_parts.h"
#include "cuda/phase_timer.h"
#include "cuda/plan.h"
#include "cuda/prefix_attention.h"
#include "cuda/step_arena.h"
#include "cuda/step_ahead.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {

// Prefix-GEMM attention: the fewest rows of one prefix in a step for the prefix GEMMs to be used.
constexpr int kMinPrefixGemmRows = 2;

// K and V of one sequence part (a prefix, or a slot's suffix): cache rows in the engine's KvFormat
// (row_bytes each), every layer in one allocation: layer l's `capacity` K rows, then its V rows, so
// layer l sits at base + l x (2 capacity row_bytes) (layout(): what a step's row descriptor carries,
// and expand_step_pointers_cuda turns into the per-layer pointers on the device). One allocation
// rather than 2 x layers: a slot's part is one cudaMalloc (64 per slot before, at 32 layers) and
// its growth one 2-D copy, and nothing needs uploading when it moves; separate buffers would need
// a per-layer base table on the device, uploaded again on every growth.
struct KvPart {
  DeviceBuffer buf;
  std::size_t row_bytes = 0;
  int len = 0, capacity = 0;
  std::uint16_t* k(int l) const { return row_at(2 * static_cast<std::size_t>(l) * static_cast<std::size_t>(capacity)); }
  std::uint16_t* v(int l) const { return row_at((2 * static_cast<std::size_t>(l) + 1) * static_cast<std::size_t>(capacity)); }
  KvLayout layout() const {
    const auto base = reinterpret_cast<std::uintptr_t>(buf.get());
    const std::uint64_t half = static_cast<std::uint64_t>(capacity) * row_bytes;
    return {base, base + half, 2 * half};
  }

 private:
  std::uint16_t* row_at(std::size_t r) const { return reinterpret_cast<std::uint16_t*>(buf.get<std::uint8_t>() + r * row_bytes); }
};

// Prefix-GEMM attention: a prompt's K/V widened to F32 for the prefix GEMMs, every layer in one
// allocation (layer l's `capacity` K rows of kv_dim floats, then its V rows), taken at prefill from
// a pool that reserve() filled, as the KV parts are (no cudaMalloc inside a run).
struct F32KvPart {
  DeviceBuffer buf;
  std::size_t kv_dim = 0;
  int capacity = 0;
  float* k(int l) const { return buf.get<float>() + 2 * static_cast<std::size_t>(l) * rows(); }
  float* v(int l) const { return buf.get<float>() + (2 * static_cast<std::size_t>(l) + 1) * rows(); }

 private:
  std::size_t rows() const { return static_cast<std::size_t>(capacity) * kv_dim; }
};

struct Prefix {
  KvPart kv;
  int slots = 0;
  F32KvPart wide;         // Prefix-GEMM attention: the K/V widened to F32
  int cascade_page = -1;  // Cascade attention: the first page of its run in the page pool
};

struct Slot {
  int prefix = -1;
  KvPart kv;        // contiguous KV: the suffix rows; paged KV: kv.len only (the rows are in blocks)
  PagedSlot paged;  // Paged KV: the block table and the promise
};

// It is its own statistics view (bench, the GPU tests).
class CudaEngine final : public Engine, public EngineStatistics {
 public:
  CudaEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt);
  ~CudaEngine() override {
    cudaSetDevice(device_);  // the buffers below are freed on the device they live on
    cudaStreamSynchronize(stream_);
  }
  const ModelConfig& config() const override { return c_; }
  std::string name() const override { return "cuda"; }
  EngineDescription describe() const override;
  EngineOptions::Kv kv_cache() const override { return kv_ == KvFormat::FP8 ? EngineOptions::Kv::FP8 : EngineOptions::Kv::BF16; }
  int prefill(std::span<const int> tokens, std::span<float> last_logits) override;
  // One forward per pass of plan_prefill_passes (the GEMMs over all its rows), one attention
  // launch per layer for all its segments, every prompt's last-row logits copied back once.
  std::vector<int> prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                int max_pass_tokens) override;
  void release_prefix(int p) override {
    use_device();
    Prefix& pre = prefix_at(p);
    if (pre.slots > 0) throw Error("release_prefix: prefix " + std::to_string(p) + " still has slots");
    if (cascade_ && pre.cascade_page >= 0) cascade_->release_prefix(pre.cascade_page);
    if (prefix_parts_on_ && pre.kv.capacity > 0) prefix_parts_.put(pre.kv.capacity, std::move(pre.kv));
    if (prefix_parts_on_ && pre.wide.capacity > 0) f32_prefix_parts_.put(pre.wide.capacity, std::move(pre.wide));
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
    if (ahead_) ahead_->forget(s);  // the handle may come back as another slot
    if (paged_) paged_->release(slot.paged);
    if (!paged_ && reserved_rows_ > 0 && slot.kv.capacity >= reserved_rows_) free_suffix_parts_.push_back(std::move(slot.kv));
    prefix_at(slot.prefix).slots--;
    slots_.erase(s);
  }
  int slot_length(int s) const override {
    const Slot& slot = slots_.at(s);
    return prefixes_.at(slot.prefix).kv.len + slot.kv.len;
  }
  // Speculation: runs of positions per slot as consecutive rows of one step (StepRow::run), every
  // row's K/V written before any row attends, each attending to its slot up to its own position;
  // not with cascade attention or prefix-GEMM attention, whose attention plans rows per prefix group.
  EngineCapabilities capabilities() const override {
    const bool runs = !cascade_ && !prefix_gemm_;
    return {runs, runs ? std::string() : "the cuda engine does not verify drafted tokens with --cascade-attention or --cuda-prefix-gemm",
            device_sampling_};
  }
  EngineStatistics& statistics() override { return *this; }
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
  AheadStats ahead_stats() const override { return ahead_stats_; }
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
  std::size_t kv_row_bytes() const { return cuda::kv_row_bytes(kv_, static_cast<std::size_t>(c_.kv_dim()), c_.head_dim); }
  // Runs f inside the finer split's kernel group `name` (PhaseTimer::Detail; nothing when off).
  template <class F>
  void timed(const char* name, F&& f) {
    const auto d = timer_.detail(name);
    f();
  }
  // Row r of a cache part's layer (layer: KvPart::k(l) or v(l); rows of kv_row_bytes()).
  std::uint16_t* kv_row_at(std::uint16_t* layer, std::size_t r) const {
    return reinterpret_cast<std::uint16_t*>(reinterpret_cast<std::uint8_t*>(layer) + r * kv_row_bytes());
  }
  void drop_cascade_pages(Prefix& p);
  // Cascade attention: a prompt's rows copied into the page pool; its first page.
  int add_cascade_prefix(const KvPart& part) {
    std::vector<const std::uint16_t*> k(static_cast<std::size_t>(c_.n_layers)), v(k.size());
    for (int l = 0; l < c_.n_layers; ++l) k[static_cast<std::size_t>(l)] = part.k(l), v[static_cast<std::size_t>(l)] = part.v(l);
    return cascade_->add_prefix(k, v, part.len);
  }
  void reserve(KvPart& part, int rows, bool exact = false);
  void scratch(int T);
  // Every buffer a decode step of up to T rows uses, sized for bucket_of(T) at once (activations,
  // logits, samples, the pointer arrays, the arena): a step inside the bucket allocates nothing.
  void size_for_bucket(int T);
  void linear(const DevLinear& l, const float* x, int T, float* y);
  // x_ += l(in), the residual add fused into small-M linear's kernel where it runs; in null: l's
  // input already quantized in act_q_ / act_s_.
  void residual_linear(const DevLinear& l, const float* in, int T);
  // The FP8 product of the activations in act_q_ / act_s_ and weights w (l's, or the tied table);
  // accumulate (small_m_takes only): added to y.
  void fp8_product(const DevLinear& l, const void* w, int T, float* y, bool accumulate = false);
  // Small-M linear's kernel runs l for T rows (an FP8 layer of 1..8 rows).
  bool small_m_takes(const DevLinear& l, int T) const;
  void quantize_input(const DevLinear& l, const float* x, int T);
  // An FP8 linear on activations already quantized into act_q_ / act_s_ (by a fused kernel).
  void linear_quantized(const DevLinear& l, int T, float* y);
  // One transformer layer over T rows; row t sits at position pos[t] and its K and V go to the
  // cache rows k_rows[t], v_rows[t] (device arrays); `attend` fills att_ from q_ and the caches.
  void layer(int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
             const std::function<void()>& attend);
  // Small-M linear's fused layer (src/cuda/layer_plan.h): plan's launches, one launcher call each.
  void layer_fused(const FusedLayerPlan& plan, int l, int T, const int* pos, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows,
                   const std::function<void()>& attend);
  // fused_plans_ and small_m_blocks_ from the options (small-M linear, small-M split,
  // the small-M grid cap), the layers' weights and the KV cache's format.
  void plan_fused_layers(const CudaOptions& o);
  // The arguments of small-M linear's kernel for l over T rows, its epilogue Rows into y.
  SmallMFused small_m_args(const DevLinear& l, int T, float* y, bool accumulate) const;
  void ffn(int l, int T);
  // out (T, vocab) = lm_head(rmsnorm(x rows [first, first + T))), on the device; out: logits_
  // when null.
  void logits_rows(int first, int T, float* out = nullptr);
  // What follows a prompt's forward, in prefill and prefill_many: its length, and (prefix-GEMM attention)
  // its K/V widened.
  void finish_prefix(Prefix& p, int len);
  // Device sampling: what decode_sample asks for.
  struct Draws {
    const SamplingParams& params;
    std::span<const std::uint64_t> prompt, candidate, step;
    std::span<Sample> out;
  };
  // A decode step prepared on the host (prepare_step): its batch, its index arrays uploaded into
  // arena_ (device addresses below), and the attention path it takes. With CUDA graphs the batch
  // is padded to its bucket (step_plan.h): every launch runs T rows, the first `real` of them the
  // batch's, the rest padding rows that touch only the scratch rows of padding_.
  struct StepPlan {
    int T = 0;                                   // rows of every launch (padded)
    int real = 0;                                // the batch's rows, first
    std::vector<Slot*> batch;
    StepLayout layout;                           // the arrays' offsets in arena_ (fixed per bucket)
    const int* tokens = nullptr;                 // (T)
    const int* pos = nullptr;                    // (T) each row's position
    const int* lens = nullptr;                   // (2 T) prefix lengths, then suffix lengths with this token
    const std::uint64_t* draws = nullptr;        // (3 T) device sampling: prompt, candidate, step indexes
    const int* map = nullptr;                    // (3 T) prefix-GEMM attention: the state-row map of `plan`
    const StepRowDesc* desc = nullptr;           // (T) each row's KV parts, expanded by forward into:
    std::uint16_t* const* rows = nullptr;        // (layers, 2, T) the cache rows this step writes: k, then v
    const std::uint16_t* const* ptrs = nullptr;  // (layers, 4, T) k_prefix, v_prefix, k_suffix, v_suffix
    const int* starts = nullptr;                 // (T) paged KV: row t's block table at tables + starts[t]
    const int* tables = nullptr;                 // Paged KV: the block tables
    int block = 0;                               // Paged KV: positions per block
    bool use_prefix = false;                     // Prefix-GEMM attention, where a prefix has enough rows
    PrefixStateMap plan;
    std::vector<std::vector<PrefixAttention::Group>> groups;  // (layers, prefix groups): their F32 K/V
    bool tiled = false;                          // Split attention: the tiled kernel
    int splits = 1;                              // Split attention: chunks per row
    float* partial = nullptr;                    // (splits > 1) the chunk states
    std::optional<CascadeStepPlan> cascade;      // Cascade attention: the step's groups and FlashInfer's schedule
  };
  // The host's part of a step: the batch checked, the index arrays laid out and uploaded; patched
  // from the speculation when it holds (patch_step), else in full (plan_step); then bind_step_arrays.
  // runs (speculation): each row's place in its slot's run (StepRow::run); empty: a plain step.
  StepPlan prepare_step(std::span<const int> slots, std::span<const int> tokens, const Draws* draws,
                        std::span<const int> runs = {});
  void plan_step(StepPlan& s, std::span<const int> slots, std::span<const int> tokens, const Draws* draws,
                 std::span<const int> runs = {});
  bool patch_step(StepPlan& s, std::span<const int> slots, std::span<const int> tokens, const Draws* draws);
  void bind_step_arrays(StepPlan& s, const Draws* draws);
  // While step s runs: step t+1 speculated into the next staging buffer (src/cuda/cuda_step_ahead.cpp).
  void speculate_next(std::span<const int> slots, const StepPlan& s, const Draws* draws);
  CascadeStepPlan plan_cascade(std::span<Slot* const> batch, int T, bool ahead = false);
  // The step's device work (what a CUDA graph may capture): the forward, then the logits in
  // logits_ or (draws) the samples in samples_.
  void forward(const StepPlan& s, const Draws* draws);
  void attend_decode(int l, const StepPlan& s);
  // One decode step of these rows; the logits to host_logits, or (draws) sampled on the device
  // and only the samples copied back.
  void decode_rows(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const Draws* draws,
                   std::span<const int> runs = {});
  // CUDA graphs: everything host-side the launches of a step depend on (graph_cache.h).
  GraphKey graph_key(const StepPlan& s, const Draws* draws) const;
  // Copies the column blocks of y (T, sum of widths) row-major into their own (T, width) arrays.
  void split_columns(const float* y, int T, std::initializer_list<std::pair<float*, int>> parts);
  void widen_prefix(Prefix& p);

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

  // Activations for T tokens (device), fp32 unless said otherwise.
  DeviceBuffer x_;         // (T, dim) the residual stream
  DeviceBuffer xn_;        // (T, dim) normed
  DeviceBuffer q_;         // (T, n_heads * head_dim)
  DeviceBuffer k_;         // (T, n_kv_heads * head_dim)
  DeviceBuffer v_;         // (T, n_kv_heads * head_dim)
  DeviceBuffer att_;       // (T, n_heads * head_dim)
  DeviceBuffer o_;         // (T, dim)
  DeviceBuffer gate_;      // (T, hidden_dim)
  DeviceBuffer up_;        // (T, hidden_dim)
  DeviceBuffer logits_;    // (T, vocab_size)
  DeviceBuffer prefill_logits_;  // (prompts, vocab_size): prefill_many's last-row logits, copied back once
  DeviceBuffer act_q_;     // (T, widest input) E4M3 codes: an FP8 GEMM's input
  DeviceBuffer act_s_;     // (T) their scales
  DeviceBuffer act_bf16_;  // (T, widest input) BF16: a BF16 GEMM's input
  DeviceBuffer fused_;     // Fused q/k/v: (T, q + 2 kv) or (T, 2 hidden_dim), a fused GEMM's output
  DeviceBuffer attn_work_; // Split attention: the chunk states
  StepArena arena_;        // a step's index arrays, one upload
  DeviceBuffer step_ptrs_; // (layers, 6, T) a step's cache row and attention pointers, expanded on the device
  std::unique_ptr<StepPlanner> planner_;
  std::vector<StepRow> step_rows_;  // the batch's descriptors, reused from step to step
  // Step t+1 prepared while step t runs (off with prefix-GEMM attention).
  std::unique_ptr<StepAhead> ahead_;
  std::vector<StepRow> spec_rows_, fresh_rows_;
  std::vector<Slot*> spec_batch_;  // the speculated rows' slots
  std::optional<CascadeStepPlan> spec_cascade_;  // Cascade attention: the speculated batch's plan
  // Unpaged: slot parts of reserved_rows_ rows made by reserve(), handed to new slots and taken
  // back from released ones (no allocation at admission).
  std::vector<KvPart> free_suffix_parts_;
  // The prompts' KV parts made by reserve(), one per prompt of the run at its length, taken at
  // prefill by best fit and put back at release_prefix (src/cuda/best_fit_parts.h).
  BestFitParts<KvPart> prefix_parts_;
  BestFitParts<F32KvPart> f32_prefix_parts_;  // Prefix-GEMM attention: the F32 copies, filled alongside
  bool prefix_parts_on_ = false;
  KvPart take_prefix_part(int rows);
  F32KvPart take_f32_part(int rows);
  F32KvPart make_f32_part(int rows) const;
  void reserve_prefix_parts(const std::vector<int>& lengths);
  int reserved_rows_ = 0;
  AheadStats ahead_stats_;
  // CUDA graphs: what the padding rows read and write, nothing else: a 1-position prefix of
  // zeros (row 0; its F32 copy with prefix-GEMM attention) and a scratch suffix row (row 1; with
  // paged KV the pool's scratch block instead).
  std::unique_ptr<Prefix> padding_;
  int sized_bucket_T_ = 0;  // size_for_bucket's bucket
  KvFormat kv_ = KvFormat::BF16;  // The KV cache's format
  int scratch_T_ = 0;
  int sm_count_ = 1;
  bool split_attention_ = false;
  std::unique_ptr<GraphCache> graphs_;  // CUDA graphs
  bool prefix_gemm_ = false;
  bool small_m_ = false;  // Small-M linear
  int small_m_blocks_ = 0;  // the fused kernels' grid cap (sm_count_ x the small-M grid cap)
  bool small_m_pdl_ = false;  // Small-M PDL
  // Small-M linear (not small-M split) with split attention: the chunk states merged in the
  // attention launch by its last block per row (merge_counters_), not by a second launch.
  bool inline_merge_ = false;
  DeviceBuffer merge_counters_;
  // Small-M linear, 9-64 rows: the tensor-core kernel (a compute capability 8.9 device), its
  // slices' partial sums and their counters (0 between launches).
  bool small_m_mma_ = false;
  DeviceBuffer mma_work_, mma_counters_;
  // The fused layer's plan of layer l for T rows at [l * (kSmallMMaxRows + 1) + T] (n == 0: unfused).
  std::vector<FusedLayerPlan> fused_plans_;
  bool fused_lm_head_ = false;  // an FP8 lm_head (lm_head quantization): the final norm in its prologue
  std::unique_ptr<PrefixAttention> prefix_attn_;
  std::unique_ptr<PagedKv> paged_;  // Paged KV
  std::unique_ptr<CascadeAttention> cascade_;  // Cascade attention
  // Device sampling: the samples (T ids, T logprobs) on the device, and a pinned host buffer
  // they come back to.
  bool device_sampling_ = false;
  DeviceBuffer samples_;
  DeviceBuffer sample_ws_;  // the sampler's passes (sample_token_workspace_bytes), grown before a step, never inside one
  PinnedBuffer pinned_;
  PhaseTimer timer_;
};

}  // namespace bestofn::cuda
