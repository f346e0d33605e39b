// Comparison outside the candidate (issue 45): the C++ comparator against Python's own ==
// (golden values), EvalPlus's float rule and find_zero's oracle, the strict form's checks; and in
// the real sandbox, candidates that pass the old in-process harness (datasets.h's plus_program:
// an __eq__ that always says yes, a subclass of int, reading the expected value from the harness's
// frame, a patched builtins.abs) and that the outside comparison rejects, naming the input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bestofn/eval/compare_outputs.h"
#include "bestofn/eval/datasets.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/eval/verify_jobs.h"

using namespace bestofn;
using nlohmann::json;

namespace {

// Golden: python3 /tmp/gold/gen.py (Python 3.11.7), which encodes each pair as the harness does
// and prints a == b; the script's pairs are the comments.
struct Pair {
  const char* a;
  const char* b;
  bool equal;
};
const Pair kPairs[] = {
      {R"(1)", R"(1.0)", true},  // 1 == 1.0
      {R"(1)", R"(true)", true},  // 1 == True
      {R"(0)", R"(false)", true},  // 0 == False
      {R"(2)", R"(true)", false},  // 2 == True
      {R"(1.5)", R"(1.5)", true},  // 1.5 == 1.5
      {R"(0.30000000000000004)", R"(0.3)", false},  // 0.30000000000000004 == 0.3
      {R"(-0.0)", R"(0)", true},  // -0.0 == 0
      {R"(9007199254740993)", R"(9007199254740992.0)", false},  // 9007199254740993 == 9007199254740992.0
      {R"(9007199254740992)", R"(9007199254740992.0)", true},  // 9007199254740992 == 9007199254740992.0
      {R"({"I": "10000000000000000000000000"})", R"(1.2676506002282294e+30)", true},  // 1267650600228229401496703205376 == 1.2676506002282294e+30
      {R"({"I": "10000000000000000000000001"})", R"(1.2676506002282294e+30)", false},  // 1267650600228229401496703205377 == 1.2676506002282294e+30
      {R"({"I": "c9f2c9cd04674edea40000000"})", R"(1e+30)", false},  // 1000000000000000000000000000000 == 1e+30
      {R"(-9223372036854775808)", R"(-9.223372036854776e+18)", true},  // -9223372036854775808 == -9.223372036854776e+18
      {R"({"I": "10000000000000000"})", R"({"I": "10000000000000000"})", true},  // 18446744073709551616 == 18446744073709551616
      {R"({"I": "-400000000000000000"})", R"({"I": "-400000000000000000"})", true},  // -1180591620717411303424 == -1180591620717411303424
      {R"({"I": "400000000000000000"})", R"({"I": "-400000000000000000"})", false},  // 1180591620717411303424 == -1180591620717411303424
      {R"({"F": "inf"})", R"({"F": "inf"})", true},  // inf == inf
      {R"({"F": "inf"})", R"({"F": "-inf"})", false},  // inf == -inf
      {R"({"F": "inf"})", R"({"I": "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"})", false},  // inf == 179769313486231590772930519078902473361797697894230657273430081157732675805500963132708477322407536021120113879871393357658789768814416622492847430639474124377767893424865485276302219601246094119453082952085005768838150682342462881473913110540827237163350510684586298239947245938479716304835356329624224137215
      {R"("a")", R"("a")", true},  // 'a' == 'a'
      {R"("a")", R"("b")", false},  // 'a' == 'b'
      {R"("")", R"([])", false},  // '' == []
      {R"("\u00e9")", R"("\u00e9")", true},  // 'é' == 'é'
      {R"("1")", R"(1)", false},  // '1' == 1
      {R"(null)", R"(null)", true},  // None == None
      {R"(null)", R"(0)", false},  // None == 0
      {R"(null)", R"([])", false},  // None == []
      {R"([1, 2])", R"([1, 2])", true},  // [1, 2] == [1, 2]
      {R"([1, 2])", R"({"T": [1, 2]})", false},  // [1, 2] == (1, 2)
      {R"({"T": [1, 2]})", R"({"T": [1.0, 2.0]})", true},  // (1, 2) == (1.0, 2.0)
      {R"([1, [2, 3]])", R"([1, [2, 3.0]])", true},  // [1, [2, 3]] == [1, [2, 3.0]]
      {R"([])", R"({"T": []})", false},  // [] == ()
      {R"({"T": []})", R"({"T": []})", true},  // () == ()
      {R"({"S": [1, 2, 3]})", R"({"S": [1, 2, 3]})", true},  // {1, 2, 3} == {1, 2, 3}
      {R"({"S": [1, 2]})", R"({"Z": [1, 2]})", true},  // {1, 2} == frozenset({1, 2})
      {R"({"S": [1, 2]})", R"([1, 2])", false},  // {1, 2} == [1, 2]
      {R"({"S": [1.0, 2]})", R"({"S": [1, 2.0]})", true},  // {1.0, 2} == {1, 2.0}
      {R"({"S": []})", R"({"Z": []})", true},  // set() == frozenset()
      {R"({"D": [["a", 1], ["b", 2]]})", R"({"D": [["b", 2], ["a", 1]]})", true},  // {'a': 1, 'b': 2} == {'b': 2, 'a': 1}
      {R"({"D": [[1, "x"]]})", R"({"D": [[1.0, "x"]]})", true},  // {1: 'x'} == {1.0: 'x'}
      {R"({"D": [[true, "x"]]})", R"({"D": [[1, "x"]]})", true},  // {True: 'x'} == {1: 'x'}
      {R"({"D": [["a", 1]]})", R"({"D": [["a", 1], ["b", 2]]})", false},  // {'a': 1} == {'a': 1, 'b': 2}
      {R"({"D": [["a", [1, 2]]]})", R"({"D": [["a", {"T": [1, 2]}]]})", false},  // {'a': [1, 2]} == {'a': (1, 2)}
      {R"({"D": [[{"T": [1, 2]}, 3]]})", R"({"D": [[{"T": [1.0, 2]}, 3.0]]})", true},  // {(1, 2): 3} == {(1.0, 2): 3.0}
      {R"({"D": []})", R"({"S": []})", false},  // {} == set()
      {R"([true, false])", R"([1, 0])", true},  // [True, False] == [1, 0]
      {R"({"C": [1.0, 0.0]})", R"(1)", true},  // (1+0j) == 1
      {R"({"C": [1.0, 2.0]})", R"({"C": [1.0, 2.0]})", true},  // (1+2j) == (1+2j)
      {R"({"C": [0.0, 2.0]})", R"({"C": [0.0, 2.0]})", true},  // 2j == 2j
      {R"({"C": [1.0, 2.0]})", R"({"C": [1.0, 3.0]})", false},  // (1+2j) == (1+3j)
      {R"(0.5)", R"(0.5000000000000001)", false},  // 0.5 == 0.5000000000000001
      // numpy's scalars ({"N": [type, item()]}), checked with numpy 2.4.6: np.float64(0.5) == 0.5,
      // np.int64(3) == 3.0, np.True_ == 1, np.float64(0.5) != '0.5', [np.float64(1.0)] == [1],
      // (np.int64(2),) == (2,)
      {R"({"N": ["numpy.float64", 0.5]})", R"(0.5)", true},
      {R"({"N": ["numpy.int64", 3]})", R"(3.0)", true},
      {R"({"N": ["numpy.bool", true]})", R"(1)", true},
      {R"({"N": ["numpy.float64", 0.5]})", R"("0.5")", false},
      {R"([{"N": ["numpy.float64", 1.0]}])", R"([1])", true},
      {R"({"T": [{"N": ["numpy.int64", 2]}]})", R"({"T": [2]})", true},
};

struct Repr {
  const char* value;
  const char* repr;
};
// Golden: the same script's repr(x) of each value.
const Repr kReprs[] = {
      {R"(1.0)", R"(1.0)"},
      {R"(0.1)", R"(0.1)"},
      {R"(1e+16)", R"(1e+16)"},
      {R"(1e-05)", R"(1e-05)"},
      {R"(123456789.125)", R"(123456789.125)"},
      {R"(-2.5e-300)", R"(-2.5e-300)"},
      {R"(1e+22)", R"(1e+22)"},
      {R"(100.0)", R"(100.0)"},
      {R"(0.0001)", R"(0.0001)"},
      {R"("it's")", R"("it's")"},
      {R"("a\"b")", R"('a"b')"},
      {R"("both'\"")", R"('both\'"')"},
      {R"("tab\tnl\n\u0001\u00e9")", R"('tab\tnl\n\x01é')"},
      {R"({"T": [1]})", R"((1,))"},
      {R"({"T": []})", R"(())"},
      {R"([1, {"T": [2, 3]}])", R"([1, (2, 3)])"},
      {R"({"D": [[1, "a"], ["b", [null, true]]]})", R"({1: 'a', 'b': [None, True]})"},
      {R"({"S": []})", R"(set())"},
      {R"({"Z": []})", R"(frozenset())"},
      {R"({"S": [3]})", R"({3})"},
      {R"({"Z": [4]})", R"(frozenset({4}))"},
      {R"({"I": "400000000000000000"})", R"(1180591620717411303424)"},
      {R"({"I": "-100000000000000000000"})", R"(-1208925819614629174706176)"},
      {R"({"C": [1.0, 2.0]})", R"((1+2j))"},
      {R"({"C": [0.0, 2.0]})", R"(2j)"},
      {R"({"C": [1.0, -2.0]})", R"((1-2j))"},
      {R"({"F": "nan"})", R"(nan)"},
      {R"({"F": "-inf"})", R"(-inf)"},
      {R"({"N": ["numpy.float64", 0.5]})", R"(np.float64(0.5))"},  // numpy 2's repr
      {R"([{"N": ["numpy.int64", 3]}])", R"([np.int64(3)])"},
};

}  // namespace

