// The examples a prompt shows (issue 46, public_tests.h): over all 164 HumanEval prompts and all
// 427 MBPP prompts, how many each yields, exact texts for a varied dozen written by hand from the
// prompts, and the check that matters: the canonical solutions pass their own extracted examples
// when run (one python3 process for all problems; the canonical solutions are trusted code, so no
// sandbox), except the prompts' own errata, named below. Then odd inputs: no crash, ever.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/public_tests.h"
#include "test_util.h"

using namespace bestofn;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<Problem>& humaneval() {
  static const std::vector<Problem> ps = [] {
    test::require_shared("data/humaneval/HumanEval.jsonl.gz");
    return load_dataset("humaneval", test::shared_path("data"));
  }();
  return ps;
}

const std::vector<Problem>& mbpp() {
  static const std::vector<Problem> ps = [] {
    test::require_shared("data/mbpp/sanitized-mbpp.json");
    return load_dataset("mbpp", test::shared_path("data"));
  }();
  return ps;
}

const Problem& by_id(const std::vector<Problem>& ps, const std::string& id) {
  for (const Problem& p : ps)
    if (p.task_id == id) return p;
  throw std::runtime_error("no problem " + id);
}

// Problems whose prompt shows no example this reader can take, and why. Checked both ways: each
// of these yields none, and every other problem yields at least one.
const std::map<std::string, std::string> kNoExample = {
    {"HumanEval/38", "no example: the docstring only says what decode_cyclic does"},
    {"HumanEval/41", "no example: a story about cars, no call"},
    {"HumanEval/50", "no example: the docstring only says what decode_shift does"},
    {"HumanEval/83", "no example: one sentence, no call"},
    {"HumanEval/81", "the example calls grade_equation(...), not the entry point numerical_letter_grade"},
    {"HumanEval/149", "the examples call list_sort(...), not the entry point sorted_list_sum"},
    {"HumanEval/160", "a pseudo-code example (operator['+', '*', '-'], array = [...], => result = 9) whose names are not "
                      "the parameters (operator, operand)"},
    {"HumanEval/80", "is_happy(a) => False: the strings are not quoted (6 lines, unreadable)"},
    {"HumanEval/115", "Input: grid : [...] / bucket_capacity : 1: bucket_capacity is not the parameter capacity (3 pairs, "
                      "unreadable)"},
};

// Lines that look like examples and cannot be read, per problem.
const std::map<std::string, int> kUnreadable = {
    {"HumanEval/80", 6},   // is_happy(a) => False ... (unquoted strings)
    {"HumanEval/115", 3},  // Input: ... bucket_capacity : 1 (not a parameter name)
    {"HumanEval/158", 1},  // find_max(["aaaaaaa", "bb" ,"cc"]) == ""aaaaaaa" (a stray quote)
};

// The prompts' own errata: examples written in the docstring that the canonical solution (and the
// hidden tests) contradict. Keyed by (task, index of the example among the problem's examples).
struct Erratum {
  const char* task;
  int index;
  const char* why;
};
const Erratum kErrata[] = {
    {"HumanEval/47", 1, "median([-10, 4, 6, 1000, 10, 20]) gives 15.0: the median of these six is (6 + 10) / 2 = 8.0, "
                        "which the canonical solution returns"},
    {"HumanEval/116", 0, "sort_array([1, 5, 2, 3, 4]) == [1, 2, 3, 4, 5]: by ones in binary the answer is [1, 2, 4, 3, 5]"},
    {"HumanEval/116", 1, "sort_array([-2, -3, -4, -5, -6]) == [-6, -5, -4, -3, -2]: the canonical solution (and the tests) "
                         "give [-4, -2, -6, -5, -3]"},
    {"HumanEval/116", 2, "sort_array([1, 0, 2, 3, 4]) [0, 1, 2, 3, 4]: the answer is [0, 1, 2, 4, 3]"},
    {"HumanEval/148", 1, "bf(\"Earth\", \"Mercury\") ==> (\"Venus\"): a string in parentheses; the function returns the tuple "
                         "('Venus',)"},
};

// What the checks compare with: floats within 1e-6, lists and tuples item by item, the rest by ==.
const char* const kEq = R"(
def _eq(a, b):
    if isinstance(a, float) or isinstance(b, float):
        try:
            return abs(a - b) <= 1e-6
        except TypeError:
            return a == b
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    return a == b
)";

