#pragma once
// A persistent pool for the CPU engine's parallel loops: a decode step runs ~10 parallel loops per
// layer, so threads are started once, not per loop, and a worker spins briefly for the next loop
// before it sleeps (a condition-variable wake-up costs more than a small loop). The calling
// thread takes part.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bestofn::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) on `size()` contiguous chunks of [0, n); chunk k always covers the same range
  // for the same n, so results never depend on scheduling. Rethrows a chunk's exception.
  void run(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void work(int index);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::exception_ptr error_;
  // What the caller publishes (one cache line, written once per loop), and what the workers
  // write back (another): a worker polling for the next loop does not pull the line the caller
  // is writing, nor the caller the one the workers count down on.
  alignas(64) const std::function<void(std::size_t, std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0;
  std::atomic<std::size_t> generation_{0};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};  // workers asleep on wake_ (else polling): a loop wakes them only if any
};

}  // namespace bestofn::cpu
