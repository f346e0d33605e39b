#pragma once
// bestofn tokenize / detokenize: text <-> ids with a model's tokenizer.json
// (src/tokenizer/run_tokenize.cpp).
#include <string>

namespace bestofn {

struct TokenizeOptions {
  std::string tokenizer;  // tokenizer.json, or a model directory holding it
  std::string input = "-";  // a file (.gz too), or "-" for stdin
  std::string chat_format = "auto", chat_template, system;  // with chat (chat_template: a Jinja file)
  bool bos = false, chat = false;
};

// Prints the ids of the whole input as a JSON array (its text wrapped as one user turn with
// o.chat). Returns kExitOk; a tokenizer that does not load or text it cannot encode is an Error.
int run_tokenize(const TokenizeOptions& o);

// Prints the text of the input's JSON array of ids, exactly (no newline added). Returns kExitOk;
// anything but an array of ids in the vocabulary is an Error.
int run_detokenize(const TokenizeOptions& o);

}  // namespace bestofn
