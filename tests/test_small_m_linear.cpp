// --small-m-linear's host twin (src/cuda/small_m_linear.h) without a GPU: its order on sums that
// are exact whatever the order, its lanes and butterfly on sums that are not, and the bound that
// ties it to cpu::linear (the CPU engine's FP8 linear: the same exact products, its own order);
// tests/test_gpu_ops.cpp (the linear_fp8_small_m_cuda row) compares the kernel with this twin bit for
// bit on a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bestofn/model/quantize.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/numeric.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {
namespace {

// Finite E4M3 codes (no 0x7f / 0xff: a checkpoint holds no NaN weights).
std::vector<std::uint8_t> codes(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint8_t> c(n);
  for (auto& v : c) {
    v = static_cast<std::uint8_t>(rng() % 256);
    if ((v & 0x7f) == 0x7f) v = static_cast<std::uint8_t>(v - 1);
  }
  return c;
}

TEST(SmallMLinear, FitsOneToEightTokensAndInputsOfSixteen) {
  EXPECT_TRUE(small_m_linear_fits(1, 1, 16));
  EXPECT_TRUE(small_m_linear_fits(8, 4096, 14336));
  EXPECT_FALSE(small_m_linear_fits(0, 4096, 4096));
  EXPECT_FALSE(small_m_linear_fits(9, 4096, 4096));  // cuBLASLt's GEMM from 9 rows on
  EXPECT_FALSE(small_m_linear_fits(1, 4096, 4104));  // not a multiple of 16
  EXPECT_FALSE(small_m_linear_fits(1, 0, 4096));
}

// Small integer products: every partial sum is exact, so the twin gives the exact sum, scaled and
// biased as stated (one rounding each), at every T, with inputs that end mid-load-round.
TEST(SmallMLinear, ExactSumsThenTheScalesAndTheBias) {
  const int out = 5;
  for (const int in : {16, 48, 512, 528, 1040}) {
    for (int T = 1; T <= kSmallMMaxRows; ++T) {
      std::vector<std::uint8_t> w(static_cast<std::size_t>(out * in)), a(static_cast<std::size_t>(T * in));
      std::vector<double> exact(static_cast<std::size_t>(T * out), 0.0);
      // Codes of 1, 2, -1, -2 (0x38, 0x40, 0xb8, 0xc0).
      const std::uint8_t vals[] = {0x38, 0x40, 0xb8, 0xc0};
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = vals[(i * 7 + 3) % 4];
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = vals[(i * 5 + 1) % 4];
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o)
          for (int k = 0; k < in; ++k)
            exact[static_cast<std::size_t>(t * out + o)] +=
                static_cast<double>(fp8_e4m3_to_float(w[static_cast<std::size_t>(o * in + k)])) * fp8_e4m3_to_float(a[static_cast<std::size_t>(t * in + k)]);
      std::vector<float> sx(static_cast<std::size_t>(T)), sw(out), bias(out), y(static_cast<std::size_t>(T * out));
      for (int t = 0; t < T; ++t) sx[static_cast<std::size_t>(t)] = 0.013f * static_cast<float>(t + 1);
      for (int o = 0; o < out; ++o) sw[static_cast<std::size_t>(o)] = 0.7f / static_cast<float>(o + 3), bias[static_cast<std::size_t>(o)] = 0.1f * static_cast<float>(o);
      small_m_linear_twin(w.data(), a.data(), sx.data(), sw.data(), true, bias.data(), T, out, in, y.data());
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          const std::size_t i = static_cast<std::size_t>(t * out + o);
          volatile float v = static_cast<float>(exact[i]);  // exact: |sum| <= 4 in < 2^24
          v = v * sx[static_cast<std::size_t>(t)];
          v = v * sw[static_cast<std::size_t>(o)];
          v = v + bias[static_cast<std::size_t>(o)];
          EXPECT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(static_cast<float>(v))) << "in " << in << " T " << T;
        }
      // accumulate: the residual stream plus the same value, one rounded add.
      std::vector<float> x(y.size()), want(y.size());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1000.0f + 0.37f * static_cast<float>(i), want[i] = x[i] + y[i];
      small_m_linear_twin(w.data(), a.data(), sx.data(), sw.data(), true, bias.data(), T, out, in, x.data(), true);
      EXPECT_EQ(x, want) << "in " << in << " T " << T;
    }
  }
}