// One program per problem: the solution, _eq, then `assert _eq(CALL, EXPECTED)` for each example,
// each caught so that every failing example is named (by index) in _failed.
std::string check_program(const std::string& solution, const std::vector<PublicExample>& examples) {
  std::string prog = solution + "\n" + kEq + "\n_failed = []\n";
  for (std::size_t i = 0; i < examples.size(); ++i)
    prog += "try:\n    assert _eq(" + examples[i].call + ", " + examples[i].expected + ")\nexcept Exception as _e:\n" +
            "    _failed.append(" + std::to_string(i) + ")\n";
  return prog;
}

// Runs each program in its own namespace in one python3 process; for each task the indices that
// failed, or -1 when the program itself did not run (a syntax error: a parser bug).
std::map<std::string, std::vector<int>> run_programs(const std::vector<std::pair<std::string, std::string>>& programs) {
  test::TempDir tmp;
  json in = json::array();
  for (const auto& [task, prog] : programs) in.push_back({{"task", task}, {"program", prog}});
  test::write_text(tmp / "in.json", in.dump());
  test::write_text(tmp / "driver.py", R"(import json, signal, sys
def _alarm(*_):
    raise TimeoutError("timed out")
signal.signal(signal.SIGALRM, _alarm)
out = {}
for item in json.load(open(sys.argv[1])):
    ns = {"__name__": "__main__"}
    signal.alarm(30)
    try:
        exec(compile(item["program"], item["task"], "exec"), ns)
        out[item["task"]] = ns["_failed"]
    except BaseException as e:
        print(item["task"], type(e).__name__, e, file=sys.stderr)
        out[item["task"]] = [-1]
    signal.alarm(0)
json.dump(out, open(sys.argv[2], "w"))
)");
  const std::string cmd = "python3 '" + (tmp / "driver.py").string() + "' '" + (tmp / "in.json").string() + "' '" +
                          (tmp / "out.json").string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, std::vector<int>> failed;
  const json out = json::parse(test::read_text(tmp / "out.json"));
  for (const auto& [task, idx] : out.items()) failed[task] = idx.get<std::vector<int>>();
  return failed;
}

Problem humaneval_style(const std::string& prompt, const std::string& entry) {
  Problem p;
  p.task_id = "t/0";
  p.prompt = prompt;
  p.entry_point = entry;
  p.dataset = "humaneval";
  return p;
}

std::vector<std::pair<std::string, std::string>> pairs(const PublicExamples& ex) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PublicExample& e : ex.examples) out.emplace_back(e.call, e.expected);
  return out;
}

using Pairs = std::vector<std::pair<std::string, std::string>>;

}  // namespace

TEST(PublicTests, EveryHumanEvalPromptCountedAndTheOnesWithoutExamplesNamed) {
  const std::vector<Problem>& ps = humaneval();
  ASSERT_EQ(ps.size(), 164u);
  std::size_t total = 0;
  int unreadable = 0;
  std::set<std::string> none;
  std::ostringstream table;
  table << "examples per HumanEval problem (task: examples[/unreadable]):\n";
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const PublicExamples ex = extract_public_examples(ps[i]);
    total += ex.examples.size();
    unreadable += ex.unreadable;
    if (ex.examples.empty()) none.insert(ps[i].task_id);
    const auto it = kUnreadable.find(ps[i].task_id);
    EXPECT_EQ(ex.unreadable, it == kUnreadable.end() ? 0 : it->second) << ps[i].task_id;
    char cell[48];
    std::snprintf(cell, sizeof cell, "%4zu: %2zu%-4s", i, ex.examples.size(),
                  ex.unreadable ? ("/" + std::to_string(ex.unreadable)).c_str() : "");
    table << cell << ((i + 1) % 8 == 0 ? "\n" : "  ");
  }
  table << "\ntotal " << total << " examples, " << none.size() << " problems with none, " << unreadable << " unreadable\n";
  std::printf("%s", table.str().c_str());
  EXPECT_GT(total, 400u);
  std::set<std::string> expected_none;
  for (const auto& [task, why] : kNoExample) expected_none.insert(task);
  EXPECT_EQ(none, expected_none);
  EXPECT_EQ(unreadable, 10);
}

