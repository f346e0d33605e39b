#include "bestofn/eval/verify_jobs.h"

#include <cstdint>

#include "bestofn/eval/outside_tests.h"

namespace bestofn {
namespace {

// Problems are told apart by address, as the caller's requests are: two problems with one id (a
// dataset's and a generate prompt's) are different work.
std::string job_key(const Problem* problem, char kind, const std::string& completion) {
  return std::to_string(reinterpret_cast<std::uintptr_t>(problem)) + kind + completion;
}

}  // namespace

std::vector<Verdict> verify_requests(const Sandbox& sandbox, const std::vector<VerifyRequest>& requests, int workers,
                                     const std::function<void(std::size_t, std::size_t)>& on_done) {
  ReferenceOutputs refs;  // the expected outputs of each problem, once for all of these requests
  std::vector<VerifyJob> jobs;
  for (const VerifyRequest& r : requests)
    jobs.push_back({job_key(r.problem, r.plus ? '+' : ' ', r.completion), [&sandbox, &refs, req = &r](int worker) {
                      const Problem& p = *req->problem;
                      return std::vector<Verdict>{req->plus ? judge_plus(sandbox, refs, p, req->completion, worker, req->timeout_s)
                                                            : judge_base(sandbox, refs, p, req->completion, worker, req->timeout_s)};
                    }});
  std::vector<Verdict> out;
  for (auto& v : verify_all(std::move(jobs), workers, on_done)) out.push_back(std::move(v.front()));
  return out;
}

VerifyJob sample_job(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, std::string completion, double plus_timeout) {
  std::string key = job_key(&problem, ' ', completion);
  return {std::move(key), [&sandbox, &refs, &problem, completion = std::move(completion), plus_timeout](int worker) {
            std::vector<Verdict> verdicts{judge_base(sandbox, refs, problem, completion, worker)};
            if (verdicts.front().passed() && !problem.plus_input_json.empty())
              verdicts.push_back(judge_plus(sandbox, refs, problem, completion, worker, plus_timeout));
            return verdicts;
          }};
}

}  // namespace bestofn