// Where the order shows: lane 0 holds 2^16 (k = 0) and lane 1 sixteen products of 2^-9 (k = 16..31),
// each under half an ulp of 2^16. Summed in k order they are lost one by one (2^16); summed per lane
// first, lane 1 gives 2^-5 exactly and the butterfly 2^16 + 2^-5: the contract's order.
TEST(SmallMLinear, LanesSumTheirOwnCodesThenTheButterfly) {
  const int in = 32;
  std::vector<std::uint8_t> w(in, 0x38), a(in, 0x00);  // weights 1, activations 0
  a[0] = 0x78, w[0] = 0x78;                             // 2^8 x 2^8 = 2^16
  for (int k = 16; k < 32; ++k) a[static_cast<std::size_t>(k)] = 0x01;  // the least subnormal, 2^-9
  const float one = 1.0f;
  float y = 0;
  small_m_linear_twin(w.data(), a.data(), &one, &one, false, nullptr, 1, 1, in, &y);
  EXPECT_EQ(y, 65536.0f + 0x1p-5f);
  float straight = 0;
  for (int k = 0; k < in; ++k) straight += fp8_e4m3_to_float(w[static_cast<std::size_t>(k)]) * fp8_e4m3_to_float(a[static_cast<std::size_t>(k)]);
  EXPECT_EQ(straight, 65536.0f);
}

// The butterfly's pairing: lane 0 sums 2^24 (sixteen rounds of sixteen products of 2^16, exact),
// lanes 1..31 one product of 1 each. Lane l meets lane l ^ d for d = 16, 8, 4, 2, 1: lane 0 + lane 16
// loses its 1 (2^24 + 1 rounds to even), then gains 2, 4, 8, 16: 2^24 + 30. Lanes added in order
// 0, 1, 2, ... would lose every 1 (2^24); the exact sum is 2^24 + 31.
TEST(SmallMLinear, TheButterflyPairsLaneLWithLaneLXorD) {
  const int in = 8192;
  std::vector<std::uint8_t> w(in, 0x38), a(in, 0x00);
  for (int round = 0; round < in / 512; ++round)
    for (int j = 0; j < 16; ++j) w[static_cast<std::size_t>(round * 512 + j)] = 0x78, a[static_cast<std::size_t>(round * 512 + j)] = 0x78;
  for (int lane = 1; lane < 32; ++lane) a[static_cast<std::size_t>(lane * 16)] = 0x38;  // 1 x 1 in round 0
  const float one = 1.0f;
  float y = 0;
  small_m_linear_twin(w.data(), a.data(), &one, &one, false, nullptr, 1, 1, in, &y);
  EXPECT_EQ(y, 16777216.0f + 30.0f);
  float in_order = 16777216.0f;
  for (int lane = 1; lane < 32; ++lane) in_order += 1.0f;
  EXPECT_EQ(in_order, 16777216.0f);
}