TEST(PublicTests, HumanEvalExamplesAsThePromptsWriteThem) {
  const std::vector<Problem>& ps = humaneval();
  auto of = [&](const char* id) { return pairs(extract_public_examples(by_id(ps, id))); };
  // >>> CALL, then the expected line.
  EXPECT_EQ(of("HumanEval/0"), (Pairs{{"has_close_elements([1.0, 2.0, 3.0], 0.5)", "False"},
                                      {"has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)", "True"}}));
  EXPECT_EQ(of("HumanEval/3"), (Pairs{{"below_zero([1, 2, 3])", "False"}, {"below_zero([1, 2, -4, 5])", "True"}}));
  // Input: / Output: pairs, positional.
  EXPECT_EQ(of("HumanEval/68"), (Pairs{{"pluck([4,2,3])", "[2, 1]"},
                                       {"pluck([1,2,3])", "[2, 1]"},
                                       {"pluck([])", "[]"},
                                       {"pluck([5, 0, 3, 0, 4, 2])", "[0, 1]"}}));
  // For N = 1000, the sum of digits will be 1 the output should be "1".
  EXPECT_EQ(of("HumanEval/84"), (Pairs{{"solve(N=1000)", "\"1\""}, {"solve(N=150)", "\"110\""}, {"solve(N=147)", "\"1100\""}}));
  // For lst = [...] the output should be 10
  EXPECT_EQ(of("HumanEval/94"), (Pairs{{"skjkasdkd(lst=[0,3,2,1,3,5,7,4,5,5,5,2,181,32,4,32,3,2,32,324,4,3])", "10"},
                                       {"skjkasdkd(lst=[1,0,1,8,2,4597,2,1,3,40,1,2,1,2,4,2,5,1])", "25"},
                                       {"skjkasdkd(lst=[1,3,1,32,5107,34,83278,109,163,23,2323,32,30,1,9,3])", "13"},
                                       {"skjkasdkd(lst=[0,724,32,71,99,32,6,0,5,91,83,0,5,6])", "11"},
                                       {"skjkasdkd(lst=[0,81,12,3,1,21])", "3"},
                                       {"skjkasdkd(lst=[0,8,1,2,1,7])", "7"}}));
  // CALL returns EXPR
  EXPECT_EQ(of("HumanEval/98"),
            (Pairs{{"count_upper('aBCdEf')", "1"}, {"count_upper('abcdefg')", "0"}, {"count_upper('dBBE')", "0"}}));
  // For s = "abcde", c = "ae", the result should be ('bcd',False) (the second line has no comma).
  EXPECT_EQ(of("HumanEval/112"), (Pairs{{"reverse_delete(s=\"abcde\", c=\"ae\")", "('bcd',False)"},
                                        {"reverse_delete(s=\"abcdef\", c=\"b\")", "('acdef',False)"},
                                        {"reverse_delete(s=\"abcdedcba\", c=\"ab\")", "('cdedc',True)"}}));
  // Input: arr = [-3, -4, 5], k = 3 / Output: [-4, -3, 5]
  EXPECT_EQ(of("HumanEval/120"), (Pairs{{"maximum(arr=[-3, -4, 5], k=3)", "[-4, -3, 5]"},
                                        {"maximum(arr=[4, -4, 4], k=2)", "[4, 4]"},
                                        {"maximum(arr=[-3, 2, 1, 2, -1, -2, 1], k=1)", "[2]"}}));
  // The recurrence (tri(1) = 3, tri(n) = ..., tri(3) = tri(2) + tri(1) + tri(4)) defines the
  // sequence, not the function (which returns a list): only the last line is an example.
  EXPECT_EQ(of("HumanEval/130"), (Pairs{{"tri(3)", "[1, 3, 2, 8]"}}));
  // CALL = EXPR
  EXPECT_EQ(of("HumanEval/144"), (Pairs{{"simplify(\"1/5\", \"5/1\")", "True"},
                                        {"simplify(\"1/6\", \"2/1\")", "False"},
                                        {"simplify(\"7/10\", \"10/2\")", "False"}}));
  EXPECT_EQ(of("HumanEval/161"), (Pairs{{"solve(\"1234\")", "\"4321\""}, {"solve(\"ab\")", "\"AB\""}, {"solve(\"#a@C\")", "\"#A@c\""}}));
  // More forms: a call spanning four lines; derivations (-> 19 - 5 - 6 = 8, == 1 + 9 + 0 + 0 = 10);
  // `# returns`; prose with two examples, its separator broken over the line end; ➞; a doctest
  // call inside round(...) with a comment; >>> CALL == EXPR; doctest output over two lines;
  // doctest's None; lower-case booleans; the pseudo-code `arr = ... return ...`.
  EXPECT_EQ(of("HumanEval/87").at(0), (std::pair<std::string, std::string>{
                                          "get_row([ [1,2,3,4,5,6], [1,2,3,4,1,6], [1,2,3,4,5,1] ], 1)",
                                          "[(0, 0), (1, 4), (1, 0), (2, 5), (2, 0)]"}));
  EXPECT_EQ(of("HumanEval/67").at(0), (std::pair<std::string, std::string>{"fruit_distribution(\"5 apples and 6 oranges\", 19)", "8"}));
  EXPECT_EQ(of("HumanEval/151").at(0), (std::pair<std::string, std::string>{"double_the_difference([1, 3, 2, 0])", "10"}));
  EXPECT_EQ(of("HumanEval/79"), (Pairs{{"decimal_to_binary(15)", "\"db1111db\""}, {"decimal_to_binary(32)", "\"db100000db\""}}));
  EXPECT_EQ(of("HumanEval/99"), (Pairs{{"closest_integer(\"10\")", "10"},
                                       {"closest_integer(\"15.3\")", "15"},
                                       {"closest_integer(\"14.5\")", "15"},
                                       {"closest_integer(\"-14.5\")", "-15"}}));
  EXPECT_EQ(of("HumanEval/72").at(0), (std::pair<std::string, std::string>{"will_it_fly([1, 2], 5)", "False"}));
  EXPECT_EQ(of("HumanEval/32").at(0), (std::pair<std::string, std::string>{"round(find_zero([1, 2]), 2)", "-0.5"}));
  EXPECT_EQ(of("HumanEval/108").at(1), (std::pair<std::string, std::string>{"count_nums([-1, 11, -11])", "1"}));
  EXPECT_EQ(of("HumanEval/113").at(1),
            (std::pair<std::string, std::string>{"odd_count(['3',\"11111111\"])",
                                                 "[\"the number of odd elements 1n the str1ng 1 of the 1nput.\", "
                                                 "\"the number of odd elements 8n the str8ng 8 of the 8nput.\"]"}));
  EXPECT_EQ(of("HumanEval/12").at(0), (std::pair<std::string, std::string>{"longest([])", "None"}));
  EXPECT_EQ(of("HumanEval/76").at(0), (std::pair<std::string, std::string>{"is_simple_power(1, 4)", "True"}));
  EXPECT_EQ(of("HumanEval/105").at(2), (std::pair<std::string, std::string>{"by_length(arr=[1, -1 , 55])", "['One']"}));
  EXPECT_EQ(of("HumanEval/141").at(1), (std::pair<std::string, std::string>{"file_name_check(\"1example.dll\")", "'No'"}));
  // The recurrences of /46 and /63 are skipped too; their >>> examples stay.
  EXPECT_EQ(of("HumanEval/46"), (Pairs{{"fib4(5)", "4"}, {"fib4(6)", "8"}, {"fib4(7)", "14"}}));
  // The source names the prompt lines.
  const PublicExamples ex = extract_public_examples(by_id(ps, "HumanEval/120"));
  ASSERT_FALSE(ex.examples.empty());
  EXPECT_EQ(ex.examples[0].source, "Input: arr = [-3, -4, 5], k = 3\nOutput: [-4, -3, 5]");
}

