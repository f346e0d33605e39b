#include "bestofn/tokenizer/chat_template.h"

#include <filesystem>
#include <vector>

#include "bestofn/util/error.h"
#include "bestofn/tokenizer/tokenizer.h"

namespace bestofn {
namespace {

// Jinja's trim / Python's str.strip() on ASCII whitespace.
std::string_view strip(std::string_view s) {
  const char* ws = " \t\n\r\v\f";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// The format's markers must be the tokenizer's special tokens: otherwise "<|eot_id|>" or "<s>"
// would be encoded as plain text and the model would see no chat at all.
ChatFormat checked(const Tokenizer& tok, ChatFormat f) {
  const std::vector<const char*> needed = f == ChatFormat::Llama3
                                              ? std::vector<const char*>{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
                                              : std::vector<const char*>{"<s>"};
  for (const char* t : needed) {
    const auto id = tok.token_id(t);
    if (!id || !tok.is_special(*id))
      throw Error(tok.path(), std::string("the ") + (f == ChatFormat::Llama3 ? "llama3" : "llama2") + " chat format needs the special token " + t +
                                  ", which this tokenizer does not have (it would be encoded as plain text); choose another --chat-format");
  }
  return f;
}

}  // namespace

ChatFormat chat_format(const Tokenizer& tok, const std::string& name) {
  if (name == "llama3") return checked(tok, ChatFormat::Llama3);
  if (name == "llama2") return checked(tok, ChatFormat::Llama2);
  const std::string config = (std::filesystem::path(tok.path()).parent_path() / "tokenizer_config.json").string();
  if (name != "auto") throw Error("--chat-format: '" + name + "' is not one of auto, llama3, llama2");
  const std::string& t = tok.chat_template();
  if (t.empty())
    throw Error(config, std::string("no chat_template to choose a chat format from; built-in formats: ") + kSupportedChatFormats +
                            " (choose one with --chat-format)");
  if (t.find("<|start_header_id|>") != std::string::npos) return checked(tok, ChatFormat::Llama3);
  if (t.find("[INST]") != std::string::npos) return checked(tok, ChatFormat::Llama2);
  throw Error(config, std::string("unknown chat_template; built-in formats: ") + kSupportedChatFormats + " (choose one with --chat-format)");
}

std::string render_chat(ChatFormat format, std::string_view system, std::string_view user) {
  std::string s;
  const std::string_view sys = strip(system);
  if (format == ChatFormat::Llama3) {
    s = "<|begin_of_text|>";
    if (!system.empty()) s.append("<|start_header_id|>system<|end_header_id|>\n\n").append(sys).append("<|eot_id|>");
    s.append("<|start_header_id|>user<|end_header_id|>\n\n").append(strip(user)).append("<|eot_id|>");
    s.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
    return s;
  }
  // Llama 2: the system block joins the first user message, and the whole is stripped.
  std::string content;
  if (!system.empty()) content.append("<<SYS>>\n").append(system).append("\n<</SYS>>\n\n");
  content.append(user);
  return s.append("<s>[INST] ").append(strip(content)).append(" [/INST]");
}

std::vector<int> encode_chat(const Tokenizer& tok, ChatFormat format, std::string_view system, std::string_view user) {
  return tok.encode(render_chat(format, system, user), false);
}

}  // namespace bestofn
