#pragma once
// The verifier pool: jobs run through the sandbox on `workers` threads at once, fed from a bounded
// queue (the producer waits while it is full), identical jobs run once. A job is opaque here: a
// key and the work a worker does, which builds its program(s) only when it runs, so that a long
// queue never holds every program's text. The verifier never depends on the engine or the eval.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bestofn/verifier/sandbox.h"

namespace bestofn {

struct VerifyJob {
  // Jobs with the same key are the same work: it runs once, and every submitter gets its verdicts.
  std::string key;
  // Builds the program(s) and runs them as worker `worker` (Sandbox::run's worker); returns their
  // verdicts in the order it ran them. An exception is a SandboxError verdict, never a crash.
  std::function<std::vector<Verdict>(int worker)> run;
};

class VerifierPool {
 public:
  using Clock = std::chrono::steady_clock;
  // Called once per submit, from a worker thread (or from submit itself when its key was done).
  using Done = std::function<void(const std::vector<Verdict>&)>;

  // `stop` (optional) cancels the pool when it becomes true: a signal handler may set it. Then
  // submit no longer waits for room, and the workers take no further job (a queued job is
  // dropped, its callbacks never called).
  VerifierPool(int workers, std::size_t capacity, const std::atomic<bool>* stop = nullptr);
  ~VerifierPool();
  VerifierPool(const VerifierPool&) = delete;
  VerifierPool& operator=(const VerifierPool&) = delete;

  // Queues a job; blocks while the queue holds `capacity` jobs. Returns the seconds it waited.
  double submit(VerifyJob job, Done done);
  // No more jobs: the workers drain the queue (unless cancelled) and stop.
  void finish();
  // Busy time: the union of every run's [start, end], and its part inside [g0, g1].
  std::pair<double, double> busy_and_overlap(Clock::time_point g0, Clock::time_point g1) const;

 private:
  struct Entry {
    bool done = false;
    std::vector<Verdict> verdicts;  // once done, without their captured output
    std::function<std::vector<Verdict>(int)> run;  // until a worker takes it
    std::vector<Done> waiters;
  };
  bool cancelled() const { return stop_ && stop_->load(); }
  void work(int worker);

  const std::size_t capacity_;
  const std::atomic<bool>* const stop_;
  mutable std::mutex mu_;
  std::condition_variable ready_, space_;
  std::map<std::string, Entry> entries_;
  std::deque<std::map<std::string, Entry>::iterator> queue_;  // into entries_ (map iterators stay valid)
  std::vector<std::pair<Clock::time_point, Clock::time_point>> intervals_;
  bool closed_ = false;
  std::vector<std::thread> threads_;
};

// Submit-all-and-wait: the verdicts of each job, in job order, on a pool of `workers` threads (0:
// the cores; never more than the distinct jobs). on_done (optional) is called with the number of
// distinct jobs finished so far, from the worker threads, serialized.
std::vector<std::vector<Verdict>> verify_all(std::vector<VerifyJob> jobs, int workers,
                                             const std::function<void(std::size_t done, std::size_t total)>& on_done = {});

}  // namespace bestofn
