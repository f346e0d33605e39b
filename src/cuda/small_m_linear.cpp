// The host twin of kernels/linear_small_m.cu (src/cuda/small_m_linear.h states the order).
#include "cuda/small_m_linear.h"

#include <array>

#include "bestofn/util/numeric.h"

namespace bestofn::cuda {

bool small_m_linear_fits(int T, int out, int in) {
  return T >= 1 && T <= kSmallMMaxRows && out >= 1 && in >= kSmallMCodes && in % kSmallMCodes == 0;
}

void small_m_linear_twin(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                         const float* bias, int T, int out, int in, float* y, bool accumulate) {
  const auto K = static_cast<std::size_t>(in);
  constexpr std::size_t kStride = static_cast<std::size_t>(kSmallMLanes) * kSmallMCodes;
  for (int t = 0; t < T; ++t) {
    const std::uint8_t* at = a + static_cast<std::size_t>(t) * K;
    for (int o = 0; o < out; ++o) {
      const std::uint8_t* wo = w + static_cast<std::size_t>(o) * K;
      std::array<float, kSmallMLanes> lane{};
      for (std::size_t l = 0; l < static_cast<std::size_t>(kSmallMLanes); ++l)
        for (std::size_t k0 = l * kSmallMCodes; k0 < K; k0 += kStride)
          for (std::size_t j = 0; j < static_cast<std::size_t>(kSmallMCodes); ++j)
            lane[l] += fp8_e4m3_to_float_finite(wo[k0 + j]) * fp8_e4m3_to_float_finite(at[k0 + j]);  // exact product
      for (std::size_t d = kSmallMLanes / 2; d >= 1; d /= 2) {
        std::array<float, kSmallMLanes> next{};
        for (std::size_t l = 0; l < static_cast<std::size_t>(kSmallMLanes); ++l) next[l] = lane[l] + lane[l ^ d];
        lane = next;
      }
      float v = lane[0] * sx[t];
      v = v * sw[per_channel ? o : 0];
      if (bias) v = v + bias[o];
      float& dst = y[static_cast<std::size_t>(t) * static_cast<std::size_t>(out) + static_cast<std::size_t>(o)];
      dst = accumulate ? dst + v : v;
    }
  }
}

}  // namespace bestofn::cuda
