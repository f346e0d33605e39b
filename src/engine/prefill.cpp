// Batched, chunked prefill (Engine::prefill_many): how the rows of several prompts are cut into
// forward passes, the checks every engine applies to its arguments, and the default of one
// prefill per prompt.
#include <algorithm>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"

namespace bestofn {

std::vector<std::vector<PrefillSegment>> plan_prefill_passes(std::span<const int> lengths, int max_tokens) {
  if (max_tokens < 1) throw Error("prefill: expected at least 1 token per pass, got " + std::to_string(max_tokens));
  std::vector<std::vector<PrefillSegment>> passes;
  int room = 0;  // rows left in the last pass
  for (std::size_t p = 0; p < lengths.size(); ++p) {
    if (lengths[p] < 1) throw Error("prefill: prompt " + std::to_string(p) + " is empty");
    for (int at = 0; at < lengths[p];) {
      if (room == 0) passes.emplace_back(), room = max_tokens;
      const int take = std::min(room, lengths[p] - at);
      passes.back().push_back({p, at, at + take});
      at += take, room -= take;
    }
  }
  return passes;
}

void check_prefill_many(const ModelConfig& c, std::span<const std::span<const int>> prompts, std::size_t logits_size,
                        int max_pass_tokens) {
  if (max_pass_tokens < 1) throw Error("prefill: expected at least 1 token per pass, got " + std::to_string(max_pass_tokens));
  if (logits_size != prompts.size() * static_cast<std::size_t>(c.vocab_size))
    throw Error("prefill: logits buffer of " + std::to_string(logits_size) + " floats for " + std::to_string(prompts.size()) +
                " prompts of vocabulary " + std::to_string(c.vocab_size));
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::string which = "prefill: prompt " + std::to_string(p);
    if (prompts[p].empty()) throw Error(which + " is empty");
    if (prompts[p].size() > static_cast<std::size_t>(c.max_position_embeddings))
      throw Error(which + " has " + std::to_string(prompts[p].size()) + " tokens, more than the context (" +
                  std::to_string(c.max_position_embeddings) + ")");
    for (int t : prompts[p])
      if (t < 0 || t >= c.vocab_size)
        throw Error(which + ": token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(c.vocab_size) + ")");
  }
}

std::vector<int> Engine::prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits, int max_pass_tokens) {
  check_prefill_many(config(), prompts, last_logits.size(), max_pass_tokens);
  const auto V = static_cast<std::size_t>(config().vocab_size);
  std::vector<int> ids;
  try {
    for (std::size_t p = 0; p < prompts.size(); ++p) ids.push_back(prefill(prompts[p], last_logits.subspan(p * V, V)));
  } catch (...) {
    for (int id : ids) release_prefix(id);
    throw;
  }
  return ids;
}

}  // namespace bestofn