TEST(CompareOutputs, PythonEqualityAsPythonHasIt) {
  for (const Pair& p : kPairs) {
    const json a = json::parse(p.a), b = json::parse(p.b);
    ASSERT_EQ(check_plain(a), "") << p.a;
    ASSERT_EQ(check_plain(b), "") << p.b;
    EXPECT_EQ(python_equal(a, b), p.equal) << p.a << " == " << p.b;
    EXPECT_EQ(python_equal(b, a), p.equal) << p.b << " == " << p.a;
  }
  // Order-free where Python is: a dict's and a set's order as written does not matter.
  EXPECT_TRUE(python_equal(json::parse(R"({"D": [[{"S": [1, 2]}, 0], ["x", {"Z": [3, 4]}]]})"),
                           json::parse(R"({"D": [["x", {"Z": [4, 3]}], [{"S": [2, 1]}, 0]]})")));
  // The one difference from Python, on purpose: NaN equals NaN (two processes share no object).
  EXPECT_TRUE(python_equal(json::parse(R"([{"F": "nan"}])"), json::parse(R"([{"F": "nan"}])")));
}

TEST(CompareOutputs, ReprAsPythonWritesItCut) {
  for (const Repr& r : kReprs) EXPECT_EQ(python_repr(json::parse(r.value)), r.repr) << r.value;
  std::string long_list = "[";
  for (int i = 0; i < 500; ++i) long_list += (i ? ", " : "") + std::to_string(i);
  long_list += "]";
  EXPECT_EQ(python_repr(json::parse(long_list)).size(), 200u);  // as '%.200r' cuts
  EXPECT_EQ(python_repr(json::parse(long_list)).substr(0, 10), "[0, 1, 2, ");
}

