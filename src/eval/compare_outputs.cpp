#include "bestofn/eval/compare_outputs.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <complex>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "bestofn/util/utf8.h"

namespace bestofn {
namespace {
using nlohmann::json;

// Deeper values are refused before anything recurses on them: the candidate writes the text, and
// a million nested brackets must not overflow bestofn's stack. Python's encoder stops far sooner
// (its recursion limit is 1000).
constexpr int kMaxDepth = 2000;

const json* tagged(const json& v, const char* tag) {
  if (!v.is_object() || v.size() != 1) return nullptr;
  const auto it = v.find(tag);
  return it == v.end() ? nullptr : &*it;
}

// A numpy scalar's value ({"N": [type, value]}), which == compares as Python's own; v itself otherwise.
const json& value_of(const json& v) {
  const json* n = tagged(v, "N");
  return n && n->is_array() && n->size() == 2 ? (*n)[1] : v;
}

bool is_float(const json& v) {
  const json& x = value_of(v);
  return x.is_number_float() || tagged(x, "F");
}
bool is_int(const json& v) {
  const json& x = value_of(v);
  return x.is_number_integer() || tagged(x, "I");  // (unsigned is an integer too)
}
bool is_number(const json& v) { return value_of(v).is_boolean() || is_int(v) || is_float(v); }
// A complex with no imaginary part is == its real part; any other is a number of its own.
const json* complex_parts(const json& v) {
  const json* c = tagged(value_of(v), "C");
  return c && c->is_array() && c->size() == 2 ? c : nullptr;
}

// A list or a tuple's elements; nullptr for anything else.
const json* sequence(const json& v) {
  if (v.is_array()) return &v;
  return tagged(v, "T");
}

// Python's float(v) for a number: false where Python raises (an int beyond a double's range).
bool to_double(const json& numpy_or_plain, double& out) {
  const json& v = value_of(numpy_or_plain);
  if (v.is_boolean()) out = v.get<bool>() ? 1.0 : 0.0;
  else if (v.is_number_unsigned()) out = static_cast<double>(v.get<std::uint64_t>());
  else if (v.is_number_integer()) out = static_cast<double>(v.get<std::int64_t>());
  else if (v.is_number_float()) out = v.get<double>();
  else if (const json* f = tagged(v, "F")) {
    const std::string s = f->is_string() ? f->get<std::string>() : "";
    out = s == "nan" ? std::nan("") : s == "inf" ? HUGE_VAL : -HUGE_VAL;
  } else if (const json* i = tagged(v, "I")) {
    if (!i->is_string()) return false;
    std::string hex = i->get<std::string>();
    hex.insert(hex.starts_with('-') ? 1 : 0, "0x");
    errno = 0;
    out = std::strtod(hex.c_str(), nullptr);  // correctly rounded, as Python's int -> float
    return !(errno == ERANGE && std::isinf(out));
  } else {
    return false;
  }
  return true;
}

// ---- canonical keys: two plain values are == in Python exactly when their keys are equal ----

std::string hex_of(std::uint64_t u) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(u));
  return buf;
}

// An integral double's exact value in hexadecimal, as Python's '%x' % int(d) writes it.
std::string integral_hex(double d) {
  const double a = std::fabs(d);
  std::string h;
  if (a < 18446744073709551616.0) {
    h = hex_of(static_cast<std::uint64_t>(a));
  } else {
    int e = 0;
    const auto m = static_cast<std::uint64_t>(std::ldexp(std::frexp(a, &e), 53));  // a = m * 2^(e - 53), e - 53 > 0
    const int shift = e - 53;
    h = hex_of(m << (shift % 4)) + std::string(static_cast<std::size_t>(shift / 4), '0');
  }
  return (d < 0 && h != "0" ? "-" : "") + h;
}

// An integer's hexadecimal digits, without leading zeros and "-0".
std::string normal_digits(std::string_view s) {
  const bool neg = !s.empty() && s[0] == '-';
  if (neg) s.remove_prefix(1);
  while (s.size() > 1 && s[0] == '0') s.remove_prefix(1);
  return (neg && s != "0" ? "-" : "") + std::string(s);
}

// Surrogates too (as WTF-8, which utf8::append writes for them): a str with lone surrogates is a
// {"U": ...} value and must compare.
void append_utf8(std::string& out, std::uint32_t cp) { utf8::append(out, cp); }

