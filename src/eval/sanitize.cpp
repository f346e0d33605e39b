// EvalPlus's sanitizer as a Python program run in the verifier's sandbox (sanitize.h). The program
// only parses the text (ast.parse); nothing of it runs.
#include "bestofn/eval/sanitize.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "bestofn/eval/datasets.h"

namespace bestofn {
namespace {
using nlohmann::json;

constexpr std::string_view kFrameStart = "\nBESTOFN-SANITIZED ";
constexpr std::string_view kFrameEnd = "\nBESTOFN-END\n";

// After _CASES: EvalPlus 0.3.1's sanitize.py (code_extract, extract_target_code_or_empty,
// sanitize) with its tree-sitter reads made from Python's ast, names as in EvalPlus where one
// function stands for one of its.
constexpr const char* kSanitizer = R"PY(
def _parses(src):
    try:
        _ast.parse(src)
        return True
    except (SyntaxError, MemoryError, ValueError, RecursionError, OverflowError):
        return False


def code_extract(text):
    lines = text.split('\n')
    n = len(lines)
    filled = [0] * (n + 1)  # filled[k]: the non-blank lines among lines[:k]
    for k, line in enumerate(lines):
        filled[k + 1] = filled[k] + (1 if line.strip() else 0)
    # EvalPlus takes the range of at least two lines that parses with the most non-blank lines,
    # the first in (start, end) order of equal ones: try the ranges longest first, in that order
    # within a length, and the first that parses is it.
    for count in range(filled[n], 0, -1):
        for i in range(n - 1):
            want = filled[i] + count
            if want > filled[n]:
                break
            lo = max(i + 1, _bisect.bisect_left(filled, want) - 1)
            hi = _bisect.bisect_right(filled, want) - 1
            for j in range(lo, hi):  # the ends j > i with filled[j + 1] == want
                src = '\n'.join(lines[i:j + 1])
                if _parses(src):
                    return src
    return lines[0]


def _lines(data):
    # (start, end) byte offsets of each line as Python's parser numbers them ("\r\n", "\r", "\n"),
    # end before the line break
    out, start, i, n = [], 0, 0, len(data)
    while i < n:
        c = data[i]
        if c == 10 or c == 13:
            out.append((start, i))
            if c == 13 and i + 1 < n and data[i + 1] == 10:
                i += 1
            start = i + 1
        i += 1
    out.append((start, n))
    return out


def _identifiers(node):
    out = set()
    for x in _ast.walk(node):
        t = type(x)
        if t is _ast.Name:
            out.add(x.id)
        elif t is _ast.Attribute:
            out.add(x.attr)
        elif t in (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef):
            out.add(x.name)
        elif t is _ast.arg:
            out.add(x.arg)
        elif t is _ast.keyword:
            if x.arg is not None:
                out.add(x.arg)
        elif t is _ast.alias:
            out.update(x.name.split('.'))
            if x.asname:
                out.add(x.asname)
        elif t is _ast.ImportFrom:
            if x.module:
                out.update(x.module.split('.'))
        elif t in (_ast.Global, _ast.Nonlocal):
            out.update(x.names)
        elif t is _ast.ExceptHandler:
            if x.name:
                out.add(x.name)
        elif t in (_ast.MatchAs, _ast.MatchStar):
            if x.name:
                out.add(x.name)
        elif t is _ast.MatchMapping:
            if x.rest:
                out.add(x.rest)
        elif t is _ast.MatchClass:
            out.update(x.kwd_attrs)
    return out


def _assigned_name(st):
    # tree-sitter's assignment node: its first child that is an identifier, so a target written
    # in parentheses is not one, and a lone name on the right of a target that is not a name is
    def bare_target(t):
        return type(t) is _ast.Name and (t.lineno, t.col_offset) == (st.lineno, st.col_offset)

    def bare_value(v):
        return type(v) is _ast.Name and (v.end_lineno, v.end_col_offset) == (st.end_lineno, st.end_col_offset)