TEST(CompareOutputs, EvalPlusFloatRuleWithinAndJustOutsideAtol) {
  // atol 0 in the dataset means 1e-6: |got - exp| <= 1e-6 + 1e-7 * |exp|.
  EXPECT_TRUE(evalplus_same(json(1.0 + 1.09e-6), json(1.0), 0));
  EXPECT_FALSE(evalplus_same(json(1.0 + 1.11e-6), json(1.0), 0));
  EXPECT_TRUE(evalplus_same(json(100.0 + 1.0e-5 + 0.9e-6), json(100.0), 0));  // 1e-6 + 1e-5
  EXPECT_FALSE(evalplus_same(json(100.0 + 1.2e-5), json(100.0), 0));
  EXPECT_TRUE(evalplus_same(json(2.0 + 0.5e-3), json(2.0), 1e-3));  // the dataset's atol
  EXPECT_FALSE(evalplus_same(json(2.0 + 1.1e-3), json(2.0), 1e-3));
  // Lists and tuples of floats element by element; an int is a number, a bool is not.
  EXPECT_TRUE(evalplus_same(json::parse("[1, 2.0000001]"), json::parse("[1.0, 2.0]"), 0));
  EXPECT_TRUE(evalplus_same(json::parse(R"({"T": [1.0, 2.0]})"), json::parse("[1.0, 2.0]"), 0));
  EXPECT_FALSE(evalplus_same(json::parse("[true, 2.0]"), json::parse("[1.0, 2.0]"), 0));
  EXPECT_FALSE(evalplus_same(json::parse("[1.0]"), json::parse("[1.0, 2.0]"), 0));
  EXPECT_FALSE(evalplus_same(json("1.0"), json(1.0), 0));
  // A float expected and a one-element list got: _same makes [exp] and keeps got as it is.
  EXPECT_TRUE(evalplus_same(json::parse("[1.0]"), json(1.0), 0));
  // NaN only where NaN is expected; inf never matches (inf - inf is NaN in _same).
  EXPECT_TRUE(evalplus_same(json::parse(R"({"F": "nan"})"), json::parse(R"({"F": "nan"})"), 0));
  EXPECT_FALSE(evalplus_same(json(1.0), json::parse(R"({"F": "nan"})"), 0));
  EXPECT_FALSE(evalplus_same(json::parse(R"({"F": "inf"})"), json::parse(R"({"F": "inf"})"), 0));
  // Not floats: Python's == (1 == 1.0 == True; a list of ints is not a float list).
  EXPECT_TRUE(evalplus_same(json(true), json(1), 0));
  EXPECT_FALSE(evalplus_same(json::parse("[1, 2]"), json::parse("[1, 3]"), 0.5));
}

