// bestofn tokenize / detokenize: text <-> ids with a model's tokenizer.json, for scripting and for
// checking what the model will see.
#include "bestofn/tokenizer/run_tokenize.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/text_file.h"

namespace bestofn {

int run_tokenize(const TokenizeOptions& o) {
  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  const std::string text = read_text_input(o.input);
  std::vector<int> ids;
  const ChatTemplate chat = o.chat ? chat_template(tok, o.chat_format, o.chat_template) : ChatTemplate{};
  try {
    if (o.chat)
      ids = encode_chat(tok, chat, o.system, text);
    else
      ids = tok.encode(text, o.bos);
  } catch (const Error& e) {
    throw Error(input_name(o.input), e.what());
  }
  std::cout << nlohmann::json(ids).dump() << "\n";
  return kExitOk;
}

int run_detokenize(const TokenizeOptions& o) {
  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  const std::string name = input_name(o.input);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_input(o.input));
  } catch (const nlohmann::json::exception& e) {
    throw Error(name, std::string("not a JSON array of token ids: ") + e.what());
  }
  if (!j.is_array()) throw Error(name, "expected a JSON array of token ids");
  std::vector<int> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= tok.vocab_size())
      throw Error(name, "id " + v.dump() + " is not in the vocabulary (0.." + std::to_string(tok.vocab_size() - 1) + ")");
    ids.push_back(v.get<int>());
  }
  std::cout << tok.decode(ids);
  return kExitOk;
}

}  // namespace bestofn