    first = st.targets[0] if type(st) is _ast.Assign else st.target
    if bare_target(first):
        return first.id
    if type(st) is _ast.Assign and len(st.targets) > 1:
        return None
    return st.value.id if st.value is not None and bare_value(st.value) else None


def _has_return(node):
    return any(type(x) is _ast.Return for x in _ast.walk(node))


def _ts_indent(data, start, end, width=0):
    # indentation as tree-sitter-python's scanner measures it: a space 1, a tab 8, \r and \f reset
    for i in range(start, end):
        c = data[i]
        if c == 32:
            width += 1
        elif c == 9:
            width += 8
        elif c == 12 or c == 13:
            width = 0
        else:
            break
    return width


def _starts_line(data, lines, st):
    # whether st begins a logical line (an indented block's first statement): only blanks before it
    # on its line, and no backslash joining the line before
    row = st.lineno - 1
    start, _ = lines[row]
    if not all(c in (32, 9, 12) for c in data[start:start + st.col_offset]):
        return False
    return row == 0 or not data[lines[row - 1][0]:lines[row - 1][1]].endswith(b'\\')


def _inner_block(st, data, lines):
    # the block that ends the compound statement st, None for a simple statement; an elif is the
    # same level as its if
    t = type(st)
    if t in (_ast.If, _ast.For, _ast.AsyncFor, _ast.While):
        if t is _ast.If and len(st.orelse) == 1 and type(st.orelse[0]) is _ast.If:
            start, _ = lines[st.orelse[0].lineno - 1]
            if data[start + st.orelse[0].col_offset:].startswith(b'elif'):
                return _inner_block(st.orelse[0], data, lines)
        return st.orelse or st.body
    if t is _ast.Try or t.__name__ == 'TryStar':
        return st.finalbody or st.orelse or st.handlers[-1].body
    if t is _ast.Match:
        return st.cases[-1].body
    if t in (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef, _ast.With, _ast.AsyncWith):
        return st.body
    return None


def _definition_end(node, data, lines):
    # where tree-sitter ends a def or class: its last statement, then a ';' and a comment on that
    # line, then the comment lines after it that its scanner keeps inside the body (each pops the
    # indentation levels deeper than itself; one back at column 0 ends the body)
    levels = [0]
    block = _inner_block(node, data, lines)
    while block:
        if _starts_line(data, lines, block[0]):
            start, end = lines[block[0].lineno - 1]
            levels.append(_ts_indent(data, start, end))
        block = _inner_block(block[-1], data, lines)
    row = node.end_lineno - 1
    at = lines[row][0] + node.end_col_offset
    # the rest of the last statement's line: a ';', a comment, a backslash that joins the next line
    k, end = at, lines[row][1]
    k = _skip_blanks(data, k, end)
    if k < end and data[k] == 59:  # ';'
        at = k = k + 1
        k = _skip_blanks(data, k, end)
    while k < end and data[k] == 92 and _skip_blanks(data, k + 1, end) == end and row + 1 < len(lines):  # '\\'
        row += 1
        k, end = _skip_blanks(data, lines[row][0], lines[row][1]), lines[row][1]
    if k < end and data[k] == 35:  # '#'
        at = _comment_end(data, k)
    # the comment lines after it (a line of a lone backslash joins the next, adding its indentation)
    carry = 0
    for start, end in lines[row + 1:]:
        width = _ts_indent(data, start, end, carry)
        k = _skip_blanks(data, start, end)
        if k == end:
            carry = 0
            continue
        if data[k] == 92 and _skip_blanks(data, k + 1, end) == end:
            carry = width
            continue
        if data[k] != 35:
            break
        carry = 0
        while width < levels[-1]:
            levels.pop()
        if len(levels) == 1:
            break
        at = _comment_end(data, k)
    return at


def _skip_blanks(data, k, end):
    while k < end and data[k] in (32, 9, 12):
        k += 1
    return k


def _comment_end(data, k):
    # tree-sitter's comment runs to the "\n" ("\r" included)
    end = data.find(b'\n', k)
    return len(data) if end < 0 else end


def extract_target_code_or_empty(text, entry):
    code = code_extract(text)
    data = code.encode('utf-8')
    try:
        tree = _ast.parse(code)
    except (SyntaxError, MemoryError, ValueError, RecursionError, OverflowError):
        # code_extract found no range that parses and gave the first line; tree-sitter reads an
        # indented line as if it were not indented, and a backslash ending it as a blank
        code = code.lstrip(' \t\f')
        if code.endswith('\\') or code.endswith('\\\r'):
            code = code[:code.rindex('\\')]
        data = code.encode('utf-8')
        try:
            tree = _ast.parse(code)
        except (SyntaxError, MemoryError, ValueError, RecursionError, OverflowError):
            return ''
    lines = _lines(data)

    def span(st, end=None):
        start = lines[st.lineno - 1][0] + st.col_offset
        if end is None:
            end = lines[st.end_lineno - 1][0] + st.end_col_offset
        return data[start:end]

