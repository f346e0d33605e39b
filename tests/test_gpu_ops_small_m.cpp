// The GPU op table's row for --small-m-linear's fused forms (linear_fp8_small_m_fused_cuda, the
// table: tests/test_gpu_ops.cpp): each against what it fuses, bit for bit.
// - Rows with a Quant or NormQuant prologue (F32 and BF16 norm weights, dynamic and static scales),
//   written or added to y: the host twin chain small_m_prologue_twin -> small_m_linear_twin.
// - The prologue's codes are the row kernels' (rmsnorm_quant_fp8_cuda's codes against
//   small_m_prologue_twin: the order of rowops::inv_rms's sum pinned by its twin).
// - Heads without rope: the q, k, v columns of that chain, apart.
// - With PDL: after a kernel that writes its input, launched early on the same stream.
// - Heads with rope: the unfused kernels on the device (rmsnorm_quant_fp8_cuda, then
//   linear_fp8_small_m_cuda, the columns apart, rope_kv_write_cuda into cache rows shuffled so that
//   the kernel must follow the row pointers): q and both caches' rows, the same bits (CUDA's cosf /
//   sinf on both sides).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bestofn/model/model_config.h"
#include "bestofn/model/quantize.h"
#include "bestofn/model/rope.h"
#include "bestofn/util/numeric.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"
#include "gpu_attention_util.h"
#include "gpu_op_rows.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn::gpu_ops {
namespace {

using test::DeviceArray, test::sync;

std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0) return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " + std::to_string(want[i]);
  return got.size() == want.size() ? "" : "sizes differ";
}

template <typename U>
std::string first_difference(const std::vector<U>& got, const std::vector<U>& want) {
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    if (got[i] != want[i]) return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " + std::to_string(want[i]);
  return got.size() == want.size() ? "" : "sizes differ";
}

struct Linear {
  std::vector<std::uint8_t> w;
  std::vector<float> sw, bias;
};

Linear random_linear(int out, int in, std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(out) * static_cast<std::size_t>(in);
  const std::vector<float> wf = test::random_floats(n, seed, 0.05f);
  Linear l;
  l.w.resize(n), l.sw.resize(static_cast<std::size_t>(out));
  quantize_fp8_rows(wf.data(), static_cast<std::size_t>(out), static_cast<std::size_t>(in), l.w.data(), l.sw.data());
  l.bias = test::random_floats(static_cast<std::size_t>(out), seed + 1, 0.5f);
  return l;
}

