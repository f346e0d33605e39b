// The CPU GEMM kernels against scalar references written from the orders their headers state
// (src/cpu/gemm_fp8.h, src/cpu/gemm_wide.h), bit for bit: E4M3 x E4M3 products are exact in fp32,
// so an FP8 dot product depends only on its summation order, and the BF16 / F16 / F32 kernels use
// one fused multiply-add per product (std::fma here). A second check puts the FP8 reference within the
// fp32 error bound of a double-precision sum, so the order is an order of the right terms.
// Shapes: the bench-100m layers (768 / 2048 wide, N = 1, 2, 3, 16, 17, 33 tokens: 16 per kernel call) and ragged ones
// (a partial quad of inputs, a partial strip of 16 rows); values: all 256 E4M3 codes as weights
// against all finite codes as activations, subnormals and +-448 included.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bestofn/util/numeric.h"
#include "bestofn/model/weights.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm_fp8.h"
#include "cpu/gemm_wide.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"

namespace bestofn {
namespace {

namespace fp8 = cpu::fp8;

struct Shape {
  std::size_t out, in, T;
};
const Shape kShapes[] = {{768, 768, 1}, {256, 768, 2}, {2048, 768, 3}, {768, 2048, 16}, {132, 768, 33}, {2048, 768, 17},
                         {259, 296, 1}, {259, 296, 5}, {7, 40, 2},     {13, 64, 4},   {37, 298, 17},  {5, 7, 3},
                         {70, 130, 6},  {70, 130, 8},  {70, 130, 9},   {70, 130, 12}, {70, 130, 15}};

// The FP8 order of gemm_fp8.h, one scalar addition at a time: per quad k, the products at k+1,
// k, k+3, k+2.
float fp8_reference(const float* x, const std::uint8_t* w, std::size_t in) {
  auto term = [&](std::size_t e) { return e < in ? x[e] * fp8_e4m3_to_float_finite(w[e]) : 0.0f; };
  float sum = 0.0f;
  for (std::size_t k = 0; k < in; k += 4)
    for (std::size_t d : {1, 0, 3, 2}) sum += term(k + d);
  return sum;
}

const char* fp8_path_name(fp8::Path p) {
  return p == fp8::Path::Generic ? "generic" : p == fp8::Path::Avx2 ? "AVX2 + FMA" : p == fp8::Path::Avx2F16c ? "AVX2 + F16C" : p == fp8::Path::Avx512Fma ? "AVX-512 FMA" : "AVX-512 BF16";
}

// Codes: weights take all 256 (row r, column i: code (r * 7 + i) mod 256 for the first 256
// columns), then random; activations take every finite code, then random finite codes.
std::vector<std::uint8_t> weight_codes(std::size_t out, std::size_t in, std::mt19937& rng) {
  std::vector<std::uint8_t> w(out * in);
  for (std::size_t r = 0; r < out; ++r)
    for (std::size_t i = 0; i < in; ++i) w[r * in + i] = static_cast<std::uint8_t>(i < 256 ? (r * 7 + i) % 256 : rng() % 256);
  return w;
}
std::vector<float> activation_values(std::size_t T, std::size_t in, std::mt19937& rng) {
  std::vector<float> x(T * in);
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto c = static_cast<std::uint8_t>(i < 256 ? i : rng() % 256);
    if ((c & 0x7f) == 0x7f) c = c == 0x7f ? 0x7e : 0xfe;  // the NaN codes -> +-448
    x[i] = fp8_e4m3_to_float_finite(c);
  }
  return x;
}

TEST(CpuGemm, Fp8PathsFollowTheStatedOrderBitForBit) {
  std::mt19937 rng(7);
  std::vector<fp8::Path> paths = {fp8::Path::Generic};
  for (fp8::Path p : {fp8::Path::Avx2, fp8::Path::Avx2F16c, fp8::Path::Avx512Bf16, fp8::Path::Avx512Fma}) {
    if (fp8::available(p)) paths.push_back(p);
    else std::cout << "[ note ] this CPU has no " << fp8_path_name(p) << ": that path is not tested here\n";
  }
  for (const Shape& s : kShapes) {
    const auto w = weight_codes(s.out, s.in, rng);
    const auto x = activation_values(s.T, s.in, rng);
    for (fp8::Path p : paths) {
      std::vector<std::uint16_t> packed(fp8::packed_size(p, s.T, s.in));
      const std::vector<float> ones(s.T, 1.0f);  // E4M3 values over a scale of 1: packed as they are
      fp8::pack_activations(p, x.data(), ones.data(), s.T, s.in, 0, s.T / 2, packed.data());  // in two parts, as the pool packs
      fp8::pack_activations(p, x.data(), ones.data(), s.T, s.in, s.T / 2, s.T, packed.data());
      std::vector<std::uint8_t> strips(fp8::packed_weight_bytes(s.out, s.in));
      const std::size_t n = fp8::strip_count(s.out);
      fp8::pack_weights(w.data(), s.out, s.in, 0, n / 2, strips.data());  // in two parts, as the pool packs
      fp8::pack_weights(w.data(), s.out, s.in, n / 2, n, strips.data());
      std::vector<float> y(s.T * s.out, NAN);
      // Two strip ranges, as two threads would split them.
      fp8::dot_strips(p, strips.data(), s.out, s.in, 0, n / 2, packed.data(), s.T, y.data(), s.out);
      fp8::dot_strips(p, strips.data(), s.out, s.in, n / 2, n, packed.data(), s.T, y.data(), s.out);
      int bad = 0;
      for (std::size_t t = 0; t < s.T; ++t)
        for (std::size_t o = 0; o < s.out; ++o) {
          const float ref = fp8_reference(x.data() + t * s.in, w.data() + o * s.in, s.in);
          const float got = y[t * s.out + o];
          if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(ref) && bad++ < 8)
            ADD_FAILURE() << fp8_path_name(p) << " " << s.out << "x" << s.in << " T" << s.T
                          << " [" << t << ", " << o << "]: " << got << " vs " << ref;
        }
      EXPECT_EQ(bad, 0);
    }
  }
}

