// The verifier pool: identical jobs run once, the queue bound holds the producer back, every
// submit gets its callback, a cancel drops what is queued; and verify_requests on a real sandbox.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "bestofn/eval/verify_jobs.h"
#include "bestofn/verifier/verifier.h"

using namespace bestofn;

namespace {

Verdict passed(const std::string& result) { return {Verdict::Status::Passed, result, "", "", 0}; }

// A gate the test opens: jobs that wait on it hold their worker until then.
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace

TEST(VerifierPool, IdenticalJobsRunOnceAndEverySubmitGetsItsCallback) {
  std::atomic<int> runs{0}, calls{0};
  Gate gate;
  {
    VerifierPool pool(2, 16);
    auto job = [&](const std::string& key) {
      return VerifyJob{key, [&, key](int) {
                         ++runs;
                         gate.wait();
                         return std::vector<Verdict>{passed(key)};
                       }};
    };
    // Three submits of "a" while its run waits (waiters), one of "b".
    for (int i = 0; i < 3; ++i)
      pool.submit(job("a"), [&](const std::vector<Verdict>& v) {
        EXPECT_EQ(v.at(0).result, "a");
        ++calls;
      });
    pool.submit(job("b"), [&](const std::vector<Verdict>& v) {
      EXPECT_EQ(v.at(0).result, "b");
      ++calls;
    });
    gate.open();
    pool.finish();
    // A submit of a key already done is answered at once, from the stored verdicts.
    pool.submit(job("a"), [&](const std::vector<Verdict>& v) {
      EXPECT_EQ(v.at(0).result, "a");
      ++calls;
    });
  }
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(calls.load(), 5);
}

TEST(VerifierPool, ProducerWaitsWhileTheQueueIsFull) {
  constexpr std::size_t kCapacity = 2;
  Gate gate;
  std::atomic<int> started{0}, submitted{0};
  VerifierPool pool(1, kCapacity);
  std::thread producer([&] {
    for (int i = 0; i < 6; ++i) {
      pool.submit({std::to_string(i), [&](int) {
                     ++started;
                     gate.wait();
                     return std::vector<Verdict>{passed("")};
                   }},
                  [](const std::vector<Verdict>&) {});
      ++submitted;
    }
  });
  // One job runs (its worker held by the gate) and kCapacity wait in the queue: the producer is
  // held in its next submit.
  for (int i = 0; i < 200 && (started.load() < 1 || submitted.load() < 1 + static_cast<int>(kCapacity)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(started.load(), 1);
  EXPECT_EQ(submitted.load(), 1 + static_cast<int>(kCapacity));
  gate.open();
  producer.join();
  pool.finish();
  EXPECT_EQ(started.load(), 6);
}

TEST(VerifierPool, CancelReleasesTheProducerAndDropsQueuedJobs) {
  std::atomic<bool> stop{false};
  Gate gate;
  std::atomic<int> runs{0}, calls{0};
  auto job = [&](int i) {
    return VerifyJob{std::to_string(i), [&](int) {
                       ++runs;
                       gate.wait();
                       return std::vector<Verdict>{passed("")};
                     }};
  };
  VerifierPool pool(1, 1, &stop);
  pool.submit(job(0), [&](const std::vector<Verdict>&) { ++calls; });  // runs, held by the gate
  for (int i = 0; i < 200 && runs.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  pool.submit(job(1), [&](const std::vector<Verdict>&) { ++calls; });  // queued
  std::thread producer([&] { pool.submit(job(2), [&](const std::vector<Verdict>&) { ++calls; }); });  // waits for room
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  producer.join();  // released by the cancel, within the pool's 100 ms poll
  gate.open();
  pool.finish();
  EXPECT_EQ(runs.load(), 1);  // the running job finishes; the queued one never starts
  EXPECT_EQ(calls.load(), 1);
}

TEST(VerifierPool, AThrowingJobIsASandboxErrorVerdict) {
  const auto verdicts = verify_all({{"x", [](int) -> std::vector<Verdict> { throw std::runtime_error("no room"); }}}, 1);
  ASSERT_EQ(verdicts.size(), 1u);
  ASSERT_EQ(verdicts[0].size(), 1u);
  EXPECT_EQ(verdicts[0][0].status, Verdict::Status::SandboxError);
  EXPECT_EQ(verdicts[0][0].result, "sandbox error: no room");
}

TEST(VerifyRequests, RealSandboxVerdictsInRequestOrder) {
  SandboxLimits limits;
  limits.timeout_s = 5.0;
  const Sandbox sandbox(limits);
  if (!sandbox.isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << sandbox.missing()[0];
  Problem p;
  p.task_id = "Pool/0";
  p.prompt = "def f():\n";
  p.test = "def check(candidate):\n    assert candidate() == 1\n";
  p.entry_point = "f";
  p.dataset = "humaneval";
  const std::string good = p.prompt + "    return 1\n", bad = p.prompt + "    return 2\n";  // whole code
  std::size_t last_done = 0, last_total = 0;
  const auto verdicts = verify_requests(sandbox, {{&p, good}, {&p, bad}, {&p, good}}, 2, [&](std::size_t done, std::size_t total) {
    last_done = done;
    last_total = total;
  });
  ASSERT_EQ(verdicts.size(), 3u);
  EXPECT_TRUE(verdicts[0].passed()) << verdicts[0].result;
  EXPECT_FALSE(verdicts[1].passed());
  EXPECT_TRUE(verdicts[2].passed());
  EXPECT_EQ(last_total, 2u);  // the duplicate ran once
  EXPECT_EQ(last_done, 2u);
}
