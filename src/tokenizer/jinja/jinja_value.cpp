// Jinja's values are Python's: this file gives them Python's meaning where a chat template can
// see it. Truth (empty is false, Undefined is false), str() and repr() (None, True, 1.0, 1e+16,
// ['a', 1], {'k': 'v'}), == across int/float/bool, ordering (refused between types Python cannot
// order), str.isspace over UTF-8, str.strip, and json.dumps as HF's tojson filter calls it
// (ensure_ascii=False, its separators and indent, sort_keys).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/jinja_impl.h"

namespace bestofn::jinja {

const Value* Value::find(const std::string& key) const {
  if (!d) return nullptr;
  for (const auto& [k, v] : *d)
    if (k == key) return &v;
  return nullptr;
}

Value Args::get(size_t index, const char* name, Value fallback) const {
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return index < pos.size() ? pos[index] : fallback;
}

void Args::at_most(size_t n) const {
  if (pos.size() > n) fail(line, callee + " takes at most " + std::to_string(n) + " positional arguments, got " + std::to_string(pos.size()));
}

bool truthy(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined:
    case Value::T::None: return false;
    case Value::T::Bool: return v.b;
    case Value::T::Int: return v.i != 0;
    case Value::T::Float: return v.f != 0;
    case Value::T::Str: return !v.s.empty();
    case Value::T::List: return !v.l->empty();
    case Value::T::Dict: return !v.d->empty();
    default: return true;
  }
}

std::string type_name(const Value& v) {
  static const char* const names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "Namespace", "function"};
  return names[static_cast<int>(v.t)];
}

std::string format_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX, the shortest digits that round-trip
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = sci[0] == '-';
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {  // Python's repr switches to exponent form here
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  const size_t whole = static_cast<size_t>(std::max(exp + 1, 0));
  if (exp < 0) {
    out.append("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
  } else if (digits.size() <= whole) {
    out.append(digits).append(whole - digits.size(), '0').append(".0");
  } else {
    out.append(digits, 0, whole).append(".").append(digits, whole, std::string::npos);
  }
  return out;
}

namespace {

std::string repr_str(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);  // non-ASCII printable text is kept (Python 3's repr)
    }
  }
  return out + q;
}

void json_str(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, int indent, int depth, const std::string& item_sep, const std::string& key_sep, bool sort_keys, int line) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.t) {
    case Value::T::None: out += "null"; return;
    case Value::T::Bool: out += v.b ? "true" : "false"; return;
    case Value::T::Int: out += std::to_string(v.i); return;
    case Value::T::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : format_float(v.f);
      return;
    case Value::T::Str: json_str(out, v.s); return;
    case Value::T::List: {
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.l->size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_value(out, (*v.l)[k], indent, depth + 1, item_sep, key_sep, sort_keys, line);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::T::Dict: {
      if (v.d->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : *v.d) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_str(out, items[k]->first);
        out += key_sep;
        json_value(out, items[k]->second, indent, depth + 1, item_sep, key_sep, sort_keys, line);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: fail(line, "tojson: Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys, int line) {
  std::string out;
  json_value(out, v, indent, 0, item_sep, key_sep, sort_keys, line);
  return out;
}

std::string repr(const Value& v) {
  switch (v.t) {
    case Value::T::Str: return repr_str(v.s);
    case Value::T::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.l->size(); ++k) out.append(k ? ", " : "").append(repr((*v.l)[k]));
      return out.append(v.tuple && v.l->size() == 1 ? "," : "").append(v.tuple ? ")" : "]");
    }
    case Value::T::Dict: {
      std::string out = "{";
      for (size_t k = 0; k < v.d->size(); ++k) out.append(k ? ", " : "").append(repr_str((*v.d)[k].first)).append(": ").append(repr((*v.d)[k].second));
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: return "";
    case Value::T::None: return "None";
    case Value::T::Bool: return v.b ? "True" : "False";
    case Value::T::Int: return std::to_string(v.i);
    case Value::T::Float: return format_float(v.f);
    case Value::T::Str: return v.s;
    case Value::T::List:
    case Value::T::Dict: return repr(v);
    case Value::T::Namespace: return "<Namespace>";
    default: fail(0, "unsupported: printing the function " + v.s);
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.number() && b.number()) {
    if (a.t != Value::T::Float && b.t != Value::T::Float) return (a.t == Value::T::Bool ? a.b : a.i) == (b.t == Value::T::Bool ? b.b : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case Value::T::Undefined:
    case Value::T::None: return true;
    case Value::T::Str: return a.s == b.s;
    case Value::T::List:
      return a.l->size() == b.l->size() && std::equal(a.l->begin(), a.l->end(), b.l->begin(), [](const Value& x, const Value& y) { return equal(x, y); });
    case Value::T::Dict:
      if (a.d->size() != b.d->size()) return false;
      for (const auto& [k, x] : *a.d) {
        const Value* y = b.find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    default: return a.d == b.d && a.fn == b.fn;  // identity
  }
}

int compare(const Value& a, const Value& b, int line) {
  if (a.number() && b.number()) {
    if (a.t != Value::T::Float && b.t != Value::T::Float) {
      const long long x = a.t == Value::T::Bool ? a.b : a.i, y = b.t == Value::T::Bool ? b.b : b.i;
      return x < y ? -1 : x > y;
    }
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
  }
  if (a.t == Value::T::Str && b.t == Value::T::Str) return a.s.compare(b.s) < 0 ? -1 : a.s.compare(b.s) > 0;  // UTF-8 order is code point order
  if (a.t == Value::T::List && b.t == Value::T::List) {
    for (size_t k = 0; k < std::min(a.l->size(), b.l->size()); ++k)
      if (!equal((*a.l)[k], (*b.l)[k])) return compare((*a.l)[k], (*b.l)[k], line);
    return a.l->size() < b.l->size() ? -1 : a.l->size() > b.l->size();
  }
  fail(line, "cannot order " + type_name(a) + " and " + type_name(b));
}

bool is_space_at(const std::string& s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  *len = 1;
  if (c < 0x80) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  unsigned cp = 0;
  if ((c & 0xE0) == 0xC0) {
    cp = ((c & 0x1Fu) << 6) | (byte(1) & 0x3Fu);
    *len = 2;
  } else if ((c & 0xF0) == 0xE0) {
    cp = ((c & 0x0Fu) << 12) | ((byte(1) & 0x3Fu) << 6) | (byte(2) & 0x3Fu);
    *len = 3;
  } else {
    *len = (c & 0xF8) == 0xF0 ? 4 : 1;
    return false;
  }
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

std::string strip(const std::string& s, bool left, bool right, const Value& chars) {
  size_t b = 0, e = s.size();
  if (chars.is(Value::T::Str)) {  // a set of characters (ASCII here; others are refused by the caller)
    if (left) b = std::min(s.size(), s.find_first_not_of(chars.s));
    if (right) e = s.find_last_not_of(chars.s) == std::string::npos ? b : std::max(b, s.find_last_not_of(chars.s) + 1);
    return s.substr(b, e - b);
  }
  size_t len;
  if (left)
    while (b < e && is_space_at(s, b, &len)) b += len;
  if (right) {
    while (e > b) {  // step back over one UTF-8 character
      size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      if (!is_space_at(s, k, &len) || k + len != e) break;
      e = k;
    }
  }
  return s.substr(b, e - b);
}

}  // namespace bestofn::jinja
