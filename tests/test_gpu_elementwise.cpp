// The elementwise kernels beyond their CPU twins (those comparisons are rows of
// tests/test_gpu_ops.cpp): the fused FFN path's strided reads against the unstrided ones, on the
// device only. Skipped without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn {
namespace {

// The fused FFN path (--fused-qkv on FP8) reads gate and up from the gate/up GEMM's (T, 2n)
// output, ld = 2n apart: the same codes and scales as from two separate arrays, and as the
// unfused path (swiglu_cuda, then quantize_act_fp8_cuda), bit for bit.
TEST(GpuElementwise, SwigluQuantFp8ReadsInterleavedRowsAsSeparateOnes) {
  SKIP_WITHOUT_GPU();
  const int T = 5, n = 96;
  const auto rows = static_cast<std::size_t>(T), cols = static_cast<std::size_t>(n);
  const std::vector<float> gate = test::random_floats(rows * cols, 850, 4.0f), up = test::random_floats(rows * cols, 851, 1.0f);
  std::vector<float> both(2 * rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) both[r * 2 * cols + c] = gate[r * cols + c], both[r * 2 * cols + cols + c] = up[r * cols + c];
  const cuda::DeviceBuffer d_gate = test::to_gpu(gate), d_up = test::to_gpu(up), d_both = test::to_gpu(both);
  const cuda::DeviceBuffer q1(rows * cols), s1(rows * 4), q2(rows * cols), s2(rows * 4), q3(rows * cols), s3(rows * 4);
  cuda::swiglu_quant_fp8_cuda(d_gate.get<float>(), d_up.get<float>(), T, n, 0.0f, q1.get<std::uint8_t>(), s1.get<float>(), nullptr);
  cuda::swiglu_quant_fp8_cuda(d_both.get<float>(), d_both.get<float>() + n, T, n, 0.0f, q2.get<std::uint8_t>(), s2.get<float>(),
                              nullptr, 2 * n);
  cuda::swiglu_cuda(d_gate.get<float>(), d_up.get<float>(), T, n, nullptr);
  cuda::quantize_act_fp8_cuda(d_gate.get<float>(), T, n, 0.0f, q3.get<std::uint8_t>(), s3.get<float>(), nullptr);
  const auto codes = test::from_gpu<std::uint8_t>(q1, rows * cols);
  const auto scales = test::from_gpu<float>(s1, rows);
  EXPECT_EQ(test::from_gpu<std::uint8_t>(q2, rows * cols), codes);
  EXPECT_EQ(test::from_gpu<float>(s2, rows), scales);
  EXPECT_EQ(test::from_gpu<std::uint8_t>(q3, rows * cols), codes);
  EXPECT_EQ(test::from_gpu<float>(s3, rows), scales);
  EXPECT_THROW(cuda::swiglu_quant_fp8_cuda(d_both.get<float>(), d_both.get<float>() + n, T, n, 0.0f, q2.get<std::uint8_t>(),
                                           s2.get<float>(), nullptr, n - 1),
               Error);
}

}  // namespace
}  // namespace bestofn
