#pragma once
// UTF-8 helpers for the tokenizer and the incremental decoder.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bestofn::utf8 {

// Length of the well-formed UTF-8 sequence starting at s[i] (1-4), or 0 when it is malformed or
// truncated (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
std::size_t sequence_length(std::string_view s, std::size_t i);

// Byte offset of the first malformed sequence, or nullopt when `s` is valid UTF-8.
std::optional<std::size_t> first_invalid(std::string_view s);

// Like Rust's String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD.
std::string lossy(std::string_view s);

// How many bytes at the end of `s` are an incomplete (but so far valid) sequence: 0 to 3.
std::size_t incomplete_tail(std::string_view s);

// Encodes one code point.
void append(std::string& out, std::uint32_t cp);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace bestofn::utf8
