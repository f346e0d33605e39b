#pragma once
// Device and pinned host memory owned by value, grow-only, freed on destruction.
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <utility>

#include "cuda/cuda_check.h"

namespace bestofn::cuda {

// Every device or pinned allocation and free made through these wrappers, and every host wait on
// the device through sync_stream / wait_event (and DeviceBuffer's own): what a run must not do
// inside its steps (EngineStatistics::device_counts; tests/test_gpu_engine.cpp checks a run).
struct DeviceCounters {
  std::atomic<long long> allocs{0}, frees{0}, syncs{0};
};
inline DeviceCounters& device_counters() {
  static DeviceCounters c;
  return c;
}
inline void sync_stream(cudaStream_t stream) {
  device_counters().syncs++;
  CUDA_CHECK(cudaStreamSynchronize(stream));
}
// Waits for an event; a wait only when it has not happened yet.
inline void wait_event(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaSuccess) return;
  if (q != cudaErrorNotReady) CUDA_CHECK(q);
  device_counters().syncs++;
  CUDA_CHECK(cudaEventSynchronize(e));
}

// A grow-only buffer owned by value, from the allocator Alloc (device or pinned host memory),
// freed on destruction.
template <class Alloc>
class BasicBuffer {
 public:
  BasicBuffer() = default;
  explicit BasicBuffer(std::size_t bytes) { resize(bytes); }
  ~BasicBuffer() {
    if (p_) Alloc::release(p_);
  }
  BasicBuffer(BasicBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  BasicBuffer& operator=(BasicBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  BasicBuffer(const BasicBuffer&) = delete;
  BasicBuffer& operator=(const BasicBuffer&) = delete;

  // Grows (contents not kept) when smaller than `bytes`.
  void resize(std::size_t bytes) {
    if (bytes <= n_) return;
    if (p_) CUDA_CHECK(Alloc::release(p_));
    p_ = nullptr;
    n_ = 0;
    CUDA_CHECK(Alloc::allocate(&p_, bytes));
    n_ = bytes;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(p_); }
  std::size_t size() const { return n_; }

 protected:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

struct DeviceAlloc {  // cudaMalloc'd, never managed memory
  static cudaError_t allocate(void** p, std::size_t bytes) { return device_counters().allocs++, cudaMalloc(p, bytes); }
  static cudaError_t release(void* p) { return device_counters().frees++, cudaFree(p); }
};
struct PinnedAlloc {  // page-locked host memory, for copies that run asynchronously
  static cudaError_t allocate(void** p, std::size_t bytes) { return device_counters().allocs++, cudaMallocHost(p, bytes); }
  static cudaError_t release(void* p) { return device_counters().frees++, cudaFreeHost(p); }
};

// Device memory, with a growth that keeps contents and host uploads.
class DeviceBuffer : public BasicBuffer<DeviceAlloc> {
 public:
  using BasicBuffer::BasicBuffer;
  // Grows keeping the first `keep` bytes (stream-ordered copy).
  void grow(std::size_t bytes, std::size_t keep, cudaStream_t stream) {
    if (bytes <= n_) return;
    DeviceBuffer fresh(bytes);  // freed if the copy below throws
    if (p_ && keep) CUDA_CHECK(cudaMemcpyAsync(fresh.p_, p_, keep, cudaMemcpyDeviceToDevice, stream));
    sync_stream(stream);
    *this = std::move(fresh);  // the old buffer goes with `fresh`
  }
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0) {  // pageable, synchronous: counted
    device_counters().syncs++;
    CUDA_CHECK(cudaMemcpy(static_cast<char*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice));
  }
};

using PinnedBuffer = BasicBuffer<PinnedAlloc>;

}  // namespace bestofn::cuda
