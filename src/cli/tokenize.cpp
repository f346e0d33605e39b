// bestofn tokenize / detokenize: text <-> ids with a model's tokenizer.json, for scripting and for
// checking what the model will see.
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "cli/commands.h"
#include "cli/validators.h"

namespace bestofn::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer, input = "-", chat_format = "auto", system;
  bool bos = false, chat = false;
};

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  sub->footer(
      "The whole input is encoded byte for byte (a trailing newline is part of the text).\n"
      "Examples:\n"
      "  printf 'def add(a, b):' | bestofn tokenize --tokenizer ~/models/Llama-3.1-8B\n"
      "  bestofn tokenize --tokenizer tokenizer.json --chat --system 'Be terse.' question.txt");
  sub->add_option("--tokenizer", opt->tokenizer, "tokenizer.json, or a model directory holding it")->required()->check(non_empty());
  sub->add_option("FILE", opt->input, "Text file (UTF-8, may be .gz); - for stdin")->default_str("-");
  sub->add_flag("--bos", opt->bos, "Add the special tokens HF adds by default: the tokenizer's post-processor template (BOS for Llama models; off by default; --chat templates carry their own)");
  auto* chat = sub->add_flag("--chat", opt->chat, "Wrap the text as one user turn in the chat template");
  sub->add_option("--chat-format", opt->chat_format, "Chat format: auto (from tokenizer_config.json), llama3, llama2")
      ->check(CLI::IsMember({"auto", "llama3", "llama2"}))
      ->default_str("auto")
      ->needs(chat);
  sub->add_option("--system", opt->system, "System message for --chat")->needs(chat)->check(utf8_text());
  return [opt] {
    const Tokenizer tok = Tokenizer::load(opt->tokenizer);
    const std::string text = read_text_input(opt->input);
    std::vector<int> ids;
    const ChatFormat format = opt->chat ? chat_format(tok, opt->chat_format) : ChatFormat::Llama3;
    try {
      if (opt->chat)
        ids = encode_chat(tok, format, opt->system, text);
      else
        ids = tok.encode(text, opt->bos);
    } catch (const Error& e) {
      throw Error(input_name(opt->input), e.what());
    }
    std::cout << nlohmann::json(ids).dump() << "\n";
    return kExitOk;
  };
}

Runner add_detokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* sub = app.add_subcommand("detokenize", "Print the text of a JSON array of token ids, exactly");
  sub->footer(
      "The text is written as is, with no newline added. Special tokens are kept.\n"
      "Example:\n"
      "  echo '[9906, 1917]' | bestofn detokenize --tokenizer ~/models/Llama-3.1-8B");
  sub->add_option("--tokenizer", opt->tokenizer, "tokenizer.json, or a model directory holding it")->required()->check(non_empty());
  sub->add_option("FILE", opt->input, "JSON array of ids; - for stdin")->default_str("-");
  return [opt] {
    const Tokenizer tok = Tokenizer::load(opt->tokenizer);
    const std::string name = input_name(opt->input);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_input(opt->input));
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
  };
}

}  // namespace bestofn::cli
