// FP8 E4M3 quantization with one scale per row: the GPU twin of quantize_fp8_rows
// (src/model/quantize.cpp). One block per row: amax reduction, then per-element conversion.
#include <cuda_fp8.h>

#include <climits>
#include <string>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "cuda/cuda_check.h"
#include "quantize_fp8.cuh"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// x: (rows, cols), q: (rows, cols), scales: (rows); grid = rows, block = kBlock. The row rule
// (amax / 448 with fmaxf, __fdiv_rn, RNE saturating) is rowops::quantize_row_fp8's, shared with
// the activation quantizers.
__global__ void __launch_bounds__(kBlock) kernel_quantize_fp8_rows(const float* x, std::size_t cols,
                                                                   std::uint8_t* q, float* scales) {
  const std::size_t row = blockIdx.x;
  const float* x_row = x + row * cols;  // (cols)
  rowops::quantize_row_fp8([x_row](int c) { return x_row[c]; }, static_cast<int>(cols), 0.0f, q + row * cols, scales + row);
}

void quantize_fp8_rows_cuda(const float* d_x, std::size_t rows, std::size_t cols, std::uint8_t* d_q,
                            float* d_scales, cudaStream_t stream) {
  if (rows == 0) return;
  // One block per row; the grid's x dimension holds at most 2^31 - 1 blocks.
  if (cols > static_cast<std::size_t>(INT_MAX))
    throw Error("quantize_fp8_rows_cuda", "expected at most " + std::to_string(INT_MAX) + " columns, got " + std::to_string(cols));
  if (rows > static_cast<std::size_t>(INT_MAX))
    throw Error("quantize_fp8_rows_cuda", std::string("expected at most ") + std::to_string(INT_MAX) + " rows, got " +
                                               std::to_string(rows));
  kernel_quantize_fp8_rows<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(d_x, cols, d_q, d_scales);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
