#pragma once
// One host-to-device copy per step: a step's index arrays (token ids, positions, lengths, cache
// row pointers of every layer, block tables, draw indexes) laid out back to back on the host,
// staged through pinned memory and copied with one cudaMemcpyAsync into one device buffer. Before
// this, each layer copied its own small arrays from pageable memory (three synchronous-ish copies
// per layer); with CUDA graphs (--cuda-graphs) the arrays must also sit at addresses that stay the
// same from step to step, which one buffer that only grows gives.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"

namespace bestofn::cuda {

class StepArena {
 public:
  StepArena() = default;
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;
  ~StepArena() {
    if (copied_) cudaEventDestroy(copied_);
  }

  void clear() { host_.clear(); }
  // Appends n values (16-byte aligned); returns their byte offset in the arena.
  template <typename T>
  std::size_t add(const T* p, std::size_t n) {
    const std::size_t off = (host_.size() + 15) / 16 * 16;
    host_.resize(off + n * sizeof(T));
    if (n) std::memcpy(host_.data() + off, p, n * sizeof(T));
    return off;
  }
  template <typename T>
  std::size_t add(const std::vector<T>& v) {
    return add(v.data(), v.size());
  }
  // Copies what was added to the device, ordered on `stream`; the device buffer only grows (by
  // doubling), so its address changes rarely.
  void upload(cudaStream_t stream) {
    const std::size_t n = std::max<std::size_t>(host_.size(), 16);
    if (!copied_) CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventSynchronize(copied_));  // the previous copy has left the pinned buffer
    if (n > pinned_.size()) pinned_.resize(std::max(n, 2 * pinned_.size()));
    // Headroom: the paged block tables grow a little now and then, and each move of this buffer
    // is a new key for the graph cache.
    if (n > dev_.size()) dev_.resize(std::max({n + n / 2, 2 * dev_.size(), std::size_t{4096}}));
    std::memcpy(pinned_.get(), host_.data(), host_.size());
    CUDA_CHECK(cudaMemcpyAsync(dev_.get(), pinned_.get(), host_.size(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(copied_, stream));
  }
  // The device address of the values added at byte offset `off`.
  template <typename T>
  T* at(std::size_t off) const {
    return reinterpret_cast<T*>(dev_.get<char>() + off);
  }
  const void* device_base() const { return dev_.get(); }

 private:
  std::vector<char> host_;
  PinnedBuffer pinned_;
  DeviceBuffer dev_;
  cudaEvent_t copied_ = nullptr;
};

}  // namespace bestofn::cuda
