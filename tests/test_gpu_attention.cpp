// The attention and sampling kernels (kernels/rope_kv.cu, attention_decode.cu,
// attention_prefill.cu, sample.cu) against their CPU twins on seeded random inputs. Each test
// states its tolerance and why; each skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bestofn/model/model_config.h"
#include "bestofn/util/numeric.h"
#include "bestofn/model/quantize.h"
#include "bestofn/util/rng.h"
#include "bestofn/engine/sampler.h"
#include "cpu/attention.h"
#include "cpu/ops.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn {
namespace {


// n elements of T on the device, freed on every path out of scope. Never a zero-byte allocation.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&ptr_, std::max<std::size_t>(n, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), std::min(host.size(), n_) * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_;
};

// Waits for the launches so far and reports their execution errors.
void sync() {
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint16_t> h(n);
  const std::vector<float> f = test::random_floats(n, seed);
  for (std::size_t i = 0; i < n; ++i) h[i] = bf16_from_float(f[i]);
  return h;
}

// "" when every |gpu - ref| <= atol + rtol |ref|, else the count and the first mismatches; `where`
// names an element from its index.
template <typename Where>
std::string compare(const std::vector<float>& gpu, const std::vector<float>& ref, double atol, double rtol, Where where) {
  std::ostringstream report;
  report.precision(9);
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(gpu[i]) - static_cast<double>(ref[i]));
    worst = std::max(worst, err);
    if (err <= atol + rtol * std::fabs(static_cast<double>(ref[i]))) continue;  // NaN fails here
    if (bad++ < 8) report << "  " << where(i) << ": gpu " << gpu[i] << ", cpu " << ref[i] << "\n";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(ref.size()) + " values out of tolerance (max error " +
         std::to_string(worst) + "), first ones:\n" + report.str();
}

// Names element i of a (T, n_heads, hd) tensor.
auto head_index(int n_heads, int hd) {
  return [n_heads, hd](std::size_t i) {
    const std::size_t r = i / static_cast<std::size_t>(hd);
    return "[t " + std::to_string(r / static_cast<std::size_t>(n_heads)) + ", head " +
           std::to_string(r % static_cast<std::size_t>(n_heads)) + ", i " + std::to_string(i % static_cast<std::size_t>(hd)) + "]";
  };
}

std::string shape_name(int T, int heads, int kv, int hd) {
  return "T " + std::to_string(T) + ", heads " + std::to_string(heads) + "/" + std::to_string(kv) + ", hd " + std::to_string(hd);
}

struct HeadShape {
  int n_heads, n_kv, hd;
};
const HeadShape kHeadShapes[] = {{8, 8, 64}, {8, 8, 128}, {32, 8, 64}, {32, 8, 128}};

// ---- rope_kv_write_cuda -------------------------------------------------------------------
//
// q (fp32, rotated in place): |gpu - cpu| <= 4e-6 + 2^-22 |cpu|. Both compute the same angle (one
// fp32 multiply) and the same fused rotation (kernels/rope_kv.cu mirrors the FMAs GCC emits for
// cpu::rope); they differ only where CUDA's cosf / sinf (<= 2 ulp) and glibc's (<= 1 ulp)
// disagree: |dc|, |ds| <= 3 * 2^-24, times |a| + |b| <= ~10 for these N(0, 1) inputs, is 2e-6.
// k / v cache rows (BF16): v is a plain rounding and must match bit for bit. k may differ by one
// BF16 ulp where the fp32 rotation differs in its last bits across a BF16 rounding boundary (a
// chance of ~2^-16 per differing fp32 ulp): at most 1% of the k values may differ, each by at most
// one BF16 ulp (2^-7 relative, plus the fp32 bound above for values near zero).

// One BF16 ulp apart at most (as floats, so that a sign change near zero also counts as close).
bool within_one_bf16_ulp(std::uint16_t a, std::uint16_t b) {
  const double x = bf16_to_float(a), y = bf16_to_float(b);
  return std::fabs(x - y) <= 0x1p-7 * std::max(std::fabs(x), std::fabs(y)) + 4e-6;
}

