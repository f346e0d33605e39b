// The examples a prompt shows (public_tests.h). A small reader of Python's literal syntax and of
// the prose forms HumanEval's docstrings use; it only cuts texts out, it evaluates nothing.
#include "bestofn/eval/public_tests.h"

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace bestofn {
namespace {

using std::size_t;
using std::string;
using std::string_view;
constexpr size_t npos = string::npos;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool ident_start(char c) { return is_alpha(c) || c == '_'; }
bool ident_char(char c) { return ident_start(c) || is_digit(c); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

string_view trim(string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

size_t skip_ws(string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// s starts with w at i, case-insensitively.
bool starts_with_ci(string_view s, size_t i, string_view w) {
  if (i > s.size() || s.size() - i < w.size()) return false;
  for (size_t k = 0; k < w.size(); ++k)
    if (lower(s[i + k]) != lower(w[k])) return false;
  return true;
}

// The end of the identifier that starts at i (i itself when none starts there).
size_t ident_end(string_view s, size_t i) {
  if (i >= s.size() || !ident_start(s[i])) return i;
  while (i < s.size() && ident_char(s[i])) ++i;
  return i;
}

// ---- Python literals -----------------------------------------------------------------------

// incomplete: the text ended where more was expected (an open bracket, an empty value): a reader
// of a line may join the next one and try again.
enum class Status { ok, fail, incomplete };
struct Scan {
  Status status;
  size_t end;  // ok: one past the construct
};

// The length of a string prefix (r, b, u, rb, br, ...) at i that a quote follows; npos when no
// string starts at i.
size_t string_prefix(string_view s, size_t i) {
  if (i > 0 && ident_char(s[i - 1])) return npos;
  size_t j = i;
  while (j < s.size() && j - i < 2) {
    const char c = lower(s[j]);
    if (c != 'r' && c != 'b' && c != 'u') break;
    ++j;
  }
  if (j < s.size() && (s[j] == '\'' || s[j] == '"')) return j - i;
  return npos;
}

bool starts_string(string_view s, size_t i) { return string_prefix(s, i) != npos; }

Scan scan_string(string_view s, size_t i) {
  const size_t pre = string_prefix(s, i);
  if (pre == npos) return {Status::fail, i};
  size_t j = i + pre;
  const char q = s[j];
  const bool triple = s.size() - j >= 3 && s[j + 1] == q && s[j + 2] == q;
  j += triple ? 3 : 1;
  while (j < s.size()) {
    const char c = s[j];
    if (c == '\\') {
      j += 2;
      continue;
    }
    if (triple) {
      if (c == q && s.size() - j >= 3 && s[j + 1] == q && s[j + 2] == q) return {Status::ok, j + 3};
    } else {
      if (c == q) return {Status::ok, j + 1};
      if (c == '\n') return {Status::fail, j};
    }
    ++j;
  }
  return {triple ? Status::incomplete : Status::fail, s.size()};
}

Scan scan_number(string_view s, size_t i) {
  size_t j = i;
  auto digits = [&](auto accept) {
    const size_t from = j;
    while (j < s.size() && (accept(s[j]) || (s[j] == '_' && j > from))) ++j;
    return j - from;
  };
  if (j + 1 < s.size() && s[j] == '0' && std::string_view("xXoObB").find(s[j + 1]) != npos) {
    const char kind = lower(s[j + 1]);
    j += 2;
    const size_t n = digits([kind](char c) {
      if (kind == 'x') return is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'f');
      if (kind == 'o') return c >= '0' && c <= '7';
      return c == '0' || c == '1';
    });
    if (n == 0) return {Status::fail, j};
  } else {
    const size_t whole = digits(is_digit);
    size_t frac = 0;
    if (j < s.size() && s[j] == '.') {
      if (j + 1 < s.size() && is_digit(s[j + 1])) {
        ++j;
        frac = digits(is_digit);
      } else if (whole > 0 && j + 1 < s.size() && string_view(",)]}:eEjJ").find(s[j + 1]) != npos) {
        ++j;  // "1." inside a container; at a sentence's end the "." is punctuation
      }
    }
    if (whole == 0 && frac == 0) return {Status::fail, j};
    if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
      size_t k = j + 1;
      if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
      if (k < s.size() && is_digit(s[k])) {
        j = k;
        digits(is_digit);
      }
    }
    if (j < s.size() && (s[j] == 'j' || s[j] == 'J')) ++j;
  }
  if (j < s.size() && ident_char(s[j])) return {Status::fail, j};  // "2nd", "1n"
  return {Status::ok, j};
}

Scan scan_literal(string_view s, size_t i, int depth = 0);

// The items of a bracketed literal from the opening bracket at i; `pairs` for a dict or set.
Scan scan_items(string_view s, size_t i, char close, bool pairs, int depth) {
  size_t j = i + 1;
  for (;;) {
    j = skip_ws(s, j);
    if (j >= s.size()) return {Status::incomplete, j};
    if (s[j] == close) return {Status::ok, j + 1};
    Scan item = scan_literal(s, j, depth + 1);
    if (item.status != Status::ok) return item;
    j = skip_ws(s, item.end);
    if (j >= s.size()) return {Status::incomplete, j};
    if (pairs && s[j] == ':') {
      item = scan_literal(s, j + 1, depth + 1);
      if (item.status != Status::ok) return item;
      j = skip_ws(s, item.end);
      if (j >= s.size()) return {Status::incomplete, j};
    }
    if (s[j] == ',') {
      ++j;
      continue;
    }
    if (s[j] == close) return {Status::ok, j + 1};
    return {Status::fail, j};
  }
}

// A Python literal at i (after blanks): a number (signed), a string, True/False/None, or a list,
// tuple, set or dict of literals.
Scan scan_literal(string_view s, size_t i, int depth) {
  if (depth > 64) return {Status::fail, i};
  i = skip_ws(s, i);
  if (i >= s.size()) return {Status::incomplete, i};
  const char c = s[i];
  if (c == '+' || c == '-') {
    const size_t j = skip_ws(s, i + 1);
    if (j >= s.size()) return {Status::incomplete, j};
    if (s[j] == '+' || s[j] == '-') return scan_literal(s, j, depth + 1);
    if (is_digit(s[j]) || s[j] == '.') return scan_number(s, j);
    return {Status::fail, j};
  }
  if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(s[i + 1]))) return scan_number(s, i);
  if (starts_string(s, i)) return scan_string(s, i);
  if (ident_start(c)) {
    const size_t e = ident_end(s, i);
    const string_view w = s.substr(i, e - i);
    if (w == "True" || w == "False" || w == "None") return {Status::ok, e};
    return {Status::fail, i};
  }
  if (c == '[') return scan_items(s, i, ']', false, depth);
  if (c == '(') return scan_items(s, i, ')', false, depth);
  if (c == '{') return scan_items(s, i, '}', true, depth);
  return {Status::fail, i};
}

// The bracket that closes the one at i (strings respected): ok with end one past it; incomplete
// when the text ends first; fail on a mismatched bracket or a broken string.
Scan match_bracket(string_view s, size_t i) {
  string stack;
  size_t j = i;
  while (j < s.size()) {
    const char c = s[j];
    if (starts_string(s, j)) {
      const Scan str = scan_string(s, j);
      if (str.status != Status::ok) return str;
      j = str.end;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      stack.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (stack.empty() || stack.back() != c) return {Status::fail, j};
      stack.pop_back();
      if (stack.empty()) return {Status::ok, j + 1};
    }
    ++j;
  }
  return {Status::incomplete, j};
}

// Calls `visit(pos)` for each character of s outside strings and brackets (depth 0) from `from`;
// visit returns false to stop. A quote that opens no whole string (an apostrophe in prose) is an
// ordinary character.
template <class F>
void each_top_level(string_view s, size_t from, F visit) {
  int depth = 0;
  size_t j = from;
  while (j < s.size()) {
    const char c = s[j];
    if (starts_string(s, j)) {
      const Scan str = scan_string(s, j);
      if (str.status == Status::ok) {
        j = str.end;
        continue;
      }
    }
    if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      if (depth > 0) --depth;
    } else if (depth == 0 && !visit(j)) {
      return;
    }
    ++j;
  }
}

