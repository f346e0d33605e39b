#pragma once
// Scalar conversions between float and the storage types of checkpoints: BF16, F16, FP8 E4M3/E5M2.
// Float -> narrow conversions round to nearest even. The E4M3 encoder saturates to +-448 and is
// bit-identical to CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), so that the CPU
// reference and the GPU quantize the same way (the numerics contract in docs/architecture.md).
#include <bit>
#include <cmath>
#include <cstdint>

namespace bestofn {

inline constexpr float kFp8E4M3Max = 448.0f;

std::uint8_t fp8_e4m3_from_float(float x);
float fp8_e4m3_to_float(std::uint8_t code);  // exact; NaN for the codes 0x7f and 0xff

// fp8_e4m3_to_float for the finite codes, branch-free so that loops over it vectorize (weights
// never hold the NaN codes): the 7 magnitude bits at float bits 20..26 read as value * 2^-120,
// for normal and subnormal codes alike, and the scale by 2^120 is exact.
inline float fp8_e4m3_to_float_finite(std::uint8_t code) {
  const std::uint32_t bits = (static_cast<std::uint32_t>(code & 0x80u) << 24) | (static_cast<std::uint32_t>(code & 0x7fu) << 20);
  return std::bit_cast<float>(bits) * 0x1p120f;
}
float fp8_e5m2_to_float(std::uint8_t code);

// fp8_e4m3_to_float(fp8_e4m3_from_float(x)) for every non-NaN x, without the detour through the
// code, branch-free so that loops over it vectorize: the CPU engine's activation quantizer.
inline float fp8_e4m3_round(float x) {
  const float ax = std::fabs(x);
  std::uint32_t b = std::bit_cast<std::uint32_t>(ax);
  b = (b + 0x7ffffu + ((b >> 20) & 1u)) & 0xfff00000u;  // keep 3 mantissa bits, ties to even
  const float normal = std::bit_cast<float>(b);
  const float subnormal = std::nearbyint(ax * 512.0f) * 0x1p-9f;  // multiples of 2^-9, ties to even
  const float r = ax < 0x1p-6f ? subnormal : normal;
  return std::copysign(r < kFp8E4M3Max ? r : kFp8E4M3Max, x);  // fmin's result, NaN included, inline
}

inline float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }
// Round to nearest even; NaN stays a quiet NaN with its sign. Inline: the KV cache converts every
// appended element.
inline std::uint16_t bf16_from_float(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

float f16_to_float(std::uint16_t h);
std::uint16_t f16_from_float(float x);

}  // namespace bestofn