// The fast path turns itself off when its self check fails (a CPU that rounds vdpbf16ps another
// way): on a CPU with the instructions, that check must pass, or every step silently runs the
// generic path at a fraction of the speed.
TEST(CpuGemm, Fp8FastPathPassesItsSelfCheckWhereTheCpuHasIt) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vbmi"))
    GTEST_SKIP() << "no AVX-512 VBMI";
  EXPECT_TRUE(fp8::available(fp8::Path::Avx512Fma));
  if (!__builtin_cpu_supports("avx512bf16")) {
    EXPECT_EQ(fp8::best_path(), fp8::Path::Avx512Fma);
    return;
  }
  EXPECT_TRUE(fp8::available(fp8::Path::Avx512Bf16));
  // Either AVX-512 path, by speed (best_path times them): never the AVX2 or the generic one.
  const fp8::Path best = fp8::best_path();
  EXPECT_TRUE(best == fp8::Path::Avx512Bf16 || best == fp8::Path::Avx512Fma) << fp8_path_name(best);
  std::cout << "[ note     ] the engine's FP8 path on this CPU: " << fp8_path_name(best) << "\n";
}

// The same for the AVX2 paths (shifts, or F16C), which every x86-64 CPU of the last decade without
// AVX-512 VBMI runs: one of the two, by speed, where AVX-512 is missing.
TEST(CpuGemm, Fp8Avx2PathPassesItsSelfCheckWhereTheCpuHasIt) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !bestofn::cpu::has_f16c()) {
    GTEST_SKIP() << "no AVX2 / FMA / F16C";
  }
  EXPECT_TRUE(fp8::available(fp8::Path::Avx2));
  EXPECT_TRUE(fp8::available(fp8::Path::Avx2F16c));
  if (!fp8::available(fp8::Path::Avx512Bf16) && !fp8::available(fp8::Path::Avx512Fma)) {
    const fp8::Path best = fp8::best_path();
    EXPECT_TRUE(best == fp8::Path::Avx2 || best == fp8::Path::Avx2F16c) << fp8_path_name(best);
  }
}