TEST(PublicTests, HumanEvalCanonicalSolutionsPassTheirOwnExamplesButThePromptsErrata) {
  const std::vector<Problem>& ps = humaneval();
  std::vector<std::pair<std::string, std::string>> programs;
  std::map<std::string, std::vector<PublicExample>> examples;
  for (const Problem& p : ps) {
    PublicExamples ex = extract_public_examples(p);
    if (ex.examples.empty()) continue;
    programs.emplace_back(p.task_id, check_program(p.prompt + p.canonical_solution, ex.examples));
    examples[p.task_id] = std::move(ex.examples);
  }
  const auto failed = run_programs(programs);
  std::set<std::pair<std::string, int>> got, want;
  for (const auto& [task, idx] : failed)
    for (int i : idx) got.insert({task, i});
  for (const Erratum& e : kErrata) want.insert({e.task, e.index});
  for (const auto& [task, i] : got)
    if (!want.count({task, i})) {
      const PublicExample* e = i >= 0 ? &examples[task].at(i) : nullptr;
      ADD_FAILURE() << task << " example " << i << " fails: "
                    << (e ? e->call + " == " + e->expected + "\n  from: " + e->source : "the program did not run");
    }
  for (const Erratum& e : kErrata)
    EXPECT_TRUE(got.count({e.task, e.index})) << e.task << " " << e.index << " was listed as an erratum but passes: " << e.why;
  std::size_t total = 0;
  for (const auto& [task, ex] : examples) total += ex.size();
  std::printf("HumanEval: %zu examples run, %zu pass, %zu prompt errata\n", total, total - got.size(), got.size());
}

