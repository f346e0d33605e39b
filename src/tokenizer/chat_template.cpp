#include "bestofn/tokenizer/chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bestofn/tokenizer/jinja.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"

namespace bestofn {
namespace {

std::filesystem::path config_path(const Tokenizer& tok) { return std::filesystem::path(tok.path()).parent_path() / "tokenizer_config.json"; }

// A built-in template's markers must be the tokenizer's special tokens: otherwise "<|eot_id|>" or
// "<s>" would be encoded as plain text and the model would see no chat at all.
void check_markers(const Tokenizer& tok, const std::string& format) {
  const std::vector<const char*> needed = format == "llama2" ? std::vector<const char*>{"<s>"}
                                                             : std::vector<const char*>{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  for (const char* t : needed) {
    const auto id = tok.token_id(t);
    if (!id || !tok.is_special(*id))
      throw Error(tok.path(), "the " + format + " chat template needs the special token " + t +
                                  ", which this tokenizer does not have (it would be encoded as plain text); choose another --chat-format or --chat-template");
  }
}

// HF's special_tokens_map as the template sees it: tokenizer_config.json's bos_token and
// eos_token (a text or {"content": text}), when set. The tokenizer has already checked them.
void add_special_tokens(const Tokenizer& tok, nlohmann::ordered_json& vars) {
  const auto path = config_path(tok);
  if (!std::filesystem::exists(path)) return;
  const auto config = nlohmann::json::parse(read_text_file(path.string()), nullptr, false);
  if (!config.is_object()) return;
  for (const char* key : {"bos_token", "eos_token"}) {
    if (!config.contains(key)) continue;
    const auto& v = config[key];
    if (v.is_string()) vars[key] = v;
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) vars[key] = v["content"];
  }
}

}  // namespace

ChatTemplate chat_template(const Tokenizer& tok, const std::string& format, const std::string& file) {
  if (!file.empty()) return {read_text_file(file), file};
  if (format != "auto") {
    ChatTemplate t{builtin_chat_template(format), "the built-in " + format + " chat template"};
    check_markers(tok, format);
    return t;
  }
  if (tok.chat_template().empty())
    throw Error(config_path(tok).string(), std::string("no chat_template; choose a built-in one with --chat-format (") + kChatFormats +
                                               ") or a Jinja file with --chat-template");
  return {tok.chat_template(), config_path(tok).string() + " chat_template"};
}

std::string render_messages(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            const std::tm* now) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  // What transformers passes: the messages, tools and documents (None), add_generation_prompt,
  // and the special tokens.
  nlohmann::ordered_json vars = {{"messages", list}, {"tools", nullptr}, {"documents", nullptr}, {"add_generation_prompt", add_generation_prompt}};
  add_special_tokens(tok, vars);
  std::tm local{};
  if (!now) {
    const std::time_t clock = std::time(nullptr);
    localtime_r(&clock, &local);
    now = &local;
  }
  return render_jinja(t.source, t.name, vars, *now);
}

std::string render_chat(const ChatTemplate& t, const Tokenizer& tok, std::string_view system, std::string_view user, const std::tm* now) {
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", std::string(system)});
  messages.push_back({"user", std::string(user)});
  return render_messages(t, tok, messages, true, now);
}

std::string render_prefilled(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& messages, std::string_view marker,
                             const std::tm* now) {
  std::string text = render_messages(t, tok, messages, false, now);
  const std::size_t at = text.find(marker);
  if (marker.empty() || at == std::string::npos)
    throw Error(t.name, "the rendered conversation does not hold the assistant's text: this template cannot begin the assistant's reply");
  text.resize(at);
  return text;
}

std::vector<int> encode_chat(const Tokenizer& tok, const ChatTemplate& t, std::string_view system, std::string_view user) {
  return tok.encode(render_chat(t, tok, system, user), false);
}

}  // namespace bestofn
