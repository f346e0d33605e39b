#include "bestofn/eval/outside_tests.h"

#include <set>
#include <string_view>

#include "bestofn/eval/compare_outputs.h"
#include "bestofn/eval/evalplus_rules.h"

namespace bestofn {
namespace {
using nlohmann::json;

// An output whose key (as _key below writes it) is longer is sent as its SHA-256 (HumanEval+'s
// largest: 147 MB of strings for HumanEval/15, ints of a million digits for HumanEval/83), unless
// it is a float or a list of floats, which EvalPlus compares within a tolerance.
constexpr std::size_t kHashOver = 16u << 10;

// The reference solution's run under EvalPlus's rules has no limit there (trusted_exec); here, this.
constexpr double kReferenceSeconds = 600;

constexpr std::string_view kFrameStart = "\nBESTOFN-OUTPUTS ";
constexpr std::string_view kFrameEnd = "\nBESTOFN-END\n";

// The harness after its settings. The encoder takes exact builtin types only (a subclass of int
// or list could answer == or repr as it likes); the candidate can patch anything here, but then
// it only changes its own claim of its outputs, which bestofn checks and compares outside.
constexpr const char* kHarness = R"PY(
_dumps, _out, _deepcopy, _INF = _json.dumps, _sys.stdout, _copy.deepcopy, float('inf')
# The standard library's dicts (MBPP's solutions return Counters) go as dicts, read through dict's
# own items(), which no subclass or patch can change; the classes are taken before the code runs.
import collections as _collections
_DICTS, _dict_items = (_collections.Counter, _collections.OrderedDict, _collections.defaultdict), dict.items
class _Sink:
    def write(self, s):
        return len(s)
    def flush(self):
        pass
class _NotPlain(Exception):
    pass
# numpy's scalars (np.mean's float64, np.sum's int64, a comparison's bool_) go as their type's name
# and the Python value their item() gives, {"N": ["numpy.float64", 0.5]}: EvalPlus compares them by
# value, and by type where it checks types. numpy is looked up, never imported. Whatever item()
# returns is the candidate's own claim, checked as plain data like any other.
_modules, _NONE, _SCALARS = _sys.modules, object(), (bool, int, float, complex, str)
def _numpy_value(x):
    np = _modules.get('numpy')
    if np is None or not isinstance(x, getattr(np, 'generic', ())):
        return _NONE
    v = x.item()
    return _NONE if type(v) is type(x) else v
def _enc(x):
    t = type(x)
    if x is None or t is bool:
        return x
    if t is int:
        return x if -9223372036854775808 <= x <= 9223372036854775807 else {'I': '%x' % x}
    if t is float:
        if x != x:
            return {'F': 'nan'}
        if x == _INF or x == -_INF:
            return {'F': 'inf' if x > 0 else '-inf'}
        return x
    if t is str:
        try:
            x.encode('utf-8')
            return x
        except UnicodeEncodeError:
            return {'U': [ord(c) for c in x]}
    if t is list:
        return [_enc(v) for v in x]
    if t is tuple:
        return {'T': [_enc(v) for v in x]}
    if t is set:
        return {'S': [_enc(v) for v in x]}
    if t is frozenset:
        return {'Z': [_enc(v) for v in x]}
    if t is dict or t in _DICTS:
        return {'D': [[_enc(k), _enc(v)] for k, v in _dict_items(x)]}
    if t is complex:
        return {'C': [_enc(x.real), _enc(x.imag)]}
    v = _numpy_value(x)
    if v is not _NONE and type(v) in _SCALARS:
        return {'N': ['%s.%s' % (t.__module__, t.__name__), _enc(v)]}
    raise _NotPlain(t.__name__)
# A key that two plain values share exactly when they are == (numbers by value, sets and dicts
# in sorted order): an output too large to send whole goes as its key's SHA-256, which is as
# good for == and tells the candidate nothing it did not compute.
def _key(x):
    t = type(x)
    v = _numpy_value(x) if t.__module__ == 'numpy' else _NONE
    if v is not _NONE:
        return _key(v)
    if x is None:
        return 'N'
    if t is bool or t is int:
        return 'n%x;' % x
    if t is float:
        if x != x:
            return 'xnan;'
        if x == _INF or x == -_INF:
            return 'x+inf;' if x > 0 else 'x-inf;'
        return 'n%x;' % int(x) if x.is_integer() else 'f%s;' % x.hex()
    if t is str:
        return 's%d:%s' % (len(x), x)
    if t is list:
        return '[' + ''.join([_key(v) for v in x]) + ']'
    if t is tuple:
        return '(' + ''.join([_key(v) for v in x]) + ')'
    if t is set or t is frozenset:
        return '<' + ''.join(sorted(set([_key(v) for v in x]))) + '>'
    if t is complex:
        return _key(x.real) if x.imag == 0 else 'c' + _key(x.real) + _key(x.imag)
    return '{' + ''.join(sorted([_key(k) + '=' + _key(v) for k, v in _dict_items(x)])) + '}'
def _float(x):
    return type(x) is float or (type(x).__module__ == 'numpy' and type(_numpy_value(x)) is float)
def _floats(x):
    return _float(x) or (type(x) in (list, tuple) and len(x) > 0 and all(_float(v) for v in x))
def _send(x):
    e = _enc(x)
    if _floats(x) or len(_dumps(e)) <= _BIG // 8:  # a key is at most 8 times the JSON
        return e
    k = _key(x)
    if len(k) <= _BIG:
        return e
    return {'H': [_hashlib.sha256(k.encode('utf-8', 'surrogatepass')).hexdigest(), type(x).__name__, len(x) if hasattr(x, '__len__') else 0]}
# With errors as outputs, each call has a time budget of its own (a variation of an input may
# send a right program into a loop: that is an output, "timeout", and the other calls still run).
class _CallTimeout(BaseException):
    pass
if _ERRORS or _LIMITS:
    import signal as _signal
    def _on_alarm(signum, frame):
        raise _CallTimeout()
    _signal.signal(_signal.SIGALRM, _on_alarm)
_perf = _time.perf_counter
_sys.stdout = _Sink()
exec(compile(_text(_CODE), 'candidate', 'exec'), _ns)
_f = _ns[_ENTRY] if _ENTRY else None
_res, _secs = [], []
for _i, _c in enumerate(_CALLS):
    _at = '%s %d' % (_LABEL, _INDEX[_i] if _INDEX else _i)
    _limit = _BUDGET if _ERRORS else (_LIMITS[_i] if _LIMITS else 0)
    try:
        _a = _deepcopy(_c) if _f is not None else None
        if _limit:
            _signal.setitimer(_signal.ITIMER_REAL, _limit)
        try:
            _t0 = _perf()
            _r = _f(*_a) if _f is not None else eval(compile(_c, 'test', 'eval'), _ns)
            _secs.append(_perf() - _t0)
        finally:
            if _limit:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
        if _NOTNONE == 1 or (_NOTNONE == 2 and type(_r) is not bool):
            _r = _r is not None
    except _CallTimeout:
        if not _ERRORS:
            raise AssertionError('%s: timed out: over its limit of %.3g s' % (_at, _limit)) from None
        _res.append({'E': 'timeout'})
        continue
    except BaseException as _e:
        # An exception is an output too (selection's evidence: selection.h), sys.exit() included.
        if _ERRORS:
            _res.append({'E': type(_e).__name__})
            continue
        if not isinstance(_e, Exception):
            raise
        raise AssertionError('%s: raised %s: %.200s' % (_at, type(_e).__name__, _e)) from _e
    try:
        _res.append(_send(_r))
    except _NotPlain as _e:
        if _ERRORS:
            _res.append({'E': 'not plain data'})
            continue
        raise AssertionError('%s: the output holds a %s, which is not plain data (None, bool, int, float, complex, str, list, tuple, dict, set, frozenset)' % (_at, _e)) from None
    except RecursionError:
        if _ERRORS:
            _res.append({'E': 'nested too deep'})
            continue
        raise AssertionError('%s: the output is nested too deep to send' % _at) from None
_payload = _dumps(_res, ensure_ascii=True, allow_nan=False)
_sys.stdout = _out
if _TIMES:
    _t = _dumps(_secs)
    _out.write('\nBESTOFN-SECONDS %d\n%s' % (len(_t), _t))
_out.write('\nBESTOFN-OUTPUTS %d\n' % len(_payload))
_out.write(_payload)
_out.write('\nBESTOFN-END\n')
_out.flush()
)PY";

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Names the solution defines or imports at column 0 (def, class, NAME =, import): an expected
// value that uses one needs the solution, so its line stays in the candidate's process.
std::set<std::string> defined_names(const std::string& code) {
  std::set<std::string> names;
  std::size_t start = 0;
  while (start < code.size()) {
    std::size_t end = code.find('\n', start);
    if (end == std::string::npos) end = code.size();
    std::string_view line(code.data() + start, end - start);
    start = end + 1;
    if (line.starts_with("import ") || line.starts_with("from ")) {  // every word: a module, a name or an alias
      for (std::size_t i = 0; i < line.size();) {
        std::size_t j = i;
        while (j < line.size() && ident_char(line[j])) ++j;
        if (j > i) names.emplace(line.substr(i, j - i));
        i = j + 1;
      }
      continue;
    }
    if (line.starts_with("def ")) line.remove_prefix(4);
    else if (line.starts_with("class ")) line.remove_prefix(6);
    line = trim(line);
    std::size_t i = 0;
    while (i < line.size() && ident_char(line[i])) ++i;
    if (i > 0 && ident_start(line[0])) names.emplace(line.substr(0, i));
  }
  return names;
}

// One token scan of an assert's expression: Python string literals (prefixes aside, triple quotes
// too) skipped whole; f(i, depth) for every other character, a bracket at its outer depth. False
// on an unterminated string or unbalanced brackets.
template <class F>
bool scan(std::string_view s, F f) {
  int depth = 0;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      const std::size_t q = s.substr(i, 3) == std::string(3, c) ? 3 : 1;
      std::size_t j = i + q;
      for (;; ++j) {
        if (j >= s.size()) return false;
        if (s[j] == '\\') ++j;
        else if (s.substr(j, q) == std::string(q, c)) break;
      }
      i = j + q;
      continue;
    }
    if (c == ')' || c == ']' || c == '}') {
      if (--depth < 0) return false;
    }
    if (!f(i, depth)) return false;
    if (c == '(' || c == '[' || c == '{') ++depth;
    ++i;
  }
  return depth == 0;
}

