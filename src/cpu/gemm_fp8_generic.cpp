// The FP8 GEMM's generic path (the order it shares with the others is in gemm_fp8.h).
//
// Generic path: the same sums in the same order with fp32 vectors of 16 lanes, one row each (GCC
// vector extension), on the strip widened to floats; each product is exact, so a fused or a
// separate multiply-add rounds the same.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cpu/gemm_fp8_paths.h"

namespace bestofn::cpu::fp8 {
namespace {

typedef float Vec __attribute__((vector_size(kStrip * sizeof(float))));

const std::array<float, 256>& code_values() {
  static const auto t = [] {
    std::array<float, 256> a{};
    for (unsigned c = 0; c < 256; ++c) a[c] = fp8_e4m3_to_float_finite(static_cast<std::uint8_t>(c));
    return a;
  }();
  return t;
}

// The scaled (or raw) sums of lanes [0, rows) of acc into y.
inline void store_row(const float* acc, std::size_t rows, float* y, const float* ts, const float* rs, std::size_t row_scales) {
  for (std::size_t j = 0; j < rows; ++j)
    y[j] = ts ? acc[j] * *ts * rs[row_scales == 1 ? 0 : j] : acc[j];
}

}  // namespace

// x: the generic layout, floats held in 16-bit words (pack_activations), read by memcpy.
void dot_strips_generic(const std::uint8_t* pw, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                        const std::uint16_t* x, std::size_t T, float* y, std::size_t ys, const float* ts, const float* rs,
                        std::size_t row_scales) {
  const std::size_t pin = padded(in), quads = pin / kQuad;
  const auto& value = code_values();
  thread_local std::vector<Vec> wv;  // (quad, d): the 16 rows' weights for input 4q + d
  wv.resize(quads * kQuad);
  for (std::size_t s = s0; s < s1; ++s) {
    const std::uint8_t* sw = pw + s * strip_bytes(in);
    for (std::size_t q = 0; q < quads; ++q)
      for (std::size_t b = 0; b < kBlock; ++b) wv[q * kQuad + kPlaces[b].d][kPlaces[b].row] = value[sw[q * kBlock + b]];
    const std::size_t r0 = s * kStrip, rows = std::min(kStrip, out - r0);
    for (std::size_t t = 0; t < T; ++t) {
      const std::uint16_t* xt = x + t * 2 * pin;
      Vec acc = {};
      for (std::size_t q = 0; q < quads; ++q) {
        const Vec* w = &wv[q * kQuad];
        float xk[kQuad];
        std::memcpy(xk, xt + 2 * q * kQuad, sizeof xk);
        acc += w[1] * xk[1];
        acc += w[0] * xk[0];
        acc += w[3] * xk[3];
        acc += w[2] * xk[2];
      }
      float lanes[kStrip];
      std::memcpy(lanes, &acc, sizeof lanes);
      store_row(lanes, rows, y + t * ys + r0, ts ? ts + t : nullptr, rs ? (row_scales == 1 ? rs : rs + r0) : nullptr, row_scales);
    }
  }
}

}  // namespace bestofn::cpu::fp8
