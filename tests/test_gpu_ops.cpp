// Every launcher of src/cuda/kernels.h against its CPU twin, in one table (after llama.cpp's
// test-backend-ops): a row per launcher names its twin and its tolerance, and its check runs the
// launcher on seeded random inputs (the edge shapes each op has: odd widths, empty sides, ties,
// non-finite values) and compares with the twin, the tolerance derived in a comment above the
// check. One parameterized test runs the rows, named after their launchers; each skips without a
// device. The elementwise and row ops' checks are here, the attention, prefix and sampling ones in
// test_gpu_ops_attention.cpp. tests/gpu_op_names.h lists the launchers: a launcher without a row,
// or a row without a launcher, fails here and (without a GPU) in test_gpu_op_names.
// Over 500 lines on purpose: the table and its elementwise rows in one place (the attention rows
// are in test_gpu_ops_attention.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bestofn/model/quantize.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/numeric.h"
#include "cpu/ops.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"
#include "gpu_op_names.h"
#include "gpu_op_rows.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn::gpu_ops {
namespace {


constexpr float kU = 0x1p-24f;  // fp32 unit roundoff: half an ulp of 1

// Token counts (decode of one slot, a few slots, a prefill chunk) and row widths (Llama-3.1-8B dim
// and hidden_dim, small ones, and odd ones that leave the last strided pass of a block partly empty).
const int kTokenCounts[] = {1, 3, 17};
const int kWidths[] = {1, 8, 64, 255, 1000, 4096, 4097, 14336};

std::string show(float v) {
  std::ostringstream s;
  s << std::setprecision(9) << v << " (0x" << std::hex << std::setw(8) << std::setfill('0') << std::bit_cast<std::uint32_t>(v)
    << ")";
  return s.str();
}

// "" when ok(i) holds for every i < n, else the count and the first mismatches as [row, col].
template <typename Ok, typename Describe>
std::string mismatches(std::size_t n, std::size_t cols, Ok ok, Describe describe) {
  std::ostringstream first;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (ok(i)) continue;
    if (bad++ < 10) first << "  [" << i / cols << ", " << i % cols << "] " << describe(i) << "\n";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(n) + " values mismatch, first ones:\n" + first.str();
}

std::string compare_bits(const std::vector<float>& gpu, const std::vector<float>& cpu, std::size_t cols) {
  return mismatches(
      cpu.size(), cols,
      [&](std::size_t i) { return std::bit_cast<std::uint32_t>(gpu[i]) == std::bit_cast<std::uint32_t>(cpu[i]); },
      [&](std::size_t i) { return "gpu " + show(gpu[i]) + ", cpu " + show(cpu[i]); });
}

// |gpu - cpu| <= atol + rtol * |cpu|; a NaN on either side is a mismatch.
std::string compare_close(const std::vector<float>& gpu, const std::vector<float>& cpu, std::size_t cols, float atol,
                          float rtol) {
  return mismatches(
      cpu.size(), cols, [&](std::size_t i) { return std::fabs(gpu[i] - cpu[i]) <= atol + rtol * std::fabs(cpu[i]); },
      [&](std::size_t i) {
        return "gpu " + show(gpu[i]) + ", cpu " + show(cpu[i]) + ", |diff| " + show(std::fabs(gpu[i] - cpu[i]));
      });
}

// FP8 codes and scales (rows, cols) from the GPU against the CPU twin's.
//   exact:  codes and scales bit for bit.
//   !exact: scales within scale_rtol; each dequantized value code * scale within one E4M3 step of the
//           CPU's (2^-3 relative for normal codes, 2^-9 * scale for subnormal ones, plus scale_rtol);
//           and at least 99% of the codes identical.
std::string compare_fp8(const std::vector<std::uint8_t>& q_gpu, const std::vector<float>& s_gpu,
                        const std::vector<std::uint8_t>& q_cpu, const std::vector<float>& s_cpu, std::size_t cols, bool exact,
                        float scale_rtol) {
  std::string report = exact ? compare_bits(s_gpu, s_cpu, 1) : compare_close(s_gpu, s_cpu, 1, 0.0f, scale_rtol);
  if (!report.empty()) return "scales: " + report;
  const auto describe = [&](std::size_t i) {
    std::ostringstream s;
    s << "gpu code 0x" << std::hex << int{q_gpu[i]} << ", cpu code 0x" << int{q_cpu[i]} << std::dec << " (scale "
      << show(s_cpu[i / cols]) << ")";
    return s.str();
  };
  if (exact)
    return mismatches(
        q_cpu.size(), cols, [&](std::size_t i) { return q_gpu[i] == q_cpu[i]; }, describe);
  report = mismatches(
      q_cpu.size(), cols,
      [&](std::size_t i) {
        const float sc = s_cpu[i / cols];
        const float c = fp8_e4m3_to_float(q_cpu[i]) * sc, g = fp8_e4m3_to_float(q_gpu[i]) * s_gpu[i / cols];
        return std::fabs(g - c) <= (0x1p-3f + scale_rtol) * std::fabs(c) + 0x1p-9f * sc;
      },
      describe);
  if (!report.empty()) return "dequantized values: " + report;
  std::size_t same = 0;
  for (std::size_t i = 0; i < q_cpu.size(); ++i) same += q_gpu[i] == q_cpu[i] ? 1 : 0;
  if (same * 100 < q_cpu.size() * 99)
    return "only " + std::to_string(same) + " of " + std::to_string(q_cpu.size()) + " codes identical (99% required)";
  return "";
}

// The FP8 twin of x (rows, cols): quantize_fp8_rows (static_scale 0: amax / 448 per row) or
// quantize_fp8_row per row with static_scale, what cpu::linear does to its input.
struct Fp8Twin {
  std::vector<std::uint8_t> q;
  std::vector<float> scales;
};
Fp8Twin quantize_twin(const float* x, std::size_t rows, std::size_t cols, float static_scale) {
  Fp8Twin t{std::vector<std::uint8_t>(rows * cols), std::vector<float>(rows, static_scale)};
  if (static_scale > 0.0f) {
    for (std::size_t r = 0; r < rows; ++r) quantize_fp8_row(x + r * cols, cols, static_scale, t.q.data() + r * cols);
  } else {
    quantize_fp8_rows(x, rows, cols, t.q.data(), t.scales.data());
  }
  return t;
}

// A Tensor view of host bytes, for the CPU twins that take one (cpu::rmsnorm, cpu::embedding).
Tensor host_tensor(const std::vector<std::uint8_t>& bytes, DType dtype, std::vector<std::int64_t> shape) {
  Tensor t;
  t.name = "test";
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = bytes.data();
  t.nbytes = bytes.size();
  return t;
}

// Values stored as dtype (F32 as is, BF16 rounded); returns the bytes and the values they hold.
std::vector<std::uint8_t> store_as(std::vector<float>& values, DType dtype) {
  std::vector<std::uint8_t> bytes(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::BF16) {
      const std::uint16_t h = bf16_from_float(values[i]);
      values[i] = bf16_to_float(h);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    }
  }
  return bytes;
}

