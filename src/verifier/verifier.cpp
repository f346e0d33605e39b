#include "bestofn/verifier/verifier.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <thread>

#include "bestofn/util/parallel.h"

namespace bestofn {

std::vector<Verdict> verify_all(const Sandbox& sandbox, const std::vector<VerifyRequest>& requests, int workers,
                                const std::function<void(std::size_t, std::size_t)>& on_done) {
  // Unique (task, completion) pairs; every request points at one.
  std::map<std::tuple<const Problem*, std::string, bool>, std::size_t> index;
  std::vector<std::size_t> job_of(requests.size());
  std::vector<const VerifyRequest*> jobs;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto [it, fresh] = index.emplace(std::make_tuple(requests[i].problem, requests[i].completion, requests[i].plus), jobs.size());
    if (fresh) jobs.push_back(&requests[i]);
    job_of[i] = it->second;
  }
  std::vector<Verdict> verdicts(jobs.size());
  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex mu;
  // Worker w runs its sandboxes as uid (limits.uid - w): see SandboxLimits::uid.
  auto work = [&](int worker) {
    for (std::size_t j; (j = next.fetch_add(1)) < jobs.size();) {
      try {
        const VerifyRequest& r = *jobs[j];
        verdicts[j] = sandbox.run(r.plus ? plus_program(*r.problem, r.completion) : program(*r.problem, r.completion), worker, r.timeout_s);
      } catch (const std::exception& e) {  // the sandbox could not run: data, never a crash
        verdicts[j] = {Verdict::Status::SandboxError, std::string("sandbox error: ") + e.what(), "", "", 0};
      }
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (on_done) on_done(done, jobs.size());
    }
  };
  constexpr int kMaxWorkers = 1024;
  const int n = std::max(1, std::min({workers > 0 ? workers : default_threads(), static_cast<int>(jobs.size()), kMaxWorkers}));
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work, i);
  work(0);
  for (auto& t : pool) t.join();
  std::vector<Verdict> out(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) out[i] = verdicts[job_of[i]];
  return out;
}

}  // namespace bestofn