    imports, definitions, taken = [], [], set()
    for st in tree.body:
        t = type(st)
        if t is _ast.Import or (t is _ast.ImportFrom and st.module != '__future__'):
            imports.append(span(st))
            continue
        if t in (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef):
            if st.decorator_list or st.name in taken:
                continue
            if t is not _ast.ClassDef and not _has_return(st):
                continue
            name = st.name
            text_of = span(st, _definition_end(st, data, lines))
        elif t in (_ast.Assign, _ast.AnnAssign):
            name = _assigned_name(st)
            if name in taken:
                continue
            text_of = span(st)
        else:
            continue
        taken.add(name)
        definitions.append((name, st, text_of))
    if entry:
        deps = {name: _identifiers(st) for name, st, _ in definitions}
        reached, queue = {entry}, [entry]
        while queue:
            for dep in deps.get(queue.pop(0), ()):
                if dep not in reached:
                    reached.add(dep)
                    queue.append(dep)
        definitions = [d for d in definitions if d[0] in reached]
    out = b''.join(s + b'\n' for s in imports) + b''.join(d[2] + b'\n' for d in definitions)
    return out[:-1].decode('utf-8')


def sanitize(text, entry):
    code = extract_target_code_or_empty(text, entry).strip()
    return code if code else code_extract(text)


_res = []
for _b64text, _entry in _CASES:
    try:
        _res.append(sanitize(_b64.b64decode(_b64text).decode('utf-8', 'replace'), _entry))
    except Exception as _e:
        _res.append({'E': '%s: %.200s' % (type(_e).__name__, _e)})
_payload = _json.dumps(_res, ensure_ascii=True)
_sys.stdout.write('\nBESTOFN-SANITIZED %d\n' % len(_payload))
_sys.stdout.write(_payload)
_sys.stdout.write('\nBESTOFN-END\n')
_sys.stdout.flush()
)PY";

}  // namespace

std::string sanitize_program(const std::vector<SanitizeCase>& cases) {
  json list = json::array();
  for (const SanitizeCase& c : cases) list.push_back({base64_encode(c.text), c.entry_point});
  return "import ast as _ast, base64 as _b64, bisect as _bisect, json as _json, sys as _sys\n"
         "_CASES = _json.loads(_b64.b64decode('" + base64_encode(list.dump()) + "'))\n" + kSanitizer;
}

std::string read_sanitized(const std::string& out, std::size_t count, std::vector<Sanitized>& results) {
  const std::size_t at = out.rfind(kFrameStart);
  if (at == std::string::npos) return "no sanitized code was written";
  std::size_t i = at + kFrameStart.size(), len = 0;
  for (; i < out.size() && out[i] >= '0' && out[i] <= '9' && len < (std::size_t{1} << 40); ++i) len = len * 10 + static_cast<std::size_t>(out[i] - '0');
  if (i >= out.size() || out[i] != '\n' || i + 1 + len > out.size() || out.compare(i + 1 + len, kFrameEnd.size(), kFrameEnd) != 0)
    return "the sanitizer's frame is malformed or cut";
  const json v = json::parse(std::string_view(out.data() + i + 1, len), nullptr, false);
  if (!v.is_array() || v.size() != count) return "expected " + std::to_string(count) + " sanitized texts, got something else";
  results.clear();
  for (const json& r : v) {
    if (r.is_string()) results.push_back({r.get<std::string>(), ""});
    else if (r.is_object() && r.contains("E") && r["E"].is_string()) results.push_back({"", "the sanitizer raised " + r["E"].get<std::string>()});
    else return "the sanitizer's frame holds neither a text nor an error";
  }
  return "";
}

std::vector<Sanitized> sanitize_all(const Sandbox& sandbox, const std::vector<SanitizeCase>& cases, int worker, double timeout_s) {
  if (cases.empty()) return {};
  std::size_t bytes = 0;
  for (const SanitizeCase& c : cases) bytes += c.text.size();
  // The solutions are parts of the texts; in ensure_ascii JSON a byte takes at most 6 (a control
  // character's \u00XX; a 4-byte character's surrogate pair takes 12).
  const Verdict v = sandbox.run(sanitize_program(cases), worker, timeout_s, 6 * bytes + (64u << 10));
  std::vector<Sanitized> results;
  std::string error = v.passed() ? read_sanitized(v.out, cases.size(), results) : "the sanitizer's run: " + v.result;
  if (error.empty()) return results;
  return std::vector<Sanitized>(cases.size(), Sanitized{"", error, v.status == Verdict::Status::TimedOut});
}

Sanitized sanitize(const Sandbox& sandbox, const std::string& text, const std::string& entry_point, int worker, double timeout_s) {
  return sanitize_all(sandbox, {{text, entry_point}}, worker, timeout_s).front();
}

}  // namespace bestofn
