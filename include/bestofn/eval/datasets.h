#pragma once
// Code-generation benchmarks as Problems: HumanEval, HumanEval+ and MBPP (sanitized), and the exact
// program text the verifier runs for a candidate completion.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace bestofn {

struct Problem {
  std::string task_id;             // "HumanEval/0", "Mbpp/2"
  std::string prompt;              // HumanEval: the code prefix given to the model; MBPP: the task text
  std::string canonical_solution;  // HumanEval: the body that follows the prompt; MBPP: the whole "code"
  std::string test;                // HumanEval: defines check(candidate); MBPP: imports, then the asserts
  std::string entry_point;         // the function under test
  std::vector<std::string> test_imports;  // MBPP only ("import math")
  std::vector<std::string> test_list;     // MBPP only: the asserts, one per test (test holds them joined)
  std::string dataset;             // "humaneval", "humaneval+", "mbpp" or "mbpp+": decides program()
  std::vector<std::string> public_tests;  // a row's own example tests, each `assert CALL == EXPR` (public_tests.h)
  // HumanEval+ and MBPP+ only. The plus (and base) inputs are kept as the file's own JSON text: some hold
  // integers beyond 64 bits, which a JSON round trip through doubles would change. The plus tests
  // run the candidate and the canonical solution on each plus input apart and compare their
  // outputs outside both (outside_tests.h); the base tests are `test`'s check().
  std::string plus_input_json, base_input_json;
  double atol = 0;
};

// MBPP or MBPP+: the model writes the whole code (no prompt to continue), tests are asserts.
inline bool is_mbpp(const Problem& p) { return p.dataset == "mbpp" || p.dataset == "mbpp+"; }
// A problem with EvalPlus's inputs (HumanEval+, MBPP+): base_input and plus_input.
inline bool has_evalplus_inputs(const Problem& p) { return !p.plus_input_json.empty(); }

// name_or_path is one of the names in data/datasets.json (dataset_manifest.h), read from data_dir
// and checked once against its published SHA-256 (a mismatch is one warning, never an error):
//   humaneval   data_dir/humaneval/HumanEval.jsonl.gz (or HumanEval.jsonl, unchecked)
//   humaneval+  data_dir/humanevalplus/HumanEvalPlus.jsonl.gz (plus_input, base_input, atol required)
//   mbpp        data_dir/mbpp/sanitized-mbpp.json
//   mbpp+       data_dir/mbppplus/MbppPlus.jsonl.gz (EvalPlus's MBPP+ v0.2.0: task_id "Mbpp/N", prompt,
//               entry_point, canonical_solution, base_input, plus_input, atol required; assertion,
//               the original MBPP asserts, is the base tests under --rules human-eval)
// or a path: *.jsonl / *.jsonl.gz in HumanEval format (a line with plus_input is a HumanEval+
// problem), *.json in MBPP sanitized format. MBPP task ids become "Mbpp/<id>" (EvalPlus style), and
// the entry point is the first function the first assert calls that `code` defines at top level.
// Throws bestofn::Error: a missing file (naming the path, where to get it, its size and sha256, and
// that --data-dir / BESTOFN_DATA choose the folder), "FILE:LINE: ..." for a bad JSONL line, "FILE: entry I: ..." for
// a bad MBPP entry, a duplicate task_id, or an empty file.
std::vector<Problem> load_dataset(const std::string& name_or_path, const std::filesystem::path& data_dir);

// An ASCII Python identifier: what an entry_point must be (it is written into the program run).
bool is_python_identifier(std::string_view s);

// The files load_dataset(name_or_path, data_dir) may read (those that do not exist included).
std::vector<std::filesystem::path> dataset_files(const std::string& name_or_path, const std::filesystem::path& data_dir);

// $BESTOFN_DATA when set and not empty, else ~/.cache/bestofn.
std::filesystem::path default_data_dir();

// The exact program the verifier runs for one candidate:
//   humaneval, humaneval+: prompt + completion + "\n" + test + "\n" + "check(" + entry_point + ")"
//     (openai/human-eval execution.py, character for character; only the base tests).
//   mbpp: completion + "\n" + test, where test = join(test_imports, "\n") + "\n" + join(test_list, "\n").
//     The completion is the whole function (the prompt is prose and is not part of the program);
//     there is no check() call: the asserts run at module level.
std::string program(const Problem& problem, const std::string& completion);

// The code a completion stands for, whole: HumanEval(+): prompt + completion (the completion is the
// function's body); MBPP(+): the completion. An EvalPlus-style sample's "solution" is this already.
std::string solution_code(const Problem& problem, const std::string& completion);

// program() for whole code: HumanEval(+): code + "\n" + test + "\ncheck(ENTRY)"; MBPP(+): code +
// "\n" + test. program(p, c) == test_program(p, solution_code(p, c)).
std::string test_program(const Problem& problem, const std::string& code);

// Standard base64 (with padding): how the harnesses carry texts into a Python literal that no
// quoting can break.
std::string base64_encode(const std::string& in);

// HumanEval+ differential plus test (EvalPlus's rule) as bestofn once ran it, in the
// candidate's process: no longer what the verifier runs (outside_tests.h compares outside it), kept
// so that the attack tests can show what that harness let through. One program that runs the
// canonical solution and the candidate on every plus_input and asserts equal outputs — floats (and lists of
// floats) within atol + 1e-7 * |expected| (atol 1e-6 when the dataset gives 0), anything else
// exactly; HumanEval/32 (find_zero) instead checks |poly(xs, x)| <= atol. Texts travel base64
// encoded, so no quoting can break the harness. Only for problems with plus inputs.
std::string plus_program(const Problem& problem, const std::string& completion);

}  // namespace bestofn