// Against cpu::linear, the CPU engine's FP8 linear on the same activations (quantized as it
// quantizes them): both sum the same exact products, each in its own order, so |twin - cpu| <=
// 2 gamma_K sum |w a| (times the scales), plus the two final roundings of each.
// cpu::linear against a twin (called as twin(w, a, sx, sw, per_channel, T, out, in, y)) on random
// codes: within 2 gamma_K sum |w a| (times the scales) plus the two final roundings of each.
template <typename Twin>
void expect_within_cpu_roundings(int out, int in, int T, bool per_channel, std::mt19937& rng, Twin twin) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  cpu::ThreadPool pool(1);
  const auto w = codes(static_cast<std::size_t>(out * in), rng);
  Linear l;
  l.weight = Tensor{"w", DType::F8_E4M3, {out, in}, w.data(), w.size()};
  for (int o = 0; o < (per_channel ? out : 1); ++o) l.weight_scale.push_back(std::fabs(u(rng)) * 1e-3f + 1e-4f);
  std::vector<float> x(static_cast<std::size_t>(T * in));
  for (auto& v : x) v = u(rng);
  std::vector<float> y_cpu(static_cast<std::size_t>(T * out)), y(static_cast<std::size_t>(T * out));
  cpu::linear(l, x.data(), static_cast<std::size_t>(T), y_cpu.data(), pool);
  std::vector<std::uint8_t> a(x.size());
  std::vector<float> sx(static_cast<std::size_t>(T));
  quantize_fp8_rows(x.data(), static_cast<std::size_t>(T), static_cast<std::size_t>(in), a.data(), sx.data());
  twin(w.data(), a.data(), sx.data(), l.weight_scale.data(), per_channel, T, out, in, y.data());
  const double gamma = in * 0x1p-24 / (1 - in * 0x1p-24);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < out; ++o) {
      double mag = 0;
      for (int k = 0; k < in; ++k)
        mag += std::fabs(static_cast<double>(fp8_e4m3_to_float(w[static_cast<std::size_t>(o * in + k)])) *
                         fp8_e4m3_to_float(a[static_cast<std::size_t>(t * in + k)]));
      const double scale = static_cast<double>(sx[static_cast<std::size_t>(t)]) * l.weight_scale[per_channel ? static_cast<std::size_t>(o) : 0];
      const std::size_t i = static_cast<std::size_t>(t * out + o);
      const double bound = 2 * gamma * mag * scale * 1.0000005 + 4 * 0x1p-24 * std::fabs(static_cast<double>(y_cpu[i]));
      EXPECT_LE(std::fabs(static_cast<double>(y[i]) - y_cpu[i]), bound) << "in " << in << " [" << t << ", " << o << "]";
    }
}

TEST(SmallMLinear, WithinTheAdditionsRoundingsOfTheCpuEngine) {
  std::mt19937 rng(17);
  for (const int in : {64, 528, 4096})
    for (const bool per_channel : {true, false})
      expect_within_cpu_roundings(37, in, 5, per_channel, rng,
                                  [](const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool pc, int T, int out,
                                     int in_, float* y) { small_m_linear_twin(w, a, sx, sw, pc, nullptr, T, out, in_, y); });
}

// The prologue's sum of squares in the block's order (rowops::inv_rms): 256 thread partials, each
// warp's butterfly, then the 8 warp sums'. x = (4096, 1 x 31): left to right every 1 is lost
// (2^24 + 1 rounds to 2^24, ties to even), so the CPU engine's sum is 2^24. In the butterfly lane 0
// adds lane 16's 1 to 2^24 first (lost), then lanes 8, 4, 2, 1 bring 2, 4, 8, 16 (sums of ones,
// exact): 2^24 + 30. Hand-derived, and the two orders give different 1/rms.
TEST(SmallMLinear, PrologueSumsSquaresInTheBlocksOrder) {
  const float eps = 1e-5f;
  std::vector<float> x(32, 1.0f);
  x[0] = 4096.0f;
  const float tree = 1.0f / std::sqrt((0x1p24f + 30.0f) / 32.0f + eps), left_to_right = 1.0f / std::sqrt(0x1p24f / 32.0f + eps);
  ASSERT_NE(tree, left_to_right);  // the case tells the two orders apart
  EXPECT_EQ(small_m_inv_rms_twin(x.data(), 32, eps), tree);
  // Thread 0 also sums x[256]^2 after x[0]^2 (its stride): 2^24 + 1, rounded to 2^24, lost.
  x.resize(257, 0.0f);
  x[256] = 1.0f;
  EXPECT_EQ(small_m_inv_rms_twin(x.data(), 257, eps), 1.0f / std::sqrt((0x1p24f + 30.0f) / 257.0f + eps));
}

