#include "bestofn/eval/datasets.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "bestofn/eval/dataset_manifest.h"
#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"

namespace bestofn {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// JSON library messages may carry the offending bytes; errors stay on one line.
std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

bool is_ident_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
bool is_ident_char(char ch) { return is_ident_start(ch) || (ch >= '0' && ch <= '9'); }
bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char ch : s)
    if (!is_ident_char(ch)) return false;
  return true;
}

// ---- typed field access: errors name the field, what was expected and what was found ----

const json& member(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw Error(where, std::string("field \"") + key + "\" is missing");
  return *it;
}

[[noreturn]] void wrong_type(const char* key, const char* want, const json& got, const std::string& where) {
  throw Error(where, std::string("field \"") + key + "\" must be " + want + ", got " + got.type_name());
}

std::string get_string(const json& obj, const char* key, const std::string& where) {
  const json& v = member(obj, key, where);
  if (!v.is_string()) wrong_type(key, "a string", v, where);
  return v.get<std::string>();
}

std::vector<std::string> get_strings(const json& obj, const char* key, const std::string& where) {
  const json& v = member(obj, key, where);
  if (!v.is_array()) wrong_type(key, "an array of strings", v, where);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      throw Error(where, std::string("field \"") + key + "\" must be an array of strings, but element " + std::to_string(i) + " is " + v[i].type_name());
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

const json& get_array(const json& obj, const char* key, const std::string& where) {
  const json& v = member(obj, key, where);
  if (!v.is_array()) wrong_type(key, "an array", v, where);
  return v;
}

// ---- the file's own text of one top-level member, for values a JSON round trip would change ----

std::size_t skip_ws(std::string_view s, std::size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  return i;
}

// s[i] is the opening quote; returns the index past the closing one.
std::size_t skip_string(std::string_view s, std::size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == '"') return i + 1;
  }
  return s.size();
}

std::size_t skip_value(std::string_view s, std::size_t i) {
  if (i >= s.size()) return i;
  if (s[i] == '"') return skip_string(s, i);
  if (s[i] == '[' || s[i] == '{') {
    int depth = 0;
    while (i < s.size()) {
      const char ch = s[i];
      if (ch == '"') {
        i = skip_string(s, i);
        continue;
      }
      if (ch == '[' || ch == '{') ++depth;
      if ((ch == ']' || ch == '}') && --depth == 0) return i + 1;
      ++i;
    }
    return s.size();
  }
  while (i < s.size() && std::string_view(",]} \t\r\n").find(s[i]) == std::string_view::npos) ++i;
  return i;
}

// The text of top-level member `key` of the object in `line` (already parsed, so valid JSON), or
// empty when the key is not spelled plainly. The last occurrence wins, as in the parsed value.
std::string raw_member(std::string_view line, std::string_view key) {
  std::string_view found;
  std::size_t i = skip_ws(line, 0) + 1;  // past '{'
  for (;;) {
    i = skip_ws(line, i);
    if (i >= line.size() || line[i] != '"') break;
    const std::size_t k0 = i;
    i = skip_string(line, i);
    const std::string_view k = line.substr(k0 + 1, i - k0 - 2);
    i = skip_ws(line, skip_ws(line, i) + 1);  // past ':'
    const std::size_t v0 = i;
    i = skip_value(line, i);
    if (k == key) found = line.substr(v0, i - v0);
    i = skip_ws(line, i);
    if (i >= line.size() || line[i] != ',') break;
    ++i;
  }
  return std::string(found);
}

std::string input_json(const json& obj, std::string_view line, const char* key, const std::string& where) {
  const json& v = get_array(obj, key, where);
  std::string raw = raw_member(line, key);
  return raw.empty() ? v.dump() : raw;
}

// EvalPlus's fields (HumanEval+, MBPP+): base_input and plus_input as the file's own text, atol.
// MBPP+ v0.2.0 gives Mbpp/793 an empty object for plus_input: read as no inputs.
void read_evalplus_fields(Problem& p, const json& j, std::string_view line, const std::string& where) {
  const bool empty_object = j.contains("plus_input") && j["plus_input"].is_object() && j["plus_input"].empty();
  p.plus_input_json = empty_object ? "[]" : input_json(j, line, "plus_input", where);
  p.base_input_json = input_json(j, line, "base_input", where);
  const json& atol = member(j, "atol", where);
  if (!atol.is_number()) wrong_type("atol", "a number", atol, where);
  p.atol = atol.get<double>();
}

// ---- HumanEval / HumanEval+ (JSONL) ----

