#pragma once
// Host references shared by the --cascade-attention rows of the GPU op table
// (tests/test_gpu_ops_cascade.cpp, tests/test_gpu_ops_cascade_suffix.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cuda/cuda_check.h"

namespace bestofn::gpu_ops {

// Host softmax state of query q (hd) over n rows of one KV head (BF16 rows of kv_dim, head at
// `off`): the log-sum-exp of the scaled scores, in double (-inf for no rows).
inline double host_lse(const float* q, const std::uint16_t* rows, int n, std::size_t kv_dim, std::size_t off, int hd) {
  if (n <= 0) return -INFINITY;
  const double scale = 1.0f / std::sqrt(static_cast<float>(hd));  // the kernels' fp32 scale
  std::vector<double> s(static_cast<std::size_t>(n));
  for (std::size_t j = 0; j < s.size(); ++j) {
    double dot = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(hd); ++i) dot += static_cast<double>(q[i]) * bf16_to_float(rows[j * kv_dim + off + i]);
    s[j] = dot * scale;
  }
  const double m = *std::max_element(s.begin(), s.end());
  double l = 0;
  for (double v : s) l += std::exp(v - m);
  return m + std::log(l);
}

template <typename T>
std::vector<T> download(const T* dev, std::size_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace bestofn::gpu_ops
