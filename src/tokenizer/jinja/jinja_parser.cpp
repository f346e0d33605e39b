// Jinja's parser (jinja2/parser.py): tokens -> a statement tree. Statements: output {{ }},
// if/elif/else, for (tuple targets, an inline "if" filter, else, loop.*), set (a name, a
// namespace attribute, or a block set ... endset), macro, break/continue (HF enables
// jinja2.ext.loopcontrols) and HF's {% generation %} block. Expressions with jinja2's precedence:
// a if b else c; or; and; not; comparisons and (not) in; + -; ~; * / // %; **; unary - +; then
// literals (strings, numbers, true/false/none, lists, tuples, dicts), names, .attr, [item],
// [a:b:c], calls with keyword arguments, |filters and "is (not) tests". Any other tag is refused
// by name and line.
#include "tokenizer/jinja/jinja_impl.h"

namespace bestofn::jinja {
namespace {

using K = Token::K;
using EK = Expr::K;

ExprP make(EK k, int line, std::vector<ExprP> a = {}) {
  auto e = std::make_shared<Expr>();
  e->k = k;
  e->line = line;
  e->a = std::move(a);
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body document() {
    std::string end;
    Body b = body({}, &end);
    return b;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& next() { return t_[i_++]; }
  bool is_op(const char* op) const { return cur().k == K::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().k == K::Name && cur().text == n; }
  bool skip_op(const char* op) { return is_op(op) ? (++i_, true) : false; }
  bool skip_name(const char* n) { return is_name(n) ? (++i_, true) : false; }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur().line, std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().k != K::Name) fail(cur().line, "expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().k != K::BlockEnd) fail(cur().line, "expected the end of the tag (%}), got " + describe(cur()));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.k) {
      case K::Eof: return "the end of the template";
      case K::BlockEnd: return "'%}'";
      case K::VarEnd: return "'}}'";
      case K::Str: return "a string";
      case K::Int:
      case K::Float: return "a number";
      default: return "'" + t.text + "'";
    }
  }

  // Statements until one of `ends` (a block tag name); *end gets the name met ("" at the end).
  Body body(const std::vector<std::string>& ends, std::string* end, int open_line = 0) {
    Body out;
    while (true) {
      const Token& tk = cur();
      if (tk.k == K::Eof) {
        if (!ends.empty()) fail(open_line, "the block opened here is never closed (expected {% " + ends.back() + " %})");
        *end = "";
        return out;
      }
      if (tk.k == K::Text) {
        auto n = std::make_shared<Node>();
        n->k = Node::K::Text;
        n->line = tk.line;
        n->text = tk.text;
        out.push_back(n);
        ++i_;
      } else if (tk.k == K::VarBegin) {
        ++i_;
        auto n = std::make_shared<Node>();
        n->k = Node::K::Output;
        n->line = tk.line;
        n->e.push_back(expression());
        if (cur().k != K::VarEnd) fail(cur().line, "expected the end of the output tag (}}), got " + describe(cur()));
        ++i_;
        out.push_back(n);
      } else {
        ++i_;  // BlockBegin
        if (cur().k != K::Name) fail(cur().line, "expected a statement name after {%, got " + describe(cur()));
        const std::string word = cur().text;
        for (const auto& e : ends) {
          if (word == e) {
            ++i_;
            *end = word;
            return out;
          }
        }
        out.push_back(statement());
      }
    }
  }