// A thread running with denormals-are-zero (MXCSR.DAZ, which code built with -ffast-math sets)
// still gets the sums of the stated order: the AVX2 path reads E4M3's subnormal codes as fp32
// subnormals, which DAZ would drop. The caller's MXCSR is left as it was.
TEST(CpuGemm, Fp8PathsIgnoreDenormalsAreZero) {
  std::mt19937 rng(11);
  const std::size_t out = 40, in = 64, T = 5;
  std::vector<std::uint8_t> w(out * in);
  for (auto& c : w) c = static_cast<std::uint8_t>((rng() % 2 ? 0x80 : 0x00) | (1 + rng() % 7));  // subnormal codes only
  const auto x = activation_values(T, in, rng);
  std::vector<float> ref(T * out);  // computed before DAZ is set
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t o = 0; o < out; ++o) ref[t * out + o] = fp8_reference(x.data() + t * in, w.data() + o * in, in);
  std::vector<fp8::Path> paths = {fp8::Path::Generic};
  for (fp8::Path p : {fp8::Path::Avx2, fp8::Path::Avx2F16c, fp8::Path::Avx512Bf16, fp8::Path::Avx512Fma})
    if (fp8::available(p)) paths.push_back(p);
  std::vector<std::uint8_t> strips(fp8::packed_weight_bytes(out, in));
  fp8::pack_weights(w.data(), out, in, 0, fp8::strip_count(out), strips.data());
  const std::vector<float> ones(T, 1.0f);
  for (fp8::Path p : paths) {
    std::vector<std::uint16_t> packed(fp8::packed_size(p, T, in));
    fp8::pack_activations(p, x.data(), ones.data(), T, in, 0, T, packed.data());
    std::vector<float> y(T * out, NAN);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x40u);
    fp8::dot_strips(p, strips.data(), out, in, 0, fp8::strip_count(out), packed.data(), T, y.data(), out);
    const unsigned after = _mm_getcsr();
    _mm_setcsr(csr);
    EXPECT_EQ(after, csr | 0x40u) << fp8_path_name(p) << ": the caller's MXCSR was not restored";
    int bad = 0;
    for (std::size_t i = 0; i < y.size(); ++i)
      if (std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(ref[i]) && bad++ < 4)
        ADD_FAILURE() << fp8_path_name(p) << " [" << i / out << ", " << i % out << "]: " << y[i] << " vs " << ref[i];
    EXPECT_EQ(bad, 0) << fp8_path_name(p);
  }
}

TEST(CpuGemm, Fp8ReferenceIsTheDotProductWithinFp32Rounding) {
  std::mt19937 rng(8);
  const std::size_t in = 2048, out = 64;
  const auto w = weight_codes(out, in, rng);
  const auto x = activation_values(1, in, rng);
  for (std::size_t o = 0; o < out; ++o) {
    double exact = 0, mag = 0;
    for (std::size_t i = 0; i < in; ++i) {
      const double term = static_cast<double>(x[i]) * fp8_e4m3_to_float_finite(w[o * in + i]);
      exact += term, mag += std::fabs(term);
    }
    EXPECT_LE(std::fabs(fp8_reference(x.data(), w.data() + o * in, in) - exact), in * 0x1p-24 * mag) << "row " << o;
  }
}

