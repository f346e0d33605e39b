// libFuzzer target: the UTF-8 helpers and incremental decoding. The first byte seeds where the
// rest is cut into pieces; the pieces go through the incremental decoder's loop (hold back
// incomplete_tail, emit lossy of the rest), which must give exactly lossy(whole) and only valid
// UTF-8. lossy must agree with first_invalid and with sequence_length.
#include <string>

#include "bestofn/util/utf8.h"
#include "fuzz_util.h"

using namespace bestofn;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  unsigned cut = data[0] | 1u;
  const std::string_view s = fuzz::as_text(data + 1, size - 1);

  const std::string whole = utf8::lossy(s);
  fuzz::check(!utf8::first_invalid(whole), "lossy gave invalid UTF-8");
  fuzz::check((whole == s) == !utf8::first_invalid(s), "lossy and first_invalid disagree");
  if (const auto bad = utf8::first_invalid(s)) {
    fuzz::check(utf8::sequence_length(s, *bad) == 0, "first_invalid at a valid sequence");
    fuzz::check(!utf8::first_invalid(s.substr(0, *bad)), "invalid bytes before first_invalid");
  }
  const std::size_t tail = utf8::incomplete_tail(s);
  fuzz::check(tail <= 3 && tail <= s.size(), "incomplete_tail out of range");
  if (tail) fuzz::check(utf8::sequence_length(s, s.size() - tail) == 0, "incomplete_tail held back a complete sequence");

  // The incremental decoder's loop over pieces of 1..8 bytes.
  std::string pending, streamed;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = std::min<std::size_t>(s.size() - i, 1 + (cut & 7));
    cut = cut * 1103515245u + 12345u;
    pending.append(s.substr(i, n));
    i += n;
    const std::size_t keep = utf8::incomplete_tail(pending);
    const std::string piece = utf8::lossy(std::string_view(pending).substr(0, pending.size() - keep));
    fuzz::check(!utf8::first_invalid(piece), "a streamed piece is invalid UTF-8");
    streamed += piece;
    pending.erase(0, pending.size() - keep);
  }
  streamed += utf8::lossy(pending);
  fuzz::check(streamed == whole, "streamed lossy != lossy of the whole");

  // append() round-trips every scalar value read from the input.
  for (std::size_t i = 0; i + 2 < s.size(); i += 3) {
    std::uint32_t cp = ((static_cast<std::uint32_t>(data[1 + i]) << 16) | (data[2 + i] << 8) | data[3 + i]) % 0x110000;
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string enc;
    utf8::append(enc, cp);
    fuzz::check(utf8::sequence_length(enc, 0) == enc.size(), "append gave a malformed sequence");
  }
  return 0;
}
