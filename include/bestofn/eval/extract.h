#pragma once
// From generated text to the code the verifier runs: the default stop strings of each dataset (base
// models continue the prompt), and the code block taken out of a chat reply (--chat).
#include <string>
#include <vector>

namespace bestofn {

// The stop strings `bestofn eval` uses unless --stop is given. dataset: "humaneval", "humaneval+"
// or "mbpp" (Problem::dataset); throws bestofn::Error for anything else.
//
// humaneval, humaneval+: "\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert ".
//   The prompt ends inside a function (signature and docstring); the completion is its body, so
//   every line of it is indented, and any new top-level statement ends it: another function or
//   class, a main guard, a print or an assert (the model writing its own tests). This is the set
//   of the issue, and the common ground of EvalPlus (evalplus/provider/utility.py: EOS
//   "\nif __name__", "\ndef main(", "\nprint(" plus, for direct completion of HumanEval, "\ndef ",
//   "\nclass ", "\nimport ", "\nfrom ", "\nassert ") and bigcode-evaluation-harness (humaneval.py:
//   "\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif", "\n```", "<file_sep>"). Not used: "\n#",
//   because a comment at column 0 is legal inside a function body and would cut it; "\nimport ",
//   "\nfrom " and "\n@", which can only come after the body and are left to "\ndef ". The price:
//   a decorated helper after the body leaves its decorator line behind, a syntax error ("\n@"
//   would avoid it).
//   None of the 164 canonical solutions of HumanEval or HumanEval+ contains a stop string
//   (tests/test_report.cpp checks this).
// mbpp: "\nassert ", "\nif __name__", "\nprint(", "\n```".
//   The prompt is prose and the model writes the whole function, imports and helpers included, so
//   "\ndef ", "\nclass ", "\nimport " must not stop it. What ends it is the model going on to test
//   or run it (assert, a main guard, print) or closing a markdown fence. EvalPlus stops MBPP
//   direct completion at "\nassert" and '\n"""'. No canonical MBPP solution contains a stop string.
// chat = true: none (EOS ends the reply; extract_code takes the code out of it).
std::vector<std::string> default_stop_strings(const std::string& dataset, bool chat = false);

// The code of a chat reply, in the style of EvalPlus's sanitizer (which also uses the first
// function's block), without a Python parser:
// - "\r\n" is read as "\n".
// - A fence is a line whose first non-blank characters are three or more backticks; the rest of the
//   line is the info string. A block ends at a line of at least as many backticks and nothing else,
//   or at the end of the reply (an unterminated fence: the reply was cut by max_new_tokens).
// - Only python blocks count: info string "python", "py", "python3" (any case) or empty. Blocks in
//   other languages (```text, ```bash) are skipped.
// - The result is the first python block with a line "def <entry_point>(" (after indentation,
//   "async " allowed); else the longest python block (the first of equal length). Its lines, each
//   ending with "\n".
// - A reply without any python block is returned unchanged (a base-model style completion, or prose
//   that will fail its tests as it should).
// Limitation: code split over several blocks (a helper in one, the function in the next) keeps
// only the block with the function.
std::string extract_code(const std::string& reply, const std::string& entry_point);

}  // namespace bestofn