// A lone "=" at j (not part of ==, <=, >=, !=, =>, :=, +=, ...).
bool lone_equals(string_view s, size_t j) {
  if (s[j] != '=') return false;
  if (j + 1 < s.size() && (s[j + 1] == '=' || s[j + 1] == '>')) return false;
  if (j > 0 && string_view("=<>!:+-*/%&|^@").find(s[j - 1]) != npos) return false;
  return true;
}

// The first top-level "#" (a comment), or s.size().
size_t comment_start(string_view s, size_t from) {
  size_t at = s.size();
  each_top_level(s, from, [&](size_t j) {
    if (s[j] != '#') return true;
    at = j;
    return false;
  });
  return at;
}

// ---- calls of the entry point ----------------------------------------------------------------

// The next `name(` at or after `from` that is a call of `name` (not part of a longer name or an
// attribute), or npos.
size_t find_call(string_view s, string_view name, size_t from) {
  if (name.empty()) return npos;
  for (size_t p = s.find(name, from); p != npos; p = s.find(name, p + 1)) {
    if (p > 0 && (ident_char(s[p - 1]) || s[p - 1] == '.')) continue;
    const size_t after = p + name.size();
    if (after < s.size() && s[after] == '(') return p;
  }
  return npos;
}

struct Arg {
  string name;  // empty: positional
  string value;
};

