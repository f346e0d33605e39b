#pragma once
// Two CUDA events that bracket work on a stream (measure_ceilings, GEMM autotuning), destroyed on
// every path out.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"

namespace bestofn::cuda {

class EventPair {
 public:
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start_));
    if (const cudaError_t err = cudaEventCreate(&stop_); err != cudaSuccess) {
      cudaEventDestroy(start_);
      CUDA_CHECK(err);
    }
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;

  void start(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(start_, s)); }
  void stop(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(stop_, s)); }
  // Waits for the stop event; the milliseconds between the two.
  float elapsed_ms() {
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace bestofn::cuda