// "assert ENTRY(ARGS) == EXPR" as (call, expr), or false for any other form.
bool plain_assert(const std::string& line_text, const std::string& entry, const std::set<std::string>& defined, std::string& call, std::string& expr) {
  if (line_text.find('\n') != std::string::npos) return false;
  const std::string_view line = trim(line_text);
  if (!line.starts_with("assert") || line.size() < 7 || (line[6] != ' ' && line[6] != '\t')) return false;
  const std::string_view rest = line.substr(7);
  std::size_t eq = std::string_view::npos;
  int eqs = 0;
  // At depth 0 only one "==" and nothing that binds looser or chains with it: no other
  // comparison, boolean operator, conditional, comma (an assert message), walrus or comment.
  const bool ok = scan(rest, [&](std::size_t i, int depth) {
    if (depth > 0) return true;
    const char c = rest[i];
    if (c == '=' && i + 1 < rest.size() && rest[i + 1] == '=') {
      if (i > 0 && (rest[i - 1] == '!' || rest[i - 1] == '<' || rest[i - 1] == '>')) return false;
      ++eqs;
      eq = i;
      return true;
    }
    if (c == '=' && i > 0 && rest[i - 1] == '=' && eq == i - 1) return true;  // the second '=' of "=="
    if (c == '<' || c == '>' || c == '!' || c == ',' || c == '#' || c == ';' || c == ':' || c == '\\' || c == '=') return false;
    if (ident_start(c) && (i == 0 || !ident_char(rest[i - 1]))) {
      std::size_t j = i;
      while (j < rest.size() && ident_char(rest[j])) ++j;
      const std::string_view word = rest.substr(i, j - i);
      for (const char* kw : {"and", "or", "not", "in", "is", "if", "else", "lambda", "for", "await", "yield"})
        if (word == kw) return false;
    }
    return true;
  });
  if (!ok || eqs != 1) return false;
  const std::string_view lhs = trim(rest.substr(0, eq)), rhs = trim(rest.substr(eq + 2));
  if (rhs.empty() || !lhs.starts_with(entry)) return false;
  // The call's own parentheses: the '(' after the name closes at the last character, so neither
  // "f(1) + g(2)" nor "f(1)(2)" is taken.
  const std::string_view args = trim(lhs.substr(entry.size()));
  if (!args.starts_with('(')) return false;
  std::size_t close = std::string_view::npos;
  scan(args, [&](std::size_t i, int depth) {
    if (depth == 0 && args[i] == ')' && close == std::string_view::npos) close = i;
    return true;
  });
  if (close != args.size() - 1) return false;
  // The expected side must not need the solution: no name the solution defines.
  bool independent = true;
  scan(rhs, [&](std::size_t i, int) {
    if (ident_start(rhs[i]) && (i == 0 || (!ident_char(rhs[i - 1]) && rhs[i - 1] != '.'))) {
      std::size_t j = i;
      while (j < rhs.size() && ident_char(rhs[j])) ++j;
      if (defined.count(std::string(rhs.substr(i, j - i)))) independent = false;
    }
    return true;
  });
  if (!independent) return false;
  call = std::string(lhs);
  expr = std::string(rhs);
  return true;
}

