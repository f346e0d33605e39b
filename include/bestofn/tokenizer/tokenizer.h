#pragma once
// Hugging Face tokenizer.json with a BPE model, in the two families Llama-architecture models ship:
//   byte-level BPE (Llama 3 / 3.1 / 3.2: Split regex + ByteLevel, ignore_merges; GPT-2 style
//   ByteLevel with its own regex, after Digits in SmolLM2), and
//   byte-fallback BPE (Llama 2, CodeLlama, Mistral: Prepend/Replace "▁" normalizer or the Metaspace
//   pre-tokenizer, <0xNN> tokens).
// encode() agrees with HF `tokenizers` id for id; decode() gives HF's text for the ids, without
// clean_up_tokenization_spaces (it rewrites code).
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bestofn {

class Tokenizer {
 public:
  // A tokenizer.json file, or a directory holding tokenizer.json (and tokenizer_config.json,
  // which gives the BOS/EOS tokens and the chat template). Throws bestofn::Error naming the file.
  static Tokenizer load(const std::filesystem::path& path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Added and special tokens in the text are matched first; the rest goes through the normalizer,
  // pre-tokenizer and BPE. `text` must be valid UTF-8. With add_bos, the special tokens HF adds
  // (add_special_tokens): the post-processor template's before and after the text (BOS first for
  // the Llama family); without a template, tokenizer_config's bos_token / eos_token where its
  // add_bos_token / add_eos_token say so; else none (a ByteLevel post-processor adds nothing).
  std::vector<int> encode(std::string_view text, bool add_bos = false) const;
  // HF decode(ids, skip_special_tokens=False). Throws for an id outside the vocabulary.
  std::string decode(std::span<const int> ids) const;

  // The bytes one token contributes to decoded text, before the decoder's whole-text steps
  // (Strip). For the incremental decoder.
  const std::string& token_bytes(int id) const;
  // token_bytes of the first token of a sequence (a Metaspace decoder drops its "▁"s).
  std::string first_token_bytes(int id) const;
  // Strip(" ", start=N) of the byte-fallback decoder: leading spaces removed from decoded text.
  int strip_leading_spaces() const;

  int vocab_size() const;  // highest id + 1
  std::optional<int> token_id(std::string_view token) const;  // vocab or added token
  std::string token(int id) const;                             // the vocabulary's string
  bool is_special(int id) const;
  std::optional<int> bos_id() const;
  std::optional<int> eos_id() const;
  bool byte_level() const;  // true: the Llama 3 family; false: byte-fallback
  // tokenizer_config.json's chat_template ("" when absent).
  const std::string& chat_template() const;
  const std::string& path() const;

  struct Impl;  // src/tokenizer/tokenizer_impl.h

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns generated ids into text as they come, emitting only complete UTF-8 characters, so that
// stop strings can be matched on the text so far. A malformed byte sequence becomes U+FFFD.
class IncrementalDecoder {
 public:
  // at_start: the ids begin a sequence, so the decoder's Strip applies to the first bytes.
  explicit IncrementalDecoder(const Tokenizer& tok, bool at_start = true);
  // The text that `id` completes (may be empty while a character is still incomplete).
  std::string push(int id);
  // The rest: an unfinished character becomes U+FFFD.
  std::string finish();

 private:
  const Tokenizer& tok_;
  std::string pending_;
  int strip_left_;
  bool first_;
};

}  // namespace bestofn
