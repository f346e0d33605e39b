// Host side of the CUDA backend that the rest of bestofn calls through cuda/cuda_api.h.
#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "quantize_fp8.cuh"

namespace bestofn::cuda {
namespace {

// A device allocation freed on every path out of its scope. Never a zero-byte allocation, so that
// the pointer is always valid to pass to a kernel.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr_, bytes > 0 ? bytes : 1)); }
  ~DeviceBuffer() { cudaFree(ptr_); }  // an error here is reported by the next checked call
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

std::size_t checked_count(std::size_t rows, std::size_t cols) {
  if (cols != 0 && rows > std::numeric_limits<std::size_t>::max() / sizeof(float) / cols)
    throw Error("quantize_fp8_rows_host", std::string("shape (") + std::to_string(rows) + ", " + std::to_string(cols) +
                                              ") overflows size_t");
  return rows * cols;
}

}  // namespace

std::vector<std::string> list_devices(std::string* error) {
  std::vector<std::string> names;
  try {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess) {
      for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        err = cudaGetDeviceProperties(&prop, i);
        if (err != cudaSuccess) break;
        names.emplace_back(prop.name);
      }
    }
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the error so that later calls do not report it again
      names.clear();
      if (error) *error = cudaGetErrorString(err);
    }
  } catch (const std::exception& e) {  // only std::bad_alloc can get here
    names.clear();
    if (error) *error = e.what();
  }
  return names;
}

int device_capability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // cleared, as list_devices does
    return 0;
  }
  return major * 10 + minor;
}

bool cascade_built() { return cascade_attention_built(); }

void quantize_fp8_rows_host(const float* x, std::size_t rows, std::size_t cols, std::uint8_t* q, float* scales) {
  const std::size_t n = checked_count(rows, cols);
  if (rows == 0) return;
  DeviceBuffer d_x(n * sizeof(float));     // (rows, cols)
  DeviceBuffer d_q(n);                      // (rows, cols)
  DeviceBuffer d_scales(rows * sizeof(float));  // (rows)
  if (n > 0) CUDA_CHECK(cudaMemcpy(d_x.as<float>(), x, n * sizeof(float), cudaMemcpyHostToDevice));
  quantize_fp8_rows_cuda(d_x.as<float>(), rows, cols, d_q.as<std::uint8_t>(), d_scales.as<float>(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());  // execution errors of the kernel surface here
  if (n > 0) CUDA_CHECK(cudaMemcpy(q, d_q.as<std::uint8_t>(), n, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(scales, d_scales.as<float>(), rows * sizeof(float), cudaMemcpyDeviceToHost));
}

}  // namespace bestofn::cuda
