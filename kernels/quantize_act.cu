// FP8 E4M3 quantization of activation rows, with a dynamic per-row scale or a checkpoint's static
// input_scale: the GPU twin of quantize_fp8_rows (dynamic) and quantize_fp8_row (static),
// bit for bit (fmaxf amax, IEEE division, RNE saturating conversion: see row_ops.cuh).
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// x: (T, n), q: (T, n) E4M3 codes, scales: (T); grid = T, block = kBlock.
__global__ void __launch_bounds__(kBlock)
    kernel_quantize_act_fp8(const float* x, int n, float static_scale, std::uint8_t* q, float* scales) {
  const std::size_t row = blockIdx.x;
  const float* x_row = x + row * static_cast<std::size_t>(n);  // (n)
  const auto value = [&](int c) { return x_row[c]; };
  rowops::quantize_row_fp8(value, n, static_scale, q + row * static_cast<std::size_t>(n), scales + row);
}

void quantize_act_fp8_cuda(const float* x, int T, int n, float static_scale, std::uint8_t* q, float* scales,
                           cudaStream_t stream) {
  rowops::check_count("quantize_act_fp8_cuda", "T", T);
  rowops::check_count("quantize_act_fp8_cuda", "n", n);
  if (T == 0) return;
  kernel_quantize_act_fp8<<<static_cast<unsigned>(T), kBlock, 0, stream>>>(x, n, static_scale, q, scales);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
