#pragma once
// The state behind bestofn::Tokenizer, shared by tokenizer_json.cpp (loading) and tokenizer.cpp
// (encoding and decoding).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <forward_list>
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
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  std::string from, to;  // Replace; Metaspace: from = the replacement, to = " "
  char strip_char = ' ';
  int strip_start = 0, strip_stop = 0;
  bool drop_first = false;  // Metaspace with a prepend scheme: the first token loses every replacement
};

// One step of the HF pre-tokenizer, applied to every piece in turn (pre_tokenizer.cpp).
//   Split:       the regex's matches become pieces of their own (HF Split "Isolated"; Digits;
//                ByteLevel's use_regex);
//   PrefixSpace: ByteLevel's add_prefix_space: " " before a piece that does not start with one;
//   Metaspace:   ' ' becomes `replacement`, which is put before the piece by the prepend scheme
//                (First: only the piece at the start of the input), and with `split` starts a
//                new piece at each occurrence (HF "MergedWithNext").
struct PreStep {
  enum Kind { Split, PrefixSpace, Metaspace } kind;
  Regex re;
  std::string replacement;
  enum Prepend { Always, First, Never } prepend = Always;
  bool split = true;
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
  std::array<int, 256> byte_ids{};      // byte-level: the token of each byte's char (-1: none)
  std::array<int, 256> fallback_ids{};  // the <0xNN> tokens (-1: none)
  int missing_bytes = 0;                // byte-level: how many bytes have no token
  // The token of each single-code-point string (the BPE's starting symbols).
  std::unordered_map<std::string_view, int> char_ids;

  // Added tokens, matched leftmost-longest before everything else.
  std::vector<AddedToken> added;
  std::array<bool, 256> added_first_byte{};

  // Normalizer steps in order: NFC when `nfc`, Prepend(to) when `prepend`, else Replace(from -> to).
  struct NormStep {
    bool prepend = false;
    std::string from, to;
    bool nfc = false;
  };
  std::vector<NormStep> normalizer;

  // Pre-tokenizer: the steps in turn, then the byte-level mapping when `byte_level` (ByteLevel is
  // the last step).
  std::vector<PreStep> pre_steps;
  bool byte_level = false;

  std::vector<DecodeStep> decoder;
  std::vector<std::string> token_bytes;  // per id, for the incremental decoder
  int strip_leading = 0;

  std::optional<int> bos, eos;
  // What encode(add_bos) adds (HF's add_special_tokens): the post-processor's TemplateProcessing
  // ("single") before and after the text; without one, tokenizer_config's bos_token / eos_token
  // where its add_bos_token / add_eos_token are true (transformers' Llama tokenizers build their
  // template from those flags); else nothing. bos is `before` when that is one id.
  bool has_template = false;
  std::vector<int> template_before, template_after;
  std::string chat_template;

  // pre-token piece -> ids (the same words recur in code).
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int>> cache;

  void load(const std::string& tokenizer_json, const std::string* config_json_path);
  void encode_piece(std::string_view piece, std::vector<int>& out) const;
  // HF BPE's merge_word before the merges: each symbol's token, else its <0xNN> tokens (byte
  // fallback), else the unk token (fused when fuse_unk), else nothing: HF drops it.
  void start_symbols(std::string_view piece, std::vector<int>& ids) const;
  // at_start: the segment begins the input (Metaspace's prepend scheme "first").
  void encode_segment(std::string_view text, bool at_start, std::vector<int>& out) const;
  // The pieces of `text` after the pre-tokenizer steps; text they write goes to `owned`.
  std::vector<std::string_view> pre_tokenize(std::string_view text, bool at_start, std::forward_list<std::string>& owned) const;
  std::string decode(std::span<const int> ids) const;
  // The bytes of one token through the per-token decoder steps (Replace, ByteFallback,
  // ByteLevel, Metaspace), with no U+FFFD replacement: a token may hold part of a character.
  // first: the token starts the decoded ids (Metaspace drops its replacements).
  std::string raw_bytes(const std::string& token, bool first = false) const;
};

// Unicode NFC of valid UTF-8 (nfc.cpp).
std::string nfc(std::string_view text);

// GPT-2's byte <-> printable-char table for byte-level BPE: bytes 33-126, 161-172 and 174-255 are
// themselves, the rest map to U+0100 upwards in byte order.
const std::array<std::uint32_t, 256>& byte_to_unicode();
// The inverse: the byte for a code point of that table, or -1.
int unicode_to_byte(std::uint32_t cp);
// A byte-level token's bytes; nullopt when a char is outside the table.
std::optional<std::string> byte_level_bytes(std::string_view token);

}  // namespace bestofn
