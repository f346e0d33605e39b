// Jinja's renderer (what jinja2 compiles a template to, and jinja2/runtime.py): scopes (a for
// loop's assignments stay in the loop, macros close over where they are defined, namespace()
// attributes are shared), the loop object (index, index0, revindex, revindex0, first, last,
// length, previtem, nextitem, cycle), break/continue, Undefined as jinja2's default Undefined
// (prints as "", is false, iterates as empty; any other use is an error naming it), jinja2's
// attribute/item lookup on dicts, Python's arithmetic, and the globals HF defines
// (raise_exception, strftime_now) with Jinja's own (namespace, range, dict).
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "bestofn/tokenizer/jinja.h"
#include "bestofn/util/error.h"
#include "tokenizer/jinja/jinja_impl.h"

namespace bestofn::jinja {
namespace {

using T = Value::T;
using EK = Expr::K;
using NK = Node::K;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopeP = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

[[noreturn]] void undefined_error(const Value& v, int line) { fail(line, "'" + v.s + "' is undefined"); }

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(j.get<long long>());
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Seq l;
      for (const auto& x : j) l.push_back(from_json(x));
      return Value::list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Map d;
      for (const auto& [k, x] : j.items()) d.emplace_back(k, from_json(x));
      return Value::dict(std::move(d));
    }
    default: throw Error("a chat template's variables must be JSON values");
  }
}

// Python's index into a sequence of n items (negative from the end); -1 when outside.
long long py_index(long long k, size_t n) { return k < 0 ? (k + static_cast<long long>(n) >= 0 ? k + static_cast<long long>(n) : -1) : (k < static_cast<long long>(n) ? k : -1); }

Seq chars(const std::string& s) {
  Args none;
  return apply_filter("list", Value::str(s), none).l ? *apply_filter("list", Value::str(s), none).l : Seq{};
}

bool contains(const Value& container, const Value& item, int line) {
  if (container.is(T::Str)) {
    if (!item.is(T::Str)) fail(line, "'in <string>' requires a string on the left, got " + type_name(item));
    return container.s.find(item.s) != std::string::npos;
  }
  if (container.is(T::Dict)) return item.is(T::Str) && container.find(item.s);
  if (container.is(T::List)) {
    for (const Value& x : *container.l)
      if (equal(x, item)) return true;
    return false;
  }
  if (container.is(T::Undefined)) return false;
  fail(line, "argument of type '" + type_name(container) + "' is not iterable");
}

