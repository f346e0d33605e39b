#pragma once
// Host launcher of kernels/quantize_fp8.cu. Includable from plain C++ (no device code here), so
// that src/cuda/*.cpp can call it with the host compiler.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace bestofn::cuda {

// GPU twin of quantize_fp8_rows (include/bestofn/model/quantize.h), bit for bit.
// d_x: (rows, cols) float, row-major, on the device. d_q: (rows, cols) E4M3 codes. d_scales: (rows).
// Asynchronous on `stream`; launch errors throw bestofn::Error, execution errors surface at the
// next synchronizing call.
void quantize_fp8_rows_cuda(const float* d_x, std::size_t rows, std::size_t cols, std::uint8_t* d_q,
                            float* d_scales, cudaStream_t stream);

}  // namespace bestofn::cuda