// cpu::linear on an FP8 Linear: the kernels' sums, scaled by the token's and the row's scales,
// whatever the thread count.
TEST(CpuGemm, Fp8LinearScalesTheOrderedSums) {
  std::mt19937 rng(9);
  const std::size_t out = 260, in = 776, T = 5;  // in: a 16-lane max with a tail; T: rows split over threads
  const auto w = weight_codes(out, in, rng);
  Linear l;
  l.weight = Tensor{"w", DType::F8_E4M3, {static_cast<std::int64_t>(out), static_cast<std::int64_t>(in)}, w.data(), w.size()};
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (std::size_t o = 0; o < out; ++o) l.weight_scale.push_back(std::fabs(u(rng)) * 1e-3f + 1e-4f);
  std::vector<float> x(T * in);
  for (auto& v : x) v = u(rng);
  for (int threads : {1, 2}) {
    cpu::ThreadPool pool(threads);
    std::vector<float> y(T * out);
    cpu::linear(l, x.data(), T, y.data(), pool);
    for (std::size_t t = 0; t < T; ++t) {
      const float* row = x.data() + t * in;
      float amax = 0;
      for (std::size_t i = 0; i < in; ++i) amax = std::max(amax, std::fabs(row[i]));
      const float sx = amax / kFp8E4M3Max;
      std::vector<float> xq(in);
      for (std::size_t i = 0; i < in; ++i) xq[i] = fp8_e4m3_round(row[i] / sx);
      for (std::size_t o = 0; o < out; ++o) {
        const float ref = fp8_reference(xq.data(), w.data() + o * in, in) * sx * l.weight_scale[o];
        ASSERT_EQ(std::bit_cast<std::uint32_t>(y[t * out + o]), std::bit_cast<std::uint32_t>(ref)) << "threads " << threads << " [" << t << ", " << o << "]";
      }
    }
  }
}

// The order of gemm_wide.h: one accumulator, one fused multiply-add per input, in order, on the
// weights as floats (w: already widened, by numeric.h's conversions).
float wide_reference(const float* x, const float* w, std::size_t in) {
  float a = 0.0f;
  for (std::size_t i = 0; i < in; ++i) a = std::fma(x[i], w[i], a);
  return a;
}

// Random (out, in) weights of one format, N(0, 0.05), with its edge values: row 0 starts with -0
// and the largest finite value (BF16 0x7f7f, F16 65504, F32 FLT_MAX); row 1 is all subnormals of
// either sign (its sums are small: a path that flushed subnormal weights to zero would give 0
// there). `stored` holds the format's bits, `value` the same weights as floats.
struct WideWeights {
  std::vector<std::uint8_t> stored;
  std::vector<float> value;
};
WideWeights wide_weights(cpu::wide::Format f, std::size_t out, std::size_t in, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::size_t n = out * in;
  WideWeights w;
  w.stored.resize(n * cpu::wide::weight_bytes(f));
  w.value.resize(n);
  const bool subnormal_row = out > 1;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = nd(rng) * 0.05f;
    const bool sub = subnormal_row && i / in == 1;
    const std::uint32_t sign = rng() & 1u;
    if (f == cpu::wide::Format::F32) {
      float e = i == 0 ? -0.0f : i == 1 ? std::bit_cast<float>(0x7f7fffffu) : v;
      if (sub) e = std::bit_cast<float>(static_cast<std::uint32_t>((sign << 31) | (1u + rng() % 0x7fffffu)));
      std::memcpy(&w.stored[4 * i], &e, 4);
      w.value[i] = e;
    } else {
      const bool bf = f == cpu::wide::Format::Bf16;
      std::uint16_t h = i == 0 ? 0x8000 : i == 1 ? static_cast<std::uint16_t>(bf ? 0x7f7f : 0x7bff) : bf ? bf16_from_float(v) : f16_from_float(v);
      if (sub) h = static_cast<std::uint16_t>((sign << 15) | (1u + rng() % (bf ? 0x7fu : 0x3ffu)));
      std::memcpy(&w.stored[2 * i], &h, 2);
      w.value[i] = bf ? bf16_to_float(h) : f16_to_float(h);
    }
  }
  return w;
}