class Renderer {
 public:
  Value eval(const Expr& e, const ScopeP& s) {
    switch (e.k) {
      case EK::Lit: return e.lit;
      case EK::Name: {
        const Value* v = s->find(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case EK::List:
      case EK::Tuple: {
        Seq l;
        for (const auto& x : e.a) l.push_back(eval(*x, s));
        return Value::list(std::move(l), e.k == EK::Tuple);
      }
      case EK::Dict: {
        Map d;
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          const Value key = eval(*e.a[k], s);
          if (!key.is(T::Str)) fail(e.line, "unsupported: a dict key of type " + type_name(key));
          d.emplace_back(key.s, eval(*e.a[k + 1], s));
        }
        return Value::dict(std::move(d));
      }
      case EK::Attr: return attr(eval(*e.a[0], s), e.name, e.line);
      case EK::Item: return item(eval(*e.a[0], s), eval(*e.a[1], s), e.line);
      case EK::Slice: return slice(e, s);
      case EK::Call: {
        const Value f = eval(*e.a[0], s);
        if (f.is(T::Undefined)) undefined_error(f, e.line);
        if (!f.is(T::Func)) fail(e.line, "'" + type_name(f) + "' object is not callable");
        Args a = args(e, s, 1);
        a.callee = f.s;
        return (*f.fn)(a);
      }
      case EK::Filter: {
        Args a = args(e, s, 1);
        return apply_filter(e.name, eval(*e.a[0], s), a);
      }
      case EK::Test: {
        Args a = args(e, s, 1);
        return Value::boolean(apply_test(e.name, eval(*e.a[0], s), a) != e.negated);
      }
      case EK::Neg:
      case EK::Pos: {
        const Value v = eval(*e.a[0], s);
        if (!v.number()) fail(e.line, "bad operand type for unary " + std::string(e.k == EK::Neg ? "-" : "+") + ": " + type_name(v));
        if (e.k == EK::Pos) return v.is(T::Bool) ? Value::integer(v.b) : v;
        return v.is(T::Float) ? Value::real(-v.f) : Value::integer(-(v.is(T::Bool) ? v.b : v.i));
      }
      case EK::Not: return Value::boolean(!truthy(eval(*e.a[0], s)));
      case EK::And: {
        Value l = eval(*e.a[0], s);
        return truthy(l) ? eval(*e.a[1], s) : l;
      }
      case EK::Or: {
        Value l = eval(*e.a[0], s);
        return truthy(l) ? l : eval(*e.a[1], s);
      }
      case EK::Cond:
        if (truthy(eval(*e.a[0], s))) return eval(*e.a[1], s);
        return e.a.size() > 2 ? eval(*e.a[2], s) : Value::undefined("the missing else of a conditional expression");
      case EK::Compare: {
        Value l = eval(*e.a[0], s);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value r = eval(*e.a[k + 1], s);
          const std::string& op = e.ops[k];
          bool ok;
          if (op == "==") ok = equal(l, r);
          else if (op == "!=") ok = !equal(l, r);
          else if (op == "in") ok = contains(r, l, e.line);
          else if (op == "notin") ok = !contains(r, l, e.line);
          else {
            if (l.is(T::Undefined)) undefined_error(l, e.line);
            if (r.is(T::Undefined)) undefined_error(r, e.line);
            const int c = compare(l, r, e.line);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case EK::Binary: return binary(e.name, eval(*e.a[0], s), eval(*e.a[1], s), e.line);
    }
    fail(e.line, "unsupported expression");
  }

  Flow exec(const Body& body, const ScopeP& s, std::string& out) {
    for (const NodeP& n : body) {
      const Flow f = exec(*n, s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  Args args(const Expr& e, const ScopeP& s, size_t first) {
    Args a;
    a.line = e.line;
    for (size_t k = first; k < e.a.size(); ++k) a.pos.push_back(eval(*e.a[k], s));
    for (const auto& [name, x] : e.kw) a.kw.emplace_back(name, eval(*x, s));
    return a;
  }

  // jinja2's getattr: a method of str/dict if there is one, else the item.
  Value attr(const Value& obj, const std::string& name, int line) {
    if (obj.is(T::Undefined)) undefined_error(obj, line);
    Value m = method(obj, name, line);
    if (!m.is(T::Undefined)) return m;
    if (obj.is(T::Dict) || obj.is(T::Namespace)) {
      const Value* v = obj.find(name);
      if (v) return *v;
    }
    return Value::undefined(name);
  }

  // jinja2's getitem: the item, else (for a string key) the attribute.
  Value item(const Value& obj, const Value& key, int line) {
    if (obj.is(T::Undefined)) undefined_error(obj, line);
    if ((obj.is(T::List) || obj.is(T::Str)) && (key.is(T::Int) || key.is(T::Bool))) {
      const Seq items = obj.is(T::List) ? Seq() : chars(obj.s);
      const Seq& l = obj.is(T::List) ? *obj.l : items;
      const long long k = py_index(key.is(T::Bool) ? key.b : key.i, l.size());
      return k < 0 ? Value::undefined(repr(key)) : l[static_cast<size_t>(k)];
    }
    if (obj.is(T::Dict) && key.is(T::Str)) {
      const Value* v = obj.find(key.s);
      if (v) return *v;
    }
    return key.is(T::Str) ? attr(obj, key.s, line) : Value::undefined(repr(key));
  }

  Value slice(const Expr& e, const ScopeP& s) {
    const Value obj = eval(*e.a[0], s);
    if (obj.is(T::Undefined)) undefined_error(obj, e.line);
    if (!obj.is(T::List) && !obj.is(T::Str)) fail(e.line, "cannot slice a " + type_name(obj));
    const Seq l = obj.is(T::List) ? *obj.l : chars(obj.s);
    const long long n = static_cast<long long>(l.size());
    auto part = [&](size_t k, long long dflt) -> std::pair<bool, long long> {
      if (!e.a[k]) return {false, dflt};
      const Value v = eval(*e.a[k], s);
      if (v.is(T::None)) return {false, dflt};
      if (!v.is(T::Int)) fail(e.line, "slice indices must be integers, got " + type_name(v));
      return {true, v.i};
    };
    const long long step = part(3, 1).second;
    if (step == 0) fail(e.line, "slice step cannot be zero");
    auto clamp = [&](std::pair<bool, long long> p, long long dflt) {
      if (!p.first) return dflt;
      long long x = p.second < 0 ? p.second + n : p.second;
      return step > 0 ? std::clamp(x, 0LL, n) : std::clamp(x, -1LL, n - 1);
    };
    const long long b = clamp(part(1, 0), step > 0 ? 0 : n - 1), end = clamp(part(2, 0), step > 0 ? n : -1);
    Seq out;
    for (long long k = b; step > 0 ? k < end : k > end; k += step) out.push_back(l[static_cast<size_t>(k)]);
    if (obj.is(T::List)) return Value::list(std::move(out));
    std::string str;
    for (const Value& c : out) str += c.s;
    return Value::str(str);
  }

  Value binary(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "~") return Value::str(to_str(l) + to_str(r));
    if (l.is(T::Undefined)) undefined_error(l, line);
    if (r.is(T::Undefined)) undefined_error(r, line);
    if (op == "+" && l.is(T::Str) && r.is(T::Str)) return Value::str(l.s + r.s);
    if (op == "+" && l.is(T::List) && r.is(T::List)) {
      Seq x = *l.l;
      x.insert(x.end(), r.l->begin(), r.l->end());
      return Value::list(std::move(x));
    }
    if (op == "*" && ((l.is(T::Str) && r.is(T::Int)) || (l.is(T::Int) && r.is(T::Str)))) {
      std::string x;
      for (long long k = 0; k < (l.is(T::Int) ? l.i : r.i); ++k) x += l.is(T::Str) ? l.s : r.s;
      return Value::str(x);
    }
    if (!l.number() || !r.number()) fail(line, "unsupported operand types for " + op + ": '" + type_name(l) + "' and '" + type_name(r) + "'");
    const bool ints = !l.is(T::Float) && !r.is(T::Float);
    const long long a = l.is(T::Bool) ? l.b : l.i, b = r.is(T::Bool) ? r.b : r.i;
    const double x = l.as_double(), y = r.as_double();
    if (op == "+") return ints ? Value::integer(a + b) : Value::real(x + y);
    if (op == "-") return ints ? Value::integer(a - b) : Value::real(x - y);
    if (op == "*") return ints ? Value::integer(a * b) : Value::real(x * y);
    if ((op == "/" || op == "//" || op == "%") && (ints ? b == 0 : y == 0)) fail(line, "division by zero");
    if (op == "/") return Value::real(x / y);
    if (op == "//") return ints ? Value::integer(a / b - ((a % b != 0) && ((a < 0) != (b < 0)))) : Value::real(std::floor(x / y));
    if (op == "%") {
      if (ints) return Value::integer(((a % b) + b) % b);
      const double m = std::fmod(x, y);
      return Value::real(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    if (ints && b >= 0) {
      long long p = 1;
      for (long long k = 0; k < b; ++k) p *= a;
      return Value::integer(p);
    }
    return Value::real(std::pow(x, y));
  }

  Flow exec(const Node& n, const ScopeP& s, std::string& out) {
    switch (n.k) {
      case NK::Text: out += n.text; return Flow::Normal;
      case NK::Output: {
        const Value v = eval(*n.e[0], s);
        if (v.is(T::Func)) fail(n.line, "unsupported: printing the function " + v.s);
        out += to_str(v);
        return Flow::Normal;
      }
      case NK::If:
        for (size_t k = 0; k < n.e.size(); ++k)
          if (truthy(eval(*n.e[k], s))) return exec(n.bodies[k], s, out);
        return n.bodies.size() > n.e.size() ? exec(n.bodies.back(), s, out) : Flow::Normal;
      case NK::For: return loop(n, s, out);
      case NK::Set: {
        Value v = eval(*n.e[0], s);
        if (n.attr.empty()) {
          s->vars[n.text] = std::move(v);
          return Flow::Normal;
        }
        const Value* ns = s->find(n.text);
        if (!ns || !ns->is(T::Namespace)) fail(n.line, "cannot assign attribute on non-namespace object '" + n.text + "'");
        for (auto& kv : *ns->d)
          if (kv.first == n.attr) {
            kv.second = std::move(v);
            return Flow::Normal;
          }
        ns->d->emplace_back(n.attr, std::move(v));
        return Flow::Normal;
      }
      case NK::SetBlock: {
        std::string body;
        exec(n.bodies[0], s, body);
        s->vars[n.text] = Value::str(body);
        return Flow::Normal;
      }
      case NK::Macro: {
        const Node* def = &n;
        // The macro's scope holds the macro: a weak reference back, or the two would never be freed.
        const std::weak_ptr<Scope> closure = s;
        s->vars[n.text] = Value::func(n.text, [this, def, closure](Args& a) {
          auto local = std::make_shared<Scope>();
          local->parent = closure.lock();
          if (!local->parent) fail(a.line, "macro '" + def->text + "' called after the scope that defined it ended");
          if (a.pos.size() > def->names.size()) fail(a.line, "macro '" + def->text + "' takes not more than " + std::to_string(def->names.size()) + " argument(s)");
          for (size_t k = 0; k < def->names.size(); ++k) {
            Value v = a.get(k, def->names[k].c_str());
            if (v.is(T::Undefined) && def->e[k]) v = eval(*def->e[k], local);
            local->vars[def->names[k]] = v.is(T::Undefined) ? Value::undefined(def->names[k]) : v;
          }
          for (const auto& [k, v] : a.kw) {
            if (std::find(def->names.begin(), def->names.end(), k) == def->names.end()) fail(a.line, "macro '" + def->text + "' has no argument '" + k + "'");
          }
          std::string body;
          exec(def->bodies[0], local, body);
          return Value::str(body);
        });
        return Flow::Normal;
      }
      case NK::Break: return Flow::Break;
      case NK::Continue: return Flow::Continue;
      case NK::Scope: return exec(n.bodies[0], s, out);
    }
    return Flow::Normal;
  }

  void bind(const Node& n, const ScopeP& scope, const Value& x) {
    if (n.names.size() == 1) {
      scope->vars[n.names[0]] = x;
      return;
    }
    const Seq parts = x.is(T::List) ? *x.l : x.is(T::Str) ? chars(x.s) : Seq{};
    if (parts.size() != n.names.size())
      fail(n.line, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.names.size()) + " names");
    for (size_t k = 0; k < parts.size(); ++k) scope->vars[n.names[k]] = parts[k];
  }

  Flow loop(const Node& n, const ScopeP& s, std::string& out) {
    const Value iterable = eval(*n.e[0], s);
    Args none;
    none.line = n.line;
    if (!iterable.is(T::List) && !iterable.is(T::Dict) && !iterable.is(T::Str) && !iterable.is(T::Undefined))
      fail(n.line, "'" + type_name(iterable) + "' object is not iterable");
    Seq all = *apply_filter("list", iterable, none).l;
    auto scope = std::make_shared<Scope>();  // each iteration starts from the outer values
    scope->parent = s;
    if (n.e[1]) {  // for x in xs if cond: the loop sees only the items that pass
      Seq kept;
      for (const Value& x : all) {
        bind(n, scope, x);
        if (truthy(eval(*n.e[1], scope))) kept.push_back(x);
      }
      all = std::move(kept);
    }
    const long long len = static_cast<long long>(all.size());
    for (long long k = 0; k < len; ++k) {
      scope = std::make_shared<Scope>();
      scope->parent = s;
      bind(n, scope, all[static_cast<size_t>(k)]);
      Map info{{"index", Value::integer(k + 1)},   {"index0", Value::integer(k)},        {"revindex", Value::integer(len - k)},
                {"revindex0", Value::integer(len - k - 1)}, {"first", Value::boolean(k == 0)}, {"last", Value::boolean(k == len - 1)},
                {"length", Value::integer(len)},     {"depth", Value::integer(1)},        {"depth0", Value::integer(0)}};
      if (k > 0) info.emplace_back("previtem", all[static_cast<size_t>(k - 1)]);
      if (k + 1 < len) info.emplace_back("nextitem", all[static_cast<size_t>(k + 1)]);
      info.emplace_back("cycle", Value::func("loop.cycle", [k](Args& a) {
        if (a.pos.empty()) fail(a.line, "loop.cycle needs at least one argument");
        return a.pos[static_cast<size_t>(k) % a.pos.size()];
      }));
      scope->vars["loop"] = Value::dict(std::move(info));
      if (exec(n.bodies[0], scope, out) == Flow::Break) break;
    }
    if (len == 0 && n.bodies.size() > 1) {
      auto other = std::make_shared<Scope>();
      other->parent = s;
      return exec(n.bodies[1], other, out);
    }
    return Flow::Normal;
  }

};

ScopeP globals(const std::tm& now) {
  auto g = std::make_shared<Scope>();
  g->vars["raise_exception"] = Value::func("raise_exception", [](Args& a) -> Value { fail(a.line, "the template raised an exception: " + to_str(a.get(0, "message"))); });
  g->vars["strftime_now"] = Value::func("strftime_now", [now](Args& a) {
    const std::string fmt = to_str(a.get(0, "format"));
    char buf[512];
    const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &now);
    if (n == 0 && !fmt.empty()) fail(a.line, "strftime_now: the format '" + fmt + "' gives nothing or too much");
    return Value::str(std::string(buf, n));
  });
  g->vars["namespace"] = Value::func("namespace", [](Args& a) {
    Value ns = Value::dict({}, T::Namespace);
    if (!a.pos.empty()) fail(a.line, "unsupported: namespace() from a positional argument");
    for (const auto& kv : a.kw) ns.d->push_back(kv);
    return ns;
  });
  g->vars["dict"] = Value::func("dict", [](Args& a) {
    if (!a.pos.empty()) fail(a.line, "unsupported: dict() from a positional argument");
    return Value::dict(Map(a.kw.begin(), a.kw.end()));
  });
  g->vars["range"] = Value::func("range", [](Args& a) {
    auto num = [&](size_t k) {
      if (!a.pos[k].is(T::Int)) fail(a.line, "range expects integers");
      return a.pos[k].i;
    };
    if (a.pos.empty() || a.pos.size() > 3) fail(a.line, "range takes 1 to 3 arguments");
    const long long b = a.pos.size() > 1 ? num(0) : 0, e = a.pos.size() > 1 ? num(1) : num(0), step = a.pos.size() > 2 ? num(2) : 1;
    if (step == 0) fail(a.line, "range step cannot be zero");
    Seq l;
    for (long long k = b; step > 0 ? k < e : k > e; k += step) {
      if (l.size() >= 100000) fail(a.line, "range is too long (sandboxed to 100000 items)");
      l.push_back(Value::integer(k));
    }
    return Value::list(std::move(l));
  });
  return g;
}

}  // namespace
}  // namespace bestofn::jinja

namespace bestofn {

std::string render_jinja(const std::string& source, const std::string& name, const nlohmann::ordered_json& variables, const std::tm& now) {
  using namespace jinja;
  try {
    const Body body = parse(lex(source));
    auto scope = std::make_shared<Scope>();
    scope->parent = globals(now);
    for (const auto& [k, v] : variables.items()) scope->vars[k] = from_json(v);
    std::string out;
    Renderer r;
    if (r.exec(body, scope, out) != Flow::Normal) throw TemplateError{0, "break or continue outside a loop"};
    return out;
  } catch (const TemplateError& e) {
    throw Error(name, (e.line > 0 ? "line " + std::to_string(e.line) + ": " : std::string()) + e.message);
  }
}

}  // namespace bestofn
