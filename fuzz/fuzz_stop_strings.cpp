// libFuzzer target: the stop-string matcher as the scheduler uses it (find_stop after every new
// piece of decoded text). Input: up to 4 stop strings and the text's pieces, separated by 0xFF
// bytes; the first byte says how many of the fields are stop strings and how they split over the
// two lists. Checked against a plain search of the whole text: the first stop found is where the
// earliest occurrence of any stop string ends first, and the kept text contains no stop string.
#include <string>
#include <vector>

#include "bestofn/generate/stop_strings.h"
#include "fuzz_util.h"

using namespace bestofn;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int n_stops = data[0] % 5, n_first = (data[0] >> 3) % (n_stops + 1);
  std::vector<std::string> fields(1);
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] == 0xFF) fields.emplace_back();
    else fields.back() += static_cast<char>(data[i]);
  }
  if (static_cast<int>(fields.size()) <= n_stops) return 0;
  const std::vector<std::string> stops(fields.begin(), fields.begin() + n_first);
  const std::vector<std::string> more(fields.begin() + n_first, fields.begin() + n_stops);

  std::string text;
  StopMatch m;
  for (std::size_t f = static_cast<std::size_t>(n_stops); f < fields.size() && !m.stop; ++f) {
    const std::size_t before = text.size();
    text += fields[f];
    m = find_stop(text, before, stops, more);
  }
  // The plain search: the smallest end of any occurrence of any non-empty stop string.
  std::size_t first_end = std::string::npos;
  for (const auto* list : {&stops, &more})
    for (const auto& s : *list)
      if (!s.empty())
        if (const std::size_t at = text.find(s); at != std::string::npos) first_end = std::min(first_end, at + s.size());
  if (!m.stop) {
    fuzz::check(first_end == std::string::npos, "a stop string occurs but was not found");
    return 0;
  }
  fuzz::check(m.at + m.stop->size() <= text.size() && text.compare(m.at, m.stop->size(), *m.stop) == 0,
              "the match is not the stop string");
  fuzz::check(first_end != std::string::npos && m.at < first_end, "the match starts after the first occurrence ends");
  const std::string kept = text.substr(0, m.at);
  for (const auto* list : {&stops, &more})
    for (const auto& s : *list)
      fuzz::check(s.empty() || kept.find(s) == std::string::npos, "the kept text still holds a stop string");
  return 0;
}