TEST(CompareOutputs, FindZeroOracle) {
  // HumanEval/32's plus input 399: Python's sum gives exactly 0.0 at this x; a fused multiply-add
  // would not.
  const json xs = json::parse("[26, 1, -2, 3, -4, 6, -6, 7, 21000, -8, 9, -10]");
  EXPECT_TRUE(find_zero_ok(xs, json(13.091719521058346), 1e-4));
  EXPECT_FALSE(find_zero_ok(xs, json(13.1), 1e-4));
  EXPECT_TRUE(find_zero_ok(json::parse("[-2, 1]"), json(2), 1e-4));  // an int root
  EXPECT_FALSE(find_zero_ok(json::parse("[-2, 1]"), json("2"), 1e-4));
  EXPECT_FALSE(find_zero_ok(json::parse("[-2, 1]"), json::parse("[2.0]"), 1e-4));
}

TEST(CompareOutputs, MalformedFormsAreRefused) {
  for (const char* bad : {R"({"X": 1})", R"({"T": [1], "S": [2]})", R"({"I": "12g"})", R"({"F": "NaN"})", R"({"D": [[1]]})",
                          R"({"U": [1114112]})", R"({"H": ["ab", "str", 3]})", R"([1, {"T": 5}])",
                          R"({"N": [1, 2]})", R"({"N": ["numpy.float64"]})", R"({"N": ["numpy.float64", [1.0]]})"})
    EXPECT_NE(check_plain(json::parse(bad)), "") << bad;
  std::string deep(5000, '[');
  deep += std::string(5000, ']');
  EXPECT_NE(check_plain(json::parse(deep)), "");  // refused before anything recurses that deep
  std::vector<json> outs;
  EXPECT_EQ(read_outputs("noise\nBESTOFN-OUTPUTS 3\n[1]\nBESTOFN-END\n", 1, outs), "");
  EXPECT_EQ(outs.at(0), 1);
  EXPECT_NE(read_outputs("\nBESTOFN-OUTPUTS 9\n[1]\nBESTOFN-END\n", 1, outs), "");
  EXPECT_NE(read_outputs("\nBESTOFN-OUTPUTS 3\n[1]\nBESTOFN-END\n", 2, outs), "");
  EXPECT_EQ(read_outputs("printed", 1, outs), "no outputs were written");
}

TEST(CompareOutputs, MbppPlainAssertsGoOutsideTheRestStayIn) {
  Problem p;
  p.dataset = "mbpp";
  p.entry_point = "f";
  p.canonical_solution = "import re\ndef f(x):\n    return x\ndef helper():\n    return 1\n";
  p.test_list = {"assert f(1) == 1", "assert f([1, (2, 3)]) == [1, (2, 3)]", "assert f('a==b') == 'a==b'",
                 "assert math.isclose(f(1.0), 1.0)", "assert f(1) == 1, 'message'", "assert f(1) == helper()", "assert f(2) == 2 == 2",
                 "assert f(1) != 2", "assert f(1)(2) == 3", "assert set(f([1])) == {1}", "assert f(1) == re.escape('x')",
                 "assert f(1) == 1 and True"};
  const MbppSplit s = split_mbpp_tests(p);
  EXPECT_EQ(s.outside_index, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.calls, (std::vector<std::string>{"f(1)", "f([1, (2, 3)])", "f('a==b')"}));
  EXPECT_EQ(s.expected, (std::vector<std::string>{"1", "[1, (2, 3)]", "'a==b'"}));
  EXPECT_EQ(s.in_process.size(), 9u);
  EXPECT_STREQ(judged_base(p), kJudgedInProcess);
  p.test_list.resize(3);
  EXPECT_STREQ(judged_base(p), kJudgedOutside);
}

