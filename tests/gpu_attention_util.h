#pragma once
// Shared by the attention tests (tests/test_gpu_attention.cpp, test_gpu_ops_attention.cpp): device
// arrays, decode batches of shared prefixes and per-row suffixes on both sides, FP8 cache rows that
// hold the values of BF16 ones exactly, and the tolerance comparison with its report.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cpu/attention.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn::test {

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
inline void sync() {
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

inline std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
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
inline auto head_index(int n_heads, int hd) {
  return [n_heads, hd](std::size_t i) {
    const std::size_t r = i / static_cast<std::size_t>(hd);
    return "[t " + std::to_string(r / static_cast<std::size_t>(n_heads)) + ", head " +
           std::to_string(r % static_cast<std::size_t>(n_heads)) + ", i " + std::to_string(i % static_cast<std::size_t>(hd)) + "]";
  };
}

inline std::string shape_name(int T, int heads, int kv, int hd) {
  return "T " + std::to_string(T) + ", heads " + std::to_string(heads) + "/" + std::to_string(kv) + ", hd " + std::to_string(hd);
}

struct HeadShape {
  int n_heads, n_kv, hd;
};
inline constexpr HeadShape kHeadShapes[] = {{8, 8, 64}, {8, 8, 128}, {32, 8, 64}, {32, 8, 128}};

// The attention kernels (decode, split, tiled, prefill, prefix merge) against their CPU twins:
//
// |gpu - cpu| <= 5e-5 + 2e-4 |cpu|. Both are fp32 with different summation orders: the CPU twin
// sums each dot product and each softmax left to right; the kernel splits positions over 8 warps
// with an online softmax (rescaling by exp(m_old - m_new) at each new max), reduces dot products
// by a warp tree and merges the warps by log-sum-exp; CUDA's expf is within 2 ulp. The twin is
// within 9e-6 of a double-precision reference at these shapes (tests/test_cpu_attention.cpp) and
// the kernel should be too, so the bound leaves a margin of ~5x at small |cpu| and ~25x at
// |cpu| ~ 1. Errors a bug makes (a wrong head, row, position or merge weight) are 1e-3 or larger.
inline constexpr double kAttnAtol = 5e-5, kAttnRtol = 2e-4;

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
    // out starts as NaNs (0xFF bytes), so a launch that leaves it unwritten cannot pass as
    // another's output that happened to be left in the same memory.
    OnDevice(const DecodeBatch& b, int splits)
        : q(b.q), out(std::vector<float>(b.q.size(), std::numeric_limits<float>::quiet_NaN())), work(std::max<std::size_t>(cuda::decode_attention_workspace_floats(b.T, b.s.n_heads, b.s.hd, splits), 1)),
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
  std::vector<float> gpu_tiled(int splits) const { return gpu_tiled(splits, nullptr); }
  std::vector<float> gpu_tiled(int splits, int* merge_counters) const {
    OnDevice d(*this, splits);
    cuda::TiledAttentionArgs a;
    a.q = d.q.get(), a.k_prefix = d.kp.get(), a.v_prefix = d.vp.get(), a.prefix_len = d.plen.get();
    a.k_suffix = d.ks.get(), a.v_suffix = d.vs.get(), a.suffix_len = d.slen.get();
    a.T = T, a.n_heads = s.n_heads, a.n_kv = s.n_kv, a.hd = s.hd, a.out = d.out.get();
    a.splits = splits, a.partial = splits > 1 ? d.work.get() : nullptr, a.merge_counters = merge_counters;
    cuda::decode_attention_tiled_cuda(a, nullptr);
    sync();
    return d.out.download();
  }
  // The split paths with the merge in the same launch (merge counters), twice on the same counters
  // (the last block of each row must leave its counter at 0): {first output, second output, the
  // counters after}.
  struct InlineMerge {
    std::vector<float> first, second;
    std::vector<int> counters;
  };
  InlineMerge gpu_inline_merge(int splits, bool tiled) const {
    DeviceArray<int> counters(std::vector<int>(static_cast<std::size_t>(T) * static_cast<std::size_t>(s.n_heads), 0));
    InlineMerge r;
    for (std::vector<float>* out : {&r.first, &r.second}) {
      if (tiled) {
        *out = gpu_tiled(splits, counters.get());
        continue;
      }
      OnDevice d(*this, splits);
      cuda::decode_attention_cuda(d.q.get(), d.kp.get(), d.vp.get(), d.plen.get(), d.ks.get(), d.vs.get(), d.slen.get(), T, s.n_heads,
                                  s.n_kv, s.hd, d.out.get(), nullptr, nullptr, nullptr, 0, splits, d.work.get(), cuda::KvFormat::BF16,
                                  counters.get());
      sync();
      *out = d.out.download();
    }
    r.counters = counters.download();
    return r;
  }
};
// FP8 KV cache rows (--kv-cache fp8).
//
// The kernels read an FP8 row as fp8_e4m3_to_float(code) * scale (one multiply per value) and then
// sum exactly as for BF16. So with values that both formats hold exactly (random finite codes
// times a power-of-two scale per row and KV head) the FP8 kernels must give the BF16 kernels'
// outputs bit for bit: any wrong byte offset, row stride or scale index breaks that.
struct Fp8Rows {
  std::vector<std::uint8_t> fp8;    // rows of kv_row_bytes(FP8): codes, then a scale per KV head
  std::vector<std::uint16_t> bf16;  // the same values, rows of kv_dim BF16
};
inline Fp8Rows fp8_rows(std::size_t rows, int n_kv, int hd, std::uint64_t seed) {
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

}  // namespace bestofn::test