Verdict failed(std::string why, double seconds) {
  Verdict v;
  v.status = Verdict::Status::Failed;
  v.result = "failed: " + std::move(why);
  v.seconds = seconds;
  return v;
}

Verdict sandbox_error(std::string why) {
  Verdict v;
  v.status = Verdict::Status::SandboxError;
  v.result = "sandbox error: " + std::move(why);
  return v;
}

// The candidate's run, read and compared: its own verdict when it did not run through; else its
// outputs against the expected ones, `same(i, got)` deciding, `describe(i, got)` saying why not.
template <class Same, class Describe>
Verdict compare_run(Verdict v, std::size_t count, Same same, Describe describe) {
  if (!v.passed()) {
    if (v.out.size() > (64u << 10)) v.out.erase(0, v.out.size() - (64u << 10));
    return v;
  }
  std::vector<json> got;
  if (std::string err = read_outputs(v.out, count, got); !err.empty()) return failed("the candidate's outputs: " + err, v.seconds);
  v.out.clear();  // the frame: read, and too large to keep
  for (std::size_t i = 0; i < count; ++i)
    if (!same(i, got[i])) return failed(describe(i, got[i]), v.seconds);
  return v;
}

}  // namespace

MbppSplit split_mbpp_tests(const Problem& problem) {
  MbppSplit s;
  const std::set<std::string> defined = defined_names(problem.canonical_solution);
  for (std::size_t i = 0; i < problem.test_list.size(); ++i) {
    std::string call, expr;
    if (plain_assert(problem.test_list[i], problem.entry_point, defined, call, expr)) {
      s.outside_index.push_back(static_cast<int>(i));
      s.calls.push_back(std::move(call));
      s.expected.push_back(std::move(expr));
    } else {
      s.in_process.push_back(problem.test_list[i]);
    }
  }
  return s;
}