std::string case_name(const char* op, int T, int n, std::uint64_t seed) {
  return std::string(op) + ": T " + std::to_string(T) + ", n " + std::to_string(n) + ", seed " + std::to_string(seed);
}

// --- embedding: a copy (F32) or an exact widening (BF16): bit for bit. ---
void embedding() {
  constexpr int kVocab = 301;
  std::uint64_t seed = 100;
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int T : kTokenCounts) {
      for (int dim : kWidths) {
        SCOPED_TRACE(case_name(dtype == DType::F32 ? "embedding F32" : "embedding BF16", T, dim, seed));
        std::vector<float> values = test::random_floats(static_cast<std::size_t>(kVocab) * dim, seed++, 0.05f);
        const std::vector<std::uint8_t> bytes = store_as(values, dtype);
        std::mt19937 rng(static_cast<std::uint32_t>(seed++));
        std::vector<int> tokens(static_cast<std::size_t>(T));
        for (int& tok : tokens) tok = std::uniform_int_distribution<int>(0, kVocab - 1)(rng);
        tokens.back() = kVocab - 1;  // the last row of the table
        tokens.front() = 0;

        const Tensor table = host_tensor(bytes, dtype, {kVocab, dim});
        std::vector<float> cpu(static_cast<std::size_t>(T) * dim);
        for (int t = 0; t < T; ++t)
          cpu::embedding(table, tokens[static_cast<std::size_t>(t)], cpu.data() + static_cast<std::size_t>(t) * dim);

        const cuda::DeviceBuffer d_table = test::to_gpu(bytes), d_tokens = test::to_gpu(tokens);
        const cuda::DeviceBuffer d_out(cpu.size() * sizeof(float));
        cuda::embedding_cuda(d_table.get(), dtype, d_tokens.get<int>(), T, dim, d_out.get<float>(), nullptr);
        EXPECT_EQ(compare_bits(test::from_gpu<float>(d_out, cpu.size()), cpu, static_cast<std::size_t>(dim)), "");
      }
    }
  }
}

// --- rmsnorm: same formula, but the GPU's sum of squares is a tree (strided partials, butterflies)
// and the CPU's is sequential. Both sums are within a random walk of ~u * sqrt(dim) of the exact one
// (a host emulation of the kernel's order measured at most 45 u on 1/rms at dim 14336 over 600
// rows), 1/rms takes half of it, and the products g * (x * inv) add 2 roundings on each side:
// rtol = u * (8 + 2 sqrt(dim)), about 5x the measured worst. A wrong eps placement, dim - 1 in the
// mean, or a dropped weight all exceed it (the 1e-3 rows make eps dominate). Every output has the
// row's relative error (products only), so atol only covers float subnormals. ---
float rmsnorm_rtol(int dim) { return kU * (8.0f + 2.0f * std::sqrt(static_cast<float>(dim))); }

struct NormCase {
  std::vector<float> x;              // (T, dim)
  std::vector<float> w;              // (dim), the values the stored weight holds
  std::vector<std::uint8_t> wbytes;  // (dim) as wdtype
  std::vector<float> cpu;            // (T, dim): cpu::rmsnorm
};

constexpr float kEps = 1e-5f;  // Llama 3's rms_norm_eps

