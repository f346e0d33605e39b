#pragma once
// Shared by the gpu-labelled tests: skipping without a device, and device buffers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_api.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"

#define SKIP_WITHOUT_GPU()                                                                     \
  do {                                                                                         \
    std::string why_;                                                                          \
    if (::bestofn::cuda::list_devices(&why_).empty()) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

namespace bestofn::test {

template <typename T>
cuda::DeviceBuffer to_gpu(const std::vector<T>& host) {
  cuda::DeviceBuffer b(std::max<std::size_t>(host.size() * sizeof(T), 1));
  if (!host.empty()) b.upload(host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> from_gpu(const cuda::DeviceBuffer& b, std::size_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace bestofn::test
