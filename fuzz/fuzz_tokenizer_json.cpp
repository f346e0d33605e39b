// libFuzzer target: loading tokenizer.json. Any bytes give a Tokenizer or a bestofn::Error; a
// tokenizer that loads must encode fixed texts into ids of its vocabulary, decode them, and stream
// them through the incremental decoder into valid UTF-8.
#include <string>
#include <vector>

#include "bestofn/util/error.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/utf8.h"
#include "fuzz_util.h"

using namespace bestofn;

namespace {

const std::vector<std::string> kTexts = {
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n", "  leading spaces\t\ttabs\r\n",
    "<s>[INST] hi [/INST]</s><|begin_of_text|><|eot_id|>", "héllo wörld 你好 🙂 \xD7\x90", "", " ",
    "x\x04y 12345 ▁▁a  b"};  // a control byte, digits, "▁▁"

void exercise(const Tokenizer& tok) {
  for (const auto& text : kTexts) {
    std::vector<int> ids;
    try {
      ids = tok.encode(text, tok.bos_id().has_value());
    } catch (const Error&) {
      continue;  // e.g. a character neither in the vocab nor covered by byte fallback or unk
    }
    for (int id : ids) fuzz::check(id >= 0 && id < tok.vocab_size(), "encode gave id " + std::to_string(id) + " outside the vocab");
    const std::string decoded = tok.decode(ids);
    IncrementalDecoder stream(tok);
    std::string streamed;
    for (int id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    fuzz::check(!utf8::first_invalid(streamed), "the incremental decoder gave invalid UTF-8");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = fuzz::write_scratch("tokenizer.json", fuzz::as_text(data, size));
  try {
    exercise(Tokenizer::load(path));
  } catch (const Error&) {
  }
  return 0;
}
