#include "bestofn/util/utf8.h"

namespace bestofn::utf8 {
namespace {

// The valid range of the second byte after each lead byte (RFC 3629 table 3-7).
bool second_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

std::size_t expected_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Bytes of a valid prefix of the sequence at s[i] (at least 1 for a bad lead byte: the maximal
// invalid subpart), and whether the sequence is complete.
std::size_t valid_prefix(std::string_view s, std::size_t i, bool* complete) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const std::size_t n = expected_length(lead);
  *complete = false;
  if (n == 0) return 1;
  if (n == 1) {
    *complete = true;
    return 1;
  }
  std::size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return k;
  }
  *complete = k == n;
  return k;
}

}  // namespace

std::size_t sequence_length(std::string_view s, std::size_t i) {
  bool complete = false;
  const std::size_t k = valid_prefix(s, i, &complete);
  return complete ? k : 0;
}

std::optional<std::size_t> first_invalid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    bool complete = false;
    const std::size_t k = valid_prefix(s, i, &complete);
    if (complete)
      out.append(s.substr(i, k));
    else
      out.append(kReplacement);
    i += k;
  }
  return out;
}

std::size_t incomplete_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is valid so far but unfinished.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: keep looking for the lead
    bool complete = false;
    const std::size_t k = valid_prefix(s, i, &complete);
    return (!complete && k == back && expected_length(b) > back) ? back : 0;
  }
  return 0;
}

void append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace bestofn::utf8
