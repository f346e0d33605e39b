#pragma once
// An engine that hands each call to another: the tests' wrappers derive from it, name themselves,
// and override what they count, limit or refuse. It has the model and KV cache of the engine it
// wraps, and keeps Engine's defaults where a wrapper has always had them: prefill_many (one
// prefill per prompt, through this engine's prefill), try_add_slot (add_slot), capabilities (no
// runs, no device sampling), statistics (none) and reserve (nothing).
#include <string>
#include <memory>
#include <span>
#include <utility>

#include "bestofn/engine/engine.h"

namespace bestofn::test {

class ForwardingEngine : public Engine {
 public:
  ForwardingEngine(std::string name, std::unique_ptr<Engine> e) : Engine(std::move(name), e->config()), e_(std::move(e)) {
    kv_cache_ = e_->kv_cache();
  }
  int prefill(std::span<const int> t, std::span<float> l) override { return e_->prefill(t, l); }
  void release_prefix(int p) override { e_->release_prefix(p); }
  int add_slot(int p) override { return e_->add_slot(p); }
  void release_slot(int s) override { e_->release_slot(s); }
  int slot_length(int s) const override { return e_->slot_length(s); }

 protected:
  void run_step(const DecodeStep& s) override { e_->step(s); }
  std::unique_ptr<Engine> e_;
};

}  // namespace bestofn::test
