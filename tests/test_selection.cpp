// Best-of-N selection without the hidden tests (issue 46): the strategies on facts written by
// hand, the input variations, selected@1, and the evidence runs on real HumanEval problems with
// candidates whose verdicts are known (the canonical solution and wrong programs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/intervals.h"
#include "bestofn/eval/selection.h"
#include "bestofn/util/error.h"
#include "bestofn/verifier/sandbox.h"
#include "test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

CandidateFacts facts(double logprob, int public_passed, const std::string& signature) {
  CandidateFacts f;
  f.mean_logprob = logprob;
  f.public_passed = public_passed;
  f.signature = signature;
  return f;
}

}  // namespace

TEST(Selection, StrategiesAreChainsOfThreeSteps) {
  EXPECT_EQ(parse_strategy("logprob").steps, std::vector<SelectStep>{SelectStep::Logprob});
  const SelectStrategy all = parse_strategy("public, cluster,logprob");
  EXPECT_EQ(all.steps, (std::vector<SelectStep>{SelectStep::Public, SelectStep::Cluster, SelectStep::Logprob}));
  EXPECT_EQ(all.name, "public, cluster,logprob");
  for (const char* bad : {"", "best", "public,,cluster", "public,public", "cluster;logprob"}) {
    try {
      parse_strategy(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--select"), std::string::npos) << e.what();
    }
  }
  ASSERT_EQ(default_strategies().size(), 4u);
  EXPECT_EQ(default_strategies().back().name, "public,cluster,logprob");
}

TEST(Selection, EachStepKeepsWhatItShouldAndLogprobBreaksTies) {
  // 0: confident and wrong everywhere; 1-3: agree on their outputs and pass the examples;
  // 4: passes the examples but disagrees; 5: never ran.
  const std::vector<CandidateFacts> c = {facts(-0.1, 0, "a"), facts(-0.5, 1, "b"), facts(-0.4, 1, "b"),
                                         facts(-0.9, 1, "b"), facts(-0.2, 1, "c"), facts(-0.05, -1, "")};
  EXPECT_EQ(select_candidate(c, parse_strategy("logprob")), 5u);
  EXPECT_EQ(select_candidate(c, parse_strategy("public")), 4u);            // the most confident that passes
  EXPECT_EQ(select_candidate(c, parse_strategy("cluster")), 2u);           // the largest group's most confident
  EXPECT_EQ(select_candidate(c, parse_strategy("public,cluster,logprob")), 2u);
  // A filter that would keep nothing keeps everything.
  const std::vector<CandidateFacts> none_pass = {facts(-1, 0, "x"), facts(-2, 0, "y"), facts(-3, 0, "y")};
  EXPECT_EQ(select_candidate(none_pass, parse_strategy("public")), 0u);
  EXPECT_EQ(select_candidate(none_pass, parse_strategy("public,cluster")), 1u);
  // Groups of equal size: the tie goes to the most confident member of either.
  const std::vector<CandidateFacts> tie = {facts(-3, 1, "x"), facts(-1, 1, "y"), facts(-2, 1, "x"), facts(-4, 1, "y")};
  EXPECT_EQ(select_candidate(tie, parse_strategy("cluster")), 1u);
  // Equal logprobs: the lowest index.
  EXPECT_EQ(select_candidate({facts(-1, 1, "x"), facts(-1, 1, "x")}, parse_strategy("logprob")), 0u);
}

TEST(Selection, VariationsKeepTypesAndNeverRepeat) {
  const json args = json::parse(R"([[1, 2, 3], "abc", 7, 0.5, true, {"T": [1, "x"]}, {"D": [["k", 1]]}, null])");
  const std::vector<json> m = mutate_args(args, 12);
  ASSERT_EQ(m.size(), 12u);
  std::set<std::string> seen{args.dump()};
  for (const json& a : m) {
    EXPECT_TRUE(seen.insert(a.dump()).second) << a.dump();
    ASSERT_EQ(a.size(), args.size());
    for (std::size_t i = 0; i < a.size(); ++i)  // (an int may come back signed or unsigned)
      EXPECT_TRUE(a[i].type() == args[i].type() || (a[i].is_number_integer() && args[i].is_number_integer())) << a.dump();
    EXPECT_TRUE(a[7].is_null());
  }
  // The first variations, in order: each argument's simplest one.
  EXPECT_EQ(m[0][0], json::parse("[1, 2]"));
  EXPECT_EQ(m[1][1], "ab");
  EXPECT_EQ(m[2][2], 8);
  EXPECT_EQ(m[3][3], 1.5);
  EXPECT_EQ(m[4][4], false);
  EXPECT_EQ(m[5][5], json::parse(R"({"T": [2, "x"]})"));  // a tuple keeps its length
  EXPECT_EQ(mutate_args(args, 12), m);                     // deterministic
  EXPECT_TRUE(mutate_args(json::array(), 4).empty());
  EXPECT_TRUE(mutate_args(json::parse("[null]"), 4).empty());
  EXPECT_EQ(mutate_args(json::parse("[\"h\\u00e9\"]"), 1)[0][0], "h\u00e9h\u00e9");  // non-ASCII text is never cut mid-character
}

TEST(Selection, SelectedAtOneAndTheGapItCloses) {
  // Problem A: 1 of 4 right, the right one agrees with another right one and passes its example;
  // problem B: none right; problem C: all right.
  SelectionPool a{{facts(-1, 0, "w"), facts(-2, 1, "r"), facts(-3, 1, "r"), facts(-0.5, 0, "v")}, {false, true, true, false}, {}};
  SelectionPool b{{facts(-1, 0, "w"), facts(-2, 0, "v")}, {false, false}, {}};
  SelectionPool c{{facts(-1, 1, "r"), facts(-2, 1, "r")}, {true, true}, {}};
  a.plus_passed = a.passed;
  b.plus_passed = b.passed;
  c.plus_passed = {true, false};
  const auto s = selection_summary({a, b, c, SelectionPool{}}, default_strategies(), true);
  EXPECT_EQ(s["problems"], 3);
  EXPECT_DOUBLE_EQ(s["pass_at_1"].get<double>(), (0.5 + 0 + 1) / 3);
  EXPECT_DOUBLE_EQ(s["pass_at_n"].get<double>(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(s["strategies"]["logprob"]["selected_at_1"].get<double>(), 1.0 / 3);  // A picks -0.5 (wrong)
  EXPECT_DOUBLE_EQ(s["strategies"]["public"]["selected_at_1"].get<double>(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(s["strategies"]["public,cluster,logprob"]["selected_at_1"].get<double>(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(s["strategies"]["public"]["gap_closed"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["strategies"]["logprob"]["gap_closed"].get<double>(), (1.0 / 3 - 0.5) / (2.0 / 3 - 0.5));
  EXPECT_DOUBLE_EQ(s["strategies"]["public"]["plus_selected_at_1"].get<double>(), 2.0 / 3);  // C: index 0 passes plus
  // Each selected@1 with its interval over the 3 problems: the picks' 0/1 per problem, bootstrapped.
  const auto want = bootstrap_interval({1.0, 0.0, 1.0});  // public: A right, B none, C right
  EXPECT_EQ(json(s["strategies"]["public"]["selected_at_1_interval"]), json::array({want->lo, want->hi}));
  EXPECT_EQ(json(s["strategies"]["logprob"]["selected_at_1_interval"]), json::array({bootstrap_interval({0.0, 0.0, 1.0})->lo,
                                                                               bootstrap_interval({0.0, 0.0, 1.0})->hi}));
  EXPECT_TRUE(s["strategies"]["public"]["plus_selected_at_1_interval"].is_array());
  const auto one = selection_summary({c}, default_strategies(), false);
  EXPECT_TRUE(one["strategies"]["public"]["selected_at_1_interval"].is_null()) << "one problem: no interval";
  EXPECT_FALSE(one["strategies"]["public"].contains("plus_selected_at_1_interval"));
}

// Real problems and a sandbox: the canonical solution (three copies, told apart by a comment),
// two copies of a wrong program that passes none of the examples, and one confident wrong program.
// Public examples keep the right ones, the cluster step finds them as the largest group, and
// the logprob alone picks the confident wrong one.
TEST(Selection, EvidenceRunsPickTheRightProgramOnRealProblems) {
  const Sandbox sandbox;
  if (!sandbox.isolated()) GTEST_SKIP() << "sandbox isolation unavailable here";
  const auto path = test::require_shared("data/humaneval/HumanEval.jsonl.gz");
  const std::vector<Problem> problems = load_dataset(path.string(), {});
  for (const char* id : {"HumanEval/0", "HumanEval/12", "HumanEval/29"}) {
    SCOPED_TRACE(id);
    const Problem* p = nullptr;
    for (const Problem& q : problems)
      if (q.task_id == id) p = &q;
    ASSERT_NE(p, nullptr);
    const SelectionInputs in = selection_inputs(sandbox, *p, 0);
    ASSERT_TRUE(in.error.empty()) << in.error;
    ASSERT_FALSE(in.public_calls.empty());
    EXPECT_GT(in.cluster_calls.size(), in.public_calls.size());  // variations were made
    const std::vector<std::string> completions = {p->canonical_solution + "    # 1\n", p->canonical_solution + "    # 2\n",
                                                  p->canonical_solution + "    # 3\n", "    return None\n", "    return None  # 2\n",
                                                  "    raise ValueError('no')\n"};
    std::vector<CandidateFacts> c;
    for (const std::string& completion : completions) c.push_back(candidate_evidence(sandbox, *p, in, solution_code(*p, completion), 0, 5.0));
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(c[i].public_passed, 1) << i;
      EXPECT_EQ(c[i].signature, c[0].signature);
    }
    EXPECT_EQ(c[3].public_passed, 0);
    EXPECT_EQ(c[3].signature, c[4].signature);
    EXPECT_NE(c[3].signature, c[0].signature);
    EXPECT_EQ(c[5].public_passed, 0);
    // Logprobs as a model might give them: the wrong ones more confident.
    const double logprob[] = {-0.9, -0.8, -0.7, -0.3, -0.2, -0.1};
    for (std::size_t i = 0; i < c.size(); ++i) c[i].mean_logprob = logprob[i];
    EXPECT_EQ(select_candidate(c, parse_strategy("logprob")), 5u);
    EXPECT_EQ(select_candidate(c, parse_strategy("public")), 2u);
    EXPECT_EQ(select_candidate(c, parse_strategy("cluster")), 2u);
    EXPECT_EQ(select_candidate(c, parse_strategy("public,cluster,logprob")), 2u);
  }
}

// A row's own public tests (generate's public_tests): a call of the entry point gets variations,
// an expression around calls (f(1) + f(2)) is a public test only.
TEST(Selection, PublicTestsOfARowAndExpressionsAroundCalls) {
  const Sandbox sandbox;
  if (!sandbox.isolated()) GTEST_SKIP() << "sandbox isolation unavailable here";
  Problem p;
  p.task_id = "row";
  p.entry_point = "f";
  p.dataset = "humaneval";
  p.public_tests = {"assert f(1) + f(2) == 5", "assert f(3) == 4"};
  const SelectionInputs in = selection_inputs(sandbox, p, 0);
  ASSERT_TRUE(in.error.empty()) << in.error;
  ASSERT_EQ(in.public_calls, (std::vector<std::string>{"f(1) + f(2)", "f(3)"}));
  EXPECT_EQ(in.unreadable, 0);
  ASSERT_GT(in.cluster_calls.size(), 2u);
  for (std::size_t i = 2; i < in.cluster_calls.size(); ++i) EXPECT_TRUE(in.cluster_calls[i].starts_with("f(")) << in.cluster_calls[i];
  EXPECT_EQ(candidate_evidence(sandbox, p, in, "def f(x):\n    return x + 1\n", 0, 5.0).public_passed, 1);
  EXPECT_EQ(candidate_evidence(sandbox, p, in, "def f(x):\n    return x\n", 0, 5.0).public_passed, 0);
}