TEST(GpuRopeKv, MatchesCpuRopeAndBf16Rounding) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 100;
  for (int T : {1, 5, 33})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      std::mt19937_64 rng(seed);
      ModelConfig c;
      c.head_dim = s.hd, c.rope_theta = 500000.0;
      c.rope_scaling = RopeScaling{RopeScalingType::Llama3, 8.0, 1.0, 4.0, 8192};
      const std::vector<float> inv_freq = rope_inv_freq(c);
      const auto qd = static_cast<std::size_t>(s.n_heads * s.hd), kvd = static_cast<std::size_t>(s.n_kv * s.hd);
      const auto N = static_cast<std::size_t>(T);
      std::vector<float> q = test::random_floats(N * qd, seed + 1), k = test::random_floats(N * kvd, seed + 2),
                         v = test::random_floats(N * kvd, seed + 3);
      std::vector<int> pos(N);
      for (auto& p : pos) p = std::uniform_int_distribution<int>(0, 8191)(rng);
      pos[0] = T > 1 ? 0 : 131071;  // angle 0, and far positions where cos/sin need range reduction
      if (T > 2) pos[N - 1] = 131071;
      // Cache rows in a shuffled order, so that the kernel must follow the row pointers.
      std::vector<std::size_t> slot(N);
      for (std::size_t t = 0; t < N; ++t) slot[t] = t;
      std::shuffle(slot.begin(), slot.end(), rng);
      seed += 10;

      DeviceArray<float> d_q(q), d_k(k), d_v(v), d_freq(inv_freq);
      DeviceArray<int> d_pos(pos);
      DeviceArray<std::uint16_t> d_kc(std::vector<std::uint16_t>(N * kvd, 0xAAAA)), d_vc(std::vector<std::uint16_t>(N * kvd, 0xAAAA));
      std::vector<std::uint16_t*> k_rows(N), v_rows(N);
      for (std::size_t t = 0; t < N; ++t) k_rows[t] = d_kc.get() + slot[t] * kvd, v_rows[t] = d_vc.get() + slot[t] * kvd;
      DeviceArray<std::uint16_t*> d_k_rows(k_rows), d_v_rows(v_rows);
      cuda::rope_kv_write_cuda(d_q.get(), d_k.get(), d_v.get(), d_pos.get(), d_freq.get(), T, s.n_heads, s.n_kv, s.hd,
                               d_k_rows.get(), d_v_rows.get(), nullptr);
      sync();
      const std::vector<float> q_gpu = d_q.download();
      const std::vector<std::uint16_t> kc = d_kc.download(), vc = d_vc.download();

      std::size_t q_exact = 0, k_off = 0;
      std::ostringstream kv_report;
      for (std::size_t t = 0; t < N; ++t) {
        cpu::rope(q.data() + t * qd, s.n_heads, s.hd, pos[t], inv_freq);
        cpu::rope(k.data() + t * kvd, s.n_kv, s.hd, pos[t], inv_freq);
        for (std::size_t i = 0; i < kvd; ++i) {
          const std::uint16_t kg = kc[slot[t] * kvd + i], kr = bf16_from_float(k[t * kvd + i]);
          const std::uint16_t vg = vc[slot[t] * kvd + i], vr = bf16_from_float(v[t * kvd + i]);
          if (kg != kr) ++k_off;
          if ((kg != kr && !within_one_bf16_ulp(kg, kr)) || vg != vr)
            kv_report << "  [t " << t << ", i " << i << "] k gpu " << kg << " cpu " << kr << ", v gpu " << vg << " cpu " << vr << "\n";
        }
      }
      for (std::size_t i = 0; i < q.size(); ++i) q_exact += q_gpu[i] == q[i];
      EXPECT_EQ(compare(q_gpu, q, 4e-6, 0x1p-22, head_index(s.n_heads, s.hd)), "");
      EXPECT_EQ(kv_report.str().substr(0, 2000), "");
      EXPECT_LE(k_off, kvd * N / 100) << k_off << " k cache values differ by one BF16 ulp";
      std::cout << "  " << shape_name(T, s.n_heads, s.n_kv, s.hd) << ": q bit-identical " << q_exact << "/" << q.size()
                << ", k off by one BF16 ulp " << k_off << "/" << kvd * N << "\n";
    }
}

// ---- decode_attention_cuda, prefill_attention_cuda ---------------------------------------
//
// |gpu - cpu| <= 5e-5 + 2e-4 |cpu|. Both are fp32 with different summation orders: the CPU twin
// sums each dot product and each softmax left to right; the kernel splits positions over 8 warps
// with an online softmax (rescaling by exp(m_old - m_new) at each new max), reduces dot products
// by a warp tree and merges the warps by log-sum-exp; CUDA's expf is within 2 ulp. The twin is
// within 9e-6 of a double-precision reference at these shapes (tests/test_cpu_attention.cpp) and
// the kernel should be too, so the bound leaves a margin of ~5x at small |cpu| and ~25x at
// |cpu| ~ 1. Errors a bug makes (a wrong head, row, position or merge weight) are 1e-3 or larger.
constexpr double kAttnAtol = 5e-5, kAttnRtol = 2e-4;

// K and V rows for a batch of decode rows, in one host pool mirrored to one device pool: prefixes
// shared by several rows (the slots of a prompt), one suffix per row.
struct DecodeBatch {
  int T;
  HeadShape s;
  std::vector<float> q;                   // (T, n_heads, hd)
  std::vector<std::uint16_t> k_pool, v_pool;  // rows of kv_dim
  std::vector<std::size_t> prefix_off, suffix_off;  // per row, in elements of the pools
  std::vector<int> prefix_len, suffix_len;

  DecodeBatch(int T_, HeadShape shape, std::uint64_t seed, int max_prefix, int max_suffix) : T(T_), s(shape) {
    std::mt19937_64 rng(seed);
    const auto kvd = static_cast<std::size_t>(s.n_kv * s.hd);
    q = test::random_floats(static_cast<std::size_t>(T * s.n_heads * s.hd), seed + 1, 2.0f);
    const int n_prefixes = std::max(1, T / 4);
    std::vector<std::size_t> p_off;
    std::vector<int> p_len;
    std::size_t rows = 0;
    for (int p = 0; p < n_prefixes; ++p) {
      p_off.push_back(rows * kvd);
      p_len.push_back(std::uniform_int_distribution<int>(1, max_prefix)(rng));
      rows += static_cast<std::size_t>(p_len.back());
    }
    for (int t = 0; t < T; ++t) {
      const auto p = static_cast<std::size_t>(std::uniform_int_distribution<int>(0, n_prefixes - 1)(rng));
      prefix_off.push_back(p_off[p]), prefix_len.push_back(p_len[p]);
      suffix_off.push_back(rows * kvd), suffix_len.push_back(std::uniform_int_distribution<int>(1, max_suffix)(rng));
      rows += static_cast<std::size_t>(suffix_len.back());
    }
    k_pool = random_bf16(rows * kvd, seed + 2), v_pool = random_bf16(rows * kvd, seed + 3);
  }
  template <typename P>
  static std::vector<P> at(P base, const std::vector<std::size_t>& off) {
    std::vector<P> out;
    for (std::size_t o : off) out.push_back(base + o);
    return out;
  }
  std::vector<float> cpu() const {
    std::vector<float> out(q.size());
    const auto kp = at(k_pool.data(), prefix_off), vp = at(v_pool.data(), prefix_off);
    const auto ks = at(k_pool.data(), suffix_off), vs = at(v_pool.data(), suffix_off);
    cpu::decode_attention(q.data(), kp.data(), vp.data(), prefix_len.data(), ks.data(), vs.data(), suffix_len.data(), T,
                          s.n_heads, s.n_kv, s.hd, out.data());
    return out;
  }
  // The batch on the device, with an output and a chunk workspace for `splits`.
  struct OnDevice {
    DeviceArray<float> q, out, work;
    DeviceArray<std::uint16_t> k, v;
    DeviceArray<const std::uint16_t*> kp, vp, ks, vs;
    DeviceArray<int> plen, slen;
    OnDevice(const DecodeBatch& b, int splits)
        : q(b.q), out(b.q.size()), work(std::max<std::size_t>(cuda::decode_attention_workspace_floats(b.T, b.s.n_heads, b.s.hd, splits), 1)),
          k(b.k_pool), v(b.v_pool), kp(at(static_cast<const std::uint16_t*>(k.get()), b.prefix_off)),
          vp(at(static_cast<const std::uint16_t*>(v.get()), b.prefix_off)), ks(at(static_cast<const std::uint16_t*>(k.get()), b.suffix_off)),
          vs(at(static_cast<const std::uint16_t*>(v.get()), b.suffix_off)), plen(b.prefix_len), slen(b.suffix_len) {}
  };
  // splits > 1: the flash-decoding path (chunks of positions merged by a second kernel).
  std::vector<float> gpu(int splits = 1) const {
    OnDevice d(*this, splits);
    cuda::decode_attention_cuda(d.q.get(), d.kp.get(), d.vp.get(), d.plen.get(), d.ks.get(), d.vs.get(), d.slen.get(), T, s.n_heads,
                                s.n_kv, s.hd, d.out.get(), nullptr, nullptr, nullptr, 0, splits, splits > 1 ? d.work.get() : nullptr);
    sync();
    return d.out.download();
  }
  // --split-attention's tiled kernel (one block per row, KV head and chunk).
  std::vector<float> gpu_tiled(int splits) const {
    OnDevice d(*this, splits);
    cuda::TiledAttentionArgs a;
    a.q = d.q.get(), a.k_prefix = d.kp.get(), a.v_prefix = d.vp.get(), a.prefix_len = d.plen.get();
    a.k_suffix = d.ks.get(), a.v_suffix = d.vs.get(), a.suffix_len = d.slen.get();
    a.T = T, a.n_heads = s.n_heads, a.n_kv = s.n_kv, a.hd = s.hd, a.out = d.out.get();
    a.splits = splits, a.partial = splits > 1 ? d.work.get() : nullptr;
    cuda::decode_attention_tiled_cuda(a, nullptr);
    sync();
    return d.out.download();
  }
};