std::string code_points_text(const json& cps) {
  std::string s;
  if (cps.is_array())
    for (const json& c : cps)
      if (c.is_number_integer()) append_utf8(s, static_cast<std::uint32_t>(c.get<std::int64_t>()));
  return s;
}

// Numbers share one form: an integral value (bool, int, or a float such as 2.0) as its exact
// hexadecimal integer, any other float as its exact hexadecimal float, so 1 == 1.0 == True and 2**53 + 1 != 2.0**53.
void number_key(const json& numpy_or_plain, std::string& out) {
  const json& v = value_of(numpy_or_plain);
  if (v.is_boolean()) {
    out += v.get<bool>() ? "n1;" : "n0;";
  } else if (v.is_number_unsigned()) {
    out += "n" + hex_of(v.get<std::uint64_t>()) + ";";
  } else if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    out += std::string(i < 0 ? "n-" : "n") + hex_of(i < 0 ? 0 - static_cast<std::uint64_t>(i) : static_cast<std::uint64_t>(i)) + ";";
  } else if (const json* i = tagged(v, "I")) {
    out += "n" + normal_digits(i->is_string() ? i->get_ref<const std::string&>() : "") + ";";
  } else {
    double d = 0;
    to_double(v, d);
    char buf[400];
    if (std::isnan(d)) {
      out += "xnan;";
    } else if (std::isinf(d)) {
      out += d > 0 ? "x+inf;" : "x-inf;";
    } else if (d == std::trunc(d)) {
      out += "n" + integral_hex(d) + ";";
    } else {
      std::snprintf(buf, sizeof buf, "%a", d);
      out += "f" + std::string(buf) + ";";
    }
  }
}

void key_of(const json& v, std::string& out);

void sorted_keys(const json& items, std::string& out, bool unique) {
  std::vector<std::string> keys;
  if (items.is_array())
    for (const json& x : items) key_of(x, keys.emplace_back());
  std::sort(keys.begin(), keys.end());
  if (unique) keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const auto& k : keys) out += k;
}

void key_of(const json& numpy_or_plain, std::string& out) {
  const json& v = value_of(numpy_or_plain);
  if (v.is_null()) {
    out += "N";
  } else if (is_number(v)) {
    number_key(v, out);
  } else if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    out += "s" + std::to_string(s.size()) + ":" + s;
  } else if (v.is_array()) {
    out += "[";
    for (const json& x : v) key_of(x, out);
    out += "]";
  } else if (const json* t = tagged(v, "T")) {
    out += "(";
    if (t->is_array())
      for (const json& x : *t) key_of(x, out);
    out += ")";
  } else if (const json* s = tagged(v, "S") ? tagged(v, "S") : tagged(v, "Z")) {
    out += "<";  // set == frozenset, as in Python
    sorted_keys(*s, out, true);
    out += ">";
  } else if (const json* d = tagged(v, "D")) {
    std::vector<std::pair<std::string, std::string>> kv;
    if (d->is_array())
      for (const json& e : *d) {
        if (!e.is_array() || e.size() != 2) continue;
        auto& [k, x] = kv.emplace_back();
        key_of(e[0], k);
        key_of(e[1], x);
      }
    std::sort(kv.begin(), kv.end());
    out += "{";
    for (const auto& [k, x] : kv) out += k + x;
    out += "}";
  } else if (const json* u = tagged(v, "U")) {
    const std::string text = code_points_text(*u);
    out += "s" + std::to_string(text.size()) + ":" + text;
  } else if (const json* c = complex_parts(v)) {
    double im = 0;
    if (to_double((*c)[1], im) && im == 0) {
      number_key((*c)[0], out);
    } else {
      out += "c";
      number_key((*c)[0], out);
      number_key((*c)[1], out);
    }
  } else if (const json* h = tagged(v, "H")) {
    out += "h" + (h->is_array() && !h->empty() && (*h)[0].is_string() ? (*h)[0].get<std::string>() : std::string("?")) + ";";
  } else {
    out += "?";  // not plain data: check_plain refuses it before any comparison
  }
}