  NodeP statement() {
    const Token& tk = next();
    auto n = std::make_shared<Node>();
    n->line = tk.line;
    const std::string& w = tk.text;
    std::string end;
    if (w == "if") {
      n->k = Node::K::If;
      n->e.push_back(expression());
      expect_block_end();
      while (true) {
        n->bodies.push_back(body({"elif", "else", "endif"}, &end, tk.line));
        if (end == "elif") {
          n->e.push_back(expression());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          n->bodies.push_back(body({"endif"}, &end, tk.line));
          break;
        } else {
          break;
        }
      }
      expect_block_end();
    } else if (w == "for") {
      n->k = Node::K::For;
      do n->names.push_back(expect_name());
      while (skip_op(","));
      if (!skip_name("in")) fail(cur().line, "expected 'in' in the for tag, got " + describe(cur()));
      n->e.push_back(or_expr());
      n->e.push_back(skip_name("if") ? expression() : nullptr);
      if (is_name("recursive")) fail(cur().line, "unsupported construct 'recursive' loops");
      expect_block_end();
      n->bodies.push_back(body({"else", "endfor"}, &end, tk.line));
      if (end == "else") {
        expect_block_end();
        n->bodies.push_back(body({"endfor"}, &end, tk.line));
      }
      expect_block_end();
    } else if (w == "set") {
      n->text = expect_name();
      if (skip_op(".")) n->attr = expect_name();
      if (is_op(",")) fail(cur().line, "unsupported construct 'set' of several names");
      if (skip_op("=")) {
        n->k = Node::K::Set;
        n->e.push_back(expression());
        expect_block_end();
      } else {
        if (!n->attr.empty() || is_op("|")) fail(cur().line, "unsupported construct 'set' block with a filter or attribute");
        n->k = Node::K::SetBlock;
        expect_block_end();
        n->bodies.push_back(body({"endset"}, &end, tk.line));
        expect_block_end();
      }
    } else if (w == "macro") {
      n->k = Node::K::Macro;
      n->text = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        if (!n->names.empty()) expect_op(",");
        if (skip_op(")")) break;
        n->names.push_back(expect_name());
        n->e.push_back(skip_op("=") ? expression() : nullptr);
      }
      expect_block_end();
      n->bodies.push_back(body({"endmacro"}, &end, tk.line));
      if (cur().k == K::Name) ++i_;  // {% endmacro name %}
      expect_block_end();
    } else if (w == "break" || w == "continue") {
      n->k = w == "break" ? Node::K::Break : Node::K::Continue;
      expect_block_end();
    } else if (w == "generation") {  // HF's AssistantTracker: renders its body as is
      n->k = Node::K::Scope;
      expect_block_end();
      n->bodies.push_back(body({"endgeneration"}, &end, tk.line));
      expect_block_end();
    } else {
      fail(tk.line, "unsupported construct '{% " + w + " %}'");
    }
    return n;
  }

 public:
  ExprP expression() {
    ExprP e = or_expr();
    while (is_name("if")) {  // a if b else c
      const int line = next().line;
      ExprP cond = or_expr();
      ExprP other = skip_name("else") ? expression() : nullptr;
      auto c = make(EK::Cond, line, {cond, e});
      if (other) c->a.push_back(other);
      e = c;
    }
    return e;
  }

 private:
  // (A for tag's iterable is read from here: there "if" starts the loop filter.)
  ExprP or_expr() {
    ExprP e = and_expr();
    while (is_name("or")) {
      const int line = next().line;  // before the right side is parsed
      e = make(EK::Or, line, {e, and_expr()});
    }
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (is_name("and")) {
      const int line = next().line;
      e = make(EK::And, line, {e, not_expr()});
    }
    return e;
  }
  ExprP not_expr() {
    if (is_name("not")) {
      const int line = next().line;
      return make(EK::Not, line, {not_expr()});
    }
    return compare();
  }
  ExprP compare() {
    ExprP first = math1();
    auto c = make(EK::Compare, first->line, {first});
    while (true) {
      if (cur().k == K::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        c->ops.push_back(next().text);
      } else if (is_name("in")) {
        ++i_;
        c->ops.push_back("in");
      } else if (is_name("not") && t_[i_ + 1].k == K::Name && t_[i_ + 1].text == "in") {
        i_ += 2;
        c->ops.push_back("notin");
      } else {
        break;
      }
      c->a.push_back(math1());
    }
    return c->ops.empty() ? first : c;
  }
  ExprP binary(const std::string& op, int line, ExprP l, ExprP r) {
    auto b = make(EK::Binary, line, {std::move(l), std::move(r)});
    b->name = op;
    return b;
  }
  ExprP math1() {
    ExprP e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      e = binary(op.text, op.line, e, concat());
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (is_op("~")) {
      const Token& op = next();
      e = binary("~", op.line, e, math2());
    }
    return e;
  }
  ExprP math2() {
    ExprP e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      e = binary(op.text, op.line, e, power());
    }
    return e;
  }
  ExprP power() {
    ExprP e = unary(true);
    while (is_op("**")) {
      const Token& op = next();
      e = binary("**", op.line, e, unary(true));
    }
    return e;
  }
  ExprP unary(bool with_filter) {
    ExprP e;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      e = make(op.text == "-" ? EK::Neg : EK::Pos, op.line, {unary(false)});
    } else {
      e = primary();
    }
    e = postfix(e);
    return with_filter ? filters(e) : e;
  }

  ExprP primary() {
    const Token& tk = next();
    auto lit = [&](Value v) {
      auto e = make(EK::Lit, tk.line);
      e->lit = std::move(v);
      return e;
    };
    switch (tk.k) {
      case K::Name:
        if (tk.text == "true" || tk.text == "True") return lit(Value::boolean(true));
        if (tk.text == "false" || tk.text == "False") return lit(Value::boolean(false));
        if (tk.text == "none" || tk.text == "None") return lit(Value::none());
        {
          auto e = make(EK::Name, tk.line);
          e->name = tk.text;
          return e;
        }
      case K::Str: {
        std::string s = tk.text;
        while (cur().k == K::Str) s += next().text;  // adjacent strings join
        return lit(Value::str(s));
      }
      case K::Int:
        try {
          return lit(Value::integer(std::stoll(tk.text)));
        } catch (const std::exception&) {
          fail(tk.line, "the integer " + tk.text + " is too large");
        }
      case K::Float: return lit(Value::real(std::stod(tk.text)));
      case K::Op:
        if (tk.text == "(") {
          if (skip_op(")")) return make(EK::Tuple, tk.line);
          ExprP e = expression();
          if (!is_op(",")) {
            expect_op(")");
            return e;
          }
          auto t = make(EK::Tuple, tk.line, {e});
          while (skip_op(",") && !is_op(")")) t->a.push_back(expression());
          expect_op(")");
          return t;
        }
        if (tk.text == "[") {
          auto l = make(EK::List, tk.line);
          while (!skip_op("]")) {
            if (!l->a.empty()) expect_op(",");
            if (skip_op("]")) break;
            l->a.push_back(expression());
          }
          return l;
        }
        if (tk.text == "{") {
          auto d = make(EK::Dict, tk.line);
          while (!skip_op("}")) {
            if (!d->a.empty()) expect_op(",");
            if (skip_op("}")) break;
            d->a.push_back(expression());
            expect_op(":");
            d->a.push_back(expression());
          }
          return d;
        }
        break;
      default: break;
    }
    fail(tk.line, "unexpected " + describe(tk) + " in an expression");
  }

  ExprP postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        auto a = make(EK::Attr, line, {e});
        if (cur().k == K::Int) {
          a->k = EK::Item;
          auto idx = make(EK::Lit, line);
          idx->lit = Value::integer(std::stoll(next().text));
          a->a.push_back(idx);
        } else {
          a->name = expect_name();
        }
        e = a;
      } else if (is_op("[")) {
        const int line = next().line;
        e = subscript(e, line);
      } else if (is_op("(")) {
        const int line = next().line;
        e = call(make(EK::Call, line, {e}));
      } else {
        return e;
      }
    }
  }

  ExprP subscript(ExprP obj, int line) {
    std::vector<ExprP> parts{nullptr};
    bool slice = false;
    if (!is_op(":")) parts[0] = expression();
    while (skip_op(":")) {
      slice = true;
      parts.push_back(is_op(":") || is_op("]") ? nullptr : expression());
    }
    expect_op("]");
    if (!slice) return make(EK::Item, line, {obj, parts[0]});
    if (parts.size() > 3) fail(line, "a slice takes at most three parts");
    parts.resize(3);
    return make(EK::Slice, line, {obj, parts[0], parts[1], parts[2]});
  }

  // Arguments after "(": positional, then name=value.
  ExprP call(ExprP c) {
    while (!skip_op(")")) {
      if (c->a.size() + c->kw.size() > 1) expect_op(",");
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur().line, "unsupported construct '*args' / '**kwargs' in a call");
      if (cur().k == K::Name && t_[i_ + 1].k == K::Op && t_[i_ + 1].text == "=") {
        std::string name = next().text;
        ++i_;
        c->kw.emplace_back(name, expression());
      } else {
        if (!c->kw.empty()) fail(cur().line, "a positional argument after a keyword argument");
        c->a.push_back(expression());
      }
    }
    return c;
  }

  ExprP filters(ExprP e) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        auto f = make(EK::Filter, line, {e});
        f->name = expect_name();
        if (skip_op("(")) f = call(f);
        e = f;
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(EK::Test, line, {e});
        t->negated = skip_name("not");
        t->name = expect_name();
        if (skip_op("(")) {
          t = call(t);
        } else if ((cur().k == K::Name && !is_name("else") && !is_name("or") && !is_name("and")) || cur().k == K::Str || cur().k == K::Int ||
                   cur().k == K::Float || is_op("[") || is_op("{")) {
          if (is_name("is")) fail(cur().line, "tests cannot be chained with 'is'");
          t->a.push_back(postfix(primary()));  // "is divisibleby 3", "is sameas none", as jinja2 reads it
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).document(); }

}  // namespace bestofn::jinja
