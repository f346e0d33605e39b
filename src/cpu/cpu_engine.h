#pragma once
// The CPU reference engine's class: its forward (src/cpu/cpu_engine.cpp: embedding, layer, ffn,
// logits) and its attention (src/cpu/engine_attention.cpp) over the KV rows of src/cpu/kv_rows.h.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/error.h"
#include "cpu/kv_rows.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "util/handle_table.h"

namespace bestofn::cpu {

struct Prefix {
  int len = 0;
  int slots = 0;
  Cache kv;
};

struct Slot {
  int prefix = -1;
  Cache kv;  // the suffix
};

// The CPU engine measures its own decode time split: it is its statistics view too.
class CpuEngine final : public Engine, public EngineStatistics {
 public:
  CpuEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt);

  EngineDescription describe() const override {
    return {"cpu", "cpu", EngineDescription::CpuKernels{cpu::fp8_kernel_name(), cpu::wide_kernel_name()}, std::nullopt};
  }

  int prefill(std::span<const int> tokens, std::span<float> last_logits) override;
  std::vector<int> prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                int max_pass_tokens) override;
  void release_prefix(int p) override {
    if (prefixes_.at(p).slots > 0) throw Error("release_prefix: prefix " + std::to_string(p) + " still has slots");
    prefixes_.erase(p);
  }
  int add_slot(int p) override {
    prefix_at(p).slots++;
    auto s = std::make_unique<Slot>(Slot{p, Cache(c_.n_layers, kv_cache_, static_cast<std::size_t>(c_.kv_dim()), static_cast<std::size_t>(c_.head_dim))});
    return slots_.put(std::move(s));
  }
  void release_slot(int s) override {
    auto& slot = slot_at(s);
    prefix_at(slot.prefix).slots--;
    slots_.erase(s);
  }
  int slot_length(int s) const override {
    const Slot& slot = slots_.at(s);
    return prefixes_.at(slot.prefix).len + static_cast<int>(slot.kv.k[0].rows());
  }
  void truncate_slot(int s, int length) override;
  PhaseTimes take_phase_times() override { return std::exchange(times_, PhaseTimes{}); }

 protected:
  void run_step(const DecodeStep& s) override;

 private:
  using Clock = std::chrono::steady_clock;
  // Adds the time since t0 to *into when a decode step is being timed (timing_ set).
  void add_since(Clock::time_point t0, double PhaseTimes::* into) {
    if (timing_) times_.*into += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  void linear(const Linear& w, const float* x, std::size_t T, float* y) {
    const auto t0 = Clock::now();
    cpu::linear(w, x, T, y, pool_, strips_of(w));
    add_since(t0, &PhaseTimes::gemm_ms);
  }
  // xn_ = rmsnorm(x_) for T rows, the rows split over the pool (each computed as alone).
  void norm_rows(const Tensor& w, std::size_t T) {
    const auto d = static_cast<std::size_t>(c_.dim);
    const auto eps = static_cast<float>(c_.rms_norm_eps);
    float* out = xn_.data();
    const float* x = x_.data();
    pool_.run(T, [&](std::size_t t0, std::size_t t1) { cpu::rmsnorm(out + t0 * d, x + t0 * d, w, t1 - t0, d, eps); });
  }
  void linear_many(std::initializer_list<const Linear*> ws, const float* x, std::size_t T, std::initializer_list<float*> ys) {
    const auto t0 = Clock::now();
    std::array<const void*, 3> strips{};  // q/k/v or gate/up
    if (ws.size() > strips.size()) throw Error("linear_many: more layers than the engine shares an input among");
    std::size_t i = 0;
    for (const Linear* w : ws) strips[i++] = strips_of(*w);
    cpu::linear_many(std::span<const Linear* const>(ws.begin(), ws.size()), x, T, std::span<float* const>(ys.begin(), ys.size()), pool_,
                     std::span<const void* const>(strips.data(), ws.size()));
    add_since(t0, &PhaseTimes::gemm_ms);
  }
  // The packed weights of a layer of this model (nullptr for a layer without weights: packed_bytes 0).
  const void* strips_of(const Linear& l) const {
    const auto it = strips_.find(&l);
    return it == strips_.end() ? nullptr : it->second;
  }
  Prefix& prefix_at(int p) const { return prefixes_.at(p); }
  Slot& slot_at(int s) const { return slots_.at(s); }

  void resize(std::size_t T);
  void embed(std::span<const int> tokens);
  // rope_cs_ = every token's rotation angles (cpu::rope_angles), once per forward pass.
  void rope_angles(const std::vector<int>& pos);
  // One prompt's rows in a prefill pass: pass rows [row, row + end - begin) sit at positions
  // [begin, end) of `prefix`, whose cache holds the positions before begin from earlier passes.
  struct PassSegment {
    Prefix* prefix;
    std::size_t row;
    int begin, end;
  };
  // A forward pass of prefill_many over the segments of `pass`: the prompts' K/V appended to
  // their prefixes (made[prompt]), the logits of the prompts that end in it to their rows of
  // last_logits.
  void prefill_pass(std::span<const PrefillSegment> pass, std::span<const std::span<const int>> prompts,
                    const std::vector<std::unique_ptr<Prefix>>& made, std::span<float> last_logits);
  void attend_prefill(int layer, std::span<const PassSegment> segments);
  // The batch rows of each prefix in a decode step: attention shares the prefix's K/V among them.
  struct PrefixGroup {
    const Prefix* prefix;
    std::vector<std::size_t> rows;
  };
  std::vector<PrefixGroup> group_by_prefix(std::span<Slot* const> batch) const;
  // batch[t]: row t's slot (a slot's rows consecutive, at consecutive positions pos[t]): row t
  // attends to its slot's suffix up to its own position.
  void attend_decode(int layer, std::span<Slot* const> batch, const std::vector<int>& pos, const std::vector<PrefixGroup>& groups);
  // runs: boundaries of the row runs that append to one cache each, in order ({0, T}: all one).
  void layer(int l, const std::vector<int>& pos, const std::function<Cache&(std::size_t)>& cache_of, std::span<const std::size_t> runs,
             const std::function<void()>& attend);
  void ffn(int layer, std::size_t T);
  void logits_rows(std::size_t first, std::size_t T, float* out);

  std::shared_ptr<const Weights> w_;
  const ModelConfig& c_;
  cpu::ThreadPool pool_;
  std::vector<float> inv_freq_;
  std::vector<float> rope_cs_;  // (T, head_dim): each token's rope_angles in this forward pass
  struct FreeBytes {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint8_t, FreeBytes> arena_;      // every packed layer's strips
  std::map<const Linear*, const std::uint8_t*> strips_;  // layer -> its strips in arena_
  HandleTable<Prefix> prefixes_{"prefix"};
  HandleTable<Slot> slots_{"slot"};
  bool timing_ = false;  // inside decode: linear and attention time go to times_
  PhaseTimes times_;

  // Activations for T tokens.
  std::vector<float> x_;     // (T, dim) the residual stream
  std::vector<float> xn_;    // (T, dim) normed
  std::vector<float> q_;     // (T, n_heads * head_dim)
  std::vector<float> k_;     // (T, n_kv_heads * head_dim)
  std::vector<float> v_;     // (T, n_kv_heads * head_dim)
  std::vector<float> att_;   // (T, n_heads * head_dim)
  std::vector<float> o_;     // (T, dim)
  std::vector<float> gate_;  // (T, hidden_dim)
  std::vector<float> up_;    // (T, hidden_dim)
};

}  // namespace bestofn::cpu