// Rows: the prologue twin then the linear twin, against the kernel; and the prologue's codes
// against rmsnorm_quant_fp8_cuda's / quantize_act_fp8_cuda's.
void rows_cases() {
  std::uint64_t seed = 9100;
  for (const int in : {16, 528, 4096})
    for (int T = 1; T <= cuda::kSmallMMaxRows; ++T)
      for (const auto prologue : {cuda::SmallMPrologue::Quant, cuda::SmallMPrologue::NormQuant}) {
        const bool norm = prologue == cuda::SmallMPrologue::NormQuant, bf16 = T % 2 == 0, accumulate = T % 3 == 0;
        const float static_scale = T == 5 ? 0.02f : 0.0f;
        const int out = 261, max_blocks = T == 1 ? 0 : T;  // the grid cap: each block loops over its rows
        SCOPED_TRACE("rows, T " + std::to_string(T) + ", in " + std::to_string(in) + (norm ? (bf16 ? ", BF16 norm" : ", F32 norm") : ", quant") +
                     (accumulate ? ", added" : "") + ", seed " + std::to_string(seed));
        const auto nx = static_cast<std::size_t>(T) * static_cast<std::size_t>(in), ny = static_cast<std::size_t>(T) * static_cast<std::size_t>(out);
        const std::vector<float> x = test::random_floats(nx, seed++, 3.0f);
        std::vector<float> g = test::random_floats(static_cast<std::size_t>(in), seed++, 1.5f);
        std::vector<std::uint16_t> g16(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) g16[i] = bf16_from_float(g[i]), g[i] = bf16 ? bf16_to_float(g16[i]) : g[i];
        const Linear l = random_linear(out, in, seed);
        seed += 2;
        std::vector<float> want = test::random_floats(ny, seed++, 2.0f);
        const DeviceArray<float> d_y(want);
        std::vector<std::uint8_t> codes(nx);
        std::vector<float> scales(static_cast<std::size_t>(T));
        cuda::small_m_prologue_twin(x.data(), norm ? g.data() : nullptr, T, in, 1e-5f, static_scale, codes.data(), scales.data());
        cuda::small_m_linear_twin(l.w.data(), codes.data(), scales.data(), l.sw.data(), true, l.bias.data(), T, out, in, want.data(), accumulate);

        const DeviceArray<float> d_x(x), d_g(g), d_sw(l.sw), d_b(l.bias), d_s(static_cast<std::size_t>(T));
        const DeviceArray<std::uint16_t> d_g16(g16);
        const DeviceArray<std::uint8_t> d_w(l.w), d_q(nx);
        cuda::SmallMFused f;
        f.w = d_w.get(), f.sw = d_sw.get(), f.per_channel = true, f.bias = d_b.get(), f.T = T, f.out = out, f.in = in;
        f.prologue = prologue, f.x = d_x.get(), f.norm = bf16 ? static_cast<const void*>(d_g16.get()) : d_g.get(), f.norm_bf16 = bf16;
        f.eps = 1e-5f, f.static_scale = static_scale, f.y = d_y.get(), f.accumulate = accumulate, f.max_blocks = max_blocks;
        cuda::linear_fp8_small_m_fused_cuda(f, nullptr);
        sync();
        EXPECT_EQ(first_difference(d_y.download(), want), "");
        // The row kernels' codes are the prologue's (the twin's order is theirs).
        if (norm)
          cuda::rmsnorm_quant_fp8_cuda(d_x.get(), f.norm, bf16 ? DType::BF16 : DType::F32, T, in, 1e-5f, static_scale, d_q.get(), d_s.get(), nullptr);
        else
          cuda::quantize_act_fp8_cuda(d_x.get(), T, in, static_scale, d_q.get(), d_s.get(), nullptr);
        sync();
        EXPECT_EQ(first_difference(d_q.download(), codes), "");
        EXPECT_EQ(first_difference(d_s.download(), scales), "");
      }
}

