#include "bestofn/verifier/verifier.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>

#include "bestofn/util/parallel.h"

namespace bestofn {

VerifierPool::VerifierPool(int workers, std::size_t capacity, const std::atomic<bool>* stop)
    : capacity_(std::max<std::size_t>(1, capacity)), stop_(stop) {
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { work(w); });
}

VerifierPool::~VerifierPool() { finish(); }

double VerifierPool::submit(VerifyJob job, Done done) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  auto [it, fresh] = entries_.try_emplace(job.key);
  Entry& e = it->second;
  if (!fresh) {  // the same job again: one run serves both
    if (e.done) {
      const std::vector<Verdict> verdicts = e.verdicts;
      lock.unlock();
      done(verdicts);
    } else {
      e.waiters.push_back(std::move(done));
    }
    return 0;
  }
  e.waiters.push_back(std::move(done));
  e.run = std::move(job.run);
  // Back-pressure: the producer waits while the queue is full, polling for a cancel, after which
  // the job is dropped.
  while (queue_.size() >= capacity_ && !cancelled()) space_.wait_for(lock, std::chrono::milliseconds(100));
  if (!cancelled()) {
    queue_.push_back(it);
    ready_.notify_one();
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void VerifierPool::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void VerifierPool::work(int worker) {
  for (;;) {
    std::map<std::string, Entry>::iterator it;
    std::function<std::vector<Verdict>(int)> run;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty() || cancelled()) return;
      it = queue_.front();
      queue_.pop_front();
      run = std::move(it->second.run);
    }
    space_.notify_one();
    const auto t0 = Clock::now();
    std::vector<Verdict> verdicts;
    try {
      verdicts = run(worker);
    } catch (const std::exception& e) {  // the sandbox could not run: data, never a crash
      verdicts = {{Verdict::Status::SandboxError, std::string("sandbox error: ") + e.what(), "", "", 0}};
    }
    std::vector<Done> waiters;
    {
      std::lock_guard<std::mutex> lock(mu_);
      intervals_.emplace_back(t0, Clock::now());
      Entry& e = it->second;
      e.done = true;
      e.verdicts = verdicts;
      for (Verdict& v : e.verdicts) v.out.clear(), v.err.clear();  // kept for later duplicates: the verdicts only
      waiters.swap(e.waiters);
    }
    for (const Done& d : waiters) d(verdicts);
  }
}

std::pair<double, double> VerifierPool::busy_and_overlap(Clock::time_point g0, Clock::time_point g1) const {
  std::vector<std::pair<Clock::time_point, Clock::time_point>> iv;
  {
    std::lock_guard<std::mutex> lock(mu_);
    iv = intervals_;
  }
  std::sort(iv.begin(), iv.end());
  double busy = 0, overlap = 0;
  auto add = [&](Clock::time_point a, Clock::time_point b) {
    busy += std::chrono::duration<double>(b - a).count();
    const auto lo = std::max(a, g0), hi = std::min(b, g1);
    if (hi > lo) overlap += std::chrono::duration<double>(hi - lo).count();
  };
  std::optional<std::pair<Clock::time_point, Clock::time_point>> cur;
  for (const auto& [a, b] : iv) {
    if (cur && a <= cur->second) {
      cur->second = std::max(cur->second, b);
      continue;
    }
    if (cur) add(cur->first, cur->second);
    cur = {a, b};
  }
  if (cur) add(cur->first, cur->second);
  return {busy, overlap};
}

std::vector<std::vector<Verdict>> verify_all(std::vector<VerifyJob> jobs, int workers,
                                             const std::function<void(std::size_t, std::size_t)>& on_done) {
  // Each distinct job is submitted once, and its verdicts (captured output included) go to every
  // index that asked for it.
  std::map<std::string, std::vector<std::size_t>> indices;
  for (std::size_t i = 0; i < jobs.size(); ++i) indices[jobs[i].key].push_back(i);
  constexpr int kMaxWorkers = 1024;
  const int n = std::max(1, std::min({workers > 0 ? workers : default_threads(), static_cast<int>(indices.size()), kMaxWorkers}));
  std::vector<std::vector<Verdict>> out(jobs.size());
  std::mutex mu;
  std::size_t finished = 0;  // distinct jobs done, for on_done's count
  {
    VerifierPool pool(n, indices.size());  // room for every job: submit never waits
    for (const auto& entry : indices) {
      const std::vector<std::size_t>& where = entry.second;
      pool.submit(std::move(jobs[where.front()]), [&out, &mu, &finished, &on_done, &indices, &where](const std::vector<Verdict>& v) {
        for (std::size_t i : where) out[i] = v;
        std::lock_guard<std::mutex> lock(mu);
        ++finished;
        if (on_done) on_done(finished, indices.size());
      });
    }
    pool.finish();
  }
  return out;
}

}  // namespace bestofn
