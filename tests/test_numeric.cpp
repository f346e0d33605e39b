// Scalar conversions against ml_dtypes / numpy (tests/data/numeric_golden.json, made by
// tools/gen_numeric_golden.py), and E4M3 saturation against CUDA's documented __NV_SATFINITE rule.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>

#include "bestofn/util/numeric.h"
#include "bestofn/model/quantize.h"
#include "test_util.h"

using namespace bestofn;

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json j = nlohmann::json::parse(test::read_text(test::source_path("tests/data/numeric_golden.json")));
  return j;
}

// Golden value: a number, null for NaN, or "inf" / "-inf".
void expect_value(const nlohmann::json& g, float got, const std::string& what) {
  if (g.is_null()) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else if (g.is_string()) {
    EXPECT_TRUE(std::isinf(got) && (got > 0) == (g == "inf")) << what << " got " << got;
  } else {
    EXPECT_EQ(got, g.get<double>()) << what;
  }
}

template <typename Encode>
void check_encode_cases(const char* key, Encode encode) {
  const auto& cases = golden()[key];
  ASSERT_GT(cases.size(), 100u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const float x = std::bit_cast<float>(c[0].get<std::uint32_t>());
    const auto want = c[1].get<std::uint32_t>();
    const auto got = static_cast<std::uint32_t>(encode(x));
    if (got != want && mismatches++ < 10) ADD_FAILURE() << key << ": x=" << x << " want 0x" << std::hex << want << " got 0x" << got;
  }
  EXPECT_EQ(mismatches, 0) << key;
}

}  // namespace

TEST(Fp8E4M3, DecodesAll256CodesLikeMlDtypes) {
  const auto& values = golden()["e4m3_values"];
  ASSERT_EQ(values.size(), 256u);
  for (int code = 0; code < 256; ++code)
    expect_value(values[code], fp8_e4m3_to_float(static_cast<std::uint8_t>(code)), "code " + std::to_string(code));
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // the two NaN codes
    EXPECT_EQ(fp8_e4m3_from_float(fp8_e4m3_to_float(static_cast<std::uint8_t>(code))), code) << "code " << code;
  }
}

TEST(Fp8E4M3, EncodesRoundingBoundariesAndRandomValuesLikeMlDtypes) {
  check_encode_cases("e4m3_encode", fp8_e4m3_from_float);
}

TEST(Fp8E4M3, SaturatesLikeCudaSatfinite) {
  // __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3): out-of-range and infinite inputs clamp
  // to +-448 (0x7e / 0xfe); NaN becomes the NaN code 0x7f.
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e9f, 3.4e38f, INFINITY}) {
    EXPECT_EQ(fp8_e4m3_from_float(x), 0x7e) << x;
    EXPECT_EQ(fp8_e4m3_from_float(-x), 0xfe) << -x;
  }
  EXPECT_EQ(fp8_e4m3_from_float(NAN), 0x7f);
  EXPECT_EQ(fp8_e4m3_from_float(-NAN), 0x7f);
  EXPECT_EQ(fp8_e4m3_from_float(416.0f), 0x7d);  // exactly representable
  EXPECT_EQ(fp8_e4m3_from_float(432.0f), 0x7e);  // the tie between 416 (odd mantissa) and 448 (even) goes to 448
}

TEST(Fp8E5M2, DecodesAll256CodesLikeMlDtypes) {
  const auto& values = golden()["e5m2_values"];
  ASSERT_EQ(values.size(), 256u);
  for (int code = 0; code < 256; ++code)
    expect_value(values[code], fp8_e5m2_to_float(static_cast<std::uint8_t>(code)), "code " + std::to_string(code));
}

TEST(Bf16, EncodesLikeMlDtypes) { check_encode_cases("bf16_encode", bf16_from_float); }

TEST(F16, EncodesLikeNumpy) { check_encode_cases("f16_encode", f16_from_float); }

TEST(F16, DecodesAll65536CodesLikeNumpy) {
  const auto& values = golden()["f16_values"];
  ASSERT_EQ(values.size(), 65536u);
  for (std::uint32_t code = 0; code < 65536; ++code) {
    const float got = f16_to_float(static_cast<std::uint16_t>(code));
    if (values[code].is_number() && got != values[code].get<double>()) {
      ADD_FAILURE() << "code " << code << " want " << values[code] << " got " << got;
      break;
    }
  }
}

TEST(QuantizeFp8Rows, ScaleIsRowAmaxOver448AndCodesMatchTheEncoder) {
  const std::size_t rows = 5, cols = 37;
  auto x = test::random_floats(rows * cols, 11, 3.0f);
  for (std::size_t c = 0; c < cols; ++c) x[2 * cols + c] = 0.0f;  // an all-zero row
  x[4 * cols + 3] = -1234.5f;                                     // an outlier sets its row's scale
  std::vector<std::uint8_t> q(rows * cols);
  std::vector<float> scales(rows);
  quantize_fp8_rows(x.data(), rows, cols, q.data(), scales.data());
  for (std::size_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (std::size_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    EXPECT_EQ(scales[r], amax > 0 ? amax / 448.0f : 1.0f) << "row " << r;
    for (std::size_t c = 0; c < cols; ++c) {
      const float deq = fp8_e4m3_to_float(q[r * cols + c]) * scales[r];
      // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 in the normal range, plus the
      // subnormal spacing 2^-9 * scale near zero.
      EXPECT_NEAR(deq, x[r * cols + c], std::fabs(x[r * cols + c]) / 16.0f + scales[r] * 0x1p-10f) << r << "," << c;
    }
  }
  EXPECT_EQ(fp8_e4m3_to_float(q[4 * cols + 3]), -448.0f);  // the row's amax maps to the top code
}

TEST(Fp8E4M3, RoundEqualsEncodeThenDecode) {
  // The engine's fast path must be the same function as the exact encoder: every code's value,
  // every midpoint and its neighbours, and 4M random float bit patterns (NaN excluded).
  std::vector<float> xs;
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(v)) continue;
    for (float x : {v, std::nextafter(v, INFINITY), std::nextafter(v, -INFINITY)}) xs.push_back(x);
    const float next = fp8_e4m3_to_float(static_cast<std::uint8_t>(c + 1 == 0x7f || c + 1 == 0xff ? c : c + 1));
    const float mid = (v + next) / 2;
    for (float x : {mid, std::nextafter(mid, INFINITY), std::nextafter(mid, -INFINITY)}) xs.push_back(x);
  }
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-45f, 464.0f, 480.0f, 1e30f, INFINITY, -INFINITY, 0x1p-6f, 0x1p-10f}) xs.push_back(x);
  std::uint64_t s = 12345;
  for (int i = 0; i < 4'000'000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(s >> 32));
    if (!std::isnan(x)) xs.push_back(x);
  }
  int bad = 0;
  for (float x : xs) {
    const float want = fp8_e4m3_to_float(fp8_e4m3_from_float(x)), got = fp8_e4m3_round(x);
    if (std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(got) && bad++ < 10)
      ADD_FAILURE() << "x=" << x << " want " << want << " got " << got;
  }
  EXPECT_EQ(bad, 0);
}