const char* judged_base(const Problem& problem) {
  if (!is_mbpp(problem) || problem.test_list.empty()) return kJudgedInProcess;
  return split_mbpp_tests(problem).in_process.empty() ? kJudgedOutside : kJudgedInProcess;
}

std::string outputs_program(const std::string& code, const std::string& entry, const std::string& calls_json, const std::string& label,
                            const std::vector<int>& indices, bool as_main, bool errors_as_outputs) {
  OutputsRun run;
  run.indices = indices, run.as_main = as_main, run.errors_as_outputs = errors_as_outputs;
  return outputs_program(code, entry, calls_json, label, run);
}

std::string outputs_program(const std::string& code, const std::string& entry, const std::string& calls_json, const std::string& label,
                            const OutputsRun& run) {
  const std::vector<int>& indices = run.indices;
  const bool as_main = run.as_main, errors_as_outputs = run.errors_as_outputs;
  std::string p = "import base64 as _b64, copy as _copy, hashlib as _hashlib, json as _json, sys as _sys, time as _time\n";
  p += "_BIG = " + std::to_string(kHashOver) + "\n";
  p += "def _text(s):\n    return _b64.b64decode(s).decode('utf-8')\n";
  p += "_CALLS = _json.loads(_text('" + base64_encode(calls_json) + "'))\n";
  // MBPP+'s inputs that JSON cannot hold (tuples, sets, complex numbers), rebuilt as EvalPlus does.
  if (!run.convert_inputs.empty()) p += "_CALLS = " + run.convert_inputs + "\n";
  std::string limits;
  for (double l : run.limits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", l);
    limits += (limits.empty() ? "" : ", ") + std::string(buf);
  }
  p += "_LIMITS = [" + limits + "]\n";
  p += std::string("_TIMES = ") + (run.record_seconds ? "True" : "False") + "\n";
  p += "_NOTNONE = " + std::to_string(run.not_none) + "\n";
  p += "_INDEX = " + json(indices).dump() + "\n";
  p += "_ENTRY = '" + entry + "'\n";
  p += std::string("_ERRORS = ") + (errors_as_outputs ? "True" : "False") + "\n";
  p += "_BUDGET = " + std::to_string(kCallBudgetSeconds) + "\n";  // a Python identifier (datasets.cpp checks) or empty
  p += "_LABEL = _text('" + base64_encode(label) + "')\n";
  p += "_CODE = '" + base64_encode(code) + "'\n";
  // MBPP's asserts ran as the main module; the plus harness ran the code in a plain namespace.
  p += as_main ? "_ns = {'__name__': '__main__'}\n" : "_ns = {}\n";
  return p + kHarness;
}