std::string check_at(const json& v, int depth) {
  if (depth > kMaxDepth) return "nested deeper than " + std::to_string(kMaxDepth);
  if (v.is_null() || v.is_boolean() || v.is_number_integer() || v.is_string()) return "";
  if (v.is_number_float()) return std::isfinite(v.get<double>()) ? "" : "a non-finite number outside an F tag";
  auto all = [&](const json& items) -> std::string {
    if (!items.is_array()) return "a tag's value is not an array";
    for (const json& x : items)
      if (std::string e = check_at(x, depth + 1); !e.empty()) return e;
    return "";
  };
  if (v.is_array()) return all(v);
  if (!v.is_object() || v.size() != 1) return std::string("an object that is not a tag of one key");
  const std::string& tag = v.begin().key();
  const json& x = v.begin().value();
  if (tag == "I") {
    if (!x.is_string()) return "an I tag without a string";
    std::string_view s = x.get_ref<const std::string&>();
    if (s.starts_with('-')) s.remove_prefix(1);
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
      return "an I tag that is not a hexadecimal integer";
    return "";
  }
  if (tag == "C") {
    if (!x.is_array() || x.size() != 2 || !is_float(x[0]) || !is_float(x[1])) return "a C tag that is not [real, imag]";
    return check_at(x[0], depth + 1) + check_at(x[1], depth + 1);
  }
  if (tag == "H") {
    if (!x.is_array() || x.size() != 3 || !x[0].is_string() || x[0].get_ref<const std::string&>().size() != 64 || !x[1].is_string() ||
        !x[2].is_number_integer())
      return "an H tag that is not [sha256, type, length]";
    return "";
  }
  if (tag == "F") return x == "nan" || x == "inf" || x == "-inf" ? "" : "an F tag other than nan, inf, -inf";
  if (tag == "T" || tag == "S" || tag == "Z") return all(x);
  if (tag == "D") {
    if (!x.is_array()) return "a D tag's value is not an array";
    for (const json& e : x) {
      if (!e.is_array() || e.size() != 2) return "a D tag's item is not a [key, value] pair";
      if (std::string err = all(e); !err.empty()) return err;
    }
    return "";
  }
  if (tag == "N") {
    if (!x.is_array() || x.size() != 2 || !x[0].is_string() || x[0].get_ref<const std::string&>().size() > 100)
      return "an N tag that is not [type, value]";
    const json& n = x[1];
    if (!(n.is_boolean() || n.is_number() || n.is_string() || tagged(n, "I") || tagged(n, "F") || tagged(n, "C") || tagged(n, "U")))
      return "an N tag whose value is not a bool, int, float, complex or str";
    return check_at(n, depth + 1);
  }
  if (tag == "U") {
    if (!x.is_array()) return "a U tag's value is not an array";
    for (const json& c : x)
      if (!c.is_number_integer() || c.get<std::int64_t>() < 0 || c.get<std::int64_t>() > 0x10FFFF) return "a U tag's code point is out of range";
    return "";
  }
  return "an unknown tag \"" + tag.substr(0, 20) + "\"";
}

// ---- Python's repr ----

// Python's repr of a finite double (float_repr_style 'short'): the shortest digits that round
// trip, positional for exponents -4..15, else d.ddde+XX.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') sign = "-", s.erase(0, 1);
  const std::size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<std::size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(exp + 1)) + "." + digits.substr(static_cast<std::size_t>(exp + 1));
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ex[16];
  std::snprintf(ex, sizeof ex, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + ex;
}

// A big int's decimal digits (Python's repr) from its hexadecimal ones, up to 1024 hexadecimal
// digits; beyond, how long it is.
std::string int_repr(std::string_view hex) {
  const bool neg = hex.starts_with('-');
  if (neg) hex.remove_prefix(1);
  if (hex.size() > 1024) return "<an int of " + std::to_string(hex.size() * 1204 / 1000) + " digits>";
  std::vector<int> n;  // base 16, most significant first
  for (char c : hex) n.push_back(c <= '9' ? c - '0' : c - 'a' + 10);
  std::string digits;
  while (!(n.empty() || (n.size() == 1 && n[0] == 0))) {
    std::vector<int> q;
    int r = 0;
    for (int d : n) {
      const int cur = r * 16 + d;
      if (!q.empty() || cur / 10) q.push_back(cur / 10);
      r = cur % 10;
    }
    digits += static_cast<char>('0' + r);
    n = std::move(q);
  }
  if (digits.empty()) digits = "0";
  std::reverse(digits.begin(), digits.end());
  return (neg ? "-" : "") + digits;
}

// UTF-8 (or WTF-8) text as code points.
std::vector<std::uint32_t> code_points(std::string_view s) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