const char* format_name(cpu::wide::Format f) {
  return f == cpu::wide::Format::Bf16 ? "BF16" : f == cpu::wide::Format::F16 ? "F16" : "F32";
}

// cpu::linear_many: each output bit for bit what cpu::linear gives it alone, on the shared path
// (FP8 layers quantizing x alike: one quantization, one pool loop over every layer's rows, the
// layers of different heights so that blocks straddle layer boundaries) and on the fallback (a
// layer with its own static input scale).
TEST(CpuGemm, LinearManyGivesEachLayersOwnNumbers) {
  std::mt19937 rng(11);
  const std::size_t in = 264, T = 6;
  const std::size_t outs[] = {130, 36, 37};
  std::vector<std::vector<std::uint8_t>> codes;
  std::vector<Linear> ls(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::size_t i = 0; i < 3; ++i) {
    codes.push_back(weight_codes(outs[i], in, rng));
    ls[i].weight = Tensor{"w", DType::F8_E4M3, {static_cast<std::int64_t>(outs[i]), static_cast<std::int64_t>(in)}, codes[i].data(), codes[i].size()};
    ls[i].weight_scale = {std::fabs(u(rng)) * 1e-3f + 1e-4f};
  }
  std::vector<float> x(T * in);
  for (auto& v : x) v = u(rng);
  for (bool static_scale : {false, true}) {
    if (static_scale) ls[2].input_scale = 0.01f;  // not shared: the fallback, one layer at a time
    for (int threads : {1, 2}) {
      cpu::ThreadPool pool(threads);
      std::vector<std::vector<float>> alone(3), many(3);
      for (std::size_t i = 0; i < 3; ++i) {
        alone[i].resize(T * outs[i]), many[i].resize(T * outs[i], NAN);
        cpu::linear(ls[i], x.data(), T, alone[i].data(), pool);
      }
      const Linear* lp[] = {&ls[0], &ls[1], &ls[2]};
      float* yp[] = {many[0].data(), many[1].data(), many[2].data()};
      cpu::linear_many(lp, x.data(), T, yp, pool);
      for (std::size_t i = 0; i < 3; ++i)
        EXPECT_EQ(std::memcmp(alone[i].data(), many[i].data(), alone[i].size() * 4), 0)
            << "layer " << i << ", threads " << threads << (static_scale ? ", static scale on layer 2" : "");
    }
  }
}

TEST(CpuGemm, WidePathsFollowTheStatedOrderBitForBit) {
  namespace wide = cpu::wide;
  std::cout << "[ note     ] paths run on this CPU:" << (wide::available(wide::Path::Avx512) ? " AVX-512" : "")
            << (wide::available(wide::Path::Avx2Fma) ? " AVX2 + FMA" : "") << " portable\n";
  std::mt19937 rng(10);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (wide::Format f : {wide::Format::Bf16, wide::Format::F16, wide::Format::F32})
    for (const Shape& s : kShapes) {
      const WideWeights w = wide_weights(f, s.out, s.in, rng);
      std::vector<float> x(s.T * s.in);
      for (auto& v : x) v = nd(rng);
      const std::size_t n = wide::strip_count(s.out);
      std::vector<float> strips(wide::packed_weight_bytes(f, s.out, s.in) / 4);  // float storage: aligned for every format
      wide::pack_weights(f, w.stored.data(), s.out, s.in, 0, n / 2, strips.data());  // in two parts, as the pool packs
      wide::pack_weights(f, w.stored.data(), s.out, s.in, n / 2, n, strips.data());
      std::vector<float> xp(wide::packed_size(s.T, s.in));
      wide::pack_activations(x.data(), s.T, s.in, 0, s.in / 2, xp.data());
      wide::pack_activations(x.data(), s.T, s.in, s.in / 2, s.in, xp.data());
      for (wide::Path p : {wide::Path::Avx512, wide::Path::Avx2Fma, wide::Path::Portable}) {
        if (!wide::available(p)) continue;
        std::vector<float> y(s.T * s.out, NAN);
        wide::dot_strips(p, f, strips.data(), s.out, s.in, 0, n / 2, xp.data(), s.T, y.data(), s.out);  // two strip ranges, as two threads
        wide::dot_strips(p, f, strips.data(), s.out, s.in, n / 2, n, xp.data(), s.T, y.data(), s.out);
        int bad = 0;
        for (std::size_t t = 0; t < s.T; ++t)
          for (std::size_t o = 0; o < s.out; ++o) {
            const float ref = wide_reference(x.data() + t * s.in, w.value.data() + o * s.in, s.in), got = y[t * s.out + o];
            if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(ref) && bad++ < 8)
              ADD_FAILURE() << format_name(f) << " path " << static_cast<int>(p) << " " << s.out << "x" << s.in << " T" << s.T << " [" << t
                            << ", " << o << "]: " << got << " vs " << ref;
          }
        EXPECT_EQ(bad, 0) << format_name(f) << " path " << static_cast<int>(p) << " " << s.out << "x" << s.in << " T" << s.T;
      }
    }
}

