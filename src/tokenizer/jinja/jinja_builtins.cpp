// Jinja's builtins that chat templates call (jinja2/filters.py, jinja2/tests.py), with HF's
// tojson (json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)), and the Python
// methods the sandbox lets a template call on str (strip, lstrip, rstrip, startswith, endswith,
// split, replace, upper, lower, title, capitalize) and dict (get, items, keys, values). Case
// changes are ASCII only: on other text they are refused rather than rendered differently.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "tokenizer/jinja/jinja_impl.h"

namespace bestofn::jinja {
namespace {

using T = Value::T;

const std::string& text(const Value& v, const Args& a, const char* what) {
  if (!v.is(T::Str)) fail(a.line, std::string(what) + " expects a string, got " + type_name(v));
  return v.s;
}

// mode 0 lower, 1 upper, 2 str.title (a letter after a non-letter is upper), 3 capitalize,
// 4 Jinja's title filter (words begin after whitespace or one of -({[<).
std::string ascii_case(const std::string& s, int line, const char* what, int mode) {
  if (std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
    fail(line, std::string("unsupported: ") + what + " of non-ASCII text");
  std::string out = s;
  bool prev_cased = false;
  for (size_t k = 0; k < out.size(); ++k) {
    const auto c = static_cast<unsigned char>(out[k]);
    const bool up = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && k == 0) || (mode == 4 && (k == 0 || std::strchr(" \t\n\r\v\f-({[<", out[k - 1])));
    out[k] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
    prev_cased = std::isalpha(c) != 0;
  }
  return out;
}

// The items a filter or a for loop walks: a list's items, a dict's keys, a string's characters.
Seq items_of(const Value& v, int line) {
  switch (v.t) {
    case T::Undefined: return {};
    case T::List: return *v.l;
    case T::Dict: {
      Seq keys;
      for (const auto& kv : *v.d) keys.push_back(Value::str(kv.first));
      return keys;
    }
    case T::Str: {
      Seq chars;
      for (size_t k = 0; k < v.s.size();) {
        size_t n = 1;
        while (k + n < v.s.size() && (static_cast<unsigned char>(v.s[k + n]) & 0xC0) == 0x80) ++n;
        chars.push_back(Value::str(v.s.substr(k, n)));
        k += n;
      }
      return chars;
    }
    default: fail(line, "'" + type_name(v) + "' object is not iterable");
  }
}

Value attribute(const Value& v, const std::string& name) {
  const Value* x = v.find(name);
  return x ? *x : Value::undefined(name);
}

std::vector<std::string> split(const std::string& s, const Value& sep, long long maxsplit) {
  std::vector<std::string> parts;
  if (sep.is(T::Str)) {
    size_t b = 0;
    for (size_t e; (maxsplit < 0 || static_cast<long long>(parts.size()) < maxsplit) && (e = s.find(sep.s, b)) != std::string::npos; b = e + sep.s.size())
      parts.push_back(s.substr(b, e - b));
    parts.push_back(s.substr(b));
    return parts;
  }
  size_t k = 0, len;
  while (true) {  // runs of whitespace, none at either end
    while (k < s.size() && is_space_at(s, k, &len)) k += len;
    if (k >= s.size()) break;
    if (maxsplit >= 0 && static_cast<long long>(parts.size()) == maxsplit) {
      parts.push_back(strip(s.substr(k), false, true, Value()));
      break;
    }
    size_t e = k;
    while (e < s.size() && !is_space_at(s, e, &len)) e += len;
    parts.push_back(s.substr(k, e - k));
    k = e;
  }
  return parts;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, long long count) {
  std::string out;
  size_t b = 0;
  long long n = 0;
  if (from.empty()) fail(0, "unsupported: replace of the empty string");
  for (size_t e; (count < 0 || n < count) && (e = s.find(from, b)) != std::string::npos; b = e + from.size(), ++n) out += s.substr(b, e - b) + to;
  return out + s.substr(b);
}

long long int_arg(const Value& v, const Args& a, const char* what) {
  if (v.is(T::Int) || v.is(T::Bool)) return v.is(T::Bool) ? v.b : v.i;
  fail(a.line, std::string(what) + " expects an integer, got " + type_name(v));
}

// select/reject/selectattr/rejectattr: the items whose test (or truth) is `keep`.
Value select(const Value& v, Args& a, bool by_attr, bool keep) {
  Args test;
  test.line = a.line;
  size_t first = 0;
  std::string attr;
  if (by_attr) attr = text(a.get(first++, "attribute"), a, "selectattr's attribute");
  const Value name = a.pos.size() > first ? a.pos[first] : Value();
  for (size_t k = first + 1; k < a.pos.size(); ++k) test.pos.push_back(a.pos[k]);
  Seq out;
  for (const Value& item : items_of(v, a.line)) {
    const Value x = by_attr ? attribute(item, attr) : item;
    const bool ok = name.is(T::Undefined) ? truthy(x) : apply_test(text(name, a, "the test name"), x, test);
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, Args& a) {
  a.callee = "the filter " + name;
  const int line = a.line;
  if (name == "trim") return Value::str(strip(to_str(v), true, true, a.get(0, "chars")));
  if (name == "tojson") {
    const Value indent = a.get(1, "indent"), seps = a.get(3, "separators");  // HF: tojson(x, ensure_ascii, indent, separators, sort_keys)
    const int in = indent.is(T::Int) ? static_cast<int>(indent.i) : -1;
    std::string item_sep = in >= 0 ? "," : ", ", key_sep = ": ";
    if (seps.is(T::List) && seps.l->size() == 2) {
      item_sep = text((*seps.l)[0], a, "tojson's separators");
      key_sep = text((*seps.l)[1], a, "tojson's separators");
    }
    if (truthy(a.get(0, "ensure_ascii"))) fail(line, "unsupported: tojson with ensure_ascii=true");
    return Value::str(to_json(v, in, item_sep, key_sep, truthy(a.get(4, "sort_keys")), line));
  }
  if (name == "length" || name == "count") {
    if (v.is(T::Str)) return Value::integer(static_cast<long long>(items_of(v, line).size()));
    if (v.is(T::List) || v.is(T::Dict) || v.is(T::Undefined)) return Value::integer(static_cast<long long>(v.is(T::List) ? v.l->size() : v.d ? v.d->size() : 0));
    fail(line, "object of type '" + type_name(v) + "' has no len()");
  }
  if (name == "default" || name == "d") {
    const bool boolean = truthy(a.get(1, "boolean"));
    return v.is(T::Undefined) || (boolean && !truthy(v)) ? a.get(0, "default_value", Value::str("")) : v;
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
    return Value::str(ascii_case(to_str(v), line, name.c_str(), name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 4 : 3));
  if (name == "string") return v.is(T::Str) ? v : Value::str(to_str(v));
  if (name == "safe") return v;
  if (name == "list") return Value::list(items_of(v, line));
  if (name == "first" || name == "last") {
    const Seq l = items_of(v, line);
    return l.empty() ? Value::undefined("") : name == "first" ? l.front() : l.back();
  }
  if (name == "reverse") {
    if (v.is(T::Str)) fail(line, "unsupported: reverse of a string");
    Seq l = items_of(v, line);
    std::reverse(l.begin(), l.end());
    return Value::list(std::move(l));
  }
  if (name == "join") {
    const Value attr = a.get(1, "attribute");
    std::string out, sep = to_str(a.get(0, "d", Value::str("")));
    bool firstitem = true;
    for (const Value& x : items_of(v, line)) {
      out += (firstitem ? "" : sep) + to_str(attr.is(T::Undefined) ? x : attribute(x, to_str(attr)));
      firstitem = false;
    }
    return Value::str(out);
  }
  if (name == "int") {
    if (v.is(T::Int) || v.is(T::Bool)) return Value::integer(v.is(T::Bool) ? v.b : v.i);
    if (v.is(T::Float)) return Value::integer(static_cast<long long>(v.f));
    try {
      size_t used = 0;
      const long long x = std::stoll(strip(to_str(v), true, true, Value()), &used);
      if (used == strip(to_str(v), true, true, Value()).size()) return Value::integer(x);
    } catch (const std::exception&) {
    }
    return a.get(0, "default", Value::integer(0));
  }
  if (name == "float") {
    if (v.number()) return Value::real(v.as_double());
    fail(line, "unsupported: float of a " + type_name(v));
  }
  if (name == "abs") {
    if (v.is(T::Int)) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.is(T::Float)) return Value::real(std::fabs(v.f));
    fail(line, "abs expects a number, got " + type_name(v));
  }
  if (name == "replace") {
    const Value count = a.get(2, "count");
    return Value::str(replace(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")), count.is(T::Undefined) || count.is(T::None) ? -1 : int_arg(count, a, "replace's count")));
  }
  if (name == "items") {
    if (v.is(T::Undefined)) return Value::list();
    if (!v.is(T::Dict)) fail(line, "items expects a mapping, got " + type_name(v));
    Seq out;
    for (const auto& [k, x] : *v.d) out.push_back(Value::list({Value::str(k), x}, true));
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") return select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr");
  if (name == "map") {
    const Value attr = a.get(99, "attribute");
    Seq out;
    if (!attr.is(T::Undefined)) {
      const Value dflt = a.get(99, "default");
      for (const Value& x : items_of(v, line)) {
        Value y = attribute(x, to_str(attr));
        out.push_back(y.is(T::Undefined) && !dflt.is(T::Undefined) ? dflt : y);
      }
      return Value::list(std::move(out));
    }
    Args rest;
    rest.line = line;
    const std::string filter = text(a.get(0, "name"), a, "map's filter name");
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    for (const Value& x : items_of(v, line)) {
      Args each = rest;
      out.push_back(apply_filter(filter, x, each));
    }
    return Value::list(std::move(out));
  }
  fail(line, "unsupported construct: the filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, Args& a) {
  a.callee = "the test " + name;
  const Value arg = a.get(0, "value");
  if (name == "defined") return !v.is(T::Undefined);
  if (name == "undefined") return v.is(T::Undefined);
  if (name == "none") return v.is(T::None);
  if (name == "boolean") return v.is(T::Bool);
  if (name == "true") return v.is(T::Bool) && v.b;
  if (name == "false") return v.is(T::Bool) && !v.b;
  if (name == "integer") return v.is(T::Int);
  if (name == "float") return v.is(T::Float);
  if (name == "number") return v.number();
  if (name == "string") return v.is(T::Str);
  if (name == "mapping") return v.is(T::Dict);
  if (name == "iterable") return v.is(T::Str) || v.is(T::List) || v.is(T::Dict) || v.is(T::Undefined);
  if (name == "sequence") return v.is(T::Str) || v.is(T::List) || v.is(T::Dict) || v.is(T::Undefined);
  if (name == "callable") return v.is(T::Func);
  if (name == "odd" || name == "even") return (int_arg(v, a, name.c_str()) % 2 != 0) == (name == "odd");
  if (name == "divisibleby") return int_arg(v, a, "divisibleby") % int_arg(arg, a, "divisibleby") == 0;
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg);
  if (name == "ne" || name == "!=") return !equal(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg, a.line) < 0;
  if (name == "le" || name == "<=") return compare(v, arg, a.line) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg, a.line) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg, a.line) >= 0;
  if (name == "in") {
    for (const Value& x : items_of(arg, a.line))
      if (arg.is(T::Str) ? arg.s.find(to_str(v)) != std::string::npos : equal(x, v)) return true;
    return false;
  }
  if (name == "sameas") return v.t == arg.t && (v.is(T::None) || v.is(T::Undefined) || (v.is(T::Bool) && v.b == arg.b) || (v.d && v.d == arg.d) || (v.l && v.l == arg.l));
  fail(a.line, "unsupported construct: the test '" + name + "'");
}

Value method(const Value& obj, const std::string& name, int line) {
  auto bind = [&](Function f) { return Value::func(name, std::move(f)); };
  if (obj.is(T::Str)) {
    const std::string s = obj.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return bind([s, name](Args& a) {
        a.at_most(1);
        const Value chars = a.get(0, "chars");
        if (chars.is(T::Str) && std::any_of(chars.s.begin(), chars.s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
          fail(a.line, "unsupported: " + name + " of non-ASCII characters");
        return Value::str(strip(s, name != "rstrip", name != "lstrip", chars));
      });
    if (name == "startswith" || name == "endswith")
      return bind([s, name](Args& a) {
        const Value p = a.get(0, "prefix");
        Seq options = p.is(T::List) ? *p.l : Seq{p};
        for (const Value& o : options) {
          const std::string& x = text(o, a, name.c_str());
          if (x.size() <= s.size() && (name == "startswith" ? s.compare(0, x.size(), x) : s.compare(s.size() - x.size(), x.size(), x)) == 0) return Value::boolean(true);
        }
        return Value::boolean(false);
      });
    if (name == "split")
      return bind([s](Args& a) {
        const Value sep = a.get(0, "sep"), max = a.get(1, "maxsplit");
        if (sep.is(T::Str) && sep.s.empty()) fail(a.line, "split: empty separator");
        Seq out;
        for (auto& p : split(s, sep, max.is(T::Undefined) ? -1 : int_arg(max, a, "split's maxsplit"))) out.push_back(Value::str(p));
        return Value::list(std::move(out));
      });
    if (name == "replace")
      return bind([s](Args& a) {
        const Value count = a.get(2, "count");
        return Value::str(replace(s, text(a.get(0, "old"), a, "replace"), text(a.get(1, "new"), a, "replace"), count.is(T::Undefined) ? -1 : int_arg(count, a, "replace's count")));
      });
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
      return bind([s, name](Args& a) { return Value::str(ascii_case(s, a.line, name.c_str(), name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3)); });
  }
  if (obj.is(T::Dict)) {
    const Value d = obj;
    if (name == "get")
      return bind([d](Args& a) {
        const Value* x = d.find(to_str(a.get(0, "key")));
        return x ? *x : a.get(1, "default", Value::none());
      });
    if (name == "items" || name == "keys" || name == "values")
      return bind([d, name](Args& a) {
        Args none;
        none.line = a.line;
        if (name == "items") return apply_filter("items", d, none);
        Seq out;
        for (const auto& [k, x] : *d.d) out.push_back(name == "keys" ? Value::str(k) : x);
        return Value::list(std::move(out));
      });
  }
  (void)line;
  return Value::undefined(name);
}

}  // namespace bestofn::jinja