// An argument at j: `name = LIT` (or `name ALT LIT`, ALT ':' for `grid : [...]`) or, unless
// `named_only`, a positional LIT. The scan's end is after the literal.
Scan read_arg(string_view s, size_t j, char alt, bool named_only, Arg& a) {
  j = skip_ws(s, j);
  const size_t e = ident_end(s, j);
  if (e > j) {
    const size_t k = skip_ws(s, e);
    if (k < s.size() && (lone_equals(s, k) || (alt && s[k] == alt))) {
      a.name = string(s.substr(j, e - j));
      j = k + 1;
    }
  }
  if (named_only && a.name.empty()) return {Status::fail, j};
  const Scan v = scan_literal(s, j);
  if (v.status == Status::ok) a.value = string(trim(s.substr(j, v.end - j)));
  return v;
}

// All of s as arguments separated by commas (a call's, between its parentheses: each a literal).
std::optional<std::vector<Arg>> all_args(string_view s, char alt) {
  std::vector<Arg> args;
  size_t j = skip_ws(s, 0);
  while (j < s.size()) {
    Arg a;
    const Scan v = read_arg(s, j, alt, false, a);
    if (v.status != Status::ok) return std::nullopt;
    args.push_back(std::move(a));
    j = skip_ws(s, v.end);
    if (j >= s.size()) break;
    if (s[j] != ',') return std::nullopt;
    j = skip_ws(s, j + 1);
  }
  return args;
}

// Whether every call of `name` in s has literal arguments (and its brackets close).
bool calls_have_literal_args(string_view s, string_view name) {
  for (size_t p = find_call(s, name, 0); p != npos; p = find_call(s, name, p + 1)) {
    const size_t open = p + name.size();
    const Scan m = match_bracket(s, open);
    if (m.status != Status::ok) return false;
    if (!all_args(s.substr(open + 1, m.end - 1 - (open + 1)), 0)) return false;
  }
  return true;
}

// ---- expected values -----------------------------------------------------------------------

struct Expected {
  Status status;
  string text;  // ok: the literal
  size_t end;   // ok: where the reader goes on (after the literal)
};

// What may follow an expected literal: nothing, sentence punctuation, or prose (a blank, then a
// word or a parenthesis). Anything else (an operator, another value, letters glued to it) means
// the text is not a literal with prose after it.
bool fine_after_literal(string_view rest) {
  if (trim(rest).empty()) return true;
  if (string_view(".,;:").find(rest[0]) != npos) return rest.size() == 1 || is_space(rest[1]);
  if (!is_space(rest[0])) return false;
  const char c = rest[skip_ws(rest, 0)];
  return is_alpha(c) || c == '(' || c == '#';
}

// The expected value that starts at `from` in s (after a separator): the comment cut, a
// derivation `1 + 9 + 0 = 10` reduced to its result, then one literal. `strict`: nothing but
// blanks may follow (doctest output).
Expected read_expected(string_view s, size_t from, bool strict = false) {
  const size_t stop = comment_start(s, from);
  string_view t = s.substr(0, stop);
  size_t at = skip_ws(t, from);
  // A derivation: arithmetic on literals, then `= result`.
  size_t last_eq = npos;
  each_top_level(t, at, [&](size_t j) {
    if (lone_equals(t, j)) last_eq = j;
    return true;
  });
  if (last_eq != npos) {
    const string_view lhs = t.substr(at, last_eq - at);
    bool arithmetic = lhs.find_first_of("0123456789") != npos;
    for (char c : lhs)
      if (string_view("0123456789+-*/%(). \t").find(c) == npos) arithmetic = false;
    if (arithmetic) at = skip_ws(t, last_eq + 1);
  }
  // Prose writes booleans in lower case too (`is_simple_power(1, 4) => true`).
  if (!strict) {
    const size_t e = ident_end(t, at);
    const string_view w = t.substr(at, e - at);
    if ((w == "true" || w == "false") && fine_after_literal(t.substr(e))) return {Status::ok, w == "true" ? "True" : "False", e};
  }
  const Scan lit = scan_literal(t, at);
  if (lit.status != Status::ok) return {lit.status, "", 0};
  const string_view rest = t.substr(lit.end);
  if (strict ? !trim(rest).empty() : !fine_after_literal(rest)) return {Status::fail, "", 0};
  return {Status::ok, string(trim(t.substr(at, lit.end - at))), lit.end};
}

