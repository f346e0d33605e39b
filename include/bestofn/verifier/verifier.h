#pragma once
// The verifier pool: many candidates, each run through the sandbox, on `workers` threads at once.
// Identical (problem, completion) pairs run once. The verifier never depends on the engine.
#include <functional>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/verifier/sandbox.h"

namespace bestofn {

struct VerifyRequest {
  const Problem* problem = nullptr;
  std::string completion;
  bool plus = false;  // the HumanEval+ differential plus test (plus_program) instead of program()
  double timeout_s = 0;  // > 0: this request's wall-clock limit instead of the sandbox's
};

// Verdicts in request order. on_done (optional) is called with the number finished so far, from
// the worker threads, serialized.
std::vector<Verdict> verify_all(const Sandbox& sandbox, const std::vector<VerifyRequest>& requests, int workers,
                                const std::function<void(std::size_t done, std::size_t total)>& on_done = {});

}  // namespace bestofn