// --small-m-pdl: the kernel launched early, while the kernel before it still writes its input. A
// residual add (x += delta, a large grid) right before the PDL launch on the same stream: a block
// that read x before its wait would see the old x, and the result would not be the twin's of x +
// delta. Large shapes, so that the early-launch window is wide.
void pdl_case() {
  if (!cuda::small_m_pdl_supported()) {
    ADD_FAILURE() << "the device cannot run --small-m-pdl's launches (compute capability 9.0 and sm_90 code needed)";
    return;
  }
  const int T = 8, in = 4096, out = 14336;
  std::uint64_t seed = 9900;
  const auto nx = static_cast<std::size_t>(T * in);
  std::vector<float> x = test::random_floats(nx, seed++, 3.0f);
  const std::vector<float> delta = test::random_floats(nx, seed++, 50.0f), g = test::random_floats(static_cast<std::size_t>(in), seed++, 1.5f);
  const Linear l = random_linear(out, in, seed);
  const DeviceArray<float> d_x(x), d_delta(delta), d_g(g), d_sw(l.sw), d_b(l.bias), d_y(static_cast<std::size_t>(T) * out);
  const DeviceArray<std::uint8_t> d_w(l.w);
  for (std::size_t i = 0; i < nx; ++i) x[i] += delta[i];  // the residual add's one rounded add
  std::vector<std::uint8_t> codes(nx);
  std::vector<float> scales(T), want(static_cast<std::size_t>(T) * out);
  cuda::small_m_prologue_twin(x.data(), g.data(), T, in, 1e-5f, 0.0f, codes.data(), scales.data());
  cuda::small_m_linear_twin(l.w.data(), codes.data(), scales.data(), l.sw.data(), true, l.bias.data(), T, out, in, want.data());
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::residual_add_cuda(d_x.get(), d_delta.get(), nx, stream);
  cuda::SmallMFused f;
  f.w = d_w.get(), f.sw = d_sw.get(), f.bias = d_b.get(), f.T = T, f.out = out, f.in = in;
  f.prologue = cuda::SmallMPrologue::NormQuant, f.x = d_x.get(), f.norm = d_g.get(), f.eps = 1e-5f, f.y = d_y.get();
  f.max_blocks = 264, f.pdl = true;
  cuda::linear_fp8_small_m_fused_cuda(f, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(first_difference(d_y.download(), want), "");
}

struct HeadCase {
  int T, n_heads, n_kv, hd, dim;
};

// Heads: without rope against the twin chain's columns; with rope against the unfused kernels.
void heads_cases() {
  std::uint64_t seed = 9500;
  for (const HeadCase& h : {HeadCase{1, 4, 2, 64, 256}, HeadCase{3, 8, 8, 64, 512}, HeadCase{8, 32, 8, 128, 4096}, HeadCase{5, 9, 3, 64, 576}})
    for (const bool rope : {false, true}) {
      SCOPED_TRACE("heads, T " + std::to_string(h.T) + ", " + std::to_string(h.n_heads) + "/" + std::to_string(h.n_kv) + " heads of " +
                   std::to_string(h.hd) + (rope ? ", rope" : "") + ", seed " + std::to_string(seed));
      const auto N = static_cast<std::size_t>(h.T), qd = static_cast<std::size_t>(h.n_heads * h.hd), kvd = static_cast<std::size_t>(h.n_kv * h.hd);
      const int out = static_cast<int>(qd + 2 * kvd);
      const std::vector<float> x = test::random_floats(N * static_cast<std::size_t>(h.dim), seed++, 3.0f),
                               g = test::random_floats(static_cast<std::size_t>(h.dim), seed++, 1.5f);
      const Linear l = random_linear(out, h.dim, seed);
      seed += 2;
      ModelConfig c;
      c.head_dim = h.hd, c.rope_theta = 500000.0;
      const std::vector<float> inv_freq = rope_inv_freq(c);
      std::mt19937_64 rng(seed++);
      std::vector<int> pos(N);
      for (auto& p : pos) p = std::uniform_int_distribution<int>(0, 131071)(rng);
      std::vector<std::size_t> slot(N);
      for (std::size_t t = 0; t < N; ++t) slot[t] = t;
      std::shuffle(slot.begin(), slot.end(), rng);

      const DeviceArray<float> d_x(x), d_g(g), d_sw(l.sw), d_b(l.bias), d_freq(inv_freq), d_s(N), d_y(N * static_cast<std::size_t>(out));
      const DeviceArray<std::uint8_t> d_w(l.w), d_codes(N * static_cast<std::size_t>(h.dim));
      const DeviceArray<int> d_pos(pos);
      const DeviceArray<float> d_q(N * qd), d_k(N * kvd), d_v(N * kvd), d_q2(N * qd), d_k2(N * kvd), d_v2(N * kvd);
      const DeviceArray<std::uint16_t> d_kc(std::vector<std::uint16_t>(N * kvd, 0xAAAA)), d_vc(std::vector<std::uint16_t>(N * kvd, 0xAAAA)),
          d_kc2(std::vector<std::uint16_t>(N * kvd, 0x5555)), d_vc2(std::vector<std::uint16_t>(N * kvd, 0x5555));
      auto rows_of = [&](const DeviceArray<std::uint16_t>& cache) {
        std::vector<std::uint16_t*> r(N);
        for (std::size_t t = 0; t < N; ++t) r[t] = cache.get() + slot[t] * kvd;
        return r;
      };
      const DeviceArray<std::uint16_t*> d_kr(rows_of(d_kc)), d_vr(rows_of(d_vc)), d_kr2(rows_of(d_kc2)), d_vr2(rows_of(d_vc2));

      cuda::SmallMFused f;
      f.w = d_w.get(), f.sw = d_sw.get(), f.per_channel = true, f.bias = d_b.get(), f.T = h.T, f.out = out, f.in = h.dim;
      f.prologue = cuda::SmallMPrologue::NormQuant, f.x = d_x.get(), f.norm = d_g.get(), f.eps = 1e-5f;
      f.epilogue = cuda::SmallMEpilogue::Heads, f.n_heads = h.n_heads, f.n_kv = h.n_kv, f.hd = h.hd, f.q = d_q.get(), f.max_blocks = 3;
      if (rope)
        f.rope = true, f.pos = d_pos.get(), f.inv_freq = d_freq.get(), f.k_rows = d_kr.get(), f.v_rows = d_vr.get();
      else
        f.k = d_k.get(), f.v = d_v.get();
      cuda::linear_fp8_small_m_fused_cuda(f, nullptr);
      sync();
      if (!rope) {  // the twin chain, its columns apart
        std::vector<std::uint8_t> codes(N * static_cast<std::size_t>(h.dim));
        std::vector<float> scales(N), y(N * static_cast<std::size_t>(out));
        cuda::small_m_prologue_twin(x.data(), g.data(), h.T, h.dim, 1e-5f, 0.0f, codes.data(), scales.data());
        cuda::small_m_linear_twin(l.w.data(), codes.data(), scales.data(), l.sw.data(), true, l.bias.data(), h.T, out, h.dim, y.data());
        std::vector<float> q(N * qd), k(N * kvd), v(N * kvd);
        for (std::size_t t = 0; t < N; ++t) {
          const float* yt = y.data() + t * static_cast<std::size_t>(out);
          std::copy_n(yt, qd, q.begin() + static_cast<std::ptrdiff_t>(t * qd));
          std::copy_n(yt + qd, kvd, k.begin() + static_cast<std::ptrdiff_t>(t * kvd));
          std::copy_n(yt + qd + kvd, kvd, v.begin() + static_cast<std::ptrdiff_t>(t * kvd));
        }
        EXPECT_EQ(first_difference(d_q.download(), q), "");
        EXPECT_EQ(first_difference(d_k.download(), k), "");
        EXPECT_EQ(first_difference(d_v.download(), v), "");
        continue;
      }
      // The unfused kernels: the norm and codes, the product, the columns apart, RoPE and the write.
      cuda::rmsnorm_quant_fp8_cuda(d_x.get(), d_g.get(), DType::F32, h.T, h.dim, 1e-5f, 0.0f, d_codes.get(), d_s.get(), nullptr);
      cuda::linear_fp8_small_m_cuda(d_w.get(), d_codes.get(), d_s.get(), d_sw.get(), true, d_b.get(), h.T, out, h.dim, d_y.get(), nullptr);
      for (const auto& [dst, off, width] : {std::tuple{d_q2.get(), std::size_t{0}, qd}, std::tuple{d_k2.get(), qd, kvd}, std::tuple{d_v2.get(), qd + kvd, kvd}})
        CUDA_CHECK(cudaMemcpy2D(dst, width * 4, d_y.get() + off, static_cast<std::size_t>(out) * 4, width * 4, N, cudaMemcpyDeviceToDevice));
      cuda::rope_kv_write_cuda(d_q2.get(), d_k2.get(), d_v2.get(), d_pos.get(), d_freq.get(), h.T, h.n_heads, h.n_kv, h.hd, d_kr2.get(),
                               d_vr2.get(), nullptr);
      sync();
      EXPECT_EQ(first_difference(d_q.download(), d_q2.download()), "");
      EXPECT_EQ(first_difference(d_kc.download(), d_kc2.download()), "");
      EXPECT_EQ(first_difference(d_vc.download(), d_vc2.download()), "");
    }
}

}  // namespace

