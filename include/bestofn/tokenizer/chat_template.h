#pragma once
// Built-in chat formats for the supported families (no general Jinja engine): the format is read
// off tokenizer_config.json's chat_template, or named explicitly.
#include <string>
#include <string_view>
#include <vector>

namespace bestofn {

class Tokenizer;

enum class ChatFormat {
  Llama3,  // <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|> (Llama 3 / 3.1 / 3.2 Instruct)
  Llama2,  // <s>[INST] <<SYS>>\n system \n<</SYS>>\n\n user [/INST] (Llama 2 chat, CodeLlama Instruct, Mistral)
};

inline constexpr const char* kSupportedChatFormats = "llama3 (Llama 3 Instruct), llama2 ([INST])";

// "llama3" | "llama2" | "auto" (from the tokenizer's chat_template). Throws bestofn::Error naming
// tokenizer_config.json and the supported formats when the template is absent or unknown.
ChatFormat chat_format(const Tokenizer& tok, const std::string& name = "auto");

// The prompt text for one user turn (and an optional system message), ending where the assistant's
// reply begins, exactly as the model's Jinja template renders it with add_generation_prompt.
// Content is stripped of surrounding whitespace, as both templates do.
std::string render_chat(ChatFormat format, std::string_view system, std::string_view user);

// render_chat, then encode (the rendered text carries its own BOS).
std::vector<int> encode_chat(const Tokenizer& tok, ChatFormat format, std::string_view system, std::string_view user);

}  // namespace bestofn
