#include "bestofn/generate/stop_strings.h"

namespace bestofn {

StopMatch find_stop(std::string_view text, std::size_t before, std::span<const std::string> stops,
                    std::span<const std::string> more) {
  StopMatch best;
  auto check = [&](const std::string& s) {
    if (s.empty()) return;
    // An occurrence ending at or before `before` was seen by an earlier call.
    const std::size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const std::size_t at = text.find(s, from);
    if (at != std::string_view::npos && at < best.at) best = {at, &s};
  };
  for (const auto& s : stops) check(s);
  for (const auto& s : more) check(s);
  return best;
}

}  // namespace bestofn
