#pragma once
// Host side, shared by the launchers whose kernels need a device feature (linear_small_m.cu's
// programmatic dependent launch, linear_fp8_mma.cu's FP8 tensor-core products): whether the
// current device runs a kernel as code built for at least a compute capability. Include from .cu
// files only.
#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace bestofn::cuda::support {

constexpr int kMaxDevices = 64;  // answers cached per device id below this
using Answers = std::array<std::atomic<int>, kMaxDevices>;  // per device: 0 unknown, 1 yes, 2 no

// Whether the current device has compute capability >= arch (major x 10 + minor) and runs
// `kernel` from code built for >= arch: its binary and its PTX (a JIT of older PTX would lack the
// instructions the kernel needs). Cached in `answers`, one array per kernel family.
inline bool runs_as_built_for(const void* kernel, int arch, Answers& answers) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached && answers[static_cast<std::size_t>(device)].load() != 0) return answers[static_cast<std::size_t>(device)].load() == 1;
  int major = 0, minor = 0;
  cudaFuncAttributes attr{};
  bool ok = false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
      cudaFuncGetAttributes(&attr, kernel) == cudaSuccess)
    ok = major * 10 + minor >= arch && attr.binaryVersion >= arch && attr.ptxVersion >= arch;
  else
    cudaGetLastError();
  if (cached) answers[static_cast<std::size_t>(device)].store(ok ? 1 : 2);
  return ok;
}

}  // namespace bestofn::cuda::support
