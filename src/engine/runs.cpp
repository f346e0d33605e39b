// The default of Engine::decode_runs and truncate_slot for engines that do not verify drafts:
// runs of one token are a decode step; anything longer is refused in one line.
#include <algorithm>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"

namespace bestofn {

std::string Engine::why_no_runs() const {
  return "the " + name() + " engine does not verify drafted tokens yet (several positions per slot in one step)";
}

void Engine::decode_runs(std::span<const int> slots, std::span<const int> counts, std::span<const int> tokens,
                         std::span<float> logits) {
  if (std::any_of(counts.begin(), counts.end(), [](int c) { return c != 1; }) || counts.size() != slots.size())
    throw Error(why_no_runs() + ": use --speculate 0");
  decode(slots, tokens, logits);
}

void Engine::truncate_slot(int slot, int length) {
  if (length != slot_length(slot))
    throw Error("the " + name() + " engine cannot drop positions of slot " + std::to_string(slot) + ": use --speculate 0");
}

}  // namespace bestofn
