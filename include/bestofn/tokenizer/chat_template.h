#pragma once
// Chat prompts as transformers' apply_chat_template(messages, add_generation_prompt=True,
// tokenize=True) makes them: a Jinja chat template (bestofn/tokenizer/jinja.h) rendered with the
// messages and tokenizer_config.json's bos_token/eos_token, then encoded without the
// post-processor's special tokens. The template is the model's own (tokenizer_config.json's
// chat_template), a built-in one named by --chat-format, or a file given by --chat-template.
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace bestofn {

class Tokenizer;

// The built-in templates, each the real one its models publish (tests/data/chat_templates/):
//   llama3    Llama 3 Instruct
//   llama3.1  Llama 3.1 Instruct (its "Cutting Knowledge Date" system header)
//   llama2    Llama 2 chat ([INST], <<SYS>>)
inline constexpr const char* kChatFormats = "auto, llama3, llama3.1, llama2";
// The Jinja text of a built-in template; throws for another name.
const std::string& builtin_chat_template(const std::string& format);

struct ChatTemplate {
  std::string source;  // Jinja text
  std::string name;    // for errors: the file, or "the built-in llama3 chat template"
};

// The template to use: `file` when given (--chat-template), else `format` (--chat-format): "auto"
// is tokenizer_config.json's chat_template (an Error naming that file when it has none), a
// built-in name is that template (an Error when the tokenizer lacks the special tokens it
// writes, which would otherwise be encoded as plain text).
ChatTemplate chat_template(const Tokenizer& tok, const std::string& format = "auto", const std::string& file = "");

// The prompt text for one user turn (and a system message when `system` is not empty), ending
// where the assistant's reply begins. `now` is strftime_now's time (default: the local time).
std::string render_chat(const ChatTemplate& t, const Tokenizer& tok, std::string_view system, std::string_view user, const std::tm* now = nullptr);

// One turn of a conversation.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// The template rendered on `messages` as apply_chat_template(messages, add_generation_prompt=...,
// tokenize=False) renders it.
std::string render_messages(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            const std::tm* now = nullptr);

// A prompt whose assistant turn the model continues from a text of ours, as EvalPlus makes one
// (evalplus/provider/utility.py, make_raw_chat_prompt): `messages` ending with an assistant turn
// whose content holds `marker` are rendered without a generation prompt, and the rendering is cut
// just before the marker's first occurrence. An Error naming the template when the rendering does
// not hold the marker (a template that drops or rewrites the assistant's text).
std::string render_prefilled(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& messages, std::string_view marker,
                             const std::tm* now = nullptr);

// render_chat, then encode with no special tokens added (the template writes its own BOS).
std::vector<int> encode_chat(const Tokenizer& tok, const ChatTemplate& t, std::string_view system, std::string_view user);

}  // namespace bestofn