TEST(GpuDecodeAttention, MatchesCpuTwin) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 2000;
  for (int T : {1, 5, 33})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      const DecodeBatch b(T, s, seed, 600, 40);
      seed += 10;
      EXPECT_EQ(compare(b.gpu(), b.cpu(), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
    }
}

// Positions split over several blocks per row: chunks longer, shorter and (32 splits of a 1-40
// position suffix) emptier than a warp's share, the same bound as one block per row.
TEST(GpuDecodeAttention, SplitPositionsMatchCpuTwin) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 2500;
  for (int T : {1, 5, 33})
    for (int splits : {2, 7, cuda::kMaxDecodeSplits})
      for (const HeadShape& s : kHeadShapes) {
        SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", splits " + std::to_string(splits) + ", seed " + std::to_string(seed));
        const DecodeBatch b(T, s, seed, 600, 40);
        seed += 10;
        EXPECT_EQ(compare(b.gpu(splits), b.cpu(), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
      }
  EXPECT_EQ(cuda::decode_attention_splits(1, 32, 132), 9);  // 264 blocks wanted, 32 heads
  EXPECT_EQ(cuda::decode_attention_splits(1, 4, 132), cuda::kMaxDecodeSplits);
  EXPECT_EQ(cuda::decode_attention_splits(64, 32, 132), 1);
}