// Python's str.isprintable, near enough for messages: the C1 controls, the soft hyphen,
// surrogates, private use, the line and paragraph separators and the BOM are not.
bool printable(std::uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD) return false;
  if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xE000 && cp <= 0xF8FF) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF) return false;
  return true;
}

std::string str_repr(std::string_view text) {
  const std::vector<std::uint32_t> cps = code_points(text);
  const bool single = std::find(cps.begin(), cps.end(), '\'') != cps.end();
  const bool dbl = std::find(cps.begin(), cps.end(), '"') != cps.end();
  const char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (std::uint32_t cp : cps) {
    if (cp == static_cast<std::uint32_t>(quote) || cp == '\\') out += '\\', out += static_cast<char>(cp);
    else if (cp == '\t') out += "\\t";
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (printable(cp)) append_utf8(out, cp);
    else {
      std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
    }
  }
  return out + quote;
}

// Appends v's repr to out, stopping once out holds more than max characters (bytes here: the
// caller cuts at a character).
void repr_to(const json& v, std::string& out, std::size_t max) {
  if (out.size() > max) return;
  auto items = [&](const json* xs, const char* open, const char* close, bool one_comma) {
    out += open;
    if (xs && xs->is_array()) {
      for (std::size_t i = 0; i < xs->size() && out.size() <= max; ++i) {
        if (i) out += ", ";
        repr_to((*xs)[i], out, max);
      }
      if (one_comma && xs->size() == 1) out += ",";
    }
    out += close;
  };
  if (const json* n = tagged(v, "N"); n && n->is_array() && n->size() == 2 && (*n)[0].is_string()) {
    // numpy 2's repr: np.float64(0.5)
    std::string type = (*n)[0].get<std::string>();
    if (type.starts_with("numpy.")) type.replace(0, 5, "np");
    out += type + "(";
    repr_to((*n)[1], out, max);
    out += ")";
  } else if (v.is_null()) out += "None";
  else if (v.is_boolean()) out += v.get<bool>() ? "True" : "False";
  else if (v.is_number_unsigned()) out += std::to_string(v.get<std::uint64_t>());
  else if (v.is_number_integer()) out += std::to_string(v.get<std::int64_t>());
  else if (v.is_number_float()) out += float_repr(v.get<double>());
  else if (v.is_string()) out += str_repr(v.get_ref<const std::string&>());
  else if (v.is_array()) items(&v, "[", "]", false);
  else if (const json* i = tagged(v, "I")) out += int_repr(i->is_string() ? i->get<std::string>() : "");
  else if (const json* c = complex_parts(v)) {
    // Python: (1+2j), 2j, (1-2j)
    double re = 0, im = 0;
    to_double((*c)[0], re);
    to_double((*c)[1], im);
    auto part = [](double d) {
      std::string r = float_repr(d);
      return r.ends_with(".0") ? r.substr(0, r.size() - 2) : r;
    };
    if (re == 0 && !std::signbit(re)) out += part(im) + "j";
    else out += "(" + part(re) + (std::signbit(im) || std::isnan(im) ? "" : "+") + part(im) + "j)";
  } else if (const json* h = tagged(v, "H")) {
    if (h->is_array() && h->size() == 3)
      out += "<" + (*h)[1].get<std::string>().substr(0, 40) + " of length " + (*h)[2].dump() + ", sha256 " + (*h)[0].get<std::string>().substr(0, 12) + "...>";
  }
  else if (const json* f = tagged(v, "F")) out += f->is_string() ? f->get<std::string>() : "?";
  else if (const json* t = tagged(v, "T")) items(t, "(", ")", true);
  else if (const json* s = tagged(v, "S")) {
    if (s->empty()) out += "set()";
    else items(s, "{", "}", false);
  } else if (const json* z = tagged(v, "Z")) {
    if (z->empty()) out += "frozenset()";
    else items(z, "frozenset({", "})", false);
  } else if (const json* d = tagged(v, "D")) {
    out += "{";
    if (d->is_array())
      for (std::size_t k = 0; k < d->size() && out.size() <= max; ++k) {
        const json& e = (*d)[k];
        if (k) out += ", ";
        if (!e.is_array() || e.size() != 2) continue;
        repr_to(e[0], out, max);
        out += ": ";
        repr_to(e[1], out, max);
      }
    out += "}";
  } else if (const json* u = tagged(v, "U")) {
    out += str_repr(code_points_text(*u));
  } else {
    out += "<not plain data>";
  }
}

}  // namespace

