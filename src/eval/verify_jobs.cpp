#include "bestofn/eval/verify_jobs.h"

#include <cstdint>

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
  std::vector<VerifyJob> jobs;
  for (const VerifyRequest& r : requests)
    jobs.push_back({job_key(r.problem, r.plus ? '+' : ' ', r.completion), [&sandbox, req = &r](int worker) {
                      const std::string program_text = req->plus ? plus_program(*req->problem, req->completion) : program(*req->problem, req->completion);
                      return std::vector<Verdict>{sandbox.run(program_text, worker, req->timeout_s)};
                    }});
  std::vector<Verdict> out;
  for (auto& v : verify_all(std::move(jobs), workers, on_done)) out.push_back(std::move(v.front()));
  return out;
}

VerifyJob sample_job(const Sandbox& sandbox, const Problem& problem, std::string completion, double plus_timeout) {
  std::string key = job_key(&problem, ' ', completion);
  return {std::move(key), [&sandbox, &problem, completion = std::move(completion), plus_timeout](int worker) {
            std::vector<Verdict> verdicts{sandbox.run(program(problem, completion), worker)};
            if (verdicts.front().passed() && !problem.plus_input_json.empty())
              verdicts.push_back(sandbox.run(plus_program(problem, completion), worker, plus_timeout));
            return verdicts;
          }};
}

}  // namespace bestofn
