// Engine's step (its checks against capabilities(), in one place, and its three uses), and the
// defaults: an engine that does not verify drafts (its capabilities, truncate_slot), samples on no
// device and measures nothing (statistics).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"

namespace bestofn {

EngineStatistics Engine::no_statistics_;

Engine::Engine(std::string name, const ModelConfig& config) : name_(std::move(name)), config_(&config) {
  capabilities_ = {false, "the " + name_ + " engine does not verify drafted tokens yet (several positions per slot in one step)", false};
}

void Engine::step(const DecodeStep& s) {
  if (!s.draws && s.counts.empty()) return run_step(s);  // a plain step: nothing to check it against
  const EngineCapabilities& can = capabilities();
  if (s.draws && !can.device_sampling) throw Error("the " + name() + " engine does not sample on its device");
  if (!s.counts.empty() && !can.runs) {
    // Runs of one token each are a plain step; anything longer is refused in one line.
    if (s.counts.size() != s.slots.size() || std::any_of(s.counts.begin(), s.counts.end(), [](int c) { return c != 1; }))
      throw Error(can.why_no_runs + ": use --speculate 0");
    DecodeStep plain = s;
    plain.counts = {};
    return run_step(plain);
  }
  run_step(s);
}

void Engine::decode(std::span<const int> slots, std::span<const int> tokens, std::span<float> logits) {
  step({slots, tokens, {}, logits, std::nullopt});
}

void Engine::decode_runs(std::span<const int> slots, std::span<const int> counts, std::span<const int> tokens,
                         std::span<float> logits) {
  // Empty counts would read as one token per slot: here they are a caller's mistake.
  if (counts.size() != slots.size()) throw Error("decode: slots and counts sizes disagree");
  step({slots, tokens, counts, logits, std::nullopt});
}

bool Engine::decode_sample(std::span<const int> slots, std::span<const int> tokens, const SamplingParams& params,
                           std::span<const std::uint64_t> prompt, std::span<const std::uint64_t> candidate,
                           std::span<const std::uint64_t> step_index, std::span<Sample> out) {
  if (!capabilities().device_sampling) return false;
  run_step({slots, tokens, {}, {}, DecodeStep::Draws{&params, prompt, candidate, step_index, out}});  // what step() would check, checked
  return true;
}

void Engine::truncate_slot(int slot, int length) {
  if (length != slot_length(slot))
    throw Error("the " + name() + " engine cannot drop positions of slot " + std::to_string(slot) + ": use --speculate 0");
}

}  // namespace bestofn
