#pragma once
// exp for decode attention's softmax weights: Cephes' expf (range reduction by ln 2 in two parts,
// a degree-6 polynomial, the exponent put in by bit arithmetic), within 2 ulp of exp on
// [-87, 88]. Branch-free plain float arithmetic, written once for a float and for vectors of
// any width (GCC's vector extension: exp_poly_impl; GCC does not vectorize a loop of the scalar
// form by itself), so the
// same bits come out on the vector and scalar paths when built without FMA contraction (the
// engine and its twin are). Arguments below -87 give ~1e-38 rather than a subnormal or 0; NaN
// stays NaN.
#include <bit>
#include <cstdint>

namespace bestofn {

// (Inline only: -Wpsabi's note on passing 64-byte vectors by value does not apply.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float ExpV16 __attribute__((vector_size(64)));
typedef std::int32_t ExpI16 __attribute__((vector_size(64)));

// F: float or ExpV16; I: the integer of the same shape.
template <class F, class I>
inline F exp_poly_impl(F x) {
  x = x < -87.0f ? F{} - 87.0f : x;
  x = x > 88.0f ? F{} + 88.0f : x;
  const F t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: rounds x / ln 2 to an integer
  const F n = t - 12582912.0f;
  const I e = std::bit_cast<I>(t) - 0x4B400000;  // that integer
  F r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = F{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const F y = p * (r * r) + r + 1.0f;
  const I bits = (e + 127) << 23;
  return y * std::bit_cast<F>(bits);
}

inline float exp_poly(float x) { return exp_poly_impl<float, std::int32_t>(x); }
inline ExpV16 exp_poly(ExpV16 x) { return exp_poly_impl<ExpV16, ExpI16>(x); }
#pragma GCC diagnostic pop

}  // namespace bestofn
