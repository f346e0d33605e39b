#include "bestofn/parallel.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bestofn {

int default_threads() {
  if (const char* env = std::getenv("BESTOFN_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  // The CPUs this thread may run on (taskset, a container's cpuset), not every CPU of the machine:
  // spinning workers on fewer cores than threads wait on each other's time slices.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn, int threads) {
  if (n == 0) return;
  const std::size_t t = std::min<std::size_t>(n, static_cast<std::size_t>(threads > 0 ? threads : default_threads()));
  if (t <= 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::thread> pool;
  pool.reserve(t);
  for (std::size_t i = 0; i < t; ++i) {
    pool.emplace_back([&, i] {
      try {
        fn(n * i / t, n * (i + 1) / t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace bestofn