NormCase make_norm_case(int T, int dim, DType wdtype, float stddev, std::uint64_t seed) {
  NormCase c;
  c.x = test::random_floats(static_cast<std::size_t>(T) * dim, seed, stddev);
  c.w = test::random_floats(static_cast<std::size_t>(dim), seed + 1, 0.2f);
  for (float& v : c.w) v += 1.0f;  // norm weights sit around 1
  c.wbytes = store_as(c.w, wdtype);
  c.cpu.resize(c.x.size());
  cpu::rmsnorm(c.cpu.data(), c.x.data(), host_tensor(c.wbytes, wdtype, {dim}), static_cast<std::size_t>(T),
               static_cast<std::size_t>(dim), kEps);
  return c;
}

void rmsnorm() {
  std::uint64_t seed = 200;
  for (DType wdtype : {DType::F32, DType::BF16}) {
    for (float stddev : {1.0f, 1e-3f, 30.0f}) {
      for (int T : kTokenCounts) {
        for (int dim : kWidths) {
          SCOPED_TRACE(case_name(wdtype == DType::F32 ? "rmsnorm, F32 weight" : "rmsnorm, BF16 weight", T, dim, seed) +
                       ", stddev " + std::to_string(stddev));
          const NormCase c = make_norm_case(T, dim, wdtype, stddev, seed);
          seed += 2;
          const cuda::DeviceBuffer d_x = test::to_gpu(c.x), d_w = test::to_gpu(c.wbytes);
          const cuda::DeviceBuffer d_out(c.x.size() * sizeof(float));
          cuda::rmsnorm_cuda(d_x.get<float>(), d_w.get(), wdtype, T, dim, kEps, d_out.get<float>(), nullptr);
          EXPECT_EQ(compare_close(test::from_gpu<float>(d_out, c.x.size()), c.cpu, static_cast<std::size_t>(dim),
                                  std::numeric_limits<float>::min(), rmsnorm_rtol(dim)),
                    "");
          if (dim <= 255) {  // in place, as Qwen3's q/k norm runs it (each head a row of head_dim): the same numbers
            cuda::rmsnorm_cuda(d_x.get<float>(), d_w.get(), wdtype, T, dim, kEps, d_x.get<float>(), nullptr);
            EXPECT_EQ(compare_bits(test::from_gpu<float>(d_x, c.x.size()), test::from_gpu<float>(d_out, c.x.size()),
                                   static_cast<std::size_t>(dim)),
                      "");
          }
        }
      }
    }
  }
}

// --- rmsnorm + FP8. No fused CPU twin exists: the twin is composed here as cpu::rmsnorm, then
// quantize_fp8_rows (dynamic) or quantize_fp8_row per row (static), which is what
// cpu::linear does to its input. The normalized values differ by up to rmsnorm_rtol, so a code may
// move by one E4M3 step where a value sits on a rounding boundary, and the dynamic scale (amax / 448)
// by rmsnorm_rtol plus the division's rounding: compare_fp8's inexact mode. ---
void rmsnorm_quant_fp8() {
  std::uint64_t seed = 300;
  for (DType wdtype : {DType::F32, DType::BF16}) {
    for (float static_scale : {0.0f, 3.0f / kFp8E4M3Max}) {  // dynamic; static, saturating beyond 3 rms
      for (int T : kTokenCounts) {
        for (int dim : kWidths) {
          SCOPED_TRACE(case_name("rmsnorm_quant_fp8", T, dim, seed) + (wdtype == DType::F32 ? ", F32" : ", BF16") +
                       " weight, static_scale " + std::to_string(static_scale));
          const NormCase c = make_norm_case(T, dim, wdtype, 1.0f, seed);
          seed += 2;
          const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(dim);
          const Fp8Twin twin = quantize_twin(c.cpu.data(), rows, cols, static_scale);

          const cuda::DeviceBuffer d_x = test::to_gpu(c.x), d_w = test::to_gpu(c.wbytes);
          const cuda::DeviceBuffer d_q(c.x.size()), d_s(rows * sizeof(float));
          cuda::rmsnorm_quant_fp8_cuda(d_x.get<float>(), d_w.get(), wdtype, T, dim, kEps, static_scale, d_q.get<std::uint8_t>(),
                                       d_s.get<float>(), nullptr);
          EXPECT_EQ(compare_fp8(test::from_gpu<std::uint8_t>(d_q, c.x.size()), test::from_gpu<float>(d_s, rows), twin.q, twin.scales,
                                cols, /*exact=*/false, rmsnorm_rtol(dim) + 2 * kU),
                    "");
        }
      }
    }
  }
}