// The tiled kernel: whole dot products per thread (16-byte loads, or one element at a time for a
// head_dim not a multiple of 8), one running softmax over prefix and suffix, tiles of 64
// positions (prefixes up to 600 cross many), GQA groups of 1 to 8 query heads, chunks as above.
TEST(GpuDecodeAttention, TiledMatchesCpuTwin) {
  SKIP_WITHOUT_GPU();
  std::vector<HeadShape> shapes(std::begin(kHeadShapes), std::end(kHeadShapes));
  shapes.push_back({16, 2, 128});  // group 8, the most the kernel takes
  shapes.push_back({6, 3, 12});    // head_dim 12: the element-wise dot product
  std::uint64_t seed = 2800;
  for (int T : {1, 5, 33})
    for (int splits : {1, 3, cuda::kMaxDecodeSplits})
      for (const HeadShape& s : shapes) {
        SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", splits " + std::to_string(splits) + ", seed " + std::to_string(seed));
        ASSERT_TRUE(cuda::decode_attention_tiled_supported(s.n_heads, s.n_kv, s.hd));
        const DecodeBatch b(T, s, seed, 600, 100);
        seed += 10;
        EXPECT_EQ(compare(b.gpu_tiled(splits), b.cpu(), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
      }
  EXPECT_FALSE(cuda::decode_attention_tiled_supported(32, 2, 128));  // group 16
}

// An empty prefix or suffix contributes nothing; both empty gives zeros. Also the largest head_dim.
TEST(GpuDecodeAttention, EmptySidesAndHeadDim256) {
  SKIP_WITHOUT_GPU();
  for (const HeadShape& s : {HeadShape{8, 2, 64}, HeadShape{4, 1, 256}}) {
    SCOPED_TRACE(shape_name(6, s.n_heads, s.n_kv, s.hd));
    DecodeBatch b(6, s, 3000 + static_cast<std::uint64_t>(s.hd), 300, 20);
    b.prefix_len[0] = 0;                       // suffix only
    b.suffix_len[1] = 0;                       // prefix only
    b.prefix_len[2] = 0, b.suffix_len[2] = 0;  // nothing
    b.prefix_len[3] = 1, b.suffix_len[3] = 1;  // one position each
    for (int splits : {1, 5, -1, -5}) {  // negative: the tiled kernel
      const std::vector<float> gpu = splits > 0 ? b.gpu(splits) : b.gpu_tiled(-splits);
      EXPECT_EQ(compare(gpu, b.cpu(), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "") << "splits " << splits;
      const auto per_row = static_cast<std::size_t>(s.n_heads * s.hd);
      for (std::size_t i = 2 * per_row; i < 3 * per_row; ++i) ASSERT_EQ(gpu[i], 0.0f) << "row 2, element " << i - 2 * per_row;
    }
  }
}

TEST(GpuPrefillAttention, MatchesCpuTwin) {
  SKIP_WITHOUT_GPU();
  std::vector<std::pair<int, HeadShape>> cases;
  for (int T : {1, 5, 33, 257})
    for (const HeadShape& s : kHeadShapes) cases.emplace_back(T, s);
  cases.emplace_back(9, HeadShape{4, 1, 256});
  std::uint64_t seed = 4000;
  for (const auto& [T, s] : cases) {
    SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
    const auto N = static_cast<std::size_t>(T), kvd = static_cast<std::size_t>(s.n_kv * s.hd);
    const std::vector<float> q = test::random_floats(N * static_cast<std::size_t>(s.n_heads * s.hd), seed, 2.0f);
    const std::vector<std::uint16_t> k = random_bf16(N * kvd, seed + 1), v = random_bf16(N * kvd, seed + 2);
    seed += 10;
    std::vector<float> ref(q.size());
    cpu::prefill_attention(q.data(), k.data(), v.data(), T, s.n_heads, s.n_kv, s.hd, ref.data());
    DeviceArray<float> d_q(q), d_out(q.size());
    DeviceArray<std::uint16_t> d_k(k), d_v(v);
    cuda::prefill_attention_cuda(d_q.get(), d_k.get(), d_v.get(), T, s.n_heads, s.n_kv, s.hd, d_out.get(), nullptr);
    sync();
    EXPECT_EQ(compare(d_out.download(), ref, kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
  }
}

// ---- FP8 KV cache rows (--kv-cache fp8) --------------------------------------------------
//
// The kernels read an FP8 row as fp8_e4m3_to_float(code) * scale (one multiply per value) and then
// sum exactly as for BF16. So with values that both formats hold exactly (random finite codes
// times a power-of-two scale per row and KV head) the FP8 kernels must give the BF16 kernels'
// outputs bit for bit: any wrong byte offset, row stride or scale index breaks that.
struct Fp8Rows {
  std::vector<std::uint8_t> fp8;    // rows of kv_row_bytes(FP8): codes, then a scale per KV head
  std::vector<std::uint16_t> bf16;  // the same values, rows of kv_dim BF16
};
Fp8Rows fp8_rows(std::size_t rows, int n_kv, int hd, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto kvd = static_cast<std::size_t>(n_kv * hd);
  const std::size_t rb = cuda::kv_row_bytes(cuda::KvFormat::FP8, kvd, hd);
  Fp8Rows out{std::vector<std::uint8_t>(rows * rb), std::vector<std::uint16_t>(rows * kvd)};
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t h = 0; h < static_cast<std::size_t>(n_kv); ++h) {
      const float scale = std::ldexp(1.0f, -5 - static_cast<int>(rng() % 8));
      std::memcpy(&out.fp8[r * rb + kvd + 4 * h], &scale, 4);
      for (std::size_t i = 0; i < static_cast<std::size_t>(hd); ++i) {
        auto code = static_cast<std::uint8_t>(rng());
        if ((code & 0x7f) == 0x7f) code ^= 1;  // no NaN codes
        const std::size_t e = h * static_cast<std::size_t>(hd) + i;
        out.fp8[r * rb + e] = code;
        out.bf16[r * kvd + e] = bf16_from_float(fp8_e4m3_to_float(code) * scale);  // exact: 4 significant bits
      }
    }
  return out;
}

TEST(GpuDecodeAttention, Fp8RowsGiveTheBf16ResultOfTheSameValues) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 2800;
  // kHeadShapes, plus a head size that is not a multiple of 16 (the tiled kernel's byte-wise FP8
  // dot product) and a GQA group of 8.
  std::vector<HeadShape> shapes(std::begin(kHeadShapes), std::end(kHeadShapes));
  shapes.push_back({6, 3, 12});
  shapes.push_back({16, 2, 128});
  for (int T : {1, 5, 33})
    for (const HeadShape& s : shapes)
      for (int splits : {1, 4}) {
        SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", splits " + std::to_string(splits) + ", seed " + std::to_string(seed));
        DecodeBatch b(T, s, seed, 300, 40);
        const auto kvd = static_cast<std::size_t>(s.n_kv * s.hd);
        const std::size_t rows = b.k_pool.size() / kvd, rb = cuda::kv_row_bytes(cuda::KvFormat::FP8, kvd, s.hd);
        const Fp8Rows K = fp8_rows(rows, s.n_kv, s.hd, seed + 5), V = fp8_rows(rows, s.n_kv, s.hd, seed + 6);
        seed += 10;
        b.k_pool = K.bf16, b.v_pool = V.bf16;
        const std::vector<float> want = b.gpu(splits);
        // The FP8 pools, with each row pointer moved from a BF16 element offset to its FP8 row.
        DeviceArray<std::uint8_t> dk(K.fp8), dv(V.fp8);
        auto rows_at = [&](const DeviceArray<std::uint8_t>& pool, const std::vector<std::size_t>& off) {
          std::vector<const std::uint16_t*> out;
          for (std::size_t o : off) out.push_back(reinterpret_cast<const std::uint16_t*>(pool.get() + o / kvd * rb));
          return out;
        };
        DeviceArray<const std::uint16_t*> kp(rows_at(dk, b.prefix_off)), vp(rows_at(dv, b.prefix_off)),
            ks(rows_at(dk, b.suffix_off)), vs(rows_at(dv, b.suffix_off));
        DeviceArray<int> plen(b.prefix_len), slen(b.suffix_len);
        DeviceArray<float> q(b.q), out(b.q.size()),
            work(std::max<std::size_t>(cuda::decode_attention_workspace_floats(T, s.n_heads, s.hd, splits), 1));
        cuda::decode_attention_cuda(q.get(), kp.get(), vp.get(), plen.get(), ks.get(), vs.get(), slen.get(), T, s.n_heads, s.n_kv,
                                    s.hd, out.get(), nullptr, nullptr, nullptr, 0, splits, splits > 1 ? work.get() : nullptr,
                                    cuda::KvFormat::FP8);
        sync();
        const std::vector<float> got = out.download();
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "FP8 rows differ from BF16 rows of the same values";
        EXPECT_EQ(compare(got, b.cpu(), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");  // and both near the twin
        // The tiled kernel (--split-attention), the same way.
        ASSERT_TRUE(cuda::decode_attention_tiled_supported(s.n_heads, s.n_kv, s.hd));
        {
          cuda::TiledAttentionArgs a;
          a.q = q.get(), a.k_prefix = kp.get(), a.v_prefix = vp.get(), a.prefix_len = plen.get();
          a.k_suffix = ks.get(), a.v_suffix = vs.get(), a.suffix_len = slen.get();
          a.T = T, a.n_heads = s.n_heads, a.n_kv = s.n_kv, a.hd = s.hd, a.out = out.get();
          a.splits = splits, a.partial = splits > 1 ? work.get() : nullptr, a.kv = cuda::KvFormat::FP8;
          cuda::decode_attention_tiled_cuda(a, nullptr);
          sync();
          const std::vector<float> tiled = out.download(), tiled_want = b.gpu_tiled(splits);
          EXPECT_EQ(std::memcmp(tiled.data(), tiled_want.data(), tiled.size() * 4), 0) << "tiled: FP8 rows differ from BF16 rows";
        }
      }
}

// --cuda-prefix-gemm's suffix side: the prefix state (m, l, unnormalized O per state row, here
// random) merged with each row's suffix, by prefix_merge_cuda and by the tiled kernel starting
// from that state; FP8 suffix rows against BF16 rows of the same values, bit for bit.
TEST(GpuPrefixMerge, Fp8RowsGiveTheBf16ResultOfTheSameValues) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 5100;
  for (int T : {1, 6, 33})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      DecodeBatch b(T, s, seed, 8, 40);  // its suffixes (rows) and queries; its prefixes unused
      const auto kvd = static_cast<std::size_t>(s.n_kv * s.hd);
      const std::size_t rows = b.k_pool.size() / kvd, rb = cuda::kv_row_bytes(cuda::KvFormat::FP8, kvd, s.hd);
      const Fp8Rows K = fp8_rows(rows, s.n_kv, s.hd, seed + 5), V = fp8_rows(rows, s.n_kv, s.hd, seed + 6);
      // Rows in prefix groups of up to 4 batch rows, and a random prefix state per state row.
      std::vector<std::vector<int>> groups;
      for (int t = 0; t < T; ++t) {
        if (t % 4 == 0) groups.emplace_back();
        groups.back().push_back(t);
      }
      const cuda::PrefixStateMap plan = cuda::prefix_state_map(groups, T, s.n_heads, s.n_kv);
      const auto state_rows = static_cast<std::size_t>(plan.rows);
      std::vector<float> m = test::random_floats(state_rows, seed + 7, 2.0f), l = test::random_floats(state_rows, seed + 8, 1.0f);
      for (auto& x : l) x = std::fabs(x) + 0.5f;
      const std::vector<float> o = test::random_floats(state_rows * static_cast<std::size_t>(s.hd), seed + 9, 1.0f);
      seed += 10;
      DeviceArray<int> map(plan.map), slen(b.suffix_len);
      DeviceArray<float> q(b.q), dm(m), dl(l), dout(o), out_bf16(b.q.size()), out_fp8(b.q.size());
      DeviceArray<std::uint16_t> kb(K.bf16), vb(V.bf16);
      DeviceArray<std::uint8_t> k8(K.fp8), v8(V.fp8);
      auto at_bf16 = [&](const DeviceArray<std::uint16_t>& pool) {
        std::vector<const std::uint16_t*> out;
        for (std::size_t off : b.suffix_off) out.push_back(pool.get() + off);
        return out;
      };
      auto at_fp8 = [&](const DeviceArray<std::uint8_t>& pool) {
        std::vector<const std::uint16_t*> out;
        for (std::size_t off : b.suffix_off) out.push_back(reinterpret_cast<const std::uint16_t*>(pool.get() + off / kvd * rb));
        return out;
      };
      DeviceArray<const std::uint16_t*> ksb(at_bf16(kb)), vsb(at_bf16(vb)), ks8(at_fp8(k8)), vs8(at_fp8(v8));
      cuda::prefix_merge_cuda(q.get(), map.get(), dm.get(), dl.get(), dout.get(), ksb.get(), vsb.get(), slen.get(), T, s.n_heads,
                              s.n_kv, s.hd, out_bf16.get(), nullptr);
      cuda::prefix_merge_cuda(q.get(), map.get(), dm.get(), dl.get(), dout.get(), ks8.get(), vs8.get(), slen.get(), T, s.n_heads,
                              s.n_kv, s.hd, out_fp8.get(), nullptr, nullptr, nullptr, 0, cuda::KvFormat::FP8);
      sync();
      std::vector<float> a = out_bf16.download(), c = out_fp8.download();
      EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "prefix merge: FP8 rows differ from BF16 rows";
      // The tiled kernel from the same prefix state.
      ASSERT_TRUE(cuda::decode_attention_tiled_supported(s.n_heads, s.n_kv, s.hd));
      for (cuda::KvFormat f : {cuda::KvFormat::BF16, cuda::KvFormat::FP8}) {
        cuda::TiledAttentionArgs t;
        t.q = q.get(), t.suffix_len = slen.get(), t.T = T, t.n_heads = s.n_heads, t.n_kv = s.n_kv, t.hd = s.hd;
        t.k_suffix = f == cuda::KvFormat::FP8 ? ks8.get() : ksb.get(), t.v_suffix = f == cuda::KvFormat::FP8 ? vs8.get() : vsb.get();
        t.out = f == cuda::KvFormat::FP8 ? out_fp8.get() : out_bf16.get(), t.kv = f;
        t.prefix_map = map.get(), t.prefix_m = dm.get(), t.prefix_l = dl.get(), t.prefix_o = dout.get();
        cuda::decode_attention_tiled_cuda(t, nullptr);
      }
      sync();
      a = out_bf16.download(), c = out_fp8.download();
      EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0) << "tiled with a prefix state: FP8 rows differ from BF16 rows";
    }
}