std::string read_outputs(const std::string& out, std::size_t count, std::vector<json>& outputs, bool errors_allowed) {
  const std::size_t at = out.rfind(kFrameStart);
  if (at == std::string::npos)
    return out.size() > kOutsideStdoutBytes / 4 ? "cut: more than the " + std::to_string(kOutsideStdoutBytes >> 20) + " MiB the verifier reads"
                                                 : "no outputs were written";
  std::size_t i = at + kFrameStart.size(), len = 0;
  for (; i < out.size() && out[i] >= '0' && out[i] <= '9' && len < (std::size_t{1} << 40); ++i) len = len * 10 + static_cast<std::size_t>(out[i] - '0');
  if (i >= out.size() || out[i] != '\n' || i + 1 + len > out.size() || out.compare(i + 1 + len, kFrameEnd.size(), kFrameEnd) != 0)
    return "the output frame is malformed or cut";
  const std::string_view payload(out.data() + i + 1, len);
  json v;
  try {
    v = json::parse(payload);
  } catch (const json::exception&) {
    return "the output frame is not valid JSON";
  }
  if (!v.is_array() || v.size() != count)
    return "expected " + std::to_string(count) + " outputs, got " + (v.is_array() ? std::to_string(v.size()) : std::string("no list"));
  for (std::size_t k = 0; k < count; ++k) {
    const bool error = errors_allowed && v[k].is_object() && v[k].size() == 1 && v[k].contains("E") && v[k]["E"].is_string();
    if (std::string err = error ? std::string() : check_plain(v[k]); !err.empty())
      return "output " + std::to_string(k) + " is not plain data: " + err;
  }
  outputs.assign(std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  return "";
}

std::string read_seconds(const std::string& out, std::size_t count, std::vector<double>& seconds) {
  constexpr std::string_view kStart = "\nBESTOFN-SECONDS ";
  const std::size_t at = out.rfind(kStart, out.rfind(kFrameStart));
  if (at == std::string::npos) return "no times were written";
  std::size_t i = at + kStart.size(), len = 0;
  for (; i < out.size() && out[i] >= '0' && out[i] <= '9' && len < (std::size_t{1} << 30); ++i) len = len * 10 + static_cast<std::size_t>(out[i] - '0');
  if (i >= out.size() || out[i] != '\n' || i + 1 + len > out.size()) return "the times frame is malformed";
  json v;
  try {
    v = json::parse(std::string_view(out.data() + i + 1, len));
  } catch (const json::exception&) {
    return "the times frame is not valid JSON";
  }
  if (!v.is_array() || v.size() != count) return "expected " + std::to_string(count) + " times";
  seconds.clear();
  for (const json& t : v) {
    if (!t.is_number() || !(t.get<double>() >= 0)) return "a time is not a number of seconds";
    seconds.push_back(t.get<double>());
  }
  return "";
}

ReferenceOutputs::Entry& ReferenceOutputs::slot(const Problem& problem, int kind) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = entries_[{&problem, kind}];
  if (!s) s = std::make_unique<Entry>();
  return *s;
}

