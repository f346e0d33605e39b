#pragma once
// Where a CUDA decode step's time goes (bench: GEMMs / attention / the rest, and kernel group by
// kernel group in PhaseTimes::detail_ms): pairs of CUDA events
// recorded around each phase on the engine's stream, read back after the step's final
// synchronization. Off by default (profile_phases): a timed step then records nothing.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "cuda/cuda_check.h"

namespace bestofn::cuda {

class PhaseTimer {
 public:
  enum Phase { Gemm, Attention, Total };

  PhaseTimer() = default;
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  ~PhaseTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void set_stream(cudaStream_t s) { stream_ = s; }
  bool enabled() const { return on_; }
  void enable(bool on) {
    on_ = on;
    used_ = 0, pairs_.clear(), details_.clear();
  }

  // Records a start event now and the matching stop event when the scope ends (nothing when off).
  class Scope {
   public:
    Scope(PhaseTimer* t, Phase p) : t_(t && t->on_ && t->in_step_ ? t : nullptr), p_(p) {
      if (t_) start_ = t_->record();
    }
    ~Scope() {
      if (t_) t_->pairs_.push_back({p_, start_, t_->record()});
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseTimer* t_;
    Phase p_;
    std::size_t start_ = 0;
  };
  Scope scope(Phase p) { return Scope(this, p); }

  // One kernel group of the finer split (PhaseTimes::detail_ms), named with the current prefix
  // (set_detail_prefix: "lm_head." while the logits are made, so its GEMM is not the layers').
  // The details do not nest: each kernel is inside at most one.
  class Detail {
   public:
    Detail(PhaseTimer* t, const char* name) : t_(t && t->on_ && t->in_step_ ? t : nullptr), name_(name) {
      if (t_) start_ = t_->record();
    }
    ~Detail() {
      if (t_) t_->details_.push_back({t_->prefix_ + name_, start_, t_->record()});
    }
    Detail(const Detail&) = delete;
    Detail& operator=(const Detail&) = delete;

   private:
    PhaseTimer* t_;
    const char* name_;
    std::size_t start_ = 0;
  };
  Detail detail(const char* name) { return Detail(this, name); }
  // Runs f inside the kernel group `name` (nothing recorded when off).
  template <class F>
  void timed(const char* name, F&& f) {
    const Detail d = detail(name);
    f();
  }
  void set_detail_prefix(const char* prefix) { prefix_ = prefix; }

  // Scopes record only between begin_step and end_step (a decode step; not prefill).
  void begin_step() {
    in_step_ = true;
    used_ = 0, pairs_.clear(), details_.clear();  // what an interrupted step left
  }
  // After the stream has synchronized: adds this step's phases to the totals.
  void end_step() {
    in_step_ = false;
    if (!on_) return;
    for (const Pair& pr : pairs_) {
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[pr.start], events_[pr.stop]));
      (pr.phase == Gemm ? times_.gemm_ms : pr.phase == Attention ? times_.attention_ms : times_.total_ms) += ms;
    }
    for (const DetailPair& d : details_) {
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[d.start], events_[d.stop]));
      times_.detail_ms[d.name] += ms;
    }
    times_.steps++;
    used_ = 0, pairs_.clear(), details_.clear();
  }
  PhaseTimes take() {
    PhaseTimes t = times_;
    times_ = {};
    return t;
  }

 private:
  struct Pair {
    Phase phase;
    std::size_t start, stop;
  };
  std::size_t record() {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return used_++;
  }

  cudaStream_t stream_ = nullptr;
  bool on_ = false, in_step_ = false;
  std::vector<cudaEvent_t> events_;  // reused from step to step
  std::size_t used_ = 0;
  std::vector<Pair> pairs_;
  struct DetailPair {
    std::string name;
    std::size_t start, stop;
  };
  std::vector<DetailPair> details_;
  std::string prefix_;
  PhaseTimes times_;
};

}  // namespace bestofn::cuda