// --- activation quantization: the same fmaxf amax, IEEE division and RNE saturating conversion as
// quantize_fp8_rows / quantize_fp8_row: bit for bit, edge rows included. ---
void quantize_act_fp8() {
  std::uint64_t seed = 400;
  for (float static_scale : {0.0f, 0.5f / kFp8E4M3Max}) {  // dynamic; static, saturating beyond 0.5
    for (int T : kTokenCounts) {
      for (int n : kWidths) {
        SCOPED_TRACE(case_name("quantize_act_fp8", T, n, seed) + ", static_scale " + std::to_string(static_scale));
        const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(n);
        std::vector<float> x = test::random_floats(rows * cols, seed++, 0.3f);
        if (T > 1)
          for (std::size_t c = 0; c < cols; ++c) x[cols + c] = 0.0f;  // an all-zero row: scale 1 when dynamic
        if (T > 2) x[2 * cols + cols / 2] = 1e4f;                     // an outlier: small codes elsewhere

        const Fp8Twin twin = quantize_twin(x.data(), rows, cols, static_scale);

        const cuda::DeviceBuffer d_x = test::to_gpu(x), d_q(rows * cols), d_s(rows * sizeof(float));
        cuda::quantize_act_fp8_cuda(d_x.get<float>(), T, n, static_scale, d_q.get<std::uint8_t>(), d_s.get<float>(), nullptr);
        EXPECT_EQ(compare_fp8(test::from_gpu<std::uint8_t>(d_q, rows * cols), test::from_gpu<float>(d_s, rows), twin.q, twin.scales,
                              cols, /*exact=*/true, 0.0f),
                  "");
      }
    }
  }
}

// --- fp32 -> BF16: round to nearest even on both sides, NaN handled like the CPU: bit for bit. ---
void f32_to_bf16() {
  std::uint64_t seed = 500;
  for (std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{4096 * 3}, std::size_t{14336 * 17 + 5}}) {
    SCOPED_TRACE("f32_to_bf16: n " + std::to_string(n) + ", seed " + std::to_string(seed));
    std::vector<float> x = test::random_floats(n, seed, 1.0f);
    std::mt19937 rng(static_cast<std::uint32_t>(seed++));
    // Every 7th value: random bits, so that exponents, subnormals, ties (low half 0x8000) and
    // NaN payloads all occur; a few fixed specials at the front.
    for (std::size_t i = 0; i < n; i += 7) {
      std::uint32_t bits = static_cast<std::uint32_t>(rng());
      if (i % 3 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // an exact tie between two BF16 values
      x[i] = std::bit_cast<float>(bits);
    }
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                              std::bit_cast<float>(0x7f800001u),       std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), -0.0f,
                              std::numeric_limits<float>::max(),       std::numeric_limits<float>::denorm_min(),
                              std::bit_cast<float>(0x3f808000u),       std::bit_cast<float>(0x3f818000u)};
    for (std::size_t i = 0; i < std::size(specials) && i + 1 < n; ++i) x[i + 1] = specials[i];

    std::vector<std::uint16_t> cpu(n);
    for (std::size_t i = 0; i < n; ++i) cpu[i] = bf16_from_float(x[i]);
    const cuda::DeviceBuffer d_x = test::to_gpu(x), d_out(n * sizeof(std::uint16_t));
    cuda::f32_to_bf16_cuda(d_x.get<float>(), n, d_out.get<std::uint16_t>(), nullptr);
    const std::vector<std::uint16_t> gpu = test::from_gpu<std::uint16_t>(d_out, n);
    EXPECT_EQ(mismatches(
                  n, n, [&](std::size_t i) { return gpu[i] == cpu[i]; },
                  [&](std::size_t i) {
                    std::ostringstream s;
                    s << "x " << show(x[i]) << ": gpu 0x" << std::hex << gpu[i] << ", cpu 0x" << cpu[i];
                    return s.str();
                  }),
              "");
  }
}

// --- the GEMM epilogue: the twin is cpu::linear's store step, `v * sx[t] * w_scale[o]`, then its
// bias add `+ bias[o]` (Qwen2's q/k/v), written out here (they have no function of their own); the
// kernel multiplies and adds in that order, each rounded apart: bit for bit. A null sx means 1
// (y * 1 is exact). ---
void scale_output() {
  std::uint64_t seed = 600;
  for (int mode = 0; mode < 4; ++mode) {  // per-channel sw; per-tensor sw; per-channel sw and no sx; + bias
    const bool per_channel = mode != 1, with_sx = mode != 2, with_bias = mode == 3;
    for (int T : kTokenCounts) {
      for (int out : kWidths) {
        SCOPED_TRACE(case_name("scale_output", T, out, seed) + ", mode " + std::to_string(mode));
        const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(out);
        const std::vector<float> y = test::random_floats(rows * cols, seed++, 50.0f);
        std::vector<float> sx = test::random_floats(rows, seed++, 1e-3f),
                           sw = test::random_floats(per_channel ? cols : 1, seed++, 1e-2f);
        for (float& v : sx) v = std::fabs(v) + 1e-4f;  // scales are positive
        for (float& v : sw) v = std::fabs(v) + 1e-3f;
        const std::vector<float> bias = test::random_floats(cols, seed++, 0.5f);

        std::vector<float> cpu(y);
        for (std::size_t t = 0; t < rows; ++t)
          for (std::size_t o = 0; o < cols; ++o) {
            float& v = cpu[t * cols + o];
            v = with_sx ? v * sx[t] * sw[per_channel ? o : 0] : v * 1.0f * sw[per_channel ? o : 0];
            if (with_bias) v += bias[o];
          }

        const cuda::DeviceBuffer d_y = test::to_gpu(y), d_sx = test::to_gpu(sx), d_sw = test::to_gpu(sw), d_b = test::to_gpu(bias);
        cuda::scale_output_cuda(d_y.get<float>(), T, out, with_sx ? d_sx.get<float>() : nullptr, d_sw.get<float>(), per_channel,
                                nullptr, with_bias ? d_b.get<float>() : nullptr);
        EXPECT_EQ(compare_bits(test::from_gpu<float>(d_y, y.size()), cpu, cols), "");
      }
    }
  }
}