const ReferenceOutputs::Entry& ReferenceOutputs::evalplus(const Sandbox& sandbox, const Problem& problem, bool plus, int worker) {
  Entry* e = &slot(problem, plus ? 3 : 2);
  std::lock_guard<std::mutex> lock(e->mu);  // the first caller computes; the others wait here
  if (e->done) return *e;
  e->done = true;
  const std::string& inputs = plus ? problem.plus_input_json : problem.base_input_json;
  const std::string what = "the reference solution of " + problem.task_id + " on its " + (plus ? "plus" : "base") + " inputs";
  std::size_t count = 0;
  try {
    const json parsed = json::parse(inputs);
    count = parsed.is_array() ? parsed.size() : 0;
  } catch (const json::exception&) {
  }
  OutputsRun run;
  run.record_seconds = true;
  if (problem.dataset == "mbpp+") {
    run.convert_inputs = mbpp_input_conversion(problem.task_id);
    if (mbpp_not_none_task(problem.entry_point)) run.not_none = 1;
  }
  const std::string label = plus ? "plus input" : "base input";
  const Verdict v = sandbox.run(outputs_program(problem.prompt + problem.canonical_solution, problem.entry_point, inputs, label, run), worker,
                                kReferenceSeconds, kOutsideStdoutBytes);
  if (!v.passed()) e->error = what + " could not be computed: " + v.result;
  else if (std::string err = read_outputs(v.out, count, e->outputs); !err.empty()) e->error = what + ": " + err;
  else if (std::string terr = read_seconds(v.out, count, e->seconds); !terr.empty()) e->error = what + ": " + terr;
  return *e;
}

const ReferenceOutputs::Entry& ReferenceOutputs::get(const Sandbox& sandbox, const Problem& problem, bool plus, int worker, double timeout_s) {
  Entry* e = &slot(problem, plus ? 1 : 0);
  std::lock_guard<std::mutex> lock(e->mu);  // the first caller computes; the others wait here
  if (e->done) return *e;
  e->done = true;
  std::string program;
  std::size_t count = 0;
  std::string what;
  if (plus) {
    if (problem.entry_point == "find_zero") return *e;  // its oracle needs no reference outputs
    const json inputs = json::parse(problem.plus_input_json);
    count = inputs.size();
    OutputsRun run;
    if (problem.dataset == "mbpp+") run.convert_inputs = mbpp_input_conversion(problem.task_id);
    program = outputs_program(problem.prompt + problem.canonical_solution, problem.entry_point, problem.plus_input_json, "plus input", run);
    what = "the reference solution of " + problem.task_id + " on its plus inputs";
  } else {
    const MbppSplit s = split_mbpp_tests(problem);
    count = s.expected.size();
    if (count == 0) return *e;
    program = outputs_program(join_lines(problem.test_imports), "", json(s.expected).dump(), "test", s.outside_index, true);
    what = "the expected values of " + problem.task_id + "'s asserts";
  }
  const Verdict v = sandbox.run(program, worker, timeout_s, kOutsideStdoutBytes);
  if (!v.passed()) e->error = what + " could not be computed: " + v.result;
  else if (std::string err = read_outputs(v.out, count, e->outputs); !err.empty()) e->error = what + ": " + err;
  return *e;
}

Verdict judge_plus(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, const std::string& code, int worker,
                   double timeout_s) {
  if (problem.plus_input_json.empty()) return sandbox_error(problem.task_id + ": no plus inputs (not a HumanEval+ problem)");
  const ReferenceOutputs::Entry& ref = refs.get(sandbox, problem, true, worker, timeout_s);
  if (!ref.error.empty()) return sandbox_error(ref.error);
  OutputsRun run;
  if (problem.dataset == "mbpp+") run.convert_inputs = mbpp_input_conversion(problem.task_id);
  const std::string program = outputs_program(code, problem.entry_point, problem.plus_input_json, "plus input", run);
  Verdict v = sandbox.run(program, worker, timeout_s, kOutsideStdoutBytes);
  auto at = [](std::size_t i) { return "plus input " + std::to_string(i) + ": "; };
  if (problem.entry_point == "find_zero") {
    const json inputs = json::parse(problem.plus_input_json);
    return compare_run(
        std::move(v), inputs.size(),
        [&](std::size_t i, const json& x) { return inputs[i].is_array() && !inputs[i].empty() && find_zero_ok(inputs[i][0], x, problem.atol); },
        [&](std::size_t i, const json& x) { return at(i) + "|poly(x)| > atol (x = " + python_repr(x) + ")"; });
  }
  return compare_run(
      std::move(v), ref.outputs.size(), [&](std::size_t i, const json& got) { return evalplus_same(got, ref.outputs[i], problem.atol); },
      [&](std::size_t i, const json& got) { return at(i) + "got " + python_repr(got) + ", expected " + python_repr(ref.outputs[i]); });
}