json parse_row(std::string_view line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw Error(where, one_line(std::string("not valid JSON: ") + e.what()));
  }
  if (!j.is_object()) throw Error(where, std::string("expected a JSON object, got ") + j.type_name());
  return j;
}

Problem humaneval_problem(const json& j, std::string_view line, const std::string& where, bool require_plus) {
  Problem p;
  p.task_id = get_string(j, "task_id", where);
  p.prompt = get_string(j, "prompt", where);
  // canonical_solution: the plus tests' reference (required there); the base tests never run it.
  const bool plus = require_plus || j.contains("plus_input");
  if (plus || j.contains("canonical_solution")) p.canonical_solution = get_string(j, "canonical_solution", where);
  p.test = get_string(j, "test", where);
  p.entry_point = get_string(j, "entry_point", where);
  if (!is_identifier(p.entry_point))
    throw Error(where, "field \"entry_point\" must be a Python identifier, got \"" + one_line(p.entry_point) + "\"");
  p.dataset = "humaneval";
  if (plus) {
    p.dataset = "humaneval+";
    read_evalplus_fields(p, j, line, where);
  }
  return p;
}

// ---- MBPP+ (EvalPlus's JSONL) ----

// An MBPP+ row has EvalPlus's inputs and no HumanEval "test" (its asserts are "assertion").
bool mbppplus_row(const json& j) { return j.contains("plus_input") && !j.contains("test"); }

// One MBPP+ row: the HumanEval+ fields, a prompt that is a docstring with the task and one assert,
// the whole code as canonical_solution, and the original MBPP asserts as "assertion" (optional:
// only --rules human-eval runs them).
Problem mbppplus_problem(const json& j, std::string_view line, const std::string& where) {
  Problem p;
  p.task_id = get_string(j, "task_id", where);
  p.prompt = get_string(j, "prompt", where);
  p.entry_point = get_string(j, "entry_point", where);
  if (!is_identifier(p.entry_point))
    throw Error(where, "field \"entry_point\" must be a Python identifier, got \"" + one_line(p.entry_point) + "\"");
  p.canonical_solution = get_string(j, "canonical_solution", where);
  p.dataset = "mbpp+";
  read_evalplus_fields(p, j, line, where);
  if (j.contains("assertion")) {
    p.test = get_string(j, "assertion", where);
    std::size_t start = 0;
    while (start < p.test.size()) {
      std::size_t end = p.test.find('\n', start);
      if (end == std::string::npos) end = p.test.size();
      const std::string text = p.test.substr(start, end - start);
      start = end + 1;
      if (text.starts_with("assert")) p.test_list.push_back(text);
      else if (text.starts_with("import ") || text.starts_with("from ")) p.test_imports.push_back(text);
    }
  }
  return p;
}

std::vector<Problem> load_jsonl(const fs::path& path, bool require_plus) {
  const std::string text = read_text_file(path);
  std::vector<Problem> out;
  std::map<std::string, std::size_t> first_line;  // task_id -> line
  std::size_t start = 0, line_no = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (skip_ws(line, 0) == line.size()) continue;  // blank lines (the trailing newline) are fine
    const std::string where = path.string() + ":" + std::to_string(line_no);
    const json j = parse_row(line, where);
    Problem p = mbppplus_row(j) ? mbppplus_problem(j, line, where) : humaneval_problem(j, line, where, require_plus);
    const auto [it, fresh] = first_line.emplace(p.task_id, line_no);
    if (!fresh)
      throw Error(where, "duplicate task_id \"" + one_line(p.task_id) + "\" (first at line " + std::to_string(it->second) + ")");
    out.push_back(std::move(p));
  }
  if (out.empty()) throw Error(path.string(), "no problems in the file");
  return out;
}

// ---- MBPP sanitized (one JSON array) ----

// Names defined at top level (column 0) as "def NAME(": the functions a test can call.
std::set<std::string> top_level_functions(const std::string& code) {
  std::set<std::string> names;
  std::size_t start = 0;
  while (start < code.size()) {
    std::size_t end = code.find('\n', start);
    if (end == std::string::npos) end = code.size();
    const std::string_view line(code.data() + start, end - start);
    start = end + 1;
    if (!line.starts_with("def") || line.size() < 4 || (line[3] != ' ' && line[3] != '\t')) continue;
    std::size_t i = skip_ws(line, 3), n0 = i;
    while (i < line.size() && is_ident_char(line[i])) ++i;
    const std::string_view name = line.substr(n0, i - n0);
    if (is_identifier(name) && skip_ws(line, i) < line.size() && line[skip_ws(line, i)] == '(') names.emplace(name);
  }
  return names;
}