// 9-64 rows on tensor cores against small_m_mma_twin: every value within the contract's bound
// (small_m_mma_bound: each chunk's truncated tensor-core sums allowed 2^-12 of its terms), the
// fraction equal bit for bit and the worst |kernel - twin| / sum|w a| printed (what Hopper's FP8
// accumulation does, measured); one slice and several, written and added to y, with a bias, twice
// on the same counters (left at 0); at in = 4096 also codes of one sign (the running sum grows with
// every product: where a slice chained through the mma's C operand broke the bound).
void linear_fp8_mma() {
  if (!cuda::small_m_mma_supported()) {
    ADD_FAILURE() << "the device cannot run linear_fp8_mma_cuda (compute capability 8.9 needed)";
    return;
  }
  std::uint64_t seed = 9700;
  std::size_t same = 0, all = 0;
  double worst = 0.0;
  for (const int in_case : {64, 576, 4096, -4096})  // -4096: 4096 codes of one sign
    for (const int T : {9, 16, 23, 40, 64}) {
      const bool one_sign = in_case < 0;
      const int in = std::abs(in_case), out = in == 4096 ? 1024 : 272;
      if (one_sign && T != 9 && T != 64) continue;
      const bool accumulate = T % 2 == 1;
      const auto nx = static_cast<std::size_t>(T) * static_cast<std::size_t>(in), ny = static_cast<std::size_t>(T) * static_cast<std::size_t>(out);
      std::vector<float> xf = test::random_floats(nx, seed++, 2.0f);
      if (one_sign)
        for (float& v : xf) v = std::fabs(v);
      std::vector<std::uint8_t> xq(nx);
      std::vector<float> sx(static_cast<std::size_t>(T));
      quantize_fp8_rows(xf.data(), static_cast<std::size_t>(T), static_cast<std::size_t>(in), xq.data(), sx.data());
      Linear l = random_linear(out, in, seed);
      if (one_sign)
        for (std::uint8_t& c : l.w) c &= 0x7f;
      seed += 2;
      const std::vector<float> y0 = test::random_floats(ny, seed++, 3.0f);
      std::vector<double> mag(ny, 0.0);  // sum_k |w a| of each (t, o)
      for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t)
        for (std::size_t o = 0; o < static_cast<std::size_t>(out); ++o)
          for (std::size_t k = 0; k < static_cast<std::size_t>(in); ++k)
            mag[t * static_cast<std::size_t>(out) + o] += std::fabs(static_cast<double>(fp8_e4m3_to_float(l.w[o * static_cast<std::size_t>(in) + k])) *
                                                                    fp8_e4m3_to_float(xq[t * static_cast<std::size_t>(in) + k]));
      const DeviceArray<std::uint8_t> d_w(l.w), d_x(xq);
      const DeviceArray<float> d_sx(sx), d_sw(l.sw), d_b(l.bias);
      for (const int slices : {1, 3, 8}) {
        if (slices > in / cuda::kMmaChunk) continue;
        SCOPED_TRACE("mma, T " + std::to_string(T) + ", " + std::to_string(out) + " x " + std::to_string(in) + ", " + std::to_string(slices) +
                     " slices, seed " + std::to_string(seed));
        std::vector<float> want = y0;
        cuda::small_m_mma_twin(l.w.data(), xq.data(), sx.data(), l.sw.data(), true, l.bias.data(), T, out, in, slices, want.data(), accumulate);
        const DeviceArray<float> d_work(std::max<std::size_t>(cuda::small_m_mma_workspace_floats(T, out, slices), 1));
        const DeviceArray<int> d_counters(std::vector<int>(static_cast<std::size_t>(out / cuda::kMmaRowsPerWarp), 0));
        const double rounding = cuda::small_m_mma_bound(in, slices);
        for (int run = 0; run < 2; ++run) {
          const DeviceArray<float> d_y(y0);
          cuda::linear_fp8_mma_cuda(d_w.get(), d_x.get(), d_sx.get(), d_sw.get(), true, d_b.get(), T, out, in, d_y.get(), nullptr, accumulate,
                                    slices, d_work.get(), d_counters.get());
          sync();
          const std::vector<float> got = d_y.download();
          for (std::size_t i = 0; i < ny; ++i) {
            const std::size_t t = i / static_cast<std::size_t>(out), o = i % static_cast<std::size_t>(out);
            const double bound = rounding * mag[i] * static_cast<double>(sx[t]) * l.sw[o] + 4 * 0x1p-24 * std::fabs(static_cast<double>(want[i]));
            EXPECT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), bound) << "[" << t << ", " << o << "], run " << run;
            const double scaled = mag[i] * static_cast<double>(sx[t]) * l.sw[o];
            if (scaled > 0) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / scaled);
            same += std::memcmp(&got[i], &want[i], 4) == 0, ++all;
          }
        }
        const std::vector<int> counters = d_counters.download();
        EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), static_cast<std::ptrdiff_t>(counters.size()));
      }
    }
  std::printf("[ mma      ] %zu of %zu values equal the twin (each product's exact sum, rounded once) bit for bit; worst |kernel - twin| / "
              "sum|w a| 2^%.1f (bound at in 4096, 1 slice: 2^%.1f)\n",
              same, all, worst > 0 ? std::log2(worst) : -999.0, std::log2(cuda::small_m_mma_bound(4096, 1)));
  ::testing::Test::RecordProperty("mma_worst_log2", std::to_string(worst > 0 ? std::log2(worst) : -999.0));
  ::testing::Test::RecordProperty("mma_bit_for_bit", std::to_string(same) + " / " + std::to_string(all));
  EXPECT_THROW(cuda::linear_fp8_mma_cuda(nullptr, nullptr, nullptr, nullptr, true, nullptr, 8, 16, 64, nullptr, nullptr, false, 1, nullptr, nullptr),
               Error);  // 8 rows: the CUDA-core kernel's
}