std::string check_plain(const json& v) { return check_at(v, 0); }

bool python_equal(const json& a, const json& b) {
  std::string ka, kb;
  key_of(a, ka);
  key_of(b, kb);
  return ka == kb;
}

bool evalplus_same(const json& got, const json& expected, double atol) {
  const json* exp_seq = sequence(expected);
  const bool floats = is_float(expected) || (exp_seq && !exp_seq->empty() && std::all_of(exp_seq->begin(), exp_seq->end(), is_float));
  if (!floats) return python_equal(got, expected);
  if (atol == 0) atol = 1e-6;
  // _same: a float expected is [expected], and got is [got] unless it is a list or tuple already.
  const json one_exp = json::array({expected}), one_got = json::array({got});
  const json& exp = is_float(expected) ? one_exp : *exp_seq;
  const json* got_seq = sequence(got);
  if (!got_seq && is_float(expected)) got_seq = &one_got;
  if (!got_seq || got_seq->size() != exp.size()) return false;
  for (std::size_t i = 0; i < exp.size(); ++i) {
    const json& g = (*got_seq)[i];
    if (g.is_boolean() || !(is_int(g) || is_float(g))) return false;
    double e = 0, gd = 0;
    if (!to_double(exp[i], e) || !to_double(g, gd)) return false;  // Python: OverflowError, a fail
    if (std::isnan(e)) {
      if (!std::isnan(gd)) return false;
    } else if (!(std::fabs(gd - e) <= atol + 1e-07 * std::fabs(e))) {
      return false;
    }
  }
  return true;
}

bool find_zero_ok(const json& xs, const json& x, double atol) {
  double xd = 0;
  if (!is_number(x) || !to_double(x, xd) || !xs.is_array()) return false;
  double sum = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    double c = 0;
    if (!to_double(xs[k], c)) return false;
    const double p = std::pow(xd, static_cast<double>(k));
    if (std::isinf(p) && std::isfinite(xd)) return false;  // Python's float ** int raises OverflowError
    volatile double term = c * p;  // rounded as Python rounds it: no fused multiply-add
    sum = k == 0 ? term : sum + term;
  }
  return std::fabs(sum) <= atol;
}

std::string python_type(const json& v) {
  if (const json* n = tagged(v, "N"); n && n->is_array() && n->size() == 2 && (*n)[0].is_string()) return (*n)[0].get<std::string>();
  if (v.is_null()) return "NoneType";
  if (v.is_boolean()) return "bool";
  if (is_int(v)) return "int";
  if (is_float(v)) return "float";
  if (v.is_string() || tagged(v, "U")) return "str";
  if (v.is_array()) return "list";
  if (tagged(v, "T")) return "tuple";
  if (tagged(v, "S")) return "set";
  if (tagged(v, "Z")) return "frozenset";
  if (tagged(v, "D")) return "dict";
  if (complex_parts(v)) return "complex";
  if (const json* h = tagged(v, "H"); h && h->is_array() && h->size() == 3 && (*h)[1].is_string()) return (*h)[1].get<std::string>();
  return "?";
}

bool holds_nan(const json& v) {
  double d = 0;
  if (is_float(v)) return to_double(v, d) && std::isnan(d);
  if (v.is_array()) return std::any_of(v.begin(), v.end(), [](const json& e) { return holds_nan(e); });
  if (v.is_object())
    for (const auto& [tag, inner] : v.items())
      if (tag != "H" && tag != "U" && tag != "I" && tag != "F" && holds_nan(inner)) return true;
  return false;
}

bool plain_to_double(const json& v, double& out) { return is_number(v) && to_double(v, out); }

