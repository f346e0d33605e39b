#include "bestofn/model/quantize.h"

#include <cmath>

#include "bestofn/util/numeric.h"

namespace bestofn {

float fp8_row_scale(float amax) { return amax > 0.0f ? amax / kFp8E4M3Max : 1.0f; }

void quantize_fp8_row(const float* x, std::size_t cols, float scale, std::uint8_t* q) {
  // Division, not a multiply by 1/scale: IEEE division is exactly rounded on both the CPU and
  // the GPU (nvcc's default -prec-div=true), so the two agree bit for bit.
  for (std::size_t c = 0; c < cols; ++c) q[c] = fp8_e4m3_from_float(x[c] / scale);
}

void quantize_fp8_rows(const float* x, std::size_t rows, std::size_t cols, std::uint8_t* q, float* scales) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float amax = 0.0f;
    for (std::size_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    scales[r] = fp8_row_scale(amax);
    quantize_fp8_row(row, cols, scales[r], q + r * cols);
  }
}

}  // namespace bestofn