TEST(PublicTests, EveryMbppPromptYieldsItsFirstAssertAndTheCanonicalCodePassesIt) {
  const std::vector<Problem>& ps = mbpp();
  ASSERT_EQ(ps.size(), 427u);
  std::vector<std::pair<std::string, std::string>> programs;
  for (const Problem& p : ps) {
    const PublicExamples ex = extract_public_examples(p);
    ASSERT_EQ(ex.examples.size(), 1u) << p.task_id;
    EXPECT_EQ(ex.unreadable, 0) << p.task_id;
    EXPECT_EQ(ex.examples[0].source, p.test_list.at(0)) << p.task_id;
    // The call is the assert's left side (or bool(the whole test) when it compares nothing).
    const std::string& a = p.test_list[0];
    if (ex.examples[0].expected == "True" && ex.examples[0].call.starts_with("bool("))
      EXPECT_EQ("assert " + ex.examples[0].call.substr(5, ex.examples[0].call.size() - 6), a) << p.task_id;
    else
      EXPECT_NE(a.find(ex.examples[0].call), std::string::npos) << p.task_id;
    std::string imports;
    for (const std::string& line : p.test_imports) imports += line + "\n";
    programs.emplace_back(p.task_id, check_program(imports + p.canonical_solution, ex.examples));
  }
  EXPECT_EQ(pairs(extract_public_examples(by_id(ps, "Mbpp/2"))).at(0).second, "set((4, 5))");
  EXPECT_EQ(pairs(extract_public_examples(by_id(ps, "Mbpp/803"))).at(0),
            (std::pair<std::string, std::string>{"bool(not is_perfect_square(10))", "True"}));
  for (const auto& [task, idx] : run_programs(programs)) EXPECT_TRUE(idx.empty()) << task << " fails its first assert";
}