// --cuda-prefix-gemm's prefix K/V from FP8 rows: each value exactly fp8(code) * scale, the BF16
// twin's value (fp8_rows: both formats hold it exactly).
TEST(GpuConvert, Fp8RowsWidenToTheirValues) {
  SKIP_WITHOUT_GPU();
  for (const HeadShape& s : kHeadShapes) {
    const std::size_t rows = 37, kvd = static_cast<std::size_t>(s.n_kv * s.hd);
    const Fp8Rows r = fp8_rows(rows, s.n_kv, s.hd, 4900 + static_cast<std::uint64_t>(s.hd));
    DeviceArray<std::uint8_t> d(r.fp8);
    DeviceArray<float> out(rows * kvd);
    cuda::fp8_rows_to_f32_cuda(reinterpret_cast<const std::uint16_t*>(d.get()), rows, s.n_kv, s.hd, out.get(), nullptr);
    sync();
    const std::vector<float> got = out.download();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != bf16_to_float(r.bf16[i]);
    EXPECT_EQ(bad, 0u) << shape_name(0, s.n_heads, s.n_kv, s.hd);
  }
}

TEST(GpuPrefillAttention, Fp8RowsGiveTheBf16ResultOfTheSameValues) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 4800;
  for (int T : {1, 33, 257})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      const auto N = static_cast<std::size_t>(T);
      const std::vector<float> q = test::random_floats(N * static_cast<std::size_t>(s.n_heads * s.hd), seed, 2.0f);
      const Fp8Rows K = fp8_rows(N, s.n_kv, s.hd, seed + 1), V = fp8_rows(N, s.n_kv, s.hd, seed + 2);
      seed += 10;
      DeviceArray<float> d_q(q), bf16_out(q.size()), fp8_out(q.size());
      DeviceArray<std::uint16_t> kb(K.bf16), vb(V.bf16);
      DeviceArray<std::uint8_t> k8(K.fp8), v8(V.fp8);
      cuda::prefill_attention_cuda(d_q.get(), kb.get(), vb.get(), T, s.n_heads, s.n_kv, s.hd, bf16_out.get(), nullptr);
      cuda::prefill_attention_cuda(d_q.get(), reinterpret_cast<const std::uint16_t*>(k8.get()),
                                   reinterpret_cast<const std::uint16_t*>(v8.get()), T, s.n_heads, s.n_kv, s.hd, fp8_out.get(), nullptr,
                                   cuda::KvFormat::FP8);
      sync();
      const std::vector<float> a = bf16_out.download(), b = fp8_out.download();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "FP8 rows differ from BF16 rows of the same values";
    }
}