// The first identifier called in `assertion` (outside string literals) that `code` defines:
// "assert name(...)", "assert math.isclose(name(...), ...)", "assert (name (...)) == ...".
std::string mbpp_entry_point(const std::string& code, const std::string& assertion, const std::string& where) {
  const std::set<std::string> defined = top_level_functions(code);
  std::size_t i = 0;
  while (i < assertion.size()) {
    const char ch = assertion[i];
    if (ch == '"' || ch == '\'') {  // skip the literal, escapes included
      for (++i; i < assertion.size() && assertion[i] != ch; ++i)
        if (assertion[i] == '\\') ++i;
      ++i;
    } else if (is_ident_start(ch) && (i == 0 || !is_ident_char(assertion[i - 1]))) {
      const std::size_t n0 = i;
      while (i < assertion.size() && is_ident_char(assertion[i])) ++i;
      const std::string name = assertion.substr(n0, i - n0);
      const std::size_t next = skip_ws(assertion, i);
      if (next < assertion.size() && assertion[next] == '(' && defined.count(name)) return name;
    } else {
      ++i;
    }
  }
  throw Error(where, "cannot find the entry point: the first test calls no function that \"code\" defines at top level: " +
                         one_line(assertion.substr(0, 120)));
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "\n" : "") + parts[i];
  return out;
}

Problem mbpp_problem(const json& e, const std::string& where_entry) {
  if (!e.is_object()) throw Error(where_entry, std::string("expected a JSON object, got ") + e.type_name());
  const json& id = member(e, "task_id", where_entry);
  if (!id.is_number_integer()) wrong_type("task_id", "an integer", id, where_entry);
  const std::string where = where_entry + " (task_id " + id.dump() + ")";
  Problem p;
  p.task_id = "Mbpp/" + id.dump();
  p.prompt = get_string(e, "prompt", where);
  p.canonical_solution = get_string(e, "code", where);
  p.test_imports = get_strings(e, "test_imports", where);
  p.test_list = get_strings(e, "test_list", where);
  if (p.test_list.empty()) throw Error(where, "field \"test_list\" is empty");
  p.test = join(p.test_imports) + "\n" + join(p.test_list);
  p.entry_point = mbpp_entry_point(p.canonical_solution, p.test_list[0], where);
  p.dataset = "mbpp";
  return p;
}

std::vector<Problem> load_mbpp(const fs::path& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(path.string(), one_line(std::string("not valid JSON: ") + e.what()));
  }
  if (!j.is_array()) throw Error(path.string(), std::string("expected a JSON array of problems, got ") + j.type_name());
  std::vector<Problem> out;
  std::map<std::string, std::size_t> first;  // task_id -> entry
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string where = path.string() + ": entry " + std::to_string(i);
    Problem p = mbpp_problem(j[i], where);
    const auto [it, fresh] = first.emplace(p.task_id, i);
    if (!fresh) throw Error(where, "duplicate task_id \"" + p.task_id + "\" (first at entry " + std::to_string(it->second) + ")");
    out.push_back(std::move(p));
  }
  if (out.empty()) throw Error(path.string(), "no problems in the file");
  return out;
}

// ---- names -> files ----

// The file a named dataset is read from: the manifest's file, checked once against its published
// checksum, else its unchecked alternative (HumanEval unzipped). A missing file's error says what
// the manifest knows of it, so the user can fetch and verify it.
fs::path named_file(const DatasetFile& d, const fs::path& data_dir) {
  std::error_code ec;
  const fs::path file = data_dir / d.file;
  if (fs::exists(file, ec)) {
    check_dataset_file(d, file);
    return file;
  }
  if (!d.alternative.empty() && fs::exists(data_dir / d.alternative, ec)) return data_dir / d.alternative;
  const std::string alternative = d.alternative.empty() ? "" : " (or " + fs::path(d.alternative).filename().string() + ", unzipped)";
  throw Error(file.string(), "dataset " + d.name + " not found; get " + d.get + alternative + " and put it here: " + d.source +
                                 ", " + d.licence + ", " + std::to_string(d.size) + " bytes, sha256 " + d.sha256 +
                                 " (--data-dir or BESTOFN_DATA choose the data folder, now " + data_dir.string() + ")");
}

}  // namespace