namespace {

struct SandboxCase {
  std::unique_ptr<Sandbox> sandbox;
  SandboxCase() {
    SandboxLimits limits;
    limits.timeout_s = 10.0;
    sandbox = std::make_unique<Sandbox>(limits);
  }
};

Problem plus_problem(const std::string& canonical, const std::string& inputs) {
  Problem p;
  p.task_id = "Outside/0";
  p.prompt = "def f(x):\n";
  p.canonical_solution = canonical;
  p.test = "def check(candidate):\n    pass\n";
  p.entry_point = "f";
  p.dataset = "humaneval+";
  p.plus_input_json = inputs;
  p.base_input_json = "[]";
  return p;
}

}  // namespace

// Each attack passes the old in-process harness and fails outside, naming the input.
TEST(OutsideAttacks, WrongProgramsThatFooledTheInProcessHarnessFail) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  const Problem ints = plus_problem("    return x * 2\n", "[[1], [2], [3]]");
  const Problem floats = plus_problem("    return x / 3\n", "[[1], [2], [4]]");
  struct Attack {
    const char* name;
    const Problem* problem;
    std::string completion;
    const char* outside_says;
  };
  const std::vector<Attack> attacks = {
      {"__eq__ always True", &ints,
       "    class Yes:\n        def __eq__(self, other):\n            return True\n        __hash__ = None\n    return Yes()\n",
       "plus input 0: the output holds a Yes, which is not plain data"},
      {"a subclass of int", &ints, "    class I(int):\n        def __eq__(self, other):\n            return True\n    return I(0)\n",
       "plus input 0: the output holds a I, which is not plain data"},
      {"a subclass of list", &ints, "    class L(list):\n        def __eq__(self, other):\n            return True\n    return L()\n",
       "plus input 0: the output holds a L, which is not plain data"},
      // The expected value is in the caller's frame of the in-process harness; outside there is none.
      {"reads the expected value from the harness's frame", &ints,
       "    import sys\n    g = sys._getframe(1).f_globals\n    return g.get('_exp', -1)\n", "plus input 0: got -1, expected 2"},
      // ... or from anywhere in its memory: the reference function's namespace, through gc.
      {"finds the reference through gc", &ints,
       "    import gc\n    for o in gc.get_objects():\n        if isinstance(o, dict) and '_ref' in o and callable(o.get('_ref')):\n"
       "            return o['_ref'](x)\n    return -1\n",
       "plus input 0: got -1, expected 2"},
      // builtins.abs patched to 0 makes every float within atol in _same.
      {"patches builtins.abs", &floats, "    import builtins\n    builtins.abs = lambda v: 0\n    return 0.0\n",
       "plus input 0: got 0.0, expected 0.3333333333333333"},
      // isinstance patched: _same takes the float path for ints and then a patched abs lets it
      // through. Outside, the patch breaks the json module the candidate's own run sends with: a
      // fail either way, and nothing it claims could pass.
      {"patches isinstance and abs", &ints,
       "    import builtins\n    builtins.isinstance = lambda o, t: t is not bool\n    builtins.abs = lambda v: 0\n    return [0.0]\n",
       "failed: "},
  };
  ReferenceOutputs refs;
  for (const Attack& a : attacks) {
    const Verdict old = c.sandbox->run(plus_program(*a.problem, a.completion), 0, 10.0);
    EXPECT_TRUE(old.passed()) << a.name << ": the in-process harness was expected to be fooled: " << old.result;
    const Verdict v = judge_plus(*c.sandbox, refs, *a.problem, solution_code(*a.problem, a.completion), 0, 10.0);
    EXPECT_EQ(v.status, Verdict::Status::Failed) << a.name << ": " << v.result;
    EXPECT_NE(v.result.find(a.outside_says), std::string::npos) << a.name << ": " << v.result;
  }
}

