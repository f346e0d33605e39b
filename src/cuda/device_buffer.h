#pragma once
// Device memory owned by value: cudaMalloc'd (never managed memory), freed on destruction.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/cuda_check.h"

namespace bestofn::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { resize(bytes); }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Grows (contents not kept) when smaller than `bytes`.
  void resize(std::size_t bytes) {
    if (bytes <= n_) return;
    if (p_) CUDA_CHECK(cudaFree(p_));
    p_ = nullptr;
    n_ = 0;
    CUDA_CHECK(cudaMalloc(&p_, bytes));
    n_ = bytes;
  }
  // Grows keeping the first `keep` bytes (stream-ordered copy).
  void grow(std::size_t bytes, std::size_t keep, cudaStream_t stream) {
    if (bytes <= n_) return;
    DeviceBuffer fresh(bytes);  // freed if the copy below throws
    if (p_ && keep) CUDA_CHECK(cudaMemcpyAsync(fresh.p_, p_, keep, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    *this = std::move(fresh);  // the old buffer goes with `fresh`
  }
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0) {
    CUDA_CHECK(cudaMemcpy(static_cast<char*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice));
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(p_); }
  std::size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

// Page-locked host memory (cudaMallocHost), for copies that run asynchronously; grows only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Grows (contents not kept) when smaller than `bytes`.
  void resize(std::size_t bytes) {
    if (bytes <= n_) return;
    if (p_) CUDA_CHECK(cudaFreeHost(p_));
    p_ = nullptr;
    n_ = 0;
    CUDA_CHECK(cudaMallocHost(&p_, bytes));
    n_ = bytes;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(p_); }
  std::size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace bestofn::cuda