namespace {

// A value as numpy's array of it: its shape and its elements in C order, or false where numpy
// would make an object array or raise.
bool as_array(const json& v, std::vector<std::size_t>& shape, std::vector<std::complex<double>>& flat, int depth = 0) {
  if (depth > 64) return false;
  if (const json* seq = sequence(v)) {
    if (seq->empty()) {
      shape = {0};
      return true;
    }
    std::vector<std::size_t> first;
    for (std::size_t i = 0; i < seq->size(); ++i) {
      std::vector<std::size_t> s;
      if (!as_array((*seq)[i], s, flat, depth + 1)) return false;
      if (i == 0) first = s;
      else if (s != first) return false;  // ragged
    }
    shape = {seq->size()};
    shape.insert(shape.end(), first.begin(), first.end());
    return true;
  }
  shape.clear();
  if (const json* c = complex_parts(v)) {
    double re = 0, im = 0;
    if (!to_double((*c)[0], re) || !to_double((*c)[1], im)) return false;
    flat.emplace_back(re, im);
    return true;
  }
  if (tagged(v, "I")) return false;  // numpy keeps an int beyond 64 bits as an object
  double d = 0;
  if (!is_number(v) || !to_double(v, d)) return false;
  flat.emplace_back(d, 0.0);
  return true;
}

bool finite(std::complex<double> z) { return std::isfinite(z.real()) && std::isfinite(z.imag()); }

}  // namespace

bool numpy_allclose(const json& a, const json& b, double rtol, double atol) {
  std::vector<std::size_t> sa, sb;
  std::vector<std::complex<double>> fa, fb;
  if (!as_array(a, sa, fa) || !as_array(b, sb, fb)) return false;
  // Broadcasting: shapes aligned at their ends, each pair of sizes equal or one of them 1.
  const std::size_t rank = std::max(sa.size(), sb.size());
  sa.insert(sa.begin(), rank - sa.size(), 1);
  sb.insert(sb.begin(), rank - sb.size(), 1);
  std::vector<std::size_t> out(rank);
  std::size_t total = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    if (sa[d] != sb[d] && sa[d] != 1 && sb[d] != 1) return false;
    out[d] = sa[d] == 1 ? sb[d] : sa[d];
    total *= out[d];
  }
  std::vector<std::size_t> idx(rank, 0);
  for (std::size_t n = 0; n < total; ++n) {
    std::size_t ia = 0, ib = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      ia = ia * sa[d] + (sa[d] == 1 ? 0 : idx[d]);
      ib = ib * sb[d] + (sb[d] == 1 ? 0 : idx[d]);
    }
    const std::complex<double> x = fa[ia], y = fb[ib];
    const bool close = finite(x) && finite(y) ? std::abs(x - y) <= atol + rtol * std::abs(y) : x == y;
    if (!close) return false;
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return true;
}

namespace {

bool hashable(const json& v) {
  if (v.is_array() || tagged(v, "S") || tagged(v, "D")) return false;
  if (const json* t = tagged(v, "T")) return std::all_of(t->begin(), t->end(), hashable);
  if (tagged(v, "H")) {
    const std::string type = python_type(v);
    return type != "list" && type != "set" && type != "dict";
  }
  return true;
}

// set(v)'s elements as equality keys, or nullopt where Python's set(v) raises.
std::optional<std::set<std::string>> element_keys(const json& v) {
  std::set<std::string> keys;
  if (v.is_string() || tagged(v, "U")) {
    const std::string text = v.is_string() ? v.get<std::string>() : code_points_text(*tagged(v, "U"));
    for (std::uint32_t cp : code_points(text)) {
      std::string one;
      append_utf8(one, cp);
      keys.insert(equality_key(json(one)));
    }
    return keys;
  }
  const json* items = sequence(v);
  if (!items) items = tagged(v, "S");
  if (!items) items = tagged(v, "Z");
  if (const json* d = tagged(v, "D")) {
    for (const json& kv : *d)
      if (kv.is_array() && kv.size() == 2) keys.insert(equality_key(kv[0]));
    return keys;
  }
  if (!items) return std::nullopt;
  for (const json& e : *items) {
    if (!hashable(e)) return std::nullopt;
    keys.insert(equality_key(e));
  }
  return keys;
}

}  // namespace

std::optional<bool> python_set_equal(const json& a, const json& b) {
  const auto ka = element_keys(a);
  if (!ka) return std::nullopt;
  const auto kb = element_keys(b);
  if (!kb) return std::nullopt;
  return *ka == *kb;
}

std::string equality_key(const json& v) {
  std::string k;
  key_of(v, k);
  return k;
}

std::string python_repr(const json& v, std::size_t max_chars) {
  std::string out;
  repr_to(v, out, max_chars * 4);  // a character is at most 4 bytes
  const std::vector<std::uint32_t> cps = code_points(out);
  if (cps.size() <= max_chars) return out;
  std::string cut;
  for (std::size_t i = 0; i < max_chars; ++i) append_utf8(cut, cps[i]);
  return cut;
}

}  // namespace bestofn