TEST(PublicTests, OddInputsNeverCrashAndCountWhatLooksLikeAnExample) {
  // Unbalanced parentheses: in a call line and in a doctest.
  {
    const PublicExamples ex = extract_public_examples(humaneval_style(
        "def f(x):\n    \"\"\"\n    f([1, 2) == 3\n    >>> f((1, 2)\n    3\n\n    f(1) == 2\n    \"\"\"\n", "f"));
    EXPECT_EQ(pairs(ex), (Pairs{{"f(1)", "2"}}));
    EXPECT_EQ(ex.unreadable, 2);
  }
  // An example spanning lines (call and expected value), and one left open at the docstring's end.
  {
    const PublicExamples ex = extract_public_examples(humaneval_style(
        "def f(x):\n    \"\"\"\n    f([1,\n      2]) == [2,\n      1]\n    f([3,\n", "f"));
    EXPECT_EQ(pairs(ex), (Pairs{{"f([1, 2])", "[2, 1]"}}));
    EXPECT_EQ(ex.examples.at(0).source, "f([1,\n2]) == [2,\n1]");
    EXPECT_EQ(ex.unreadable, 1);
  }
  // Unicode arrows, and ASCII ones, and a trailing full stop.
  {
    const PublicExamples ex = extract_public_examples(humaneval_style(
        "def f(x):\n    '''\n    f(1) \u279e 2\n    f(2) \u2192 'b'\n    f(3) \u21d2 (4,)\n    f(4) -> 5.\n    f(5) => 1.5.\n    '''\n",
        "f"));
    EXPECT_EQ(pairs(ex), (Pairs{{"f(1)", "2"}, {"f(2)", "'b'"}, {"f(3)", "(4,)"}, {"f(4)", "5"}, {"f(5)", "1.5"}}));
    EXPECT_EQ(ex.unreadable, 0);
  }
  // >>> with no expected line: doctest's rule, the value shown for None is nothing.
  {
    const PublicExamples ex =
        extract_public_examples(humaneval_style("def f(x):\n    \"\"\"\n    >>> f(1)\n\n    >>> f(2)\n    \"\"\"\n", "f"));
    EXPECT_EQ(pairs(ex), (Pairs{{"f(1)", "None"}, {"f(2)", "None"}}));
  }
  // Doctest lines that are not examples of f (skipped, not counted), and an output that is no literal.
  {
    const PublicExamples ex = extract_public_examples(humaneval_style(
        "def f(x):\n    \"\"\"\n    >>> x = f(1)\n    >>> g(2)\n    3\n    >>> f(x)\n    2\n    >>> f(3)\n    <object at 0x1>\n"
        "    >>> f([1,\n    ...    2])\n    [2, 1]\n    \"\"\"\n",
        "f"));
    EXPECT_EQ(pairs(ex), (Pairs{{"f([1, 2])", "[2, 1]"}}));
    EXPECT_EQ(ex.unreadable, 2);  // f(x): not literal arguments; <object at 0x1>: not a literal
  }
  // Named forms: names that are the parameters, names that are not, positional Input.
  {
    const PublicExamples ex = extract_public_examples(humaneval_style(
        "def g(a, b=2):\n    \"\"\"\n    For a = [1], the output should be 3.\n    For q = 1 the output should be 3\n"
        "    Input: 5, 6\n    Output: 11\n    Input: c = 1\n    Output: 1\n    \"\"\"\n",
        "g"));
    EXPECT_EQ(pairs(ex), (Pairs{{"g(a=[1])", "3"}, {"g(5, 6)", "11"}}));
    EXPECT_EQ(ex.unreadable, 2);
  }
  // Mentions and prose are not examples; glued junk after a value is unreadable.
  {
    const PublicExamples ex = extract_public_examples(humaneval_style(
        "def f(x):\n    \"\"\"\n    Write f() that returns 2.\n    f(1) == 2 since one and one\n    f(2) == \"\"a\"\n"
        "    f(3) == 4 + 1\n    self.f(4) == 1\n    \"\"\"\n",
        "f"));
    EXPECT_EQ(pairs(ex), (Pairs{{"f(1)", "2"}}));
    EXPECT_EQ(ex.unreadable, 2);
  }
  // Empty prompt, no docstring, no def, an entry point that is no identifier, a docstring never closed.
  for (const auto& [prompt, entry] : std::vector<std::pair<std::string, std::string>>{
           {"", "f"}, {"def f(x):\n    return x\n", "f"}, {"\"\"\"f(1) == 2\"\"\"\n", "f"}, {"def f(x):\n  '''f(1) == 2'''", ""},
           {"def f(x):\n  '''f(1) == 2'''", "f(x"}, {"def f(", "f"}, {"def f(x):\n    \"\"\"\n    f(1) == 2\n    f(", "f"}}) {
    const PublicExamples ex = extract_public_examples(humaneval_style(prompt, entry));
    EXPECT_LE(ex.examples.size(), 1u) << prompt;
  }
  EXPECT_EQ(pairs(extract_public_examples(humaneval_style("def f(x):\n    \"\"\"\n    f(1) == 2\n    f(", "f"))),
            (Pairs{{"f(1)", "2"}}));
  // Every prefix of a few real prompts (a prompt cut anywhere): no crash, no exception.
  const std::vector<Problem>& ps = humaneval();
  for (const char* id : {"HumanEval/87", "HumanEval/99", "HumanEval/113", "HumanEval/120", "HumanEval/130", "HumanEval/84"}) {
    Problem p = by_id(ps, id);
    const std::string full = p.prompt;
    for (std::size_t n = 0; n <= full.size(); ++n) {
      p.prompt = full.substr(0, n);
      EXPECT_NO_THROW(extract_public_examples(p)) << id << " cut at " << n;
    }
  }
}

TEST(PublicTests, ARowsOwnPublicTestsComeFirst) {
  Problem p = humaneval_style("def f(x):\n    \"\"\"\n    >>> f(1)\n    2\n    \"\"\"\n", "f");
  p.public_tests = {"assert f(3) == [4, 5]", "assert f(3)==4, 'message'", "f(1) == 2", "assert not f(0)", "assert"};
  const PublicExamples ex = extract_public_examples(p);
  EXPECT_EQ(pairs(ex), (Pairs{{"f(3)", "[4, 5]"}, {"f(3)", "4"}, {"bool(not f(0))", "True"}}));
  EXPECT_EQ(ex.unreadable, 2);
  p.dataset = "mbpp";  // the row's own tests, whatever the dataset
  EXPECT_EQ(extract_public_examples(p).examples.size(), 3u);
}