// The prologue's codes against the CPU engine's (cpu::rmsnorm, then quantize_fp8_rows / _row): the
// sums of squares differ in order only (each within gamma_in of the exact sum), so the row scales
// agree within (in + 8) u and a code differs by at most one E4M3 step, rarely. (Without a norm
// the twin is quantize_fp8_rows itself; the device row checks the kernel against it.)
TEST(SmallMLinear, PrologueCodesAreTheCpuEnginesWithinTheNormsOrder) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  cpu::ThreadPool pool(1);
  for (const int in : {16, 576, 4096}) {
    const int T = 3;
    const auto n = static_cast<std::size_t>(T * in);
    std::vector<float> x(n), g(static_cast<std::size_t>(in));
    for (auto& v : x) v = u(rng);
    for (auto& v : g) v = u(rng);
    for (const float static_scale : {0.0f, 0.01f}) {
      std::vector<std::uint8_t> codes(n), want(n);
      std::vector<float> scales(T), want_s(T, static_scale);
      const Tensor gt{"g", DType::F32, {in}, reinterpret_cast<const std::uint8_t*>(g.data()), g.size() * 4};
      std::vector<float> normed(n);
      cpu::rmsnorm(normed.data(), x.data(), gt, static_cast<std::size_t>(T), static_cast<std::size_t>(in), 1e-5f);
      if (static_scale > 0)
        for (int t = 0; t < T; ++t)
          quantize_fp8_row(normed.data() + static_cast<std::size_t>(t * in), static_cast<std::size_t>(in), static_scale, want.data() + static_cast<std::size_t>(t * in));
      else
        quantize_fp8_rows(normed.data(), static_cast<std::size_t>(T), static_cast<std::size_t>(in), want.data(), want_s.data());
      small_m_prologue_twin(x.data(), g.data(), T, in, 1e-5f, static_scale, codes.data(), scales.data());
      for (int t = 0; t < T; ++t)
        EXPECT_LE(std::fabs(scales[static_cast<std::size_t>(t)] - want_s[static_cast<std::size_t>(t)]),
                  (in + 8) * 0x1p-24 * want_s[static_cast<std::size_t>(t)]);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (codes[i] == want[i]) continue;
        ++differ;
        EXPECT_EQ(codes[i] & 0x80, want[i] & 0x80) << "in " << in << " [" << i << "]: the sign";
        EXPECT_EQ(std::abs((codes[i] & 0x7f) - (want[i] & 0x7f)), 1) << "in " << in << " [" << i << "]";
      }
      EXPECT_LE(differ, n / 50 + 1) << "in " << in;
    }
  }
}

TEST(SmallMLinear, TensorCoresTakeNineToSixtyFourRowsAndEnoughSlices) {
  EXPECT_TRUE(small_m_mma_fits(9, 16, 64));
  EXPECT_TRUE(small_m_mma_fits(64, 28672, 4096));
  EXPECT_FALSE(small_m_mma_fits(8, 4096, 4096));   // the CUDA-core kernel's
  EXPECT_FALSE(small_m_mma_fits(65, 4096, 4096));  // cuBLASLt's
  EXPECT_FALSE(small_m_mma_fits(16, 4104, 4096));  // out not a multiple of 16
  EXPECT_FALSE(small_m_mma_fits(16, 4096, 4112));  // in not a multiple of 64
  // About 16 warps per SM: o_proj's 256 row groups on 132 SMs take 8 slices, gate/up's 1792 two.
  EXPECT_EQ(small_m_mma_slices(4096, 4096, 132), 8);
  EXPECT_EQ(small_m_mma_slices(28672, 4096, 132), 2);
  EXPECT_EQ(small_m_mma_slices(128256, 4096, 132), 1);
  EXPECT_EQ(small_m_mma_slices(4096, 128, 132), 2);  // never more than the 64-wide chunks
  EXPECT_EQ(small_m_mma_workspace_floats(9, 32, 3), 3u * 16 * 32);
  EXPECT_EQ(small_m_mma_workspace_floats(64, 32, 1), 0u);
}

