#pragma once
// The pieces of the small Jinja interpreter behind bestofn/tokenizer/jinja.h: what Hugging Face
// chat templates use, rendered as jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True) with the loopcontrols extension does.
//   jinja_lexer.cpp    template text -> tokens (delimiters, whitespace control, expression tokens)
//   jinja_parser.cpp   tokens -> statement tree and expression trees
//   jinja_value.cpp    Python's values: truth, str(), repr(), ==, <, json.dumps
//   jinja_builtins.cpp filters, tests, str/dict methods, globals
//   jinja_eval.cpp     the renderer: scopes, statements, expressions
// Anything else is refused with an Error naming the construct and its line.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace bestofn::jinja {

// ---- values (jinja_value.cpp) ----
struct Value;
using Seq = std::vector<Value>;
using Map = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
struct Args;
using Function = std::function<Value(Args&)>;

struct Value {
  enum class T { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Func };
  T t = T::Undefined;
  bool b = false;
  bool tuple = false;  // a List that Python would hold as a tuple (its repr)
  long long i = 0;
  double f = 0;
  std::string s;                // Str; Undefined: the name that was undefined; Func: its name
  std::shared_ptr<Seq> l;      // Seq (tuples too)
  std::shared_ptr<Map> d;      // Map, Namespace
  std::shared_ptr<Function> fn;  // Func

  static Value undefined(std::string name) { Value v; v.s = std::move(name); return v; }
  static Value none() { Value v; v.t = T::None; return v; }
  static Value boolean(bool x) { Value v; v.t = T::Bool; v.b = x; return v; }
  static Value integer(long long x) { Value v; v.t = T::Int; v.i = x; return v; }
  static Value real(double x) { Value v; v.t = T::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.t = T::Str; v.s = std::move(x); return v; }
  static Value list(Seq x = {}, bool tuple = false) { Value v; v.t = T::List; v.tuple = tuple; v.l = std::make_shared<Seq>(std::move(x)); return v; }
  static Value dict(Map x = {}, T kind = T::Dict) { Value v; v.t = kind; v.d = std::make_shared<Map>(std::move(x)); return v; }
  static Value func(std::string name, Function f) { Value v; v.t = T::Func; v.s = std::move(name); v.fn = std::make_shared<Function>(std::move(f)); return v; }

  bool is(T x) const { return t == x; }
  bool number() const { return t == T::Int || t == T::Float || t == T::Bool; }
  double as_double() const { return t == T::Float ? f : static_cast<double>(t == T::Bool ? b : i); }
  const Value* find(const std::string& key) const;  // a Map's or Namespace's item, or null
};

// A call's arguments; `line` is the caller's, for errors.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  std::string callee;
  // Argument `name` at `index` (keyword or positional), or `fallback`.
  Value get(size_t index, const char* name, Value fallback = Value::undefined("")) const;
  void at_most(size_t n) const;  // refuses more positional arguments than n
};

bool truthy(const Value& v);
std::string type_name(const Value& v);
std::string to_str(const Value& v);   // Python's str()
std::string repr(const Value& v);     // Python's repr()
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, int line);  // <0, 0, >0; refuses what Python cannot order
std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys, int line);
std::string format_float(double x);  // Python's repr of a float
bool is_space_at(const std::string& s, size_t i, size_t* len);  // Python's str.isspace at byte i (UTF-8)
std::string strip(const std::string& s, bool left, bool right, const Value& chars);  // str.strip/lstrip/rstrip

// ---- errors ----
// A template problem: the renderer prefixes the template's name.
struct TemplateError {
  int line;
  std::string message;
};
[[noreturn]] void fail(int line, const std::string& message);

// ---- tokens (jinja_lexer.cpp) ----
struct Token {
  enum class K { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };
  K k;
  std::string text;  // Text's text, a name, a string's value, an operator, a number's digits
  int line;
};
std::vector<Token> lex(const std::string& source);

// ---- trees (jinja_parser.cpp) ----
struct Expr;
using ExprP = std::shared_ptr<Expr>;
struct Expr {
  enum class K { Lit, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, Binary, And, Or, Compare, Cond };
  K k;
  int line;
  Value lit;                  // Lit
  std::string name;           // Name, Attr, Filter, Test; Binary's operator
  std::vector<ExprP> a;       // operands: a[0] is the object / left side / callee
  std::vector<std::pair<std::string, ExprP>> kw;  // call keyword arguments; Map's keys are in a
  std::vector<std::string> ops;  // Compare's operators
  bool negated = false;       // Test: "is not"
};

struct Node;
using NodeP = std::shared_ptr<Node>;
using Body = std::vector<NodeP>;
struct Node {
  enum class K { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Scope };
  K k;
  int line;
  std::string text;                // Text; Set/SetBlock/Macro name (Set: "ns.attr" has attr below)
  std::string attr;                // Set of a namespace attribute
  std::vector<std::string> names;  // For targets; Macro parameters
  std::vector<ExprP> e;            // If: conditions; For: iterable, filter; Set: value; Macro: defaults (null: none)
  std::vector<Body> bodies;        // If: one per condition, then else; For: body, else; others: body
};
Body parse(const std::vector<Token>& tokens);

// ---- builtins (jinja_builtins.cpp) ----
Value apply_filter(const std::string& name, const Value& v, Args& args);
bool apply_test(const std::string& name, const Value& v, Args& args);
Value method(const Value& object, const std::string& name, int line);  // a bound method, or Undefined

}  // namespace bestofn::jinja