// --- --small-m-linear's FP8 linear for 1..8 tokens against its host twin small_m_linear_twin, bit
// for bit (src/cuda/small_m_linear.h: the lanes' order, the butterfly, the scales and the bias
// rounded apart): inputs that end mid-round of the lanes' loads, per-channel and per-tensor scales,
// with and without a bias, written or added to y (the residual add), and a shape it refuses. ---
void linear_fp8_small_m() {
  std::uint64_t seed = 1700;
  for (const int in : {16, 528, 4096, 14336}) {
    const int out = in == 14336 ? 64 : 257;
    for (int T = 1; T <= cuda::kSmallMMaxRows; ++T) {
      for (const bool per_channel : {true, false}) {
        SCOPED_TRACE(case_name("linear_fp8_small_m", T, out, seed) + ", in " + std::to_string(in) + (per_channel ? "" : ", per tensor"));
        const auto n_w = static_cast<std::size_t>(out) * static_cast<std::size_t>(in), n_x = static_cast<std::size_t>(T) * static_cast<std::size_t>(in);
        const std::vector<float> wf = test::random_floats(n_w, seed++, 0.05f), xf = test::random_floats(n_x, seed++, 2.0f);
        std::vector<std::uint8_t> wq(n_w), xq(n_x);
        std::vector<float> sw(static_cast<std::size_t>(out)), sx(static_cast<std::size_t>(T));
        quantize_fp8_rows(wf.data(), static_cast<std::size_t>(out), static_cast<std::size_t>(in), wq.data(), sw.data());
        quantize_fp8_rows(xf.data(), static_cast<std::size_t>(T), static_cast<std::size_t>(in), xq.data(), sx.data());
        if (!per_channel) sw.assign(1, sw[0]);
        const std::vector<float> bias = test::random_floats(static_cast<std::size_t>(out), seed++, 0.5f);
        const bool with_bias = T % 2 == 0, accumulate = T % 3 != 1;  // the residual add fused: y holds x
        std::vector<float> cpu = test::random_floats(static_cast<std::size_t>(T) * static_cast<std::size_t>(out), seed++, 3.0f);
        const cuda::DeviceBuffer d_w = test::to_gpu(wq), d_x = test::to_gpu(xq), d_sw = test::to_gpu(sw), d_sx = test::to_gpu(sx),
                                 d_b = test::to_gpu(bias), d_y = test::to_gpu(cpu);
        cuda::small_m_linear_twin(wq.data(), xq.data(), sx.data(), sw.data(), per_channel, with_bias ? bias.data() : nullptr, T, out, in,
                                  cpu.data(), accumulate);
        cuda::linear_fp8_small_m_cuda(d_w.get<std::uint8_t>(), d_x.get<std::uint8_t>(), d_sx.get<float>(), d_sw.get<float>(), per_channel,
                                      with_bias ? d_b.get<float>() : nullptr, T, out, in, d_y.get<float>(), nullptr,
                                      accumulate);
        EXPECT_EQ(compare_bits(test::from_gpu<float>(d_y, cpu.size()), cpu, static_cast<std::size_t>(out)), "");
      }
    }
  }
  EXPECT_THROW(cuda::linear_fp8_small_m_cuda(nullptr, nullptr, nullptr, nullptr, true, nullptr, 9, 16, 16, nullptr, nullptr), Error);
}

// --- swiglu: the same expression `g / (1 + exp(-g)) * up` and IEEE division on both sides, but
// CUDA's expf (max 2 ulp) is not the CPU's exp (exp_poly, within 2 ulp; glibc's exp only
// for g < -88). The two exps differ by up to 4 ulp, passed into 1 + exp scaled by
// exp / (1 + exp) <= 1; then the add, the division and the product each round once per side:
// under 7 ulp in all, rtol = 8 ulp (FLT_EPSILON = 1 ulp of 1). atol covers float subnormals. ---
constexpr float kSwigluRtol = 8.0f * std::numeric_limits<float>::epsilon();

// Gates of stddev 4 reach the saturated ends of silu; a few extremes where exp over/underflows.
std::vector<float> random_gates(std::size_t n, std::uint64_t seed) {
  std::vector<float> g = test::random_floats(n, seed, 4.0f);
  const float extremes[] = {-90.0f, -87.0f, -20.0f, 20.0f, 90.0f, -1e-30f};
  for (std::size_t i = 0; i < std::size(extremes) && i * 97 < n; ++i) g[i * 97] = extremes[i];
  return g;
}

void swiglu() {
  std::uint64_t seed = 700;
  for (int T : kTokenCounts) {
    for (int n : kWidths) {
      SCOPED_TRACE(case_name("swiglu", T, n, seed));
      const std::size_t total = static_cast<std::size_t>(T) * static_cast<std::size_t>(n);
      const std::vector<float> gate = random_gates(total, seed++), up = test::random_floats(total, seed++, 1.0f);
      std::vector<float> cpu(gate);
      cpu::swiglu(cpu.data(), up.data(), total);

      const cuda::DeviceBuffer d_gate = test::to_gpu(gate), d_up = test::to_gpu(up);
      cuda::swiglu_cuda(d_gate.get<float>(), d_up.get<float>(), T, n, nullptr);
      EXPECT_EQ(compare_close(test::from_gpu<float>(d_gate, total), cpu, static_cast<std::size_t>(n),
                              std::numeric_limits<float>::min(), kSwigluRtol),
                "");
    }
  }
}

