#include "bestofn/eval/prompt_style.h"

#include <sstream>

#include "bestofn/eval/extract.h"
#include "bestofn/util/error.h"

namespace bestofn {
namespace {

std::string first_assert(const Problem& p) {
  std::istringstream lines(p.test);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("assert")) return line;
  return "";
}

// bestofn's own prompts.
std::string bestofn_prompt(const Problem& p, bool chat) {
  if (p.dataset == "mbpp") {
    if (!chat) return task_prompt(p);
    return p.prompt + "\nYour code should pass this test:\n" + first_assert(p) + "\nReply with the complete Python code in one ```python code block.";
  }
  if (!chat) return p.prompt;
  return "Complete the following Python function. Reply with the whole function, imports included, in one ```python code "
         "block.\n\n```python\n" +
         p.prompt + "```";
}

}  // namespace

PromptStyle parse_prompt_style(const std::string& name) {
  if (name == "bestofn") return PromptStyle::Bestofn;
  if (name == "evalplus") return PromptStyle::Evalplus;
  throw Error("--prompt-style", "'" + name + "': expected one of " + kPromptStyles);
}

const char* prompt_style_name(PromptStyle style) { return style == PromptStyle::Evalplus ? "evalplus" : "bestofn"; }

std::string task_prompt(const Problem& p) {
  if (p.dataset == "mbpp") return "\"\"\"\n" + p.prompt + "\n" + first_assert(p) + "\n\"\"\"\n";
  return p.prompt;
}

std::string python_strip(const std::string& s) {
  auto space = [](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); };
  std::size_t a = 0, b = s.size();
  while (a < b && space(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && space(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::string prompt_text(const Problem& p, PromptStyle style, bool chat) {
  if (style == PromptStyle::Bestofn) return bestofn_prompt(p, chat);
  const std::string task = python_strip(task_prompt(p));
  if (!chat) return task + "\n";
  return std::string(kEvalplusInstructionPrefix) + "\n```\n" + task + "\n```\n";
}

std::vector<ChatMessage> evalplus_chat(const Problem& p, const std::string& system) {
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", prompt_text(p, PromptStyle::Evalplus, true)});
  messages.push_back({"assistant", std::string(kEvalplusResponsePrefix) + "\n```python\n" + kEvalplusSplitter + "\n```\n"});
  return messages;
}

std::vector<int> encode_problem(const ModelOptions& f, const LoadedModel& m, const Problem& p, PromptStyle style, const std::string& where) {
  if (style == PromptStyle::Bestofn || !f.chat) return encode_prompt(f, m, prompt_text(p, style, f.chat), where);
  std::string text;
  try {
    text = render_prefilled(m.chat_template, m.tokenizer, evalplus_chat(p, f.system), kEvalplusSplitter);
  } catch (const Error& e) {
    throw Error(where, e.what());
  }
  ModelOptions plain = f;  // the rendered text is encoded as a plain prompt is, special tokens and all
  plain.chat = false;
  return encode_prompt(plain, m, text, where);
}

std::vector<std::string> style_stop_strings(const std::string& dataset, PromptStyle style, bool chat) {
  if (style == PromptStyle::Bestofn) return default_stop_strings(dataset == "mbpp+" ? "mbpp" : dataset, chat);  // MBPP+'s prompt is MBPP's form
  std::vector<std::string> stop = kEvalplusEos;
  if (chat) stop.push_back("\n```\n");
  else if (dataset == "humaneval" || dataset == "humaneval+") stop.insert(stop.end(), {"\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert "});
  else if (dataset == "mbpp" || dataset == "mbpp+") stop.insert(stop.end(), {"\n\"\"\"", "\nassert"});
  else throw Error("default stop strings: expected dataset humaneval, humaneval+, mbpp or mbpp+, got \"" + dataset + "\"");
  return stop;
}

std::string evalplus_sanitizer_input(const Problem& p, const std::string& completion, bool chat) {
  std::string text;
  for (const char c : completion) {
    if (c == '\t') text += "    ";
    else text += c;
  }
  return chat ? text : prompt_text(p, PromptStyle::Evalplus, false) + text;
}

}  // namespace bestofn
