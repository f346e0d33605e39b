#pragma once
#include <cstddef>
#include <functional>

namespace bestofn {

// Threads used by CPU work: $BESTOFN_THREADS, else the CPUs the calling thread may run on
// (its affinity mask: taskset, a cpuset), else the hardware concurrency.
int default_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n), on up to `threads` threads (0: the
// default). Rethrows the first exception a chunk threw, after all chunks finished.
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn, int threads = 0);

}  // namespace bestofn
