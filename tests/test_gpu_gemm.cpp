// cuBLASLt GEMMs (src/cuda/gemm.cpp) with the FP8 epilogue against a double-precision CPU
// reference on the same inputs. Tolerance, BF16 and F32: fp32 accumulation of `in` exact products
// (BF16 x BF16 products are exact in fp32) has error <= in * 2^-24 * sum|terms| in the worst case;
// we allow 4 * sqrt(in) * 2^-24 * sum|terms| + 1e-30, the usual random-walk bound with margin.
// FP8: Hopper's FP8 tensor cores keep ~14 mantissa bits in the running sum between promotions to
// F32 (DeepSeek-V3 technical report, sec. 3.3.2: "around 14 bits"), so one chunk's sum may be off
// by ~2^-14 of its sum of |terms|, whatever K is; the first H200 run saw ~2e-5 (2^-15.6) relative
// to sum|terms| at K = 64 (benchmarks/results/2026-11-29-nvidia-h200). We allow 2^-12 sum|terms|
// and print the worst ratio per case. A wrong scale, row or code is off by O(1) of the value.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "bestofn/model/quantize.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "test_util.h"

using namespace bestofn;

namespace {

struct Case {
  int out, in, T;
};

// Compares y (T, out) with the reference built from dequantized inputs xd (T, in), wd (out, in).
void expect_gemm(const std::vector<float>& y, const std::vector<double>& xd, const std::vector<double>& wd, const Case& c,
                 const std::string& what, bool fp8_accumulation = false) {
  int bad = 0;
  double worst = 0;  // max |got - ref| / sum|terms|
  for (int t = 0; t < c.T; ++t)
    for (int o = 0; o < c.out; ++o) {
      double ref = 0, mag = 0;
      for (int i = 0; i < c.in; ++i) {
        const double term = xd[static_cast<std::size_t>(t * c.in + i)] * wd[static_cast<std::size_t>(o * c.in + i)];
        ref += term;
        mag += std::fabs(term);
      }
      const double tol = (fp8_accumulation ? 0x1p-12 : 4 * std::sqrt(static_cast<double>(c.in)) * 0x1p-24) * mag + 1e-30;
      const double got = y[static_cast<std::size_t>(t * c.out + o)];
      if (mag > 0) worst = std::max(worst, std::fabs(got - ref) / mag);
      if (std::fabs(got - ref) > tol && bad++ < 8) ADD_FAILURE() << what << " [" << t << ", " << o << "]: gpu " << got << " ref " << ref << " tol " << tol;
    }
  std::printf("[ accuracy ] %s: worst |gpu - ref| / sum|terms| = %.3g (2^%.1f)\n", what.c_str(), worst, worst > 0 ? std::log2(worst) : -999.0);
  EXPECT_EQ(bad, 0) << what;
}

const Case kCases[] = {{64, 64, 1}, {128, 256, 3}, {256, 128, 16}, {6144, 4096, 1}, {4096, 4096, 7}, {512, 1024, 64}};

}  // namespace

TEST(GpuGemm, Fp8WithPerChannelAndPerTokenScales) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  cuda::Gemm gemm(stream);
  for (const Case& c : kCases) {
    const auto T = static_cast<std::size_t>(c.T), out = static_cast<std::size_t>(c.out), in = static_cast<std::size_t>(c.in);
    auto wf = test::random_floats(out * in, 100 + out, 0.05f), xf = test::random_floats(T * in, 200 + T, 2.0f);
    std::vector<std::uint8_t> wq(out * in), xq(T * in);
    std::vector<float> sw(out), sx(T);
    quantize_fp8_rows(wf.data(), out, in, wq.data(), sw.data());
    quantize_fp8_rows(xf.data(), T, in, xq.data(), sx.data());
    std::vector<double> wd(out * in), xd(T * in);
    for (std::size_t i = 0; i < wd.size(); ++i) wd[i] = static_cast<double>(fp8_e4m3_to_float(wq[i])) * sw[i / in];
    for (std::size_t i = 0; i < xd.size(); ++i) xd[i] = static_cast<double>(fp8_e4m3_to_float(xq[i])) * sx[i / in];
    auto dw = test::to_gpu(wq), dx = test::to_gpu(xq), dsw = test::to_gpu(sw), dsx = test::to_gpu(sx);
    cuda::DeviceBuffer dy(T * out * 4);
    gemm.run(cuda::GemmInput::FP8, dw.get(), dx.get(), dy.get<float>(), c.out, c.in, c.T);
    cuda::scale_output_cuda(dy.get<float>(), c.T, c.out, dsx.get<float>(), dsw.get<float>(), true, stream);
    expect_gemm(test::from_gpu<float>(dy, T * out), xd, wd, c, "fp8 " + std::to_string(c.out) + "x" + std::to_string(c.in) + " T" + std::to_string(c.T),
                true);
  }
}

TEST(GpuGemm, Bf16AndF32) {
  SKIP_WITHOUT_GPU();
  cuda::Gemm gemm(nullptr);
  for (const Case& c : kCases) {
    const auto T = static_cast<std::size_t>(c.T), out = static_cast<std::size_t>(c.out), in = static_cast<std::size_t>(c.in);
    auto wf = test::random_floats(out * in, 300 + out, 0.05f), xf = test::random_floats(T * in, 400 + T);
    std::vector<std::uint16_t> wb(out * in), xb(T * in);
    std::vector<double> wd(out * in), xd(T * in), wf64(out * in), xf64(T * in);
    for (std::size_t i = 0; i < wb.size(); ++i) wb[i] = bf16_from_float(wf[i]), wd[i] = bf16_to_float(wb[i]), wf64[i] = wf[i];
    for (std::size_t i = 0; i < xb.size(); ++i) xb[i] = bf16_from_float(xf[i]), xd[i] = bf16_to_float(xb[i]), xf64[i] = xf[i];
    auto dwb = test::to_gpu(wb), dxb = test::to_gpu(xb), dwf = test::to_gpu(wf), dxf = test::to_gpu(xf);
    cuda::DeviceBuffer dy(T * out * 4);
    gemm.run(cuda::GemmInput::BF16, dwb.get(), dxb.get(), dy.get<float>(), c.out, c.in, c.T);
    expect_gemm(test::from_gpu<float>(dy, T * out), xd, wd, c, "bf16");
    gemm.run(cuda::GemmInput::F32, dwf.get(), dxf.get(), dy.get<float>(), c.out, c.in, c.T);
    // F32 inputs are not exact products: the same bound holds (one rounding per product more).
    expect_gemm(test::from_gpu<float>(dy, T * out), xf64, wf64, c, "f32");
  }
}
