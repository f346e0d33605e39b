// Jinja's lexer (jinja2/lexer.py): template text -> tokens. It implements the delimiters {{ }},
// {% %}, {# #}; whitespace control "-" and "+" at either end of a tag; HF's trim_blocks (the
// newline after a block or comment tag is dropped) and lstrip_blocks (spaces and tabs before a
// block or comment tag at the start of a line are dropped); jinja2's newline handling (\r\n and
// \r read as \n, one trailing newline dropped); and the expression tokens: names, strings with
// Python's escapes, integers, floats and operators, with brackets balanced so that "}}" inside
// a dict literal does not end the tag.
#include <cctype>
#include <cstring>

#include "bestofn/util/utf8.h"
#include "tokenizer/jinja/jinja_impl.h"

namespace bestofn::jinja {
namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string normalized(const std::string& in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      s += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      s += in[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : s_(normalized(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (true) {
      size_t start = std::string::npos;
      for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, s_.find(open, pos_));
      std::string text = s_.substr(pos_, start == std::string::npos ? std::string::npos : start - pos_);
      const int text_line = line_;
      advance_lines(text);
      if (start == std::string::npos) {
        if (!text.empty()) out_.push_back({Token::K::Text, text, text_line});
        break;
      }
      const char kind = s_[start + 1];
      const char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+') ? s_[start + 2] : 0;
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && ascii_space(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const size_t l = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l > 0 || line_starting) && text.find_first_not_of(" \t", l) == std::string::npos) text.resize(l);
      }
      if (!text.empty()) out_.push_back({Token::K::Text, text, text_line});
      pos_ = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        const size_t close = s_.find("#}", pos_);
        if (close == std::string::npos) fail(line_, "the comment opened here is never closed with #}");
        advance_lines(s_.substr(pos_, close - pos_));
        const char before = close > pos_ ? s_[close - 1] : 0;
        pos_ = close + 2;
        line_starting = after_tag(before == '-' ? '-' : before == '+' ? '+' : 0, true);
      } else {
        out_.push_back({kind == '{' ? Token::K::VarBegin : Token::K::BlockBegin, "", line_});
        line_starting = expression(kind == '{');
      }
    }
    out_.push_back({Token::K::Eof, "", line_});
    return out_;
  }

 private:
  void advance_lines(const std::string& t) {
    for (char c : t) line_ += c == '\n';
  }

  // After a tag's closing delimiter: "-" drops the whitespace that follows, trim_blocks one
  // newline after a block or comment. Returns whether the next text starts a line.
  bool after_tag(char sign, bool block) {
    const size_t from = pos_;
    if (sign == '-') {
      while (pos_ < s_.size() && ascii_space(s_[pos_])) ++pos_;
    } else if (sign != '+' && block && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
    advance_lines(s_.substr(from, pos_ - from));
    return pos_ > from && s_[pos_ - 1] == '\n';
  }

  bool ends_here(bool var, char* sign, size_t* len) const {
    const char* close = var ? "}}" : "%}";
    for (char c : {'-', '+'}) {
      if (var && c == '+') continue;
      if (s_[pos_] == c && s_.compare(pos_ + 1, 2, close) == 0) {
        *sign = c;
        *len = 3;
        return true;
      }
    }
    *sign = 0;
    *len = 2;
    return s_.compare(pos_, 2, close) == 0;
  }

  bool expression(bool var) {
    int depth = 0;
    while (true) {
      while (pos_ < s_.size() && ascii_space(s_[pos_])) line_ += s_[pos_++] == '\n';
      if (pos_ >= s_.size()) fail(line_, std::string("the tag is never closed with ") + (var ? "}}" : "%}"));
      char sign;
      size_t len;
      if (depth == 0 && ends_here(var, &sign, &len)) {
        out_.push_back({var ? Token::K::VarEnd : Token::K::BlockEnd, "", line_});
        pos_ += len;
        return after_tag(sign, !var);
      }
      const char c = s_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t b = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        out_.push_back({Token::K::Name, s_.substr(b, pos_ - b), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string(c);
      } else {
        op(&depth);
      }
    }
  }

  void number() {
    const size_t b = pos_;
    auto digits = [&] {
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string t;
    for (size_t i = b; i < pos_; ++i)
      if (s_[i] != '_') t += s_[i];
    out_.push_back({is_float ? Token::K::Float : Token::K::Int, t, line_});
  }

  // A quoted string with Python's unicode-escape rules (as jinja2 decodes it).
  void string(char quote) {
    const int line = line_;
    std::string v;
    ++pos_;
    while (true) {
      if (pos_ >= s_.size()) fail(line, "the string opened here is never closed");
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ >= s_.size()) {
        v += c;
        continue;
      }
      const char e = s_[pos_++];
      const char* simple = std::strchr("nrtabfv\\'\"", e);
      if (e == '\n') {
        ++line_;  // a backslash-newline continues the string
      } else if (simple && e != 0) {
        static const char map[] = "\n\r\t\a\b\f\v\\'\"";
        v += map[simple - "nrtabfv\\'\""];
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (pos_ + n > s_.size()) fail(line_, "a truncated \\" + std::string(1, e) + " escape in a string");
        const std::string hex = s_.substr(pos_, n);
        if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) fail(line_, "a malformed \\" + std::string(1, e) + " escape in a string");
        utf8::append(v, static_cast<std::uint32_t>(std::stoul(hex, nullptr, 16)));
        pos_ += n;
      } else if (e >= '0' && e <= '7') {
        unsigned long cp = static_cast<unsigned long>(e - '0');
        for (int k = 0; k < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++k) cp = cp * 8 + static_cast<unsigned long>(s_[pos_++] - '0');
        utf8::append(v, static_cast<std::uint32_t>(cp));
      } else {
        v += '\\';  // Python keeps an unknown escape as written
        v += e;
      }
    }
    out_.push_back({Token::K::Str, v, line});
  }

  void op(int* depth) {
    static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* t : two) {
      if (s_.compare(pos_, 2, t) == 0) {
        out_.push_back({Token::K::Op, t, line_});
        pos_ += 2;
        return;
      }
    }
    const char c = s_[pos_];
    if (!std::strchr("+-/*%~[](){}<>=.,:|", c) || c == 0) fail(line_, std::string("unexpected character '") + c + "' in a tag");
    if (c == '(' || c == '[' || c == '{') ++*depth;
    if (c == ')' || c == ']' || c == '}') {
      if (*depth == 0) fail(line_, std::string("unbalanced '") + c + "' in a tag");
      --*depth;
    }
    out_.push_back({Token::K::Op, std::string(1, c), line_});
    ++pos_;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

[[noreturn]] void fail(int line, const std::string& message) { throw TemplateError{line, message}; }

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace bestofn::jinja