// ---- separators ----------------------------------------------------------------------------

constexpr string_view kSymbolSeparators[] = {"==>", "-->", "==", "=>", "->", "\u279e", "\u2192", "\u21d2", "="};
constexpr string_view kWordSeparators[] = {"should return", "should be", "will return", "returns", "gives"};

// After a call: the separator at or after i (blanks and a `#` allowed before it). ok: end is where
// the expected value starts; incomplete: the line ends inside a worded separator ("should");
// fail: no separator (the call is mentioned, not an example).
Scan read_separator(string_view s, size_t i) {
  size_t j = skip_ws(s, i);
  if (j < s.size() && s[j] == '#') j = skip_ws(s, j + 1);
  for (string_view sep : kSymbolSeparators)
    if (s.substr(j, sep.size()) == sep) {
      if (sep == "=" && j + 1 < s.size() && s[j + 1] == '=') continue;
      return {Status::ok, j + sep.size()};
    }
  for (string_view sep : kWordSeparators)
    if (starts_with_ci(s, j, sep) && (j + sep.size() == s.size() || is_space(s[j + sep.size()])))
      return {Status::ok, j + sep.size()};
  const string_view rest = trim(s.substr(j));
  if (!rest.empty())
    for (string_view sep : kWordSeparators)
      if (rest.size() < sep.size() && starts_with_ci(sep, 0, rest) && sep[rest.size()] == ' ') return {Status::incomplete, j};
  return {Status::fail, j};
}

// ---- the prompt's function -----------------------------------------------------------------

struct Param {
  string name;
  bool has_default = false;
};

struct Function {
  bool found = false;
  std::vector<Param> params;
  string docstring;  // its text between the quotes
};

bool is_blank_or_comment_or_import(string_view line) {
  const string_view t = trim(line);
  return t.empty() || t[0] == '#' || t.starts_with("import ") || t.starts_with("from ");
}

Function find_function(const string& prompt, const string& entry) {
  Function f;
  const string_view s(prompt);
  size_t def_open = npos;
  // The last line `def entry(` (any indentation, `async` allowed).
  for (size_t line = 0; line < s.size();) {
    size_t eol = s.find('\n', line);
    if (eol == npos) eol = s.size();
    size_t j = skip_ws(s.substr(0, eol), line);
    if (s.substr(j, 6) == "async ") j = skip_ws(s.substr(0, eol), j + 6);
    if (s.substr(j, 4) == "def " || s.substr(j, 4) == "def\t") {
      j = skip_ws(s.substr(0, eol), j + 4);
      if (s.substr(j, entry.size()) == entry) {
        const size_t k = skip_ws(s.substr(0, eol), j + entry.size());
        if (k < eol && s[k] == '(') def_open = k;
      }
    }
    line = eol + 1;
  }
  if (def_open == npos) return f;
  f.found = true;
  const Scan sig = match_bracket(s, def_open);
  if (sig.status != Status::ok) return f;
  // Parameters: split at top-level commas.
  const string_view inside = s.substr(def_open + 1, sig.end - 1 - (def_open + 1));
  std::vector<size_t> cuts{0};
  each_top_level(inside, 0, [&](size_t j) {
    if (inside[j] == ',') cuts.push_back(j + 1);
    return true;
  });
  cuts.push_back(inside.size() + 1);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const string_view part = trim(inside.substr(cuts[k], cuts[k + 1] - 1 - cuts[k]));
    if (part.empty() || part[0] == '*' || part == "/") continue;
    Param p;
    p.name = string(part.substr(0, ident_end(part, 0)));
    if (p.name.empty()) continue;
    each_top_level(part, 0, [&](size_t j) {
      if (lone_equals(part, j)) p.has_default = true;
      return !p.has_default;
    });
    f.params.push_back(std::move(p));
  }
  // The docstring: the first string after the signature's line, with only blanks, comments and
  // imports before it.
  size_t body = s.find('\n', sig.end);
  if (body == npos) body = s.size();
  for (size_t line = body + (body < s.size() ? 1 : 0); line < s.size();) {
    size_t eol = s.find('\n', line);
    if (eol == npos) eol = s.size();
    const size_t j = skip_ws(s.substr(0, eol), line);
    if (j < eol && starts_string(s, j)) {
      const size_t pre = string_prefix(s, j);
      const size_t q = j + pre;
      const bool triple = s.size() - q >= 3 && s[q + 1] == s[q] && s[q + 2] == s[q];
      const size_t open = q + (triple ? 3 : 1);
      const string quote(triple ? 3 : 1, s[q]);
      size_t close = s.find(quote, open);
      if (close == npos) close = s.size();  // a prompt cut inside its docstring
      f.docstring = string(s.substr(open, close - open));
      return f;
    }
    if (!is_blank_or_comment_or_import(s.substr(line, eol - line))) return f;
    line = eol + 1;
  }
  return f;
}

