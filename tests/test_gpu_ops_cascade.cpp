// The --cascade-attention rows of the GPU op table (tests/test_gpu_ops.cpp): the query gather and
// the whole cascade path (src/cuda/cascade_attention.cpp: the prefix page pool, FlashInfer's plan
// and tensor-core batch prefill, the merge with each suffix) against cpu::decode_attention and a
// host log-sum-exp merge. They run only through the table, which skips them without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cpu/attention.h"
#include "cuda/cascade_attention.h"
#include "cuda/kernels.h"
#include "gpu_attention_util.h"
#include "gpu_cascade_util.h"
#include "gpu_op_rows.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn::gpu_ops {
namespace {

using test::compare, test::head_index, test::kAttnAtol, test::kAttnRtol, test::sync;

// Rows of `n` positions, n_kv heads of hd values: values a BF16 and an FP8 row hold alike (an E4M3
// code of a N(0, 4) draw times 2^-2, 4 significant bits), in both formats.
struct KvRows {
  std::vector<std::uint16_t> bf16;  // (n, kv_dim)
  std::vector<std::uint8_t> fp8;    // (n, kv_row_bytes(FP8))
};
KvRows kv_rows(int n, int n_kv, int hd, std::uint64_t seed) {
  const auto kvd = static_cast<std::size_t>(n_kv * hd);
  const std::size_t rb = cuda::kv_row_bytes(cuda::KvFormat::FP8, kvd, hd);
  const std::vector<float> x = test::random_floats(static_cast<std::size_t>(n) * kvd, seed, 4.0f);
  KvRows r{std::vector<std::uint16_t>(x.size()), std::vector<std::uint8_t>(static_cast<std::size_t>(n) * rb)};
  const float scale = 0.25f;
  for (std::size_t p = 0; p < static_cast<std::size_t>(n); ++p) {
    for (std::size_t h = 0; h < static_cast<std::size_t>(n_kv); ++h) std::memcpy(&r.fp8[p * rb + kvd + 4 * h], &scale, 4);
    for (std::size_t e = 0; e < kvd; ++e) {
      const std::uint8_t code = fp8_e4m3_from_float(x[p * kvd + e]);
      r.fp8[p * rb + e] = code;
      r.bf16[p * kvd + e] = bf16_from_float(fp8_e4m3_to_float(code) * scale);  // exact
    }
  }
  return r;
}

}  // namespace

// gather_queries_bf16_cuda: each row of q in a shuffled order, rounded to BF16: bit for bit
// against bf16_from_float (both round to nearest even; no NaN among the inputs).
void gather_queries_bf16() {
  std::uint64_t seed = 7600;
  for (const auto& [T, heads, hd] : {std::tuple{1, 32, 128}, {37, 32, 128}, {300, 8, 64}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", heads " + std::to_string(heads) + ", hd " + std::to_string(hd));
    const auto width = static_cast<std::size_t>(heads * hd);
    const std::vector<float> q = test::random_floats(static_cast<std::size_t>(T) * width, seed++, 3.0f);
    std::vector<int> order(static_cast<std::size_t>(T));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed++));
    const cuda::DeviceBuffer dq = test::to_gpu(q), dorder = test::to_gpu(order);
    cuda::DeviceBuffer out(static_cast<std::size_t>(T) * width * 2);
    cuda::gather_queries_bf16_cuda(dq.get<float>(), dorder.get<int>(), T, heads, hd, out.get<std::uint16_t>(), nullptr);
    const std::vector<std::uint16_t> got = test::from_gpu<std::uint16_t>(out, static_cast<std::size_t>(T) * width);
    std::size_t bad = 0;
    for (std::size_t r = 0; r < order.size(); ++r)
      for (std::size_t i = 0; i < width; ++i) bad += got[r * width + i] != bf16_from_float(q[static_cast<std::size_t>(order[r]) * width + i]);
    EXPECT_EQ(bad, 0u);
  }
}

