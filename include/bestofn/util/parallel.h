#pragma once
#include <cstddef>
#include <functional>
#include <optional>

namespace bestofn {

// The CPUs the calling thread may run on (its affinity mask: taskset, a cpuset), else the
// hardware concurrency; at least 1.
int available_cpus();

// $BESTOFN_THREADS: nullopt when unset or empty, else a whole number from 1 to kMaxThreads
// (bestofn::Error naming the variable otherwise).
inline constexpr int kMaxThreads = 1024;
std::optional<int> threads_from_env();

// Threads used by CPU work: $BESTOFN_THREADS, else available_cpus().
int default_threads();

// The CPU engine's pool for `requested` threads (0: default_threads()), at most available_cpus():
// its workers spin for the next loop, and more of them than CPUs wait on each other's time slices
// (--threads 1024 on 2 CPUs took 40x as long). Results do not depend on the count.
int engine_threads(int requested);

// Calls fn(begin, end) on disjoint chunks covering [0, n), on up to `threads` threads (0: the
// default). Rethrows the first exception a chunk threw, after all chunks finished.
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn, int threads = 0);

}  // namespace bestofn