// --- swiglu + FP8. Composed twin (no fused CPU op): cpu::swiglu, then quantize_fp8_rows or
// quantize_fp8_row, what cpu::linear does to down_proj's input. Values differ by kSwigluRtol,
// so compare_fp8's inexact mode, with the scale within kSwigluRtol plus the division's rounding. ---
void swiglu_quant_fp8() {
  std::uint64_t seed = 800;
  for (float static_scale : {0.0f, 2.0f / kFp8E4M3Max}) {  // dynamic; static, saturating beyond 2
    for (int T : kTokenCounts) {
      for (int n : kWidths) {
        SCOPED_TRACE(case_name("swiglu_quant_fp8", T, n, seed) + ", static_scale " + std::to_string(static_scale));
        const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(n);
        const std::vector<float> gate = random_gates(rows * cols, seed++), up = test::random_floats(rows * cols, seed++, 1.0f);
        std::vector<float> h(gate);
        cpu::swiglu(h.data(), up.data(), h.size());
        const Fp8Twin twin = quantize_twin(h.data(), rows, cols, static_scale);

        const cuda::DeviceBuffer d_gate = test::to_gpu(gate), d_up = test::to_gpu(up), d_q(h.size()), d_s(rows * sizeof(float));
        cuda::swiglu_quant_fp8_cuda(d_gate.get<float>(), d_up.get<float>(), T, n, static_scale, d_q.get<std::uint8_t>(),
                                    d_s.get<float>(), nullptr);
        EXPECT_EQ(compare_fp8(test::from_gpu<std::uint8_t>(d_q, h.size()), test::from_gpu<float>(d_s, rows), twin.q, twin.scales, cols,
                              /*exact=*/false, kSwigluRtol + 2 * kU),
                  "");
      }
    }
  }
}

// --- residual add: one IEEE add per element on both sides: bit for bit. ---
void residual_add() {
  std::uint64_t seed = 900;
  for (int T : kTokenCounts) {
    for (int dim : kWidths) {
      SCOPED_TRACE(case_name("residual_add", T, dim, seed));
      const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(dim);
      const std::vector<float> x = test::random_floats(n, seed++, 3.0f), y = test::random_floats(n, seed++, 0.5f);
      std::vector<float> cpu(x);
      for (std::size_t i = 0; i < n; ++i) cpu[i] += y[i];  // the CPU engine's residual loop
      const cuda::DeviceBuffer d_x = test::to_gpu(x), d_y = test::to_gpu(y);
      cuda::residual_add_cuda(d_x.get<float>(), d_y.get<float>(), n, nullptr);
      EXPECT_EQ(compare_bits(test::from_gpu<float>(d_x, n), cpu, static_cast<std::size_t>(dim)), "");
    }
  }
}

// --- bias add after a BF16 / F32 GEMM: one IEEE add per element, as cpu::linear's bias add: bit
// for bit. ---
void bias_add() {
  std::uint64_t seed = 950;
  for (int T : kTokenCounts) {
    for (int out : kWidths) {
      SCOPED_TRACE(case_name("bias_add", T, out, seed));
      const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(out);
      const std::vector<float> y = test::random_floats(rows * cols, seed++, 3.0f), bias = test::random_floats(cols, seed++, 0.5f);
      std::vector<float> cpu(y);
      for (std::size_t t = 0; t < rows; ++t)
        for (std::size_t o = 0; o < cols; ++o) cpu[t * cols + o] += bias[o];  // cpu::linear's bias add
      const cuda::DeviceBuffer d_y = test::to_gpu(y), d_b = test::to_gpu(bias);
      cuda::bias_add_cuda(d_y.get<float>(), T, out, d_b.get<float>(), nullptr);
      EXPECT_EQ(compare_bits(test::from_gpu<float>(d_y, y.size()), cpu, cols), "");
    }
  }
}

