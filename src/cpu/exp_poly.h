#pragma once
// exp for decode attention's softmax weights: Cephes' expf (range reduction by ln 2 in two parts,
// a degree-6 polynomial, the exponent put in by bit arithmetic), within 2 ulp of exp on
// [-87, 88]. Branch-free plain float arithmetic, so a loop of it vectorizes (libm's expf does
// not), and the same bits come out on the vector and scalar paths when built without FMA
// contraction (the engine and its twin are). Arguments below -87 give ~1e-38 rather than a
// subnormal or 0; NaN stays NaN.
#include <bit>
#include <cstdint>

namespace bestofn::cpu {

inline float exp_poly(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: rounds x / ln 2 to an integer
  const float n = t - 12582912.0f;
  const std::int32_t e = std::bit_cast<std::int32_t>(t) - 0x4B400000;  // that integer
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  return y * std::bit_cast<float>((e + 127) << 23);
}

}  // namespace bestofn::cpu