Verdict judge_evalplus(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, const std::string& code, bool plus, int worker,
                       const JudgeRules& rules) {
  if (!has_evalplus_inputs(problem)) return sandbox_error(problem.task_id + ": no base_input / plus_input (not a HumanEval+ or MBPP+ problem)");
  const ReferenceOutputs::Entry& ref = refs.evalplus(sandbox, problem, plus, worker);
  if (!ref.error.empty()) return sandbox_error(ref.error);
  std::vector<double> seconds = ref.seconds;
  if (rules.times) {
    if (auto cached = rules.times->get(problem, plus)) seconds = std::move(*cached);
    else rules.times->put(problem, plus, seconds);
  }
  const std::string& inputs_json = plus ? problem.plus_input_json : problem.base_input_json;
  json inputs = json::parse(inputs_json);
  if (!inputs.is_array()) inputs = json::array();  // MBPP+'s Mbpp/793 has {} for its plus inputs
  if (seconds.size() != inputs.size() || ref.outputs.size() != inputs.size())
    return sandbox_error(problem.task_id + ": the reference times do not match its " + std::to_string(inputs.size()) + " inputs");
  OutputsRun run;
  run.limits = evalplus_time_limits(rules, seconds);
  if (problem.dataset == "mbpp+") {
    run.convert_inputs = mbpp_input_conversion(problem.task_id);
    if (mbpp_not_none_task(problem.entry_point)) run.not_none = 2;
  }
  const std::string label = plus ? "plus input" : "base input";
  Verdict v = sandbox.run(outputs_program(code, problem.entry_point, inputs_json, label, run), worker, evalplus_run_seconds(rules, run.limits),
                          kOutsideStdoutBytes);
  double atol = problem.atol;  // EvalPlus changes it as it goes (evalplus_match); in order, one input at a time
  return compare_run(
      std::move(v), inputs.size(), [&](std::size_t i, const json& got) { return evalplus_match(problem, inputs[i], got, ref.outputs[i], atol); },
      [&](std::size_t i, const json& got) {
        return label + " " + std::to_string(i) + ": got " + python_repr(got) + ", expected " + python_repr(ref.outputs[i]);
      });
}

Verdict judge_base(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, const std::string& code, int worker,
                   double timeout_s) {
  if (!is_mbpp(problem) || problem.test_list.empty()) return sandbox.run(test_program(problem, code), worker, timeout_s);
  const MbppSplit s = split_mbpp_tests(problem);
  if (s.calls.empty()) return sandbox.run(test_program(problem, code), worker, timeout_s);
  const ReferenceOutputs::Entry& ref = refs.get(sandbox, problem, false, worker, timeout_s);
  if (!ref.error.empty()) return sandbox_error(ref.error);
  // The lines that stay in-process run first, at module level, as program() runs them.
  const std::string with_tests = code + "\n" + join_lines(problem.test_imports) + join_lines(s.in_process);
  Verdict v = sandbox.run(outputs_program(with_tests, "", json(s.calls).dump(), "test", s.outside_index, true), worker, timeout_s, kOutsideStdoutBytes);
  return compare_run(
      std::move(v), ref.outputs.size(), [&](std::size_t i, const json& got) { return python_equal(got, ref.outputs[i]); },
      [&](std::size_t i, const json& got) {
        return "test " + std::to_string(s.outside_index[i]) + ": got " + python_repr(got) + ", expected " + python_repr(ref.outputs[i]);
      });
}

}  // namespace bestofn