// --- argmax: comparisons only, so exact: the index std::max_element returns (the first maximum),
// on random rows and on rows built to catch a wrong tie-break across threads and warps, -inf rows,
// and NaN (never chosen unless it is element 0, as with std::max_element's operator<). ---
void argmax() {
  std::uint64_t seed = 1000;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int V : {1, 2, 33, 1000, 4097, 32000, 128256}) {
    constexpr int T = 9;
    SCOPED_TRACE(case_name("argmax", T, V, seed));
    const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(V);
    std::vector<float> logits = test::random_floats(rows * cols, seed++, 3.0f);
    float* row[T];
    for (std::size_t t = 0; t < rows; ++t) row[t] = logits.data() + t * cols;
    // Rows 0-2 random. Row 3: the maximum three times, the lowest index in a later warp's stride than
    // the others' thread; row 4: all equal; row 5: all -inf; row 6: NaN first; row 7: NaN elsewhere,
    // including where the maximum would be; row 8: all NaN.
    const std::size_t hi = cols - 1, mid = cols / 2, low = std::min<std::size_t>(cols - 1, 37);
    row[3][hi] = row[3][mid] = row[3][low] = 100.0f;
    std::fill_n(row[4], cols, 0.25f);
    std::fill_n(row[5], cols, -inf);
    row[6][0] = nan;
    row[7][mid] = 100.0f;
    for (std::size_t c = 1; c < cols; c += 3) row[7][c] = nan;
    std::fill_n(row[8], cols, nan);

    std::vector<int> cpu(rows);
    for (std::size_t t = 0; t < rows; ++t) cpu[t] = static_cast<int>(std::max_element(row[t], row[t] + cols) - row[t]);
    const cuda::DeviceBuffer d_logits = test::to_gpu(logits), d_out(rows * sizeof(int));
    cuda::argmax_cuda(d_logits.get<float>(), T, V, d_out.get<int>(), nullptr);
    const std::vector<int> gpu = test::from_gpu<int>(d_out, rows);
    EXPECT_EQ(mismatches(
                  rows, 1, [&](std::size_t t) { return gpu[t] == cpu[t]; },
                  [&](std::size_t t) { return "gpu " + std::to_string(gpu[t]) + ", cpu " + std::to_string(cpu[t]); }),
              "");
  }
}

// --- BF16 -> fp32: widening is exact on both sides: bit for bit, over every BF16 bit pattern
// (normals, subnormals, zeros, infinities and NaNs of both signs), shuffled. ---
void bf16_to_f32() {
  std::vector<std::uint16_t> x(1u << 16);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i);
  std::shuffle(x.begin(), x.end(), std::mt19937(7100));
  const cuda::DeviceBuffer dx = test::to_gpu(x);
  cuda::DeviceBuffer dy(x.size() * 4);
  cuda::bf16_to_f32_cuda(dx.get<std::uint16_t>(), x.size(), dy.get<float>(), nullptr);
  const std::vector<float> y = test::from_gpu<float>(dy, x.size());
  std::vector<float> cpu(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) cpu[i] = bf16_to_float(x[i]);
  EXPECT_EQ(compare_bits(y, cpu, x.size()), "");
}

// One row per launcher.
struct OpRow {
  const char* launcher;   // as src/cuda/kernels.h declares it (and tests/gpu_op_names.h lists it)
  const char* twin;       // the CPU function (or loop) it must agree with
  const char* tolerance;  // how close, and in short why (its check's comment derives it)
  void (*check)();        // the seeded inputs, the launch, the twin and the comparison
};

