#pragma once
// FP8 E4M3 quantization, one scale per row: the CPU reference (the oracle for the GPU twin in
// kernels/quantize_fp8.cu). Used for online quantization of weights at load (a row = an output
// channel) and, later, for dynamic per-token activation quantization (a row = a token).
//   scale[r] = amax(|x[r, :]|) / 448   (1.0 when the row is all zeros)
//   q[r, c]  = fp8_e4m3(x[r, c] / scale[r])   round to nearest even, saturating
#include <cstddef>
#include <cstdint>

namespace bestofn {

// x: (rows, cols) float, row-major. q: (rows, cols) E4M3 codes. scales: (rows).
void quantize_fp8_rows(const float* x, std::size_t rows, std::size_t cols, std::uint8_t* q, float* scales);

// The per-row scale rule alone, so that callers that hold a row in another dtype agree exactly.
float fp8_row_scale(float amax);

// Quantize one row with a given scale.
void quantize_fp8_row(const float* x, std::size_t cols, float scale, std::uint8_t* q);

}  // namespace bestofn
