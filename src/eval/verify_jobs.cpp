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
                                     const std::function<void(std::size_t, std::size_t)>& on_done, const JudgeRules& rules,
                                     ReferenceOutputs* shared_refs) {
  ReferenceOutputs own;  // the expected outputs of each problem, once for all of these requests
  ReferenceOutputs& refs = shared_refs ? *shared_refs : own;
  std::vector<VerifyJob> jobs;
  for (const VerifyRequest& r : requests)
    jobs.push_back({job_key(r.problem, r.plus ? '+' : ' ', r.code), [&sandbox, &refs, &rules, req = &r](int worker) {
                      const Problem& p = *req->problem;
                      if (rules.evalplus) return std::vector<Verdict>{judge_evalplus(sandbox, refs, p, req->code, req->plus, worker, rules)};
                      return std::vector<Verdict>{req->plus ? judge_plus(sandbox, refs, p, req->code, worker, req->timeout_s)
                                                            : judge_base(sandbox, refs, p, req->code, worker, req->timeout_s)};
                    }});
  std::vector<Verdict> out;
  for (auto& v : verify_all(std::move(jobs), workers, on_done)) out.push_back(std::move(v.front()));
  return out;
}

std::string row_code(const Problem& problem, const nlohmann::json& row) {
  if (const auto it = row.find("solution"); it != row.end() && it->is_string()) return it->get<std::string>();
  return solution_code(problem, row.at("completion").get<std::string>());
}

VerifyJob sample_job(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& problem, std::string code, double plus_timeout,
                     const JudgeRules& rules) {
  std::string key = job_key(&problem, ' ', code);
  return {std::move(key), [&sandbox, &refs, &problem, code = std::move(code), plus_timeout, &rules](int worker) {
            if (rules.evalplus) {
              std::vector<Verdict> verdicts{judge_evalplus(sandbox, refs, problem, code, false, worker, rules)};
              if (verdicts.front().passed()) verdicts.push_back(judge_evalplus(sandbox, refs, problem, code, true, worker, rules));
              return verdicts;
            }
            std::vector<Verdict> verdicts{judge_base(sandbox, refs, problem, code, worker)};
            if (verdicts.front().passed() && has_evalplus_inputs(problem))
              verdicts.push_back(judge_plus(sandbox, refs, problem, code, worker, plus_timeout));
            return verdicts;
          }};
}

}  // namespace bestofn
