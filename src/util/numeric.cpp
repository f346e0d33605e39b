#include "bestofn/util/numeric.h"

#include <cmath>
#include <limits>

namespace bestofn {
namespace {

// Round the integer `value` right by `shift` bits, to nearest, ties to even.
std::uint32_t shift_round_even(std::uint32_t value, int shift) {
  if (shift <= 0) return value;
  if (shift > 31) return 0;
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rem = value & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  return kept + ((rem > half || (rem == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

std::uint8_t fp8_e4m3_from_float(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7f;                   // NaN: CUDA gives 0x7f, sign dropped
  if (abs_bits >= 0x43e00000u) return sign | 0x7eu;          // |x| >= 448 (and inf): saturate
  const int exp = static_cast<int>(abs_bits >> 23) - 127;    // unbiased float exponent
  const std::uint32_t mant = abs_bits & 0x7fffffu;
  if (exp >= -6) {
    // Normal E4M3: keep 3 of 23 mantissa bits. A carry out of the mantissa bumps the exponent,
    // which is exactly right; it cannot pass 448 here because |x| < 448.
    const std::uint32_t base = (static_cast<std::uint32_t>(exp + 7) << 3) | (mant >> 20);
    const std::uint32_t code = shift_round_even((base << 20) | (mant & 0xfffffu), 20);
    return sign | static_cast<std::uint8_t>(code);
  }
  if ((abs_bits >> 23) == 0) return sign;                     // float subnormal or zero -> 0
  // Subnormal E4M3: the value in units of 2^-9 is (1.mant) * 2^(exp+9), i.e. (mant|1<<23) >> (14-exp).
  const std::uint32_t code = shift_round_even(mant | 0x800000u, 14 - exp);
  return sign | static_cast<std::uint8_t>(code);
}

float fp8_e4m3_to_float(std::uint8_t code) {
  if ((code & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  return fp8_e4m3_to_float_finite(code);
}

float fp8_e5m2_to_float(std::uint8_t code) {
  // E5M2 is the top byte of an IEEE half.
  return f16_to_float(static_cast<std::uint16_t>(code << 8));
}

float f16_to_float(std::uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f)
    return mant ? std::numeric_limits<float>::quiet_NaN() : sign * std::numeric_limits<float>::infinity();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 1024.0f, exp - 15);
}

std::uint16_t f16_from_float(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;          // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;         // >= 65520 rounds to inf
  const int exp = static_cast<int>(abs_bits >> 23) - 127;
  const std::uint32_t mant = abs_bits & 0x7fffffu;
  if (exp >= -14) {
    const std::uint32_t base = (static_cast<std::uint32_t>(exp + 15) << 10) | (mant >> 13);
    return sign | static_cast<std::uint16_t>(shift_round_even((base << 13) | (mant & 0x1fffu), 13));
  }
  if ((abs_bits >> 23) == 0) return sign;
  // Subnormal half: units of 2^-24, (1.mant) * 2^(exp+24) = (mant|1<<23) >> (-1-exp).
  return sign | static_cast<std::uint16_t>(shift_round_even(mant | 0x800000u, -1 - exp));
}

}  // namespace bestofn