// The tensor-core contract's structure: with small integer products every sum is exact whatever
// its grouping, so the twin gives the exact result at every slice count (no product or chunk
// dropped or counted twice), then the scales and bias as stated.
TEST(SmallMLinear, TensorCoreTwinSumsEveryProductOnceInEverySlicing) {
  const int out = 32, in = 576, T = 17;
  std::vector<std::uint8_t> w(static_cast<std::size_t>(out * in)), a(static_cast<std::size_t>(T * in));
  const std::uint8_t vals[] = {0x38, 0x40, 0xb8, 0xc0, 0x30};  // 1, 2, -1, -2, 0.5
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = vals[(i * 7 + 3) % 5];
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = vals[(i * 11 + 1) % 5];
  std::vector<float> sx(T, 0.25f), sw(out, 2.0f), bias(out, 0.0f), y(static_cast<std::size_t>(T * out));
  for (int o = 0; o < out; ++o) bias[static_cast<std::size_t>(o)] = 0.5f * static_cast<float>(o);
  for (const int slices : {1, 2, 3, 9}) {
    small_m_mma_twin(w.data(), a.data(), sx.data(), sw.data(), true, bias.data(), T, out, in, slices, y.data());
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < out; ++o) {
        double exact = 0;
        for (int k = 0; k < in; ++k)
          exact += static_cast<double>(fp8_e4m3_to_float(w[static_cast<std::size_t>(o * in + k)])) * fp8_e4m3_to_float(a[static_cast<std::size_t>(t * in + k)]);
        EXPECT_EQ(y[static_cast<std::size_t>(t * out + o)], static_cast<float>(exact * 0.25 * 2.0 + 0.5 * o)) << slices << " slices [" << t << ", " << o << "]";
      }
  }
}

// Against the CPU engine's FP8 linear (cpu::linear: the same exact products, its own order): the
// twin's roundings are one per 32 products plus one per chunk and slice, so |twin - cpu| stays
// within 2 gamma_K sum |w a| (scaled), as small_m_linear_twin's.
TEST(SmallMLinear, TensorCoreTwinWithinTheAdditionsRoundingsOfTheCpuEngine) {
  std::mt19937 rng(31);
  for (const int slices : {1, 5})
    expect_within_cpu_roundings(48, 1024, 12, true, rng,
                                [slices](const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool pc, int T, int out,
                                         int in, float* y) { small_m_mma_twin(w, a, sx, sw, pc, nullptr, T, out, in, slices, y); });
}

}  // namespace
}  // namespace bestofn::cuda

namespace bestofn::cuda {
namespace {

// A CPU model of the tensor-core kernel on hardware whose FP8 mma does not accumulate in F32 (Ada
// and Hopper keep about 13-14 bits: DeepSeek-V3 report, sec. 3.3.2): each product's exact sum, C
// included, cut toward zero to `bits` fraction bits. The kernel's own adds (chunk into slice, slice
// into total) are F32. PerChunk is the kernel's order (each chunk's two products from a zeroed
// fragment); PerSlice chains the whole slice through the C operand, as the kernel did before.
enum class Chain { PerChunk, PerSlice };

float truncated(double v, int bits) {
  if (v == 0.0) return 0.0f;
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const double quantum = std::ldexp(1.0, e - 1 - bits);
  return static_cast<float>(std::trunc(v / quantum) * quantum);
}

// y (T, out): the raw sums (unit scales, no bias) as the modelled hardware would give them.
std::vector<float> mma_on_truncating_hardware(const std::vector<std::uint8_t>& w, const std::vector<std::uint8_t>& a, int T, int out, int in,
                                              int slices, Chain chain, int bits) {
  std::vector<float> y(static_cast<std::size_t>(T) * static_cast<std::size_t>(out));
  const int chunks = in / kMmaChunk;
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < out; ++o) {
      float total = 0.0f;
      for (int s = 0; s < slices; ++s) {
        float acc = 0.0f;
        for (int c = s * chunks / slices; c < (s + 1) * chunks / slices; ++c) {
          float frag = chain == Chain::PerChunk ? 0.0f : acc;
          for (int half = 0; half < 2; ++half) {
            double exact = frag;
            for (int q = 0; q < 4; ++q)
              for (int j = 8 * half; j < 8 * half + 8; ++j) {
                const int k = c * kMmaChunk + 16 * q + j;
                exact += static_cast<double>(fp8_e4m3_to_float(w[static_cast<std::size_t>(o * in + k)])) *
                         fp8_e4m3_to_float(a[static_cast<std::size_t>(t * in + k)]);
              }
            frag = truncated(exact, bits);
          }
          acc = chain == Chain::PerChunk ? acc + frag : frag;
        }
        total = total + acc;
      }
      y[static_cast<std::size_t>(t * out + o)] = total;
    }
  return y;
}

// The largest |model - twin| / sum_k |w a| over a layer, with unit scales.
double worst_against_twin(const std::vector<std::uint8_t>& w, const std::vector<std::uint8_t>& a, int T, int out, int in, int slices,
                          Chain chain) {
  const std::vector<float> ones(static_cast<std::size_t>(std::max(T, out)), 1.0f);
  std::vector<float> twin(static_cast<std::size_t>(T * out));
  small_m_mma_twin(w.data(), a.data(), ones.data(), ones.data(), true, nullptr, T, out, in, slices, twin.data());
  const std::vector<float> hw = mma_on_truncating_hardware(w, a, T, out, in, slices, chain, 13);
  double worst = 0.0;
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < out; ++o) {
      double mag = 0.0;
      for (int k = 0; k < in; ++k)
        mag += std::fabs(static_cast<double>(fp8_e4m3_to_float(w[static_cast<std::size_t>(o * in + k)])) *
                         fp8_e4m3_to_float(a[static_cast<std::size_t>(t * in + k)]));
      const std::size_t i = static_cast<std::size_t>(t * out + o);
      if (mag > 0) worst = std::max(worst, std::fabs(static_cast<double>(hw[i]) - twin[i]) / mag);
    }
  return worst;
}