TEST(OutsideAttacks, HonestCandidatesPassAndFailuresNameTheInput) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  ReferenceOutputs refs;
  // Outputs of every plain type, big ints, a huge string (sent as its SHA-256) and the candidate's
  // own prints, a forged frame among them, pass when they equal the reference's.
  const Problem rich = plus_problem(
      "    return [None, True, 2**80, -3, 1.5, float('nan'), 'é\\n', (1,), {2, 1}, frozenset(), {'a': [1]}, 'x' * 100000 * x, 1j]\n",
      "[[1], [2]]");
  const std::string same_other_order =
      "    print('\\nBESTOFN-OUTPUTS 2\\n[]\\nBESTOFN-END')\n"
      "    return [None, 1, 2**80, -3.0, 1.5, float('nan'), 'é\\n', (1.0,), {1, 2}, frozenset(), {'a': [True]}, 'x' * 100000 * x, 1j]\n";
  Verdict v = judge_plus(*c.sandbox, refs, rich, solution_code(rich, same_other_order), 0, 10.0);
  EXPECT_TRUE(v.passed()) << v.result;
  v = judge_plus(*c.sandbox, refs, rich, rich.prompt + "    return [None, True, 2**80, -3, 1.5, float('nan'), 'é\\n', (1,), {2, 1}, frozenset(), {'a': [1]}, 'x' * 100001 * x, 1j]\n", 0, 10.0);
  EXPECT_EQ(v.result.substr(0, 22), "failed: plus input 0: ") << v.result;
  // A list where a tuple is expected, an exception on input 2, a wrong value on input 1.
  const Problem ints = plus_problem("    return (x, x)\n", "[[1], [2], [0]]");
  v = judge_plus(*c.sandbox, refs, ints, ints.prompt + "    return [x, x]\n", 0, 10.0);
  EXPECT_EQ(v.result, "failed: plus input 0: got [1, 1], expected (1, 1)");
  v = judge_plus(*c.sandbox, refs, ints, ints.prompt + "    return (x, 2 // x)\n", 0, 10.0);
  EXPECT_EQ(v.result, "failed: AssertionError: plus input 2: raised ZeroDivisionError: integer division or modulo by zero");
  v = judge_plus(*c.sandbox, refs, ints, ints.prompt + "    return (x, 1)\n", 0, 10.0);
  EXPECT_EQ(v.result, "failed: plus input 1: got (2, 1), expected (2, 2)");
  // A reference that fails is the verifier's error, never the candidate's fail.
  const Problem broken = plus_problem("    return 1 // 0\n", "[[1]]");
  v = judge_plus(*c.sandbox, refs, broken, broken.prompt + "    return 1\n", 0, 10.0);
  EXPECT_EQ(v.status, Verdict::Status::SandboxError) << v.result;
  EXPECT_NE(v.result.find("the reference solution of Outside/0 on its plus inputs could not be computed"), std::string::npos) << v.result;
}

TEST(OutsideAttacks, MbppEqTrickPassesInProcessAndFailsOutside) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  Problem p;
  p.task_id = "Mbpp/0";
  p.dataset = "mbpp";
  p.entry_point = "f";
  p.canonical_solution = "def f(x):\n    return {x: x + 1}\n";
  p.test_imports = {"import math"};
  p.test_list = {"assert f(1) == {1: 2}", "assert f(2) == dict([(2, 3)])"};
  p.test = "import math\n" + p.test_list[0] + "\n" + p.test_list[1];
  const std::string yes = "class Yes:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Yes()\n";
  EXPECT_TRUE(c.sandbox->run(program(p, yes)).passed());  // today's in-process asserts are fooled
  ReferenceOutputs refs;
  EXPECT_STREQ(judged_base(p), kJudgedOutside);
  Verdict v = judge_base(*c.sandbox, refs, p, yes, 0);
  EXPECT_NE(v.result.find("test 0: the output holds a Yes, which is not plain data"), std::string::npos) << v.result;
  v = judge_base(*c.sandbox, refs, p, p.canonical_solution, 0);
  EXPECT_TRUE(v.passed()) << v.result;
  v = judge_base(*c.sandbox, refs, p, "import collections\ndef f(x):\n    return collections.Counter({x: x + 1})\n", 0);
  EXPECT_TRUE(v.passed()) << v.result;  // the standard library's dicts are dicts
  v = judge_base(*c.sandbox, refs, p, "def f(x):\n    return {x: x + 1} if x == 1 else {x: 0}\n", 0);
  EXPECT_EQ(v.result, "failed: test 1: got {2: 0}, expected {2: 3}");
}
