// The rows of tests/gpu_ops_table.h whose comparison lives here: the launchers that had no test
// against their CPU twin elsewhere. Seeded random inputs; each test's bound is its row's tolerance.
// Skipped without a device (test_gpu_op_names checks the table itself everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "gpu_ops_table.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn {
namespace {

// The row of `launcher`, for the failure messages: what the op is compared with, and how closely.
std::string row_of(const std::string& launcher) {
  for (const test::GpuOpRow& row : test::kGpuOps)
    if (launcher == row.launcher) return launcher + " against " + row.twin + " (" + row.tolerance + ")";
  ADD_FAILURE() << launcher << " has no row in tests/gpu_ops_table.h";
  return launcher;
}

TEST(GpuOps, Bf16ToF32) {
  SKIP_WITHOUT_GPU();
  SCOPED_TRACE(row_of("bf16_to_f32_cuda"));
  // Every BF16 bit pattern: normals, subnormals, zeros, infinities and NaNs of both signs.
  std::vector<std::uint16_t> x(1u << 16);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i);
  std::shuffle(x.begin(), x.end(), std::mt19937(7100));
  const cuda::DeviceBuffer dx = test::to_gpu(x);
  cuda::DeviceBuffer dy(x.size() * 4);
  cuda::bf16_to_f32_cuda(dx.get<std::uint16_t>(), x.size(), dy.get<float>(), nullptr);
  const std::vector<float> y = test::from_gpu<float>(dy, x.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = bf16_to_float(x[i]);
    if (std::memcmp(&y[i], &want, 4) != 0 && differ++ < 4) ADD_FAILURE() << "bits " << x[i] << ": " << y[i] << " != " << want;
  }
  EXPECT_EQ(differ, 0u);
}

// Batch rows in prefix groups of up to 3 (interleaved, as a scheduler's batch may hold them).
std::vector<std::vector<int>> interleaved_groups(int T) {
  const int n = (T + 2) / 3;
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(n));
  for (int t = 0; t < T; ++t) groups[static_cast<std::size_t>(t % n)].push_back(t);
  return groups;
}

TEST(GpuOps, GatherPrefixQueries) {
  SKIP_WITHOUT_GPU();
  SCOPED_TRACE(row_of("gather_prefix_queries_cuda"));
  struct Shape {
    int T, n_heads, n_kv, hd;
  };
  std::uint64_t seed = 7200;
  for (const Shape& s : {Shape{1, 8, 8, 64}, Shape{7, 32, 8, 128}, Shape{33, 8, 2, 64}}) {
    SCOPED_TRACE("T " + std::to_string(s.T) + ", heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv));
    const auto hd = static_cast<std::size_t>(s.hd);
    const std::vector<float> q = test::random_floats(static_cast<std::size_t>(s.T * s.n_heads) * hd, seed++);
    const cuda::PrefixStateMap plan = cuda::prefix_state_map(interleaved_groups(s.T), s.T, s.n_heads, s.n_kv);
    const cuda::DeviceBuffer dq = test::to_gpu(q), dmap = test::to_gpu(plan.map);
    cuda::DeviceBuffer dqg(static_cast<std::size_t>(plan.rows) * hd * 4);
    cuda::gather_prefix_queries_cuda(dq.get<float>(), dmap.get<int>(), s.T, s.n_heads, s.n_kv, s.hd, dqg.get<float>(), nullptr);
    const std::vector<float> qg = test::from_gpu<float>(dqg, static_cast<std::size_t>(plan.rows) * hd);
    // The twin: row (t, h) of q copied to state row map[t] + (h / group) R + i group + h % group.
    const int group = s.n_heads / s.n_kv;
    const auto Ts = static_cast<std::size_t>(s.T);
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.n_heads; ++h) {
        const auto ts = static_cast<std::size_t>(t);
        const auto row = static_cast<std::size_t>(plan.map[ts] + (h / group) * plan.map[Ts + ts] + plan.map[2 * Ts + ts] * group + h % group);
        const float* want = q.data() + (ts * static_cast<std::size_t>(s.n_heads) + static_cast<std::size_t>(h)) * hd;
        EXPECT_EQ(std::memcmp(qg.data() + row * hd, want, hd * 4), 0) << "row t " << t << ", head " << h;
      }
  }
}

// Within `ulps` float ulps of `want` (relative to its magnitude).
bool within_ulps(double got, double want, double ulps) {
  return std::fabs(got - want) <= ulps * std::numeric_limits<float>::epsilon() * std::fabs(want);
}

TEST(GpuOps, PrefixSoftmax) {
  SKIP_WITHOUT_GPU();
  SCOPED_TRACE(row_of("prefix_softmax_cuda"));
  std::uint64_t seed = 7300;
  // Rows shorter than the block, about as long, and many times longer; scores as wide as a
  // prefix's products (stddev 4).
  for (const auto& [rows, L] : {std::pair{1, 1}, {5, 100}, {16, 256}, {3, 5000}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", L " + std::to_string(L));
    const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(L);
    const std::vector<float> s = test::random_floats(n, seed++, 4.0f);
    cuda::DeviceBuffer ds = test::to_gpu(s), dm(static_cast<std::size_t>(rows) * 4), dl(static_cast<std::size_t>(rows) * 4);
    cuda::prefix_softmax_cuda(ds.get<float>(), rows, L, dm.get<float>(), dl.get<float>(), nullptr);
    const std::vector<float> e = test::from_gpu<float>(ds, n), m = test::from_gpu<float>(dm, static_cast<std::size_t>(rows)),
                             l = test::from_gpu<float>(dl, static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      const auto row = s.begin() + static_cast<std::ptrdiff_t>(r) * L;
      const float want_m = *std::max_element(row, row + L);
      EXPECT_EQ(m[static_cast<std::size_t>(r)], want_m) << "row " << r << ": the maximum";
      double want_l = 0;
      int bad = 0;
      for (int j = 0; j < L; ++j) {
        const std::size_t at = static_cast<std::size_t>(r) * static_cast<std::size_t>(L) + static_cast<std::size_t>(j);
        // exp of the rounded difference, as the kernel takes it; CUDA's expf is within 2 ulp.
        const double want = std::exp(static_cast<double>(s[at] - want_m));
        want_l += want;
        if (!within_ulps(e[at], want, 4) && bad++ < 4) ADD_FAILURE() << "row " << r << ", " << j << ": " << e[at] << " != " << want;
      }
      EXPECT_TRUE(within_ulps(l[static_cast<std::size_t>(r)], want_l, 4 + L)) << "row " << r << ": sum " << l[static_cast<std::size_t>(r)]
                                                                              << " != " << want_l;
    }
  }
}

}  // namespace
}  // namespace bestofn