// Random codes of both signs, or of one sign (a row aligned with its input, as the rows that make
// a layer's largest outputs are: the running sum then grows with every product).
std::vector<std::uint8_t> signed_codes(std::size_t n, std::mt19937& rng, bool positive) {
  std::vector<std::uint8_t> c = codes(n, rng);
  if (positive)
    for (auto& v : c) v &= 0x7f;
  return c;
}

// The contract's bound holds for products whose sums keep 13 fraction bits, truncated, on the
// Llama-3.1-8B shapes' inputs (4096: q/k/v, o, gate/up and the lm_head; 14336: down) at the slice
// counts the kernel picks there and at one, for inputs of both signs and of one sign.
TEST(SmallMLinear, TensorCoreBoundHoldsWhenTheMmaTruncatesItsSums) {
  std::mt19937 rng(41);
  const int T = 9, out = 16;
  for (const int in : {4096, 14336})
    for (const bool positive : {false, true}) {
      const auto w = signed_codes(static_cast<std::size_t>(out * in), rng, positive);
      const auto a = signed_codes(static_cast<std::size_t>(T * in), rng, positive);
      for (const int slices : {1, 2, 8}) {
        const double worst = worst_against_twin(w, a, T, out, in, slices, Chain::PerChunk);
        EXPECT_LE(worst, small_m_mma_bound(in, slices)) << "in " << in << ", " << slices << " slices, " << (positive ? "one sign" : "both signs");
        EXPECT_GT(worst, 0.0) << "the model truncated nothing: it would not tell the orders apart";
      }
    }
}

// The order the kernel had before (a slice chained through the mma's C operand, 2 C / S products
// in a row) breaks that bound under the same model: its error is a fraction of the running sum at
// every product, growing with the chain, where the chunk's is a fraction of its own terms.
TEST(SmallMLinear, SliceChainedMmaAccumulationBreaksTheBound) {
  std::mt19937 rng(43);
  const int T = 9, out = 16, in = 4096;
  const auto w = signed_codes(static_cast<std::size_t>(out * in), rng, true);
  const auto a = signed_codes(static_cast<std::size_t>(T * in), rng, true);
  const double chained = worst_against_twin(w, a, T, out, in, 1, Chain::PerSlice);
  const double chunked = worst_against_twin(w, a, T, out, in, 1, Chain::PerChunk);
  EXPECT_GT(chained, small_m_mma_bound(in, 1));
  EXPECT_GT(chained, 8 * chunked);
  std::printf("[ model    ] in 4096, one slice, one sign: worst |hw - twin| / sum|w a| 2^%.1f slice-chained, 2^%.1f per chunk\n",
              std::log2(chained), std::log2(chunked));
}

}  // namespace
}  // namespace bestofn::cuda
