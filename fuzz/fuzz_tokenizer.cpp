// libFuzzer target: the real Llama 3 and Mistral tokenizers (../shared/tokenizers) on any input.
//  - text: encode gives ids of the vocabulary (or an Error for invalid UTF-8), and for valid UTF-8
//    decode(encode(x)) == x for Llama 3 (byte-level BPE is lossless), and the incremental decoder
//    streams exactly decode(ids);
//  - ids (3 bytes each): decode never fails for ids of the vocabulary and gives valid UTF-8, and the
//    incremental decoder streams valid UTF-8 pieces whose concatenation is decode(ids) (for
//    byte fallback: when the ids' bytes are valid UTF-8).
#include <memory>
#include <string>
#include <vector>

#include "bestofn/util/error.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/utf8.h"
#include "fuzz_util.h"

using namespace bestofn;

namespace {

std::unique_ptr<Tokenizer> llama3, mistral;

std::string stream(const Tokenizer& tok, const std::vector<int>& ids) {
  IncrementalDecoder dec(tok);
  std::string out;
  for (int id : ids) {
    const std::string piece = dec.push(id);
    fuzz::check(!utf8::first_invalid(piece), "the incremental decoder gave an invalid UTF-8 piece");
    out += piece;
  }
  return out + dec.finish();
}

void text_case(const Tokenizer& tok, std::string_view text, bool lossless) {
  std::vector<int> ids;
  try {
    ids = tok.encode(text, false);
  } catch (const Error&) {
    fuzz::check(utf8::first_invalid(text).has_value(), "encode refused valid UTF-8");
    return;
  }
  fuzz::check(!utf8::first_invalid(text), "encode accepted invalid UTF-8");
  for (int id : ids) fuzz::check(id >= 0 && id < tok.vocab_size(), "encode gave an id outside the vocab");
  const std::string decoded = tok.decode(ids);
  if (lossless) fuzz::check(decoded == text, tok.path() + ": decode(encode(x)) != x");
  fuzz::check(stream(tok, ids) == decoded, tok.path() + ": streamed text != decode(ids) for encoded text");
}

void ids_case(const Tokenizer& tok, const std::uint8_t* data, std::size_t size) {
  std::vector<int> ids;
  for (std::size_t i = 0; i + 2 < size; i += 3) ids.push_back(((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]) % tok.vocab_size());
  const std::string decoded = tok.decode(ids);
  fuzz::check(!utf8::first_invalid(decoded), tok.path() + ": decode gave invalid UTF-8");
  const std::string streamed = stream(tok, ids);
  // Byte fallback (Mistral): HF turns a run of <0xNN> tokens that is not valid UTF-8 into one
  // U+FFFD per byte, valid characters of the run included; the stream has emitted those already
  // and marks each maximal invalid subpart instead. Both are valid UTF-8; they agree otherwise.
  std::string raw;
  for (int id : ids) raw += tok.token_bytes(id);
  if (tok.byte_level() || !utf8::first_invalid(raw)) fuzz::check(streamed == decoded, tok.path() + ": streamed text != decode(ids)");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  llama3 = std::make_unique<Tokenizer>(Tokenizer::load(fuzz::shared_path("tokenizers/llama3")));
  mistral = std::make_unique<Tokenizer>(Tokenizer::load(fuzz::shared_path("tokenizers/mistral")));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  ++data, --size;
  const Tokenizer& tok = (mode & 1) ? *mistral : *llama3;
  if (mode & 2) ids_case(tok, data, size);
  else text_case(tok, fuzz::as_text(data, size), /*lossless=*/!(mode & 1));
  return 0;
}
