#include "bestofn/eval/extract.h"

#include <cctype>
#include <string_view>

#include "bestofn/util/error.h"

namespace bestofn {

std::vector<std::string> default_stop_strings(const std::string& dataset, bool chat) {
  if (dataset != "humaneval" && dataset != "humaneval+" && dataset != "mbpp")
    throw Error("default stop strings: expected dataset humaneval, humaneval+ or mbpp, got \"" + dataset + "\"");
  if (chat) return {};
  if (dataset == "mbpp") return {"\nassert ", "\nif __name__", "\nprint(", "\n```"};
  return {"\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert "};
}

namespace {

struct CodeBlock {
  std::string code;
  bool python = false;
};

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::string_view trim(std::string_view s) {
  s = trim_left(s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::size_t count_backticks(std::string_view s) {
  std::size_t n = 0;
  while (n < s.size() && s[n] == '`') ++n;
  return n;
}

bool is_python_info(std::string_view info) {
  std::string lower;
  for (const char c : info) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.empty() || lower == "python" || lower == "py" || lower == "python3";
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Every fenced block of an LF-only text, in order; an unterminated one runs to the end.
std::vector<CodeBlock> fenced_blocks(std::string_view text) {
  std::vector<CodeBlock> blocks;
  const std::vector<std::string_view> lines = split_lines(text);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string_view opening = trim_left(lines[i]);
    const std::size_t fence = count_backticks(opening);
    if (fence < 3) continue;
    CodeBlock block;
    block.python = is_python_info(trim(opening.substr(fence)));
    for (++i; i < lines.size(); ++i) {
      const std::string_view t = trim(lines[i]);
      if (count_backticks(t) >= fence && count_backticks(t) == t.size()) break;
      block.code.append(lines[i]).push_back('\n');
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

// A line "def <name>(" after indentation, "async " allowed.
bool defines(const std::string& code, const std::string& name) {
  for (std::string_view line : split_lines(code)) {
    line = trim_left(line);
    if (line.starts_with("async ")) line = trim_left(line.substr(6));
    if (!line.starts_with("def ")) continue;
    line = trim_left(line.substr(4));
    if (!line.starts_with(name)) continue;
    line = trim_left(line.substr(name.size()));
    if (line.starts_with("(")) return true;
  }
  return false;
}

}  // namespace

std::string extract_code(const std::string& reply, const std::string& entry_point) {
  std::string text;
  text.reserve(reply.size());
  for (std::size_t i = 0; i < reply.size(); ++i)
    if (!(reply[i] == '\r' && i + 1 < reply.size() && reply[i + 1] == '\n')) text.push_back(reply[i]);

  const CodeBlock* longest = nullptr;
  const std::vector<CodeBlock> blocks = fenced_blocks(text);
  for (const CodeBlock& block : blocks) {
    if (!block.python) continue;
    if (!entry_point.empty() && defines(block.code, entry_point)) return block.code;
    if (!longest || block.code.size() > longest->code.size()) longest = &block;
  }
  return longest ? longest->code : reply;
}

}  // namespace bestofn
