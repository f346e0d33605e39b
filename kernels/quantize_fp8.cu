// FP8 E4M3 quantization with one scale per row: the GPU twin of cpu::quantize_fp8_rows
// (src/cpu/quantize.cpp). One block per row: amax reduction, then per-element conversion.
#include <cuda_fp8.h>

#include <climits>
#include <string>

#include "bestofn/error.h"
#include "bestofn/numeric.h"
#include "cuda/cuda_check.h"
#include "quantize_fp8.cuh"

namespace bestofn::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;

// Max over the block, returned to every thread. Inputs are >= 0 (they are |x|), so 0 is the
// identity. fmaxf is exact and order-independent, so the tree order cannot change the result.
__device__ float block_max(float v) {
  __shared__ float warp_max[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_max[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

}  // namespace

// x: (rows, cols), q: (rows, cols), scales: (rows); grid = rows, block = kBlock.
__global__ void __launch_bounds__(kBlock) kernel_quantize_fp8_rows(const float* x, std::size_t cols,
                                                                   std::uint8_t* q, float* scales) {
  const std::size_t row = blockIdx.x;
  const float* x_row = x + row * cols;  // (cols)
  std::uint8_t* q_row = q + row * cols;  // (cols)

  // amax = max |x| over the row. fmaxf returns the other operand for a NaN, like std::fmax in the
  // CPU reference, so a NaN element never becomes the row's amax.
  float amax = 0.0f;
  for (std::size_t c = threadIdx.x; c < cols; c += kBlock) amax = fmaxf(amax, fabsf(x_row[c]));
  amax = block_max(amax);

  // scale = amax / 448, 1 for an all-zero row (cpu::fp8_row_scale). __fdiv_rn is the IEEE
  // round-to-nearest division whatever -prec-div / -use_fast_math say, as on the CPU.
  const float scale = amax > 0.0f ? __fdiv_rn(amax, kFp8E4M3Max) : 1.0f;
  if (threadIdx.x == 0) scales[row] = scale;

  // q = e4m3(x / scale): a division, not a multiply by 1/scale (the CPU does the same), then
  // round to nearest even, saturating to +-448 (cvt.rn.satfinite on sm_89+).
  for (std::size_t c = threadIdx.x; c < cols; c += kBlock)
    q_row[c] = __nv_cvt_float_to_fp8(__fdiv_rn(x_row[c], scale), __NV_SATFINITE, __NV_E4M3);
}

void quantize_fp8_rows_cuda(const float* d_x, std::size_t rows, std::size_t cols, std::uint8_t* d_q,
                            float* d_scales, cudaStream_t stream) {
  if (rows == 0) return;
  // One block per row; the grid's x dimension holds at most 2^31 - 1 blocks.
  if (rows > static_cast<std::size_t>(INT_MAX))
    throw Error("quantize_fp8_rows_cuda", std::string("expected at most ") + std::to_string(INT_MAX) + " rows, got " +
                                               std::to_string(rows));
  kernel_quantize_fp8_rows<<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(d_x, cols, d_q, d_scales);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
