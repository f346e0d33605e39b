#pragma once
// A small Jinja interpreter for Hugging Face chat templates (src/tokenizer/jinja/): what chat
// templates use, rendered byte for byte as transformers' apply_chat_template renders it (jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols; HF's tojson,
// raise_exception and strftime_now). A construct it does not support is an Error naming it and
// its line, never a different rendering.
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace bestofn {

// Renders `source` with `variables` (a JSON object: messages, add_generation_prompt, bos_token...).
// `now` is what strftime_now formats. Throws bestofn::Error "NAME: line N: problem" for a malformed
// or unsupported template, an undefined value used, or raise_exception.
std::string render_jinja(const std::string& source, const std::string& name, const nlohmann::ordered_json& variables, const std::tm& now);

}  // namespace bestofn