// rope_kv_write_cuda into FP8 rows against cpu::rope + quantize_fp8_rows over each row's KV
// heads. v: the same floats in, so the same codes and scales bit for bit (the quantizer is the
// activation quantizer's, GpuQuantize). k: the rotation may differ in its last fp32 bits where
// cosf / sinf do (GpuRopeKv above: ~10% of rotated values differ in the last bit), which can move
// a value across an E4M3 rounding boundary or change a head's amax, and so its scale, by an ulp.
// So: each dequantized k within one E4M3 step (2^-3 relative, plus the smallest step of its row)
// of the CPU's; in heads whose scale agrees, at most 1% of the codes differ; and at most a quarter
// of the heads have a scale an ulp or so off (one rotated value in 64-128 decides it).
TEST(GpuRopeKv, Fp8RowsMatchCpuQuantizer) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 150;
  for (int T : {1, 5, 33})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      ModelConfig c;
      c.head_dim = s.hd, c.rope_theta = 500000.0;
      const std::vector<float> inv_freq = rope_inv_freq(c);
      const auto qd = static_cast<std::size_t>(s.n_heads * s.hd), kvd = static_cast<std::size_t>(s.n_kv * s.hd);
      const auto N = static_cast<std::size_t>(T), heads = static_cast<std::size_t>(s.n_kv);
      const std::size_t rb = cuda::kv_row_bytes(cuda::KvFormat::FP8, kvd, s.hd);
      std::vector<float> q = test::random_floats(N * qd, seed + 1), k = test::random_floats(N * kvd, seed + 2),
                         v = test::random_floats(N * kvd, seed + 3);
      std::vector<int> pos(N);
      for (std::size_t t = 0; t < N; ++t) pos[t] = static_cast<int>(t * 97 % 4096);
      seed += 10;
      DeviceArray<float> d_q(q), d_k(k), d_v(v), d_freq(inv_freq);
      DeviceArray<int> d_pos(pos);
      DeviceArray<std::uint8_t> kc(std::vector<std::uint8_t>(N * rb, 0xAA)), vc(std::vector<std::uint8_t>(N * rb, 0xAA));
      std::vector<std::uint16_t*> k_rows(N), v_rows(N);
      for (std::size_t t = 0; t < N; ++t)  // rows in reverse order: the kernel must follow the pointers
        k_rows[t] = reinterpret_cast<std::uint16_t*>(kc.get() + (N - 1 - t) * rb), v_rows[t] = reinterpret_cast<std::uint16_t*>(vc.get() + (N - 1 - t) * rb);
      DeviceArray<std::uint16_t*> d_k_rows(k_rows), d_v_rows(v_rows);
      cuda::rope_kv_write_cuda(d_q.get(), d_k.get(), d_v.get(), d_pos.get(), d_freq.get(), T, s.n_heads, s.n_kv, s.hd,
                               d_k_rows.get(), d_v_rows.get(), nullptr, cuda::KvFormat::FP8);
      sync();
      const std::vector<std::uint8_t> kg = kc.download(), vg = vc.download();
      std::size_t k_off = 0, scale_off = 0, bad = 0;
      for (std::size_t t = 0; t < N; ++t) {
        cpu::rope(k.data() + t * kvd, s.n_kv, s.hd, pos[t], inv_freq);
        std::vector<std::uint8_t> kq(kvd), vq(kvd);
        std::vector<float> ks(heads), vs(heads);
        quantize_fp8_rows(k.data() + t * kvd, heads, static_cast<std::size_t>(s.hd), kq.data(), ks.data());
        quantize_fp8_rows(v.data() + t * kvd, heads, static_cast<std::size_t>(s.hd), vq.data(), vs.data());
        const std::uint8_t* krow = kg.data() + (N - 1 - t) * rb;
        const std::uint8_t* vrow = vg.data() + (N - 1 - t) * rb;
        float kscale[64], vscale[64];
        std::memcpy(kscale, krow + kvd, 4 * heads), std::memcpy(vscale, vrow + kvd, 4 * heads);
        for (std::size_t h = 0; h < heads; ++h) {
          if (std::memcmp(&vscale[h], &vs[h], 4) != 0 && bad++ < 8) ADD_FAILURE() << "v scale t " << t << " head " << h;
          const bool same_scale = kscale[h] == ks[h];
          scale_off += !same_scale;
          if (!same_scale && std::fabs(kscale[h] - ks[h]) > 1e-6 * ks[h] && bad++ < 8)
            ADD_FAILURE() << "k scale t " << t << " head " << h << ": gpu " << kscale[h] << " cpu " << ks[h];
          for (std::size_t i = 0; i < static_cast<std::size_t>(s.hd); ++i) {
            const std::size_t e = h * static_cast<std::size_t>(s.hd) + i;
            if (vrow[e] != vq[e] && bad++ < 8) ADD_FAILURE() << "v code t " << t << " e " << e << ": " << int(vrow[e]) << " vs " << int(vq[e]);
            const double kgv = fp8_e4m3_to_float(krow[e]) * kscale[h], kcv = fp8_e4m3_to_float(kq[e]) * ks[h];
            if (same_scale && krow[e] != kq[e]) ++k_off;
            if (std::fabs(kgv - kcv) > 0x1p-3 * std::fabs(kcv) + 0x1p-9 * ks[h] * 1.01 && bad++ < 8)
              ADD_FAILURE() << "k t " << t << " e " << e << ": gpu " << kgv << " cpu " << kcv;
          }
        }
      }
      EXPECT_EQ(bad, 0u);
      EXPECT_LE(k_off, N * kvd / 100) << k_off << " k codes differ under an equal scale";
      EXPECT_LE(scale_off, N * heads / 4) << scale_off << " k heads with another scale";
    }
}