// The whole --cascade-attention path (CascadeAttention, one layer) on the 8B shape (32 query heads,
// 8 KV heads, head_dim 128): prefix groups of 1, 3, 100 and 2 rows, interleaved in the batch, over
// prompts of 37, 17, 201 and 16 positions (page runs with partial last pages, one exactly full);
// suffixes paged in 16-position blocks in a shuffled block order, 1 to 40 positions (row 0: 1);
// FlashInfer's plan with and without its CUDA-graph grid (which splits the KV and merges the
// chunks, and pads the groups to the rows); BF16 and FP8 cache rows holding the same values; the
// suffixes by today's per-row kernel (cascade_merge_cuda), and for BF16 also by FlashInfer's paged
// decode over the block pool (use_paged_suffix: cascade_suffix_attention_cuda and
// cascade_state_merge_cuda).
//
// The reference: cpu::decode_attention over each row's prefix alone with the queries rounded to
// BF16 (what the tensor cores read) and over its suffix alone with the F32 queries, each side's
// log-sum-exp in double, merged on the host by log-sum-exp. Checks and their bounds:
// - the prefix's log-sum-exp (FlashInfer's base 2, times ln 2): 1e-4 + 1e-5 |lse|. Both score the
//   same BF16 products (exact in F32) with F32 sums in another order; ex2 / lg2.approx are within
//   2^-22. A wrong page, position or head moves it by far more.
// - the prefix's normalized output (BF16): 2^-8 max|v| + 2^-8 |ref| + 2e-5, max|v| over the
//   group's values of that KV head: the softmax weights are rounded to BF16 for the P.V product
//   (2^-9 each, 2^-8 with the normalizer's), and the output is rounded to BF16 (2^-9 of it).
// - the merged output: that bound plus kAttnAtol + kAttnRtol |ref| (the suffix's F32 kernel, on
//   either path: FlashInfer's decode scores in F32 with its exp2 and a scale rounded once more,
//   ~1e-5 relative, inside that bound).
// - FP8 rows against BF16 rows of the same values, both through today's suffix kernel: bit for bit
//   (the pages hold bf16(code x scale), exact here; the merge reads FP8 as the other kernels do).
void cascade_prefix_attention() {
  const int n_heads = 32, n_kv = 8, hd = 128, group = n_heads / n_kv, block = 16;
  const auto kvd = static_cast<std::size_t>(n_kv * hd), HD = static_cast<std::size_t>(hd), H = static_cast<std::size_t>(n_heads);
  struct Group {
    int rows, len;
  };
  const Group groups[] = {{1, 37}, {3, 17}, {100, 201}, {2, 16}};
  std::vector<int> group_of;
  for (int g = 0; g < 4; ++g) group_of.insert(group_of.end(), static_cast<std::size_t>(groups[g].rows), g);
  std::shuffle(group_of.begin(), group_of.end(), std::mt19937_64(7700));
  const int T = static_cast<int>(group_of.size());
  const auto Ts = static_cast<std::size_t>(T);
  std::vector<KvRows> pk, pv;
  for (int g = 0; g < 4; ++g) pk.push_back(kv_rows(groups[g].len, n_kv, hd, 7710 + 2 * static_cast<std::uint64_t>(g))),
                              pv.push_back(kv_rows(groups[g].len, n_kv, hd, 7711 + 2 * static_cast<std::uint64_t>(g)));
  // Suffixes: row t's positions in blocks table[starts[t] ..] of a shuffled pool.
  std::mt19937_64 rng(7720);
  std::vector<int> slen(Ts), starts, table;
  int blocks = 0;
  for (std::size_t t = 0; t < Ts; ++t) {
    slen[t] = t == 0 ? 1 : 1 + static_cast<int>(rng() % 40);
    starts.push_back(static_cast<int>(table.size()));
    for (int b = 0; b < (slen[t] + block - 1) / block; ++b) table.push_back(blocks++);
  }
  std::vector<int> perm(static_cast<std::size_t>(blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int& b : table) b = perm[static_cast<std::size_t>(b)];
  const int pool_rows = blocks * block;
  const KvRows sk = kv_rows(pool_rows, n_kv, hd, 7730), sv = kv_rows(pool_rows, n_kv, hd, 7731);
  const std::vector<float> q = test::random_floats(Ts * H * HD, 7740);
  std::vector<float> q_bf16(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) q_bf16[i] = bf16_to_float(bf16_from_float(q[i]));

  // The reference, batch order. Host copies of each row's suffix, contiguous, for the CPU twin.
  std::vector<std::vector<std::uint16_t>> sk_rows(Ts), sv_rows(Ts);
  for (std::size_t t = 0; t < Ts; ++t)
    for (int j = 0; j < slen[t]; ++j) {
      const std::size_t r = static_cast<std::size_t>(table[static_cast<std::size_t>(starts[t] + j / block)] * block + j % block);
      sk_rows[t].insert(sk_rows[t].end(), sk.bf16.begin() + static_cast<long>(r * kvd), sk.bf16.begin() + static_cast<long>((r + 1) * kvd));
      sv_rows[t].insert(sv_rows[t].end(), sv.bf16.begin() + static_cast<long>(r * kvd), sv.bf16.begin() + static_cast<long>((r + 1) * kvd));
    }
  std::vector<const std::uint16_t*> kp, vp, ks, vs;
  std::vector<int> plen, zeros(Ts, 0);
  for (std::size_t t = 0; t < Ts; ++t) {
    const auto g = static_cast<std::size_t>(group_of[t]);
    kp.push_back(pk[g].bf16.data()), vp.push_back(pv[g].bf16.data()), plen.push_back(groups[g].len);
    ks.push_back(sk_rows[t].data()), vs.push_back(sv_rows[t].data());
  }
  std::vector<float> ref_p(q.size()), ref_s(q.size()), ref(q.size());
  cpu::decode_attention(q_bf16.data(), kp.data(), vp.data(), plen.data(), ks.data(), vs.data(), zeros.data(), T, n_heads, n_kv, hd, ref_p.data());
  cpu::decode_attention(q.data(), kp.data(), vp.data(), zeros.data(), ks.data(), vs.data(), slen.data(), T, n_heads, n_kv, hd, ref_s.data());
  std::vector<double> lse_p(Ts * H), vmax(Ts * H);
  for (std::size_t t = 0; t < Ts; ++t)
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t off = (h / static_cast<std::size_t>(group)) * HD, row = t * H + h;
      lse_p[row] = host_lse(q_bf16.data() + row * HD, kp[t], plen[t], kvd, off, hd);
      const double lse_s = host_lse(q.data() + row * HD, ks[t], slen[t], kvd, off, hd);
      for (int j = 0; j < plen[t]; ++j)
        for (std::size_t i = 0; i < HD; ++i)
          vmax[row] = std::max(vmax[row], static_cast<double>(std::fabs(bf16_to_float(vp[t][static_cast<std::size_t>(j) * kvd + off + i]))));
      const double M = std::max(lse_p[row], lse_s), a = std::exp(lse_p[row] - M), b = std::exp(lse_s - M);
      for (std::size_t i = 0; i < HD; ++i)
        ref[row * HD + i] = static_cast<float>((ref_p[row * HD + i] * a + ref_s[row * HD + i] * b) / (a + b));
    }

  std::vector<float> bf16_att[2];
  std::vector<std::uint16_t> bf16_out[2];
  // Row t's block table, for FlashInfer's decode: table[starts[t] ..], slen[t] positions.
  std::vector<cuda::SuffixRow> suffix_rows;
  for (std::size_t t = 0; t < Ts; ++t)
    suffix_rows.push_back({std::span<const int>(table).subspan(static_cast<std::size_t>(starts[t]), static_cast<std::size_t>((slen[t] + block - 1) / block)),
                           slen[t]});
  struct Variant {
    cuda::KvFormat kv;
    bool decode;  // the suffixes by FlashInfer's paged decode
  };
  for (const Variant var : {Variant{cuda::KvFormat::BF16, false}, Variant{cuda::KvFormat::FP8, false}, Variant{cuda::KvFormat::BF16, true}})
    for (const bool fixed_grid : {false, true}) {
      const cuda::KvFormat kv = var.kv;
      const bool fp8 = kv == cuda::KvFormat::FP8;
      SCOPED_TRACE(std::string(fp8 ? "FP8" : "BF16") + " rows" + (var.decode ? ", FlashInfer's decode" : "") + (fixed_grid ? ", CUDA-graph grid" : ""));
      cuda::CascadeAttention ca(nullptr, 1, n_heads, n_kv, hd, kv);
      std::vector<cuda::CascadeRow> rows(Ts);
      std::vector<int> first_page(4);
      for (std::size_t g = 0; g < 4; ++g) {
        const cuda::DeviceBuffer k = fp8 ? test::to_gpu(pk[g].fp8) : test::to_gpu(pk[g].bf16);
        const cuda::DeviceBuffer v = fp8 ? test::to_gpu(pv[g].fp8) : test::to_gpu(pv[g].bf16);
        const std::uint16_t* k_rows = k.get<std::uint16_t>();
        const std::uint16_t* v_rows = v.get<std::uint16_t>();
        first_page[g] = ca.add_prefix(std::span(&k_rows, 1), std::span(&v_rows, 1), groups[g].len);
      }
      for (std::size_t t = 0; t < Ts; ++t) {
        const auto g = static_cast<std::size_t>(group_of[t]);
        rows[t] = {static_cast<int>(g), first_page[g], groups[g].len};
      }
      const cuda::DeviceBuffer dk = fp8 ? test::to_gpu(sk.fp8) : test::to_gpu(sk.bf16), dv = fp8 ? test::to_gpu(sv.fp8) : test::to_gpu(sv.bf16);
      if (var.decode) {
        const auto base = [](const cuda::DeviceBuffer& b) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(b.get())); };
        ASSERT_TRUE(ca.use_paged_suffix({base(dk), base(dv), 0}, blocks));
      }
      const cuda::CascadeStepPlan sp = ca.plan(rows, var.decode ? std::span<const cuda::SuffixRow>(suffix_rows) : std::span<const cuda::SuffixRow>(),
                                               fixed_grid);
      EXPECT_EQ(sp.suffix, var.decode);
      if (fixed_grid) {
        EXPECT_EQ(sp.shape.groups, T) << "the groups padded to the rows";
      }
      const std::vector<const std::uint16_t*> kpool(Ts, dk.get<std::uint16_t>()), vpool(Ts, dv.get<std::uint16_t>());
      const cuda::DeviceBuffer dkp = test::to_gpu(kpool), dvp = test::to_gpu(vpool), dslen = test::to_gpu(slen), dtable = test::to_gpu(table),
                               dstarts = test::to_gpu(starts), dq = test::to_gpu(q);
      cuda::DeviceBuffer att(q.size() * 4);
      ca.run(0, sp, dq.get<float>(), dkp.get<const std::uint16_t*>(), dvp.get<const std::uint16_t*>(), dslen.get<int>(),
             att.get<float>(), dtable.get<int>(), dstarts.get<int>(), block);
      sync();
      const std::vector<float> got = test::from_gpu<float>(att, q.size());
      const std::vector<std::uint16_t> out_p = download(ca.prefix_out(), q.size());
      const std::vector<float> lse2 = download(ca.prefix_lse2(), Ts * H);
      // Batch row t sits at place r of the group order (the layout's order array).
      std::vector<std::size_t> place(Ts);
      for (std::size_t r = 0; r < Ts; ++r) place[static_cast<std::size_t>(sp.host[sp.layout.order + r])] = r;
      std::size_t bad_lse = 0, bad_p = 0, bad = 0;
      double worst_lse = 0, worst_p = 0, worst = 0;
      for (std::size_t t = 0; t < Ts; ++t)
        for (std::size_t h = 0; h < H; ++h) {
          const std::size_t row = t * H + h, grow = place[t] * H + h;
          const double e_lse = std::fabs(lse2[grow] * 0.6931471805599453 - lse_p[row]);
          worst_lse = std::max(worst_lse, e_lse);
          bad_lse += !(e_lse <= 1e-4 + 1e-5 * std::fabs(lse_p[row]));
          for (std::size_t i = 0; i < HD; ++i) {
            const double rp = ref_p[row * HD + i], tol_p = 0x1p-8 * vmax[row] + 0x1p-8 * std::fabs(rp) + 2e-5;
            const double e_p = std::fabs(bf16_to_float(out_p[grow * HD + i]) - rp);
            worst_p = std::max(worst_p, e_p);
            bad_p += !(e_p <= tol_p);
            const double r = ref[row * HD + i], e = std::fabs(got[row * HD + i] - r);
            worst = std::max(worst, e);
            bad += !(e <= tol_p + kAttnAtol + kAttnRtol * std::fabs(r));
          }
        }
      EXPECT_EQ(bad_lse, 0u) << "prefix log-sum-exp, worst error " << worst_lse;
      EXPECT_EQ(bad_p, 0u) << "prefix output, worst error " << worst_p;
      EXPECT_EQ(bad, 0u) << "merged output, worst error " << worst;
      std::cout << "  cascade " << (fp8 ? "fp8" : "bf16") << (var.decode ? " flashinfer-decode" : "") << (fixed_grid ? " graph-grid" : "")
                << ": worst errors lse " << worst_lse << ", prefix " << worst_p << ", merged " << worst << "\n";
      if (var.decode) {
        EXPECT_EQ(out_p, bf16_out[fixed_grid]) << "the prefix side differs with the suffix path";
      } else if (!fp8) {
        bf16_att[fixed_grid] = got, bf16_out[fixed_grid] = out_p;
      } else {
        EXPECT_EQ(std::memcmp(got.data(), bf16_att[fixed_grid].data(), got.size() * 4), 0) << "FP8 rows differ from BF16 rows of the same values";
        EXPECT_EQ(out_p, bf16_out[fixed_grid]) << "FP8 prefix pages differ from BF16 ones of the same values";
      }
    }
}

}  // namespace bestofn::gpu_ops
