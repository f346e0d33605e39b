#pragma once
// Scalar conversions between float and the storage types of checkpoints: BF16, F16, FP8 E4M3/E5M2.
// Float -> narrow conversions round to nearest even. The E4M3 encoder saturates to +-448 and is
// bit-identical to CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), so that the CPU
// reference and the GPU quantize the same way (the numerics contract in DESIGN.md).
#include <bit>
#include <cstdint>

namespace bestofn {

inline constexpr float kFp8E4M3Max = 448.0f;

std::uint8_t fp8_e4m3_from_float(float x);
float fp8_e4m3_to_float(std::uint8_t code);  // exact; NaN for the codes 0x7f and 0xff
float fp8_e5m2_to_float(std::uint8_t code);

inline float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }
std::uint16_t bf16_from_float(float x);

float f16_to_float(std::uint16_t h);
std::uint16_t f16_from_float(float x);

}  // namespace bestofn