// ---- sample_token_cuda ----------------------------------------------------------------------------
//
// Tokens: greedy must be identical. Sampling follows sample_token's rule with the same Philox
// draw, but the weights come from CUDA's expf (<= 2 ulp, glibc <= 1) and the double sums run in
// another order, so a token may differ where u * kept mass (or top_p * total, or min_p against a
// weight) falls within a few fp32 ulps of a boundary: at least 99% of the rows must agree.
// logprob: |gpu - cpu| <= 1e-4 where the tokens agree (both are z_tok - logsumexp(z) with the sum
// in double; they differ by the float rounding of logsumexp, ~1e-6 for |lse| ~ 20).

struct SampleRun {
  std::vector<int> tokens;
  std::vector<float> logprobs;
};

struct SampleCase {
  int T, V;
  std::vector<float> logits;  // (T, V)
  std::vector<std::uint64_t> prompt, candidate, step;

  SampleCase(int T_, int V_, std::uint64_t seed, float stddev) : T(T_), V(V_) {
    logits = test::random_floats(static_cast<std::size_t>(T) * static_cast<std::size_t>(V), seed, stddev);
    std::mt19937_64 rng(seed + 1);
    for (int t = 0; t < T; ++t) prompt.push_back(rng()), candidate.push_back(rng() % 1024), step.push_back(rng() % 4096);
  }
  SampleRun cpu(const SamplingParams& p) const {
    SampleRun r;
    SamplerScratch scratch;
    for (int t = 0; t < T; ++t) {
      const std::span<const float> row(logits.data() + static_cast<std::size_t>(t) * static_cast<std::size_t>(V),
                                       static_cast<std::size_t>(V));
      const Sample s = sample_token(row, p, prompt[static_cast<std::size_t>(t)], candidate[static_cast<std::size_t>(t)],
                                    step[static_cast<std::size_t>(t)], scratch);
      r.tokens.push_back(s.token), r.logprobs.push_back(s.logprob);
    }
    return r;
  }
  SampleRun gpu(const SamplingParams& p) const {
    DeviceArray<float> d_logits(logits), d_logprobs(static_cast<std::size_t>(T));
    DeviceArray<std::uint64_t> d_prompt(prompt), d_candidate(candidate), d_step(step);
    DeviceArray<int> d_tokens(static_cast<std::size_t>(T));
    cuda::sample_token_cuda(d_logits.get(), T, V, p, d_prompt.get(), d_candidate.get(), d_step.get(), d_tokens.get(),
                      d_logprobs.get(), nullptr);
    sync();
    return {d_tokens.download(), d_logprobs.download()};
  }
};

std::string params_name(const SamplingParams& p) {
  std::ostringstream s;
  s << "temperature " << p.temperature << ", top_k " << p.top_k << ", top_p " << p.top_p << ", min_p " << p.min_p
    << ", seed " << p.seed;
  return s.str();
}