const OpRow kRows[] = {
    {"embedding_cuda", "cpu::embedding", "bit for bit: a row copy, BF16 widened exactly", embedding},
    {"rmsnorm_cuda", "cpu::rmsnorm", "relative 2^-24 (8 + 2 sqrt(dim)): the sum of squares in another order", rmsnorm},
    {"rmsnorm_quant_fp8_cuda", "cpu::rmsnorm, then quantize_fp8_rows / quantize_fp8_row",
     "one E4M3 step: a normalized value that differs in its last bits may round the other way", rmsnorm_quant_fp8},
    {"quantize_act_fp8_cuda", "quantize_fp8_rows / quantize_fp8_row", "bit for bit: the row maximum and the division are order-free",
     quantize_act_fp8},
    {"f32_to_bf16_cuda", "bf16_from_float", "bit for bit: both round to nearest even", f32_to_bf16},
    {"bf16_to_f32_cuda", "bf16_to_float", "bit for bit: widening BF16 is exact", bf16_to_f32},
    {"scale_output_cuda", "the store step of cpu::linear (and its bias add)", "bit for bit: the same two rounded multiplies (and add)",
     scale_output},
    {"bias_add_cuda", "the bias add of cpu::linear", "bit for bit: one rounded add", bias_add},
    {"linear_fp8_small_m_cuda", "cuda::small_m_linear_twin (within 2 gamma_K sum |w a| of cpu::linear: test_small_m_linear)",
     "bit for bit: the same exact products added in the stated order, the scales and bias rounded apart", linear_fp8_small_m},
    {"linear_fp8_mma_cuda", "cuda::small_m_mma_twin (each product's exact sum rounded once)",
     "small_m_mma_bound: (2^-12 + (2C + 2S + 4) u) sum |w a| scaled, each chunk's truncated mma sums 2^-12 of its terms; the fraction bit "
     "for bit and the worst ratio are printed",
     linear_fp8_mma},
    {"linear_fp8_small_m_fused_cuda", "small_m_prologue_twin then small_m_linear_twin; with rope, the unfused kernels on the device",
     "bit for bit: the row kernels' codes, the same product, rope_kv_write_cuda's arithmetic", linear_fp8_small_m_fused},
    {"swiglu_cuda", "cpu::swiglu", "relative 8 eps: CUDA's expf and the CPU's exp differ by a few ulp", swiglu},
    {"swiglu_quant_fp8_cuda", "cpu::swiglu, then quantize_fp8_rows / quantize_fp8_row",
     "one E4M3 step: the exp's last bits may move a value across a rounding boundary", swiglu_quant_fp8},
    {"residual_add_cuda", "the CPU engine's residual loop", "bit for bit: one rounded add", residual_add},
    {"argmax_cuda", "std::max_element", "exact: the first index of the maximum", argmax},
    {"fp8_rows_to_f32_cuda", "the CPU engine's KV read, fp8_e4m3_to_float(code) * scale", "bit for bit: one rounded multiply",
     fp8_rows_to_f32},
    {"rope_kv_write_cuda", "cpu::rope, then bf16_from_float or quantize_fp8_rows per KV head",
     "q 4e-6 + 2^-22 relative (sin/cos differ by <= 3 ulp); v bit for bit; k one BF16 ulp on <= 1%, or one E4M3 step",
     rope_kv_write},
    {"decode_attention_cuda", "cpu::decode_attention", "5e-5 + 2e-4 relative: softmax sums in another order", decode_attention},
    {"decode_merge_cuda", "cpu::decode_attention (the split path's merge)", "as decode_attention_cuda: chunks merged by log-sum-exp",
     decode_merge},
    {"decode_attention_tiled_cuda", "cpu::decode_attention", "as decode_attention_cuda: positions summed in tiles",
     decode_attention_tiled},
    {"prefill_attention_cuda", "cpu::prefill_attention", "as decode_attention_cuda: softmax sums in another order", prefill_attention},
    {"prefill_attention_segments_cuda", "cpu::prefill_attention over each segment, q_offset its first position",
     "as prefill_attention_cuda: the same online softmax", prefill_attention_segments},
    {"sample_token_cuda", "bestofn::sample_token",
     "tokens exact at any launch shape and tile size; logprobs 2^-22 (|L| + |lse| + |logprob|): the log-sum-exp summed per chunk",
     sample_token},
    {"gather_prefix_queries_cuda", "a copy of each (t, h) query row to state_row(t, h)", "bit for bit: a copy",
     gather_prefix_queries},
    {"prefix_softmax_cuda", "each row's max, exp(s - max) and its sum, in double",
     "m exact; exp 4 ulp (CUDA's expf); l 2^-24 (4 + L) relative: the sum in another order", prefix_softmax},
    {"prefix_merge_cuda", "the log-sum-exp merge of the prefix state (m, l, o) with the suffix's, in double",
     "as decode_attention_cuda: the suffix's sums in another order", prefix_merge},
    {"expand_step_pointers_cuda", "cuda::expand_step_pointers (src/cuda/step_plan.h)", "bit for bit: integer adds and multiplies",
     expand_step_pointers},
    {"gather_queries_bf16_cuda", "bf16_from_float of each row in the given order", "bit for bit: both round to nearest even",
     gather_queries_bf16},
    {"cascade_prefix_attention_cuda", "cpu::decode_attention on each side (prefix: BF16 queries), merged by log-sum-exp in double",
     "lse 1e-4; prefix 2^-8 (max|v| + |ref|): BF16 softmax weights and output; FP8 rows = BF16 rows bit for bit",
     cascade_prefix_attention},
    {"cascade_merge_cuda", "the log-sum-exp merge of the cascade's state (base-2 lse, BF16 o) with the suffix's, in double",
     "as decode_attention_cuda: the suffix's sums in another order", cascade_merge},
    {"cascade_suffix_attention_cuda", "cpu::decode_attention over each paged suffix alone, its log-sum-exp in double",
     "as decode_attention_cuda (FlashInfer's F32 scores, exp2); lse 1e-4; an empty suffix: lse -inf, zeros", cascade_suffix_attention},
    {"cascade_state_merge_cuda", "the log-sum-exp merge of the prefix state with a row's suffix chunk states, in double",
     "1e-6 + 2^-17 max|o|: F32 expf of lse x ln 2", cascade_state_merge},
};

// Runs without a device: the compiled table against the launcher list.
TEST(GpuOps, EveryListedLauncherHasARow) {
  std::set<std::string_view> rows, listed(std::begin(test::kGpuOpLaunchers), std::end(test::kGpuOpLaunchers));
  for (const OpRow& row : kRows) EXPECT_TRUE(rows.insert(row.launcher).second) << row.launcher << ": two rows";
  for (std::string_view name : listed) EXPECT_TRUE(rows.count(name)) << name << " (tests/gpu_op_names.h) has no row in kRows";
  for (std::string_view name : rows) EXPECT_TRUE(listed.count(name)) << name << ": a row for a launcher tests/gpu_op_names.h lacks";
}

// gtest names a row by its launcher (in --gtest_list_tests and on failure), not by its bytes.
void PrintTo(const OpRow& row, std::ostream* out) { *out << row.launcher; }

class GpuOp : public testing::TestWithParam<OpRow> {};

TEST_P(GpuOp, MatchesCpuTwin) {
  SKIP_WITHOUT_GPU();
  const OpRow& row = GetParam();
  SCOPED_TRACE(std::string(row.launcher) + " against " + row.twin + " (" + row.tolerance + ")");
  row.check();
}

INSTANTIATE_TEST_SUITE_P(Table, GpuOp, testing::ValuesIn(kRows),
                         [](const testing::TestParamInfo<OpRow>& row) { return std::string(row.param.launcher); });

}  // namespace
}  // namespace bestofn::gpu_ops
