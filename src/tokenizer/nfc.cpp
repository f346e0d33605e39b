// Unicode NFC (canonical decomposition, canonical ordering, canonical composition: UAX #15), for
// HF's "NFC" normalizer. The data is generated (tools/gen_unicode_nfc_table.py); Hangul syllables
// are composed and decomposed by the algorithm of the Unicode standard (3.12).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bestofn/util/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace bestofn {
namespace {

struct CombiningClass {
  char32_t cp;
  std::uint8_t ccc;
};
struct Triple {
  char32_t a, b, c;
};
#include "tokenizer/unicode_nfc_data.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int combining_class(char32_t c) {
  const auto* it = std::lower_bound(std::begin(kCombiningClass), std::end(kCombiningClass), c,
                                    [](const CombiningClass& e, char32_t x) { return e.cp < x; });
  return it != std::end(kCombiningClass) && it->cp == c ? it->ccc : 0;
}

void decompose(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out += kLBase + s / kNCount;
    out += kVBase + (s % kNCount) / kTCount;
    if (s % kTCount) out += kTBase + s % kTCount;
    return;
  }
  const auto* it = std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), c, [](const Triple& e, char32_t x) { return e.a < x; });
  if (it == std::end(kDecomposition) || it->a != c) {
    out += c;
    return;
  }
  decompose(it->b, out);
  if (it->c) decompose(it->c, out);
}

std::optional<char32_t> compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) return a + (b - kTBase);
  const auto* it = std::lower_bound(std::begin(kComposition), std::end(kComposition), std::pair{a, b},
                                    [](const Triple& e, std::pair<char32_t, char32_t> x) { return std::pair{e.a, e.b} < x; });
  if (it != std::end(kComposition) && it->a == a && it->b == b) return it->c;
  return std::nullopt;
}

// The code point of the valid sequence of `n` bytes at s[i].
char32_t code_point(std::string_view s, std::size_t i, std::size_t n) {
  static constexpr unsigned char kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  char32_t c = static_cast<unsigned char>(s[i]) & kLeadMask[n];
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  return c;
}

// The code points of `text` (valid UTF-8).
std::u32string code_points(std::string_view text) {
  std::u32string out;
  for (std::size_t i = 0, n; i < text.size(); i += n) {
    n = std::max<std::size_t>(1, utf8::sequence_length(text, i));
    out += code_point(text, i, n);
  }
  return out;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Below U+0300 every character is its own NFC and none combines with what precedes it.
  const std::u32string cps = code_points(text);
  if (std::all_of(cps.begin(), cps.end(), [](char32_t c) { return c < 0x300; })) return std::string(text);
  std::u32string d;
  for (char32_t c : cps) decompose(c, d);
  // Canonical ordering: each run of non-starters sorted by combining class, stably.
  for (std::size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t x, char32_t y) { return combining_class(x) < combining_class(y); });
    i = j;
  }
  // Canonical composition: a character joins the last starter unless blocked by one of the same or
  // a higher class between them (256: a leading non-starter, which nothing joins).
  std::u32string r;
  std::size_t starter = 0;
  int last = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const int cc = combining_class(d[i]);
    if (i == 0) {
      r += d[i];
      last = cc ? 256 : 0;
      continue;
    }
    if (const auto c = compose(r[starter], d[i]); c && (last < cc || last == 0)) {
      r[starter] = *c;
      continue;
    }
    if (cc == 0) starter = r.size();
    last = cc;
    r += d[i];
  }
  std::string out;
  out.reserve(text.size());
  for (char32_t c : r) utf8::append(out, c);
  return out;
}

}  // namespace bestofn
