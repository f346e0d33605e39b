#pragma once
// Stop strings on incrementally decoded text: after each new piece of text, the earliest stop
// string that ends inside the new piece. Checked after every piece, this finds the first place
// where any stop string occurs in the whole text.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace bestofn {

struct StopMatch {
  std::size_t at = std::string::npos;  // where the stop string starts in the text
  const std::string* stop = nullptr;   // which one (nullptr: none matched)
};

// The earliest occurrence, over `stops` then `more`, of a stop string that ends after
// text[before - 1] (the text before `before` was checked already). Empty stop strings never
// match; on a tie the first listed wins.
StopMatch find_stop(std::string_view text, std::size_t before, std::span<const std::string> stops,
                    std::span<const std::string> more = {});

}  // namespace bestofn
