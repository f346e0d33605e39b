// The pre-tokenizer steps (HF Split, Digits, ByteLevel, Metaspace) and GPT-2's byte <-> unicode
// table; the loading is in tokenizer_json.cpp.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>

#include "bestofn/util/error.h"
#include "bestofn/util/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace bestofn {

const std::array<std::uint32_t, 256>& byte_to_unicode() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    std::uint32_t extra = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t[b] = printable ? b : extra++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(std::uint32_t cp) {
  static const std::array<int, 0x144> inverse = [] {
    std::array<int, 0x144> inv{};
    inv.fill(-1);
    for (std::size_t b = 0; b < 256; ++b) inv[byte_to_unicode()[b]] = static_cast<int>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::optional<std::string> byte_level_bytes(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    const auto lead = static_cast<unsigned char>(token[i]);
    std::uint32_t cp = lead;
    std::size_t n = 1;
    if (lead >= 0xC0 && lead < 0xE0 && i + 1 < token.size()) {  // the table stops at U+0143: two bytes at most
      cp = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
      n = 2;
    } else if (lead >= 0x80) {
      return std::nullopt;
    }
    const int b = unicode_to_byte(cp);
    if (b < 0) return std::nullopt;
    bytes += static_cast<char>(b);
    i += n;
  }
  return bytes;
}
namespace {

// Splits every piece by `re` into its matches and the gaps between them (HF Split, Isolated). A
// match that fails other than by finding nothing (PCRE2's match or depth limit, on a regex that
// backtracks without end) is an error naming `file`: taking the rest of the piece as one gap would
// encode the text otherwise than HF, without a word.
std::vector<std::string_view> split(const std::vector<std::string_view>& pieces, pcre2_code* re, const std::string& file) {
  std::vector<std::string_view> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(pcre2_match_data_create_from_pattern(re, nullptr),
                                                                          pcre2_match_data_free);
  pcre2_match_data* md = data.get();
  if (!md) throw std::bad_alloc();
  for (std::string_view p : pieces) {
    std::size_t pos = 0, gap = 0;
    while (pos < p.size()) {
      const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) msg[0] = 0;
        throw Error(file, "pre_tokenizer regex failed on the input at byte " + std::to_string(pos) + " of a " +
                              std::to_string(p.size()) + "-byte piece: " + reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[0] > gap) out.push_back(p.substr(gap, ov[0] - gap));
      if (ov[1] > ov[0]) out.push_back(p.substr(ov[0], ov[1] - ov[0]));
      gap = ov[1];
      pos = ov[1] > ov[0] ? ov[1] : ov[0] + std::max<std::size_t>(1, utf8::sequence_length(p, ov[0]));
    }
    if (gap < p.size()) out.push_back(p.substr(gap));
  }
  return out;
}

// HF Metaspace on each piece: ' ' -> replacement, the prepend scheme, then (split) a new piece at
// every replacement but a leading one. Only the first piece can be at the start of the input.
std::vector<std::string_view> metaspace(const std::vector<std::string_view>& pieces, const PreStep& m, bool at_start,
                                        std::forward_list<std::string>& owned) {
  std::vector<std::string_view> out;
  const std::string_view rep = m.replacement;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string_view p = pieces[i];
    // (HF checks the start after the replacement: a leading ' ' counts as one.)
    const bool prepend = (m.prepend == PreStep::Always || (m.prepend == PreStep::First && at_start && i == 0)) &&
                         !p.starts_with(rep) && !p.starts_with(' ');
    std::string_view s = p;
    if (prepend || p.find(' ') != std::string_view::npos) {
      std::string& t = owned.emplace_front(prepend ? rep : std::string_view());
      for (char c : p) {
        if (c == ' ') t += rep;
        else t += c;
      }
      s = t;
    }
    if (!m.split) {
      out.push_back(s);
      continue;
    }
    std::size_t begin = 0;
    for (std::size_t at = s.find(rep, 1); at != std::string_view::npos; at = s.find(rep, at + rep.size())) {
      out.push_back(s.substr(begin, at - begin));
      begin = at;
    }
    out.push_back(s.substr(begin));
  }
  return out;
}

}  // namespace

std::vector<std::string_view> Tokenizer::Impl::pre_tokenize(std::string_view text, bool at_start,
                                                            std::forward_list<std::string>& owned) const {
  std::vector<std::string_view> pieces{text};
  for (const PreStep& step : pre_steps) {
    switch (step.kind) {
      case PreStep::Split:
        pieces = split(pieces, step.re.get(), path);
        break;
      case PreStep::PrefixSpace:
        for (auto& p : pieces)
          if (!p.starts_with(' ')) p = owned.emplace_front(" ").append(p);
        break;
      case PreStep::Metaspace:
        pieces = metaspace(pieces, step, at_start, owned);
        break;
    }
  }
  return pieces;
}

}  // namespace bestofn