// No inputs: every output is the empty sum, 0, on every path (the AVX2 path sizes its cache
// groups by the strip's width, which is then 0).
TEST(CpuGemm, WideEmptySumsAreZero) {
  namespace wide = cpu::wide;
  const float none = 0.0f;
  for (wide::Path p : {wide::Path::Avx512, wide::Path::Avx2Fma, wide::Path::Portable}) {
    if (!wide::available(p)) continue;
    for (wide::Format f : {wide::Format::Bf16, wide::Format::F16, wide::Format::F32}) {
      std::vector<float> y(3 * 20, NAN);
      wide::dot_strips(p, f, &none, 20, 0, 0, wide::strip_count(20), &none, 3, y.data(), 20);
      for (float v : y) ASSERT_EQ(std::bit_cast<std::uint32_t>(v), 0u) << format_name(f) << " path " << static_cast<int>(p);
    }
  }
}

// cpu::linear on a BF16, F16 or F32 Linear (packed for the call, activations packed over the pool
// by input): the stated order whatever the thread count and the token count.
TEST(CpuGemm, WideLinearGivesTheOrderedSums) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::size_t out = 70, in = 300;
  const struct {
    cpu::wide::Format f;
    DType dtype;
  } kinds[] = {{cpu::wide::Format::Bf16, DType::BF16}, {cpu::wide::Format::F16, DType::F16}, {cpu::wide::Format::F32, DType::F32}};
  for (const auto& kind : kinds) {
    const WideWeights w = wide_weights(kind.f, out, in, rng);
    Linear l;
    l.weight = Tensor{"w", kind.dtype, {static_cast<std::int64_t>(out), static_cast<std::int64_t>(in)}, w.stored.data(), w.stored.size()};
    for (std::size_t T : {1u, 5u, 20u})
      for (int threads : {1, 2}) {
        std::vector<float> x(T * in), y(T * out);
        for (auto& v : x) v = nd(rng);
        cpu::ThreadPool pool(threads);
        cpu::linear(l, x.data(), T, y.data(), pool);
        for (std::size_t t = 0; t < T; ++t)
          for (std::size_t o = 0; o < out; ++o)
            ASSERT_EQ(std::bit_cast<std::uint32_t>(y[t * out + o]),
                      std::bit_cast<std::uint32_t>(wide_reference(x.data() + t * in, w.value.data() + o * in, in)))
                << format_name(kind.f) << ", T " << T << ", threads " << threads << " [" << t << ", " << o << "]";
      }
  }
}

}  // namespace
}  // namespace bestofn
