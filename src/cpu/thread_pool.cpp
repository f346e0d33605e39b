#include "cpu/thread_pool.h"

#include <chrono>

namespace bestofn::cpu {
namespace {
// How long an idle worker polls for the next loop before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(int index) {
  std::size_t seen = 0;
  for (;;) {
    // Poll (reading the clock every 64 polls), then sleep until the generation moves.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (unsigned polls = 1; generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed); ++polls)
      if (polls % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
    if (generation_.load() == seen && !stop_.load()) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);  // before the predicate's check: run() sees it or we see its generation
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::size_t n = n_, parts = static_cast<std::size_t>(size());
    try {
      const std::size_t b = n * static_cast<std::size_t>(index) / parts, e = n * (static_cast<std::size_t>(index) + 1) / parts;
      if (b < e) (*fn_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0) return;
  const std::size_t parts = static_cast<std::size_t>(size());
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  // Workers read fn_, n_ and error_ only after they see the new generation (acquire), and no
  // worker runs between loops: plain stores, published by the generation's move.
  fn_ = &fn;
  n_ = n;
  error_ = nullptr;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // sequentially consistent, as is the read of sleepers_ below and the
                             // workers' increment of it: a worker going to sleep either is counted
                             // here or finds the new generation in its predicate
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }  // a worker between its predicate and its wait holds mu_
    wake_.notify_all();
  }
  std::exception_ptr mine;
  try {
    if (n / parts > 0) fn(0, n / parts);
  } catch (...) {
    mine = std::current_exception();
  }
  while (pending_.load(std::memory_order_acquire) != 0) {
  }
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace bestofn::cpu
