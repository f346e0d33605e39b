// cpu::swiglu (SwiGLU's elementwise step) against silu in double precision: within 6 ulp of
// the rounded result (exp_poly's 2 ulp through 1 + e, the division and the product), -0 where
// exp(-g) overflows a float, NaN and infinities as IEEE arithmetic gives them; and an element's result is the
// same whatever the length of the call and its place in it (the engine splits rows over threads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/ops.h"

namespace bestofn {
namespace {

// In double, but exp(-g) overflows where a float's does (past FLT_MAX), as the op's float
// arithmetic must: there silu is -0 (times u), not the double's tiny value.
double silu_ref(double g, double u) {
  double e = std::exp(-g);
  if (e > std::numeric_limits<float>::max()) e = std::numeric_limits<double>::infinity();
  return g / (1.0 + e) * u;
}

TEST(CpuOps, SiluMulIsSiluWithinSixUlp) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 6.0f);
  std::vector<float> g, u;
  for (int i = 0; i < 100000; ++i) g.push_back(nd(rng)), u.push_back(nd(rng));
  for (float x = -120.0f; x <= 120.0f; x += 0.0625f) g.push_back(x), u.push_back(1.5f);  // both saturated ends
  const std::vector<float> g0 = g;
  cpu::swiglu(g.data(), u.data(), g.size());
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double ref = silu_ref(g0[i], u[i]);
    const double tol = 6.0 * std::numeric_limits<float>::epsilon() * std::fabs(ref) + std::numeric_limits<float>::denorm_min();
    if (std::fabs(g[i] - ref) > tol && bad++ < 5) ADD_FAILURE() << "silu(" << g0[i] << ") * " << u[i] << ": " << g[i] << " vs " << ref;
  }
  EXPECT_EQ(bad, 0);
}

TEST(CpuOps, SiluMulEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g = {-100.0f, -88.5f, 0.0f, -0.0f, inf, -inf, NAN, 100.0f}, u(g.size(), 2.0f);
  const std::vector<float> g0 = g;
  cpu::swiglu(g.data(), u.data(), g.size());
  EXPECT_EQ(g[0], 0.0f);                                             // exp(100) overflows: -100 / inf
  EXPECT_FLOAT_EQ(g[1], static_cast<float>(silu_ref(-88.5, 2.0)));   // libm's exp, not the clamped one
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_EQ(g[3], 0.0f);
  EXPECT_EQ(g[4], inf);                                              // inf / (1 + 0)
  EXPECT_TRUE(std::isnan(g[5]));                                     // -inf / inf
  EXPECT_TRUE(std::isnan(g[6]));
  EXPECT_EQ(g[7], 200.0f);
}

TEST(CpuOps, SiluMulElementsDoNotDependOnTheCall) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 5.0f);
  const std::size_t n = 203;  // not a multiple of 16
  std::vector<float> g0(n), u(n);
  for (std::size_t i = 0; i < n; ++i) g0[i] = nd(rng), u[i] = nd(rng);
  std::vector<float> whole = g0;
  cpu::swiglu(whole.data(), u.data(), n);
  for (std::size_t start : {1u, 5u, 17u, 100u}) {
    std::vector<float> part = g0;
    cpu::swiglu(part.data(), u.data(), start);  // two calls with tails in other places
    cpu::swiglu(part.data() + start, u.data() + start, n - start);
    EXPECT_EQ(std::memcmp(part.data(), whole.data(), n * sizeof(float)), 0) << "split at " << start;
  }
}

}  // namespace
}  // namespace bestofn