// ---- the docstring reader ------------------------------------------------------------------

std::vector<string> split_lines(string_view s) {
  std::vector<string> lines;
  size_t start = 0;
  for (;;) {
    const size_t eol = s.find('\n', start);
    lines.emplace_back(s.substr(start, (eol == npos ? s.size() : eol) - start));
    if (eol == npos) break;
    start = eol + 1;
  }
  return lines;
}

string join(const std::vector<string>& parts, string_view sep) {
  string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

class DocReader {
 public:
  DocReader(const string& doc, const string& entry, const std::vector<Param>& params)
      : lines_(split_lines(doc)), entry_(entry), params_(params) {
    for (string& l : lines_)
      if (!l.empty() && l.back() == '\r') l.pop_back();
  }

  PublicExamples read() {
    size_t i = 0;
    while (i < lines_.size()) {
      const string_view t = trim(lines_[i]);
      if (t.starts_with(">>>")) {
        end_block();
        i = doctest(i);
      } else if (find_call(t, entry_, 0) != npos) {
        i = call_line(i);
      } else if (starts_with_ci(t, 0, "input") && trim(t.substr(5)).starts_with(":")) {
        end_block();
        i = input_output(i);
      } else {
        end_block();
        if (!named_for(i)) assignment(i);
        ++i;
      }
    }
    end_block();
    return std::move(out_);
  }

 private:
  std::vector<string> lines_;
  const string& entry_;
  const std::vector<Param>& params_;
  PublicExamples out_;
  // The group of consecutive lines with calls of the entry point being read: kept back until it
  // ends, and dropped when it turns out to define the entry point by itself.
  std::vector<PublicExample> block_;
  int block_unreadable_ = 0;
  bool block_recurrence_ = false;

  void end_block() {
    if (!block_recurrence_) {
      for (PublicExample& e : block_) out_.examples.push_back(std::move(e));
      out_.unreadable += block_unreadable_;
    }
    block_.clear();
    block_unreadable_ = 0;
    block_recurrence_ = false;
  }

  bool blank(size_t i) const { return trim(lines_[i]).empty(); }

  // Lines [from, to) trimmed and joined by "\n": an example's source.
  string source(size_t from, size_t to) const {
    std::vector<string> parts;
    for (size_t k = from; k < to && k < lines_.size(); ++k) parts.emplace_back(trim(lines_[k]));
    return join(parts, "\n");
  }

  string entry_call(const std::vector<Arg>& args) const {
    string call = entry_ + "(";
    for (size_t k = 0; k < args.size(); ++k) {
      if (k) call += ", ";
      if (!args[k].name.empty()) call += args[k].name + "=";
      call += args[k].value;
    }
    return call + ")";
  }

  // Whether named arguments name exactly the parameters that need a value (and no others), or
  // positional ones number them (when the def was found).
  bool args_fit(const std::vector<Arg>& args) const {
    size_t required = 0;
    for (const Param& p : params_) required += !p.has_default;
    if (args.empty()) return required == 0;
    const bool named = !args.front().name.empty();
    for (const Arg& a : args)
      if (a.name.empty() == named) return false;  // mixed
    if (!named) return args.size() >= required && args.size() <= params_.size();
    std::set<string> given;
    for (const Arg& a : args) {
      bool known = false;
      for (const Param& p : params_) known = known || p.name == a.name;
      if (!known || !given.insert(a.name).second) return false;
    }
    for (const Param& p : params_)
      if (!p.has_default && !given.count(p.name)) return false;
    return true;
  }

  // `>>> SOURCE` (with `...` continuations) and its expected lines. Returns the next line.
  size_t doctest(size_t i) {
    const size_t first = i;
    auto after_prompt = [](string_view t) { return string(trim(t.substr(3))); };
    std::vector<string> src{after_prompt(trim(lines_[i]))};
    ++i;
    while (i < lines_.size() && trim(lines_[i]).starts_with("...")) src.push_back(after_prompt(trim(lines_[i]))), ++i;
    std::vector<string> want;
    while (i < lines_.size() && !blank(i) && !trim(lines_[i]).starts_with(">>>")) want.emplace_back(trim(lines_[i])), ++i;
    const string code = join(src, " ");
    string_view c = trim(string_view(code).substr(0, comment_start(code, 0)));
    if (find_call(c, entry_, 0) == npos) return i;  // not about the entry point
    // Statements are not examples: an assignment, a definition, an import, a loop.
    bool assigns = false;
    each_top_level(c, 0, [&](size_t j) {
      assigns = lone_equals(c, j) || (c[j] == '=' && j > 0 && string_view("+-*/%&|^@").find(c[j - 1]) != npos);
      return !assigns;
    });
    for (string_view kw : {"import ", "from ", "for ", "while ", "if ", "def ", "class ", "with ", "try:", "del ", "assert "})
      if (c.starts_with(kw)) return i;
    if (assigns) return i;
    PublicExample ex;
    ex.source = source(first, i);
    // `CALL == EXPR`, or `CALL EXPR`, on the source line itself.
    size_t eq = npos;
    each_top_level(c, 0, [&](size_t j) {
      if (c.substr(j, 2) == "==" && (j == 0 || c[j - 1] != '=') && (j + 2 >= c.size() || c[j + 2] != '=')) eq = j;
      return eq == npos;
    });
    std::optional<Expected> inline_want;
    string_view call = c;
    if (eq != npos) {
      call = trim(c.substr(0, eq));
      inline_want = read_expected(c, eq + 2, true);
    } else if (c.starts_with(entry_ + "(")) {
      const Scan m = match_bracket(c, entry_.size());
      if (m.status == Status::ok && m.end < c.size() && is_space(c[m.end])) {
        const Expected e = read_expected(c, m.end, true);
        if (e.status == Status::ok) {
          call = c.substr(0, m.end);
          inline_want = e;
        }
      }
    }
    if (call.starts_with("print(") || !calls_have_literal_args(call, entry_)) {
      ++out_.unreadable;
      return i;
    }
    ex.call = string(call);
    if (inline_want) {
      if (inline_want->status != Status::ok) {
        ++out_.unreadable;
        return i;
      }
      ex.expected = inline_want->text;
    } else if (want.empty()) {
      ex.expected = "None";  // doctest: a call whose value is None shows nothing
    } else {
      const string w = join(want, " ");
      const Expected e = read_expected(w, 0, true);
      if (e.status != Status::ok) {
        ++out_.unreadable;
        return i;
      }
      ex.expected = e.text;
    }
    out_.examples.push_back(std::move(ex));
    return i;
  }

  // A line with calls of the entry point (joined with the next ones while a call or its expected
  // value is open, or a worded separator is cut at the line's end). Returns the next line.
  size_t call_line(size_t i) {
    const size_t first = i;
    string text(trim(lines_[i]));
    size_t next = i + 1;
    auto join_next = [&]() {
      if (next >= lines_.size() || blank(next) || trim(lines_[next]).starts_with(">>>")) return false;
      text += " ";
      text += trim(lines_[next]);
      ++next;
      return true;
    };
    size_t pos = 0;
    std::vector<PublicExample> found;
    int unreadable = 0;
    bool recurrence = false;
    for (int guard = 0; guard < 10000; ++guard) {
      const size_t p = find_call(text, entry_, pos);
      if (p == npos) break;
      const size_t open = p + entry_.size();
      const Scan m = match_bracket(text, open);
      if (m.status == Status::incomplete && join_next()) continue;
      if (m.status != Status::ok) {  // unbalanced: the rest of the line cannot be read
        ++unreadable;
        break;
      }
      const Scan sep = read_separator(text, m.end);
      if (sep.status == Status::incomplete && join_next()) continue;
      if (sep.status != Status::ok) {  // a mention, not an example
        pos = m.end;
        continue;
      }
      // A right-hand side that calls the entry point: a recurrence.
      const size_t rhs = skip_ws(text, sep.end);
      if (find_call(text, entry_, rhs) == rhs) {
        recurrence = true;
        pos = m.end;
        continue;
      }
      const Expected e = read_expected(text, sep.end);
      if (e.status == Status::incomplete && join_next()) continue;
      const auto args = all_args(string_view(text).substr(open + 1, m.end - 1 - (open + 1)), 0);
      if (e.status != Status::ok) {
        // An expected value that cannot be read: unreadable when the call itself reads (a definition
        // such as `tri(n) = 1 + n / 2` is not an example at all).
        if (args) ++unreadable;
        pos = m.end;
        continue;
      }
      if (!args) {
        ++unreadable;
        pos = e.end;
        continue;
      }
      found.push_back({text.substr(p, m.end - p), e.text, ""});
      pos = e.end;
    }
    const string src = source(first, next);
    for (PublicExample& ex : found) {
      ex.source = src;
      block_.push_back(std::move(ex));
    }
    block_unreadable_ += unreadable;
    block_recurrence_ = block_recurrence_ || recurrence;
    return next;
  }

  // `name = LIT` items from j, separated by commas or blanks, up to the first text that is not
  // one (prose); *end is after the last literal. Nullopt when none reads, or when one starts and
  // breaks (`name = <not a literal>`).
  static std::optional<std::vector<Arg>> leading_assignments(string_view s, size_t j, size_t* end) {
    std::vector<Arg> args;
    for (;;) {
      Arg a;
      const Scan v = read_arg(s, j, 0, true, a);
      if (v.status != Status::ok) {
        if (a.name.empty() && !args.empty()) break;  // prose
        return std::nullopt;
      }
      args.push_back(std::move(a));
      *end = v.end;
      j = skip_ws(s, v.end);
      if (j < s.size() && s[j] == ',') ++j;
    }
    return args;
  }

  // `For a = LIT, b = LIT ... should be EXPR` (HumanEval/84, /94, /112, /133, /142): true when the
  // line was in this form.
  bool named_for(size_t i) {
    const string text(trim(lines_[i]));
    for (size_t f = 0; f < text.size(); ++f) {
      if (!starts_with_ci(text, f, "for ") || (f > 0 && ident_char(text[f - 1]))) continue;
      const size_t j = skip_ws(text, f + 4);
      const size_t e = ident_end(text, j);
      const size_t k = skip_ws(text, e);
      if (e == j || k >= text.size() || !lone_equals(text, k)) continue;
      size_t end = j;
      const auto args = leading_assignments(text, j, &end);
      size_t phrase = npos, phrase_len = 0;
      for (string_view w : {"should be ", "should return "}) {
        for (size_t q = end; q + w.size() <= text.size(); ++q)
          if (starts_with_ci(text, q, w)) {
            if (phrase == npos || q < phrase) phrase = q, phrase_len = w.size();
            break;
          }
      }
      if (phrase == npos) return false;  // a named value in prose, with no result
      if (!args || !args_fit(*args)) {
        ++out_.unreadable;
        return true;
      }
      const Expected want = read_expected(text, phrase + phrase_len);
      if (want.status != Status::ok) {
        ++out_.unreadable;
        return true;
      }
      out_.examples.push_back({entry_call(*args), want.text, text});
      return true;
    }
    return false;
  }

  // `Input: ...` (on this and the following lines) and then `Output: EXPR`. Returns the next line.
  size_t input_output(size_t i) {
    const size_t first = i;
    const string_view head = trim(lines_[i]);
    std::vector<string> in;
    const string_view first_text = trim(head.substr(head.find(':') + 1));
    if (!first_text.empty()) in.emplace_back(first_text);
    ++i;
    size_t out_line = npos;
    for (; i < lines_.size() && i < first + 12; ++i) {
      const string_view t = trim(lines_[i]);
      if (starts_with_ci(t, 0, "output") && trim(t.substr(6)).starts_with(":")) {
        out_line = i;
        break;
      }
      if (t.starts_with(">>>") || (starts_with_ci(t, 0, "input") && trim(t.substr(5)).starts_with(":"))) break;
      if (!t.empty()) in.emplace_back(t);
    }
    if (out_line == npos) {
      ++out_.unreadable;
      return i;
    }
    const string_view ot = trim(lines_[out_line]);
    string want_text(trim(ot.substr(ot.find(':') + 1)));
    size_t last = out_line + 1;
    if (want_text.empty() && last < lines_.size() && !blank(last)) want_text = string(trim(lines_[last])), ++last;
    const string args_text = join(in, ", ");
    const auto args = all_args(args_text, ':');
    const Expected want = read_expected(want_text, 0);
    if (!args || !args_fit(*args) || want.status != Status::ok) {
      ++out_.unreadable;
      return last;
    }
    out_.examples.push_back({entry_call(*args), want.text, source(first, last)});
    return last;
  }

  // `arr = LIT` (the parameters assigned, nothing else on the line), then, past `->` lines, a line
  // `return EXPR` or `return = EXPR` (HumanEval/105's pseudo-code). True when read.
  bool assignment(size_t i) {
    const string_view t = trim(lines_[i]);
    const size_t e = ident_end(t, 0);
    const size_t k = skip_ws(t, e);
    if (e == 0 || k >= t.size() || !lone_equals(t, k)) return false;
    const auto args = all_args(t, 0);
    if (!args || args->empty() || args->front().name.empty() || params_.empty() || !args_fit(*args)) return false;
    for (size_t r = i + 1; r < lines_.size() && r < i + 8; ++r) {
      const string_view rt = trim(lines_[r]);
      if (rt.starts_with("->")) continue;
      if (!rt.starts_with("return") || (rt.size() > 6 && ident_char(rt[6]))) return false;
      size_t from = skip_ws(rt, 6);
      if (from < rt.size() && lone_equals(rt, from)) ++from;
      const Expected want = read_expected(rt, from);
      if (want.status != Status::ok) {
        ++out_.unreadable;
        return true;
      }
      out_.examples.push_back({entry_call(*args), want.text, source(i, r + 1)});
      return true;
    }
    return false;
  }
};

// `assert CALL == EXPR` (EXPR kept as written), or `assert EXPR` as bool(EXPR) == True.
std::optional<PublicExample> assert_example(string_view line) {
  const string_view t = trim(line);
  if (!t.starts_with("assert") || t.size() < 7 || !(is_space(t[6]) || t[6] == '(')) return std::nullopt;
  string_view body = trim(t.substr(6));
  body = trim(body.substr(0, comment_start(body, 0)));
  // `assert X, "message"`: the message is not part of the test.
  size_t comma = npos;
  each_top_level(body, 0, [&](size_t j) {
    if (body[j] == ',') comma = j;
    return comma == npos;
  });
  if (comma != npos) body = trim(body.substr(0, comma));
  if (body.empty()) return std::nullopt;
  size_t eq = npos;
  each_top_level(body, 0, [&](size_t j) {
    if (body.substr(j, 2) == "==" && (j == 0 || string_view("=<>!").find(body[j - 1]) == npos) &&
        (j + 2 >= body.size() || body[j + 2] != '='))
      eq = j;
    return eq == npos;
  });
  PublicExample ex;
  ex.source = string(t);
  if (eq == npos) {
    ex.call = "bool(" + string(body) + ")";
    ex.expected = "True";
    return ex;
  }
  ex.call = string(trim(body.substr(0, eq)));
  ex.expected = string(trim(body.substr(eq + 2)));
  if (ex.call.empty() || ex.expected.empty()) return std::nullopt;
  return ex;
}

}  // namespace

PublicExamples extract_public_examples(const Problem& problem) {
  PublicExamples out;
  if (!problem.public_tests.empty()) {
    for (const string& line : problem.public_tests) {
      if (auto ex = assert_example(line)) {
        out.examples.push_back(std::move(*ex));
      } else {
        ++out.unreadable;
      }
    }
    return out;
  }
  if (is_mbpp(problem)) {
    // MBPP shows its first test; MBPP+'s prompt holds the one it shows (the docstring's assert).
    for (const string& line : split_lines(problem.dataset == "mbpp+" ? problem.prompt : problem.test)) {
      if (!trim(line).starts_with("assert")) continue;
      if (auto ex = assert_example(line)) {
        out.examples.push_back(std::move(*ex));
      } else {
        ++out.unreadable;
      }
      break;
    }
    return out;
  }
  if (!is_python_identifier(problem.entry_point)) return out;
  const Function f = find_function(problem.prompt, problem.entry_point);
  if (!f.found || f.docstring.empty()) return out;
  return DocReader(f.docstring, problem.entry_point, f.params).read();
}

}  // namespace bestofn
