#include "bestofn/util/parallel.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bestofn/util/error.h"

namespace bestofn {

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::optional<int> threads_from_env() {
  const char* env = std::getenv("BESTOFN_THREADS");
  if (!env || !*env) return std::nullopt;
  const std::string s = env;
  const bool digits = s.size() <= 4 && s.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::stoi(s) : 0;
  if (n < 1 || n > kMaxThreads)
    throw Error("$BESTOFN_THREADS", "must be a whole number of threads from 1 to " + std::to_string(kMaxThreads) + ", not '" + s + "'");
  return n;
}

int default_threads() {
  if (const auto n = threads_from_env()) return *n;
  // The CPUs this thread may run on, not every CPU of the machine: spinning workers on fewer
  // cores than threads wait on each other's time slices.
  return available_cpus();
}

int engine_threads(int requested) { return std::min(requested > 0 ? requested : default_threads(), available_cpus()); }

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
