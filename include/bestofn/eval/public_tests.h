#pragma once
// The examples a prompt itself shows (the `public` selection): HumanEval's docstring
// examples in their many written forms, MBPP's assert that bestofn's MBPP prompt shows, or a row's
// own `public_tests`. Only texts are extracted here; nothing is evaluated in C++: the caller runs
// `CALL` and `EXPECTED` as Python (in the sandbox) and compares.
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"

namespace bestofn {

struct PublicExample {
  std::string call;      // a Python expression calling the entry point: "below_zero([1, 2, -4, 5])", "solve(N=1000)"
  std::string expected;  // a Python expression for the expected value: "True", "[2, 1]", "('bcd',False)", "\"110\""
  std::string source;    // the prompt line(s) it came from (trimmed, joined by "\n"), for messages
};

struct PublicExamples {
  std::vector<PublicExample> examples;
  int unreadable = 0;  // lines that looked like an example but could not be read (counted, never an error)
};

// Which examples a problem shows, in the order they appear:
// - problem.public_tests not empty: those lines, each `assert CALL == EXPR` (or `assert EXPR`, read
//   as call "bool(EXPR)", expected "True"); any other line is unreadable.
// - dataset "mbpp": the first line of problem.test that starts with "assert" (the one the MBPP
//   prompt shows), read as above. EXPR is kept as written (it may be an expression: "set((4, 5))");
//   a call may need problem.test_imports ("math.isclose(...)").
// - dataset "mbpp+": the first line of the prompt that starts with "assert" (EvalPlus's prompt is a
//   docstring holding the task and that one assert).
// - otherwise (HumanEval, HumanEval+, a user's HumanEval-format file): the docstring of the
//   `def entry_point(...)` in the prompt (the last such def), read in these forms:
//     >>> CALL            doctest: the expected value on the following line(s), up to a blank line,
//     EXPECTED            the next `>>>` or the docstring's end; `...` lines continue the source; no
//                         expected line means None (doctest's rule). `>>> CALL == EXPR` (and
//                         `>>> CALL EXPR`) carry the expected value on the same line. A `>>>`
//                         source that does not call the entry point, or assigns, is skipped.
//     CALL SEP EXPR       anywhere in a line, SEP one of == -> => ==> --> = ➞ → ⇒ "returns"
//                         "should return" "should be" "will return" "gives" (optionally after `#`).
//                         CALL is `entry_point(` ... its balanced `)`, with literal arguments (a
//                         call spanning lines, or a separator broken over a line end, is joined).
//                         EXPR is the Python literal that follows, without a trailing `.` `,` `;`
//                         `:`, comment or prose; `A + B = C` derivations give C; prose's `true`
//                         and `false` are read as True and False. A group of
//                         consecutive such lines that defines the entry point by itself
//                         (`fib4(n) -> fib4(n-1) + ...`) is a recurrence, not examples: skipped.
//     For a = LIT, b = LIT ... should be EXPR     keyword call entry(a=LIT, b=LIT) when the names are
//                         the def's parameters;
//     Input: a = LIT, b = LIT   /   Input: LIT     the same, or positional, with the expected value
//     Output: EXPR        on the next `Output:` line;
//     a = LIT ... return EXPR   a line assigning the parameters, then a `return` line (pseudo-code).
// A line in any of these forms that cannot be read (unbalanced brackets, arguments that are not
// literals, an expected value that is not a literal, names that are not the parameters) counts in
// `unreadable`. Never throws on any text.
PublicExamples extract_public_examples(const Problem& problem);

}  // namespace bestofn