// "" when at least 1 - max_off_fraction of the tokens agree and the logprobs of agreeing rows are
// within 1e-4; else a report with the first differing rows.
std::string compare_samples(const SampleRun& gpu, const SampleRun& cpu, double max_off_fraction) {
  std::ostringstream report;
  report.precision(9);
  std::size_t off = 0, bad_logprob = 0, shown = 0;
  for (std::size_t t = 0; t < cpu.tokens.size(); ++t) {
    const bool same = gpu.tokens[t] == cpu.tokens[t];
    const bool lp_ok = std::fabs(static_cast<double>(gpu.logprobs[t]) - static_cast<double>(cpu.logprobs[t])) <= 1e-4;
    off += !same;
    bad_logprob += same && !lp_ok;
    if ((!same || !lp_ok) && shown++ < 8)
      report << "  row " << t << ": gpu token " << gpu.tokens[t] << " (logprob " << gpu.logprobs[t] << "), cpu token "
             << cpu.tokens[t] << " (logprob " << cpu.logprobs[t] << ")\n";
  }
  const auto allowed = static_cast<std::size_t>(max_off_fraction * static_cast<double>(cpu.tokens.size()));
  if (off <= allowed && bad_logprob == 0) return "";
  return std::to_string(off) + " of " + std::to_string(cpu.tokens.size()) + " tokens differ (allowed " +
         std::to_string(allowed) + "), " + std::to_string(bad_logprob) + " logprobs off by more than 1e-4:\n" + report.str();
}

TEST(GpuSample, GreedyIsIdentical) {
  SKIP_WITHOUT_GPU();
  for (const int V : {1, 1000, 128256}) {
    SCOPED_TRACE("V " + std::to_string(V));
    SampleCase c(64, V, 500 + static_cast<std::uint64_t>(V), 3.0f);
    // Repeated maxima: the first index wins on both.
    for (std::size_t t = 0; t < 64 && V > 1; t += 3) {
      float* row = c.logits.data() + t * static_cast<std::size_t>(V);
      const float m = *std::max_element(row, row + V);
      row[(t * 7919) % static_cast<std::size_t>(V)] = m;
      row[static_cast<std::size_t>(V) - 1] = m;
    }
    SamplingParams p;
    p.temperature = 0.0f;
    EXPECT_EQ(compare_samples(c.gpu(p), c.cpu(p), 0.0), "");
  }
}

// Each truncation mode, alone and together, plus the two id-order walks (no truncation, and a
// top_k that keeps every candidate). stddev 3 keeps every token a candidate at T = 1; stddev 8
// drops most of the vocabulary below the 30-nat cut.
std::vector<SamplingParams> sampling_modes() {
  auto make = [](float temp, int k, float top_p, float min_p, std::uint64_t seed) {
    SamplingParams p;
    p.temperature = temp, p.top_k = k, p.top_p = top_p, p.min_p = min_p, p.seed = seed;
    return p;
  };
  return {make(1.0f, 0, 1.0f, 0.0f, 1),          make(0.7f, 40, 1.0f, 0.0f, 2),   make(1.0f, 0, 0.9f, 0.0f, 3),
          make(0.8f, 0, 1.0f, 0.05f, 4),         make(0.6f, 50, 0.95f, 0.02f, 5), make(1.0f, 1 << 30, 1.0f, 0.0f, 6),
          make(1.3f, 1, 1.0f, 0.0f, 7),          make(1.0f, 0, 0.0f, 0.0f, 8),    make(1.0f, 0, 1.0f, 2.0f, 9),
          make(1.0f, 0, 0.5f, 0.0f, 0xDEADBEEF12345678ull)};
}

TEST(GpuSample, RandomLogitsMatchCpu) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int T, V;
    float stddev;
  };
  std::uint64_t seed = 600;
  for (const Shape& sh : {Shape{300, 1000, 3.0f}, Shape{100, 128256, 3.0f}, Shape{100, 128256, 8.0f}}) {
    const SampleCase c(sh.T, sh.V, seed++, sh.stddev);
    for (const SamplingParams& p : sampling_modes()) {
      SCOPED_TRACE("T " + std::to_string(sh.T) + ", V " + std::to_string(sh.V) + ", stddev " + std::to_string(sh.stddev) +
                   ", " + params_name(p));
      EXPECT_EQ(compare_samples(c.gpu(p), c.cpu(p), 0.01), "");
    }
  }
}

// Logits on a grid of 0.25 give many exact ties in z: the probability order must break them by
// id on both sides, in top-k, top-p and the walk.
TEST(GpuSample, TiedLogitsBreakTiesById) {
  SKIP_WITHOUT_GPU();
  SampleCase c(200, 5000, 700, 2.0f);
  for (float& x : c.logits) x = std::round(x * 4.0f) / 4.0f;
  for (const SamplingParams& p : sampling_modes()) {
    SCOPED_TRACE(params_name(p));
    EXPECT_EQ(compare_samples(c.gpu(p), c.cpu(p), 0.01), "");
  }
}

// Equal logits make every weight exactly 1, so each sum is an exact integer and the token is
// floor(u * kept) on both sides: the device Philox and uniform01 must equal src/util/rng.cpp's for
// every row, including seeds and prompts with their high words set.
TEST(GpuSample, EqualLogitsExposeTheDrawExactly) {
  SKIP_WITHOUT_GPU();
  SampleCase c(256, 4096, 800, 1.0f);
  std::fill(c.logits.begin(), c.logits.end(), 0.5f);
  for (std::size_t t = 0; t < c.prompt.size(); ++t) c.prompt[t] = (t % 2 ? (1ull << 40) * t : t), c.candidate[t] = t / 2;
  for (const std::uint64_t seed : {0ull, 42ull, 0xFFFFFFFF00000001ull}) {
    for (const float top_p : {1.0f, 0.5f}) {  // the id-order walk, and the ordered one (ties by id)
      SamplingParams p;
      p.temperature = 1.0f, p.top_p = top_p, p.seed = seed;
      SCOPED_TRACE(params_name(p));
      const SampleRun gpu = c.gpu(p), cpu = c.cpu(p);
      EXPECT_EQ(compare_samples(gpu, cpu, 0.0), "");
      // The draw itself: token = floor(u * kept), kept = 4096 or 2048.
      const double kept = top_p < 1.0f ? 2048.0 : 4096.0;
      for (std::size_t t = 0; t < 4; ++t)
        EXPECT_EQ(cpu.tokens[t], static_cast<int>(std::floor(static_cast<double>(uniform01(seed, c.prompt[t], c.candidate[t], c.step[t])) * kept)));
    }
  }
}

}  // namespace
}  // namespace bestofn
