#pragma once
// The verifier's jobs for a benchmark's problems: a candidate run against its problem's tests
// (datasets.h's program in the candidate's process; outside_tests.h's comparison outside it for
// HumanEval+'s plus tests and MBPP's plain asserts), built when a worker takes the job.
#include <functional>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/verifier/sandbox.h"
#include "bestofn/verifier/verifier.h"

namespace bestofn {

struct VerifyRequest {
  const Problem* problem = nullptr;
  std::string completion;
  bool plus = false;  // HumanEval+'s differential plus tests (judge_plus) instead of the base tests
  double timeout_s = 0;  // > 0: this request's wall-clock limit instead of the sandbox's
};

// The verdict of each request, in order; identical (problem, completion, plus) requests run once,
// and each problem's reference outputs once for all of them.
// on_done: as verify_all's.
std::vector<Verdict> verify_requests(const Sandbox& sandbox, const std::vector<VerifyRequest>& requests, int workers,
                                     const std::function<void(std::size_t done, std::size_t total)>& on_done = {});

// eval's job for one sample: the base tests, then HumanEval+'s plus tests (with plus_timeout)
// only when the base ones passed and the problem has them. Its verdicts: {base} or {base, plus}.
// refs: the run's expected outputs (outside_tests.h), shared by all its jobs; it must outlive them.
VerifyJob sample_job(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, std::string completion, double plus_timeout);

}  // namespace bestofn