void linear_fp8_small_m_fused() {
  rows_cases();
  heads_cases();
  pdl_case();
  // Refused: no activations; Heads without a prologue (everything else it needs given).
  const DeviceArray<std::uint8_t> d_w(std::vector<std::uint8_t>(48 * 16, 0x38)), d_a(std::vector<std::uint8_t>(16, 0x38));
  const DeviceArray<float> d_s(std::vector<float>(48, 1.0f)), d_q(32), d_k(8), d_v(8);
  cuda::SmallMFused f;
  f.T = 1, f.out = 48, f.in = 16, f.w = d_w.get(), f.sw = d_s.get(), f.y = d_q.get();
  try {
    cuda::linear_fp8_small_m_fused_cuda(f, nullptr);
    ADD_FAILURE() << "no activations: not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no activation codes"), std::string::npos) << e.what();
  }
  f.a = d_a.get(), f.sx = d_s.get();
  f.epilogue = cuda::SmallMEpilogue::Heads, f.n_heads = 1, f.n_kv = 1, f.hd = 16, f.q = d_q.get(), f.k = d_k.get(), f.v = d_v.get();
  EXPECT_EQ(cuda::small_m_fused_refusal(f), "");  // the shape itself is fine
  try {
    cuda::linear_fp8_small_m_fused_cuda(f, nullptr);
    ADD_FAILURE() << "Heads without a prologue: not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("with a prologue only"), std::string::npos) << e.what();
  }
}

}  // namespace bestofn::gpu_ops
