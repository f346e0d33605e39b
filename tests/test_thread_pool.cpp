// cpu::ThreadPool, the CPU engine's parallel loops: every index of a loop runs exactly once, in
// the chunks the header promises, whatever the pool's size; a worker that fell asleep between
// loops (idle past its polling window) is woken by the next one, so no loop hangs; a chunk's
// exception reaches the caller and the pool stays usable.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <cstdlib>

#include "bestofn/util/parallel.h"
#include "cpu/thread_pool.h"

namespace bestofn {
namespace {

TEST(ThreadPool, EveryIndexRunsOnceInFixedChunks) {
  for (int threads : {1, 2, 3, 4}) {
    cpu::ThreadPool pool(threads);
    for (std::size_t n : {1u, 2u, 3u, 7u, 16u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::set<std::pair<std::size_t, std::size_t>> chunks;
      pool.run(n, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) hits[i]++;
        std::lock_guard<std::mutex> lock(mu);
        chunks.insert({b, e});
      });
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "threads " << threads << ", n " << n << ", index " << i;
      // Chunk k is [n k / threads, n (k + 1) / threads), the empty ones not called (a single
      // chunk when n is 1: the caller runs it alone).
      std::set<std::pair<std::size_t, std::size_t>> expected;
      const auto parts = static_cast<std::size_t>(threads);
      for (std::size_t k = 0; k < parts; ++k)
        if (n * k / parts < n * (k + 1) / parts) expected.insert({n * k / parts, n * (k + 1) / parts});
      if (n == 1) expected = {{0, 1}};
      EXPECT_EQ(chunks, expected) << "threads " << threads << ", n " << n;
    }
  }
}

// Pauses around the workers' polling window (200 us) between loops, so that loops meet workers
// polling, going to sleep and asleep; each loop must run all of its indices (a lost wake-up hangs
// here, and the test's ctest TIMEOUT, tests/CMakeLists.txt, reports it).
TEST(ThreadPool, LoopsAfterIdlePausesWakeTheWorkers) {
  cpu::ThreadPool pool(3);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pause_us(0, 600);
  for (int loop = 0; loop < 400; ++loop) {
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
    std::atomic<std::size_t> sum{0};
    pool.run(30, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) sum += i + 1;
    });
    ASSERT_EQ(sum.load(), 30u * 31u / 2u) << "loop " << loop;
  }
}

TEST(ThreadPool, AChunksExceptionReachesTheCaller) {
  cpu::ThreadPool pool(2);
  for (std::size_t bad : {0u, 9u}) {  // the caller's chunk, then a worker's
    EXPECT_THROW(pool.run(10,
                          [&](std::size_t b, std::size_t e) {
                            if (bad >= b && bad < e) throw std::runtime_error("chunk failed");
                          }),
                 std::runtime_error);
  }
  std::atomic<int> ran{0};
  pool.run(10, [&](std::size_t b, std::size_t e) { ran += static_cast<int>(e - b); });
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
// The default thread count follows the CPUs a thread may use (taskset, a container's cpuset), not
// the machine's: a thread confined to one CPU gets 1, the test's own thread the size of its mask.
TEST(Parallel, DefaultThreadsFollowTheAffinityMask) {
  if (std::getenv("BESTOFN_THREADS")) GTEST_SKIP() << "BESTOFN_THREADS overrides the mask";
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  EXPECT_EQ(default_threads(), CPU_COUNT(&mine));
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  int confined = -1;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0) confined = default_threads();
  });
  t.join();
  EXPECT_EQ(confined, 1);
}

}  // namespace bestofn