std::vector<Problem> load_dataset(const std::string& name_or_path, const fs::path& data_dir) {
  if (const DatasetFile* d = find_dataset(name_or_path)) {
    const fs::path file = named_file(*d, data_dir);
    if (d->name == "mbpp") return load_mbpp(file);
    return load_jsonl(file, d->name == "humaneval+" || d->name == "mbpp+");
  }
  std::error_code ec;
  const fs::path path(name_or_path);
  if (!fs::exists(path, ec))
    throw Error(name_or_path, "no such dataset file (a dataset is humaneval, humaneval+, mbpp, or a .jsonl, .jsonl.gz or .json file)");
  if (has_extension(name_or_path, {".jsonl", ".jsonl.gz"})) return load_jsonl(path, false);
  if (has_extension(name_or_path, {".json"})) return load_mbpp(path);
  throw Error(name_or_path, "unknown dataset format: expected .jsonl or .jsonl.gz (HumanEval format) or .json (MBPP sanitized format)");
}

bool is_python_identifier(std::string_view s) { return is_identifier(s); }

std::vector<fs::path> dataset_files(const std::string& name_or_path, const fs::path& data_dir) {
  const DatasetFile* d = find_dataset(name_or_path);
  if (!d) return {fs::path(name_or_path)};
  std::vector<fs::path> files{data_dir / d->file};
  if (!d->alternative.empty()) files.push_back(data_dir / d->alternative);
  return files;
}

fs::path default_data_dir() {
  if (const char* env = std::getenv("BESTOFN_DATA"); env && *env) return fs::path(env);
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    const passwd* pw = getpwuid(getuid());
    home = pw && pw->pw_dir ? pw->pw_dir : ".";
  }
  return fs::path(home) / ".cache" / "bestofn";
}

std::string base64_encode(const std::string& in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) | static_cast<unsigned char>(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string plus_program(const Problem& problem, const std::string& completion) {
  if (problem.plus_input_json.empty()) throw Error(problem.task_id + ": no plus inputs (not a HumanEval+ problem)");
  char atol[64];
  std::snprintf(atol, sizeof atol, "%.17g", problem.atol);
  std::string p;
  p += "import base64 as _b64, copy as _copy, json as _json, math as _math\n";
  p += "def _text(s):\n    return _b64.b64decode(s).decode('utf-8')\n";
  p += "_INPUTS = _json.loads(_text('" + base64_encode(problem.plus_input_json) + "'))\n";
  p += std::string("_ATOL = ") + atol + "\n";
  p += "_ENTRY = '" + problem.entry_point + "'\n";
  p += "_ref_ns, _cand_ns = {}, {}\n";
  p += "exec(compile(_text('" + base64_encode(problem.prompt + problem.canonical_solution) + "'), 'reference', 'exec'), _ref_ns)\n";
  p += "exec(compile(_text('" + base64_encode(problem.prompt + completion) + "'), 'candidate', 'exec'), _cand_ns)\n";
  p += R"PY(_ref, _cand = _ref_ns[_ENTRY], _cand_ns[_ENTRY]
def _floats(x):
    return isinstance(x, float) or (isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(v, float) for v in x))
def _same(got, exp, atol):
    if _floats(exp):
        if atol == 0:
            atol = 1e-6
        if isinstance(exp, float):
            exp, got = [exp], [got] if not isinstance(got, (list, tuple)) else got
        if not isinstance(got, (list, tuple)) or len(got) != len(exp):
            return False
        for g, e in zip(got, exp):
            if not isinstance(g, (int, float)) or isinstance(g, bool):
                return False
            if _math.isnan(e):
                if not _math.isnan(g):
                    return False
            elif not abs(g - e) <= atol + 1e-07 * abs(e):
                return False
        return True
    return got == exp
for _i, _args in enumerate(_INPUTS):
    if _ENTRY == 'find_zero':
        _xs = _args[0]
        _x = _cand(*_copy.deepcopy(_args))
        assert abs(sum(c * _x ** k for k, c in enumerate(_xs))) <= _ATOL, 'plus input %d: |poly(x)| > atol' % _i
        continue
    _exp = _ref(*_copy.deepcopy(_args))
    _got = _cand(*_copy.deepcopy(_args))
    assert _same(_got, _exp, _ATOL), 'plus input %d: got %.200r, expected %.200r' % (_i, _got, _exp)
)PY";
  return p;
}

std::string solution_code(const Problem& problem, const std::string& completion) {
  return is_mbpp(problem) ? completion : problem.prompt + completion;
}

std::string test_program(const Problem& problem, const std::string& code) {
  if (is_mbpp(problem)) return code + "\n" + problem.test;
  return code + "\n" + problem.test + "\n" + "check(" + problem.entry_point + ")";
}

std::string program(const Problem& problem, const std::string& completion) { return test_program(problem, solution_code(problem, completion)); }

}  // namespace bestofn
