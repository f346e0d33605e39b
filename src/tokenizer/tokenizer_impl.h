#pragma once
// The state behind bestofn::Tokenizer, shared by tokenizer_json.cpp (loading) and tokenizer.cpp
// (encoding and decoding).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <memory>
#include <mutex>
#include <span>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bestofn/tokenizer/tokenizer.h"
#include "tokenizer/bpe.h"

namespace bestofn {

struct Pcre2Deleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using Regex = std::unique_ptr<pcre2_code, Pcre2Deleter>;

struct AddedToken {
  std::string content;
  int id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

// One step of the HF decoder chain, applied to the list of token strings.
struct DecodeStep {
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip } kind;
  std::string from, to;  // Replace
  char strip_char = ' ';
  int strip_start = 0, strip_stop = 0;
};

struct Tokenizer::Impl {
  std::string path;

  // Model: BPE.
  bpe::StringIds vocab;  // token -> id (vocab and added tokens)
  std::vector<std::string> id_to_token;
  std::vector<bool> special;
  bpe::MergeTable merges;
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  std::optional<int> unk_id;
  std::array<int, 256> byte_ids{};
  // Byte-fallback: the token of each single-code-point string (the BPE's starting symbols).
  std::unordered_map<std::string_view, int> char_ids;  // byte-level: the token of each byte's char; fallback: <0xNN> (-1: none)

  // Added tokens, matched leftmost-longest before everything else.
  std::vector<AddedToken> added;
  std::array<bool, 256> added_first_byte{};

  // Normalizer steps in order: Prepend(text) when `prepend`, else Replace(from -> to).
  struct NormStep {
    bool prepend = false;
    std::string from, to;
  };
  std::vector<NormStep> normalizer;

  // Pre-tokenizer: regexes that split pieces in turn (Split Isolated, ByteLevel use_regex), then
  // the byte-level mapping when `byte_level`.
  std::vector<Regex> splits;
  bool byte_level = false;

  std::vector<DecodeStep> decoder;
  std::vector<std::string> token_bytes;  // per id, for the incremental decoder
  int strip_leading = 0;

  std::optional<int> bos, eos;
  // The post-processor's TemplateProcessing ("single"), when there is one: the ids it puts before
  // and after the text (HF's add_special_tokens). bos is `before` when that is one id.
  bool has_template = false;
  std::vector<int> template_before, template_after;
  std::string chat_template;

  // pre-token piece -> ids (the same words recur in code).
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int>> cache;

  void load(const std::string& tokenizer_json, const std::string* config_json_path);
  void encode_piece(std::string_view piece, std::vector<int>& out) const;
  void encode_segment(std::string_view text, std::vector<int>& out) const;
  std::string decode(std::span<const int> ids) const;
  // The bytes of one token through the per-token decoder steps (Replace, ByteFallback,
  // ByteLevel), with no U+FFFD replacement: a token may hold part of a character.
  std::string raw_bytes(const std::string& token) const;
};

// GPT-2's byte <-> printable-char table for byte-level BPE: bytes 33-126, 161-172 and 174-255 are
// themselves, the rest map to U+0100 upwards in byte order.
const std::array<std::uint32_t, 256>& byte_to_unicode();
// The inverse: the byte for a code point of that table, or -1.
int unicode_to_byte(std::uint32_t cp);
// A byte-level token's bytes; nullopt when a char is outside the table.
std::optional<std::string> byte_level_bytes(std::string_view token);

}  // namespace bestofn
