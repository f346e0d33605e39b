#pragma once
// EvalPlus's sanitizer (evalplus/sanitize.py of EvalPlus 0.3.1), which turns a model's text into
// the code EvalPlus tests: the longest run of lines that parses as Python (code_extract), then its
// imports and the top-level classes, functions with a return statement and `NAME = ...`
// assignments, only those the entry point reaches through the names they use. EvalPlus finds the
// definitions with tree-sitter; bestofn needs Python's own parser to decide what parses, so the
// sanitizer is a Python program (ast, never running the text) run in the verifier's sandbox, and
// it reads tree-sitter's answers off Python's syntax tree:
// - a definition's text ends where tree-sitter ends it: its last statement, a ';' and a comment
//   on that line, and the comment lines after it that tree-sitter-python's scanner keeps inside
//   the body (a comment at least as indented as the innermost open block; one less indented pops
//   the blocks deeper than it, and one back at column 0 ends the body);
// - a name is an identifier of tree-sitter's tree: names, attributes, parameters, keyword
//   arguments, imported and aliased names, global/nonlocal, `except ... as`, match captures;
// - an assignment is named by tree-sitter's first identifier child: a bare target, else a bare
//   name on the right of a single target (`a, b = c` is named c; `(a) = 1` is not named a);
// - decorated definitions and `from __future__` imports are not kept (tree-sitter names them
//   decorated_definition and future_import_statement);
// - a first line that does not parse is read as if unindented (what tree-sitter recovers).
// Tested against EvalPlus 0.3.1 itself (tests/data/sanitize_golden.json, tools/gen_sanitize_golden.py):
// equal on every case but the named differences there, all of them text that tree-sitter-python
// cannot parse although Python can (its error recovery decides EvalPlus's answer) or that makes
// EvalPlus raise.
// code_extract gives EvalPlus's answer without its O(lines^2) parses: the ranges are tried longest
// first and the first that parses is the one (one parse when the whole text parses). A text with no
// code at all still costs one parse per range (250 lines of prose: about 3 s).
#include <string>
#include <utility>
#include <vector>

#include "bestofn/verifier/sandbox.h"

namespace bestofn {

// The time a sanitizer run may take (a reply of a few thousand lines of prose takes longer).
constexpr double kSanitizeSeconds = 60.0;

struct SanitizeCase {
  std::string text;         // the model's text (a chat reply, or the prompt followed by a completion)
  std::string entry_point;  // empty: keep every definition
};

struct Sanitized {
  std::string solution;  // EvalPlus's sanitize(text, entry_point), when error is empty
  std::string error;     // why there is none: the run's verdict, or the program's own exception
  bool timed_out = false;  // the run went past its time (a long text with no code in it)
};

// The Python program that sanitizes each case and writes the solutions, in order, in one frame on
// stdout (texts travel in base64; one that is not UTF-8 is read with U+FFFD for its bad bytes).
std::string sanitize_program(const std::vector<SanitizeCase>& cases);

// The frame of a sanitize_program run: "" and `results` filled (count of them), or what is wrong.
std::string read_sanitized(const std::string& out, std::size_t count, std::vector<Sanitized>& results);

// The cases sanitized in one sandbox run as `worker`; a run that fails gives every case its error.
std::vector<Sanitized> sanitize_all(const Sandbox& sandbox, const std::vector<SanitizeCase>& cases, int worker,
                                    double timeout_s = kSanitizeSeconds);
Sanitized sanitize(const Sandbox& sandbox, const std::string& text, const std::string& entry_point, int worker,
                   double timeout_s = kSanitizeSeconds);

}  // namespace bestofn
