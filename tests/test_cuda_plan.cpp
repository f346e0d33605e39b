// Host-side planning of the CUDA engine's part-2 paths, run without a GPU: the state-row map of the
// shared-prefix GEMMs and the concatenation of fused linear layers (src/cuda/plan.h), and the
// token-count buckets and on-disk cache of --gemm-autotune (src/cuda/gemm_algo_cache.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "cpu/attention.h"
#include "cuda/gemm_algo_cache.h"
#include "cuda/best_fit_parts.h"
#include "cuda/plan.h"
#include "test_util.h"

namespace bestofn::cuda {
namespace {

int state_row(const PrefixStateMap& m, int T, int t, int h, int group) {
  const auto ts = static_cast<std::size_t>(t), Ts = static_cast<std::size_t>(T);
  return m.map[ts] + (h / group) * m.map[Ts + ts] + m.map[2 * Ts + ts] * group + h % group;
}

TEST(CudaPlan, PrefixStateRowsAreOneMatrixPerGroupAndKvHead) {
  const int T = 5, heads = 6, kv = 2, group = 3;
  // Two prefixes, their rows interleaved in the batch.
  const std::vector<std::vector<int>> groups = {{0, 2, 3}, {1, 4}};
  const PrefixStateMap m = prefix_state_map(groups, T, heads, kv);
  EXPECT_EQ(m.rows, T * heads);
  EXPECT_EQ(m.base, (std::vector<int>{0, 18}));
  EXPECT_EQ(m.R, (std::vector<int>{9, 6}));
  std::set<int> seen;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::size_t i = 0; i < groups[g].size(); ++i)
      for (int h = 0; h < heads; ++h) {
        const int r = state_row(m, T, groups[g][i], h, group);
        // KV head h / group's block of group g, rows slot-major then query head within the KV head.
        EXPECT_EQ(r, m.base[g] + (h / group) * m.R[g] + static_cast<int>(i) * group + h % group);
        EXPECT_TRUE(seen.insert(r).second) << "row " << r << " twice";
      }
  EXPECT_EQ(static_cast<int>(seen.size()), m.rows);
}

// C_b = alpha op(A_b) op(B_b) by the BLAS definition (column-major), as cuBLAS computes it.
void blas_gemm(const StridedGemm& g, float alpha, const float* A, const float* B, float* C) {
  for (int b = 0; b < g.batch; ++b)
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        double acc = 0.0;
        for (int p = 0; p < g.k; ++p) {
          const float a = g.trans_a ? A[b * g.stride_a + i * g.lda + p] : A[b * g.stride_a + p * g.lda + i];
          const float x = g.trans_b ? B[b * g.stride_b + p * g.ldb + j] : B[b * g.stride_b + j * g.ldb + p];
          acc += static_cast<double>(a) * x;
        }
        C[b * g.stride_c + j * g.ldc + i] = alpha * static_cast<float>(acc);
      }
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = bf16_from_float(d(rng));
  return v;
}

// The --cuda-prefix-gemm pipeline on the CPU, step by step as src/cuda/prefix_attention.cpp and
// kernels/prefix_attention.cu run it (gather by the state map, the two GEMMs with the arguments of
// prefix_gemms through a BLAS reference, row softmax, suffix and log-sum-exp merge), against
// cpu::decode_attention: a wrong transpose, leading dimension or stride in prefix_gemms, or a
// state map that disagrees with the GEMMs' row blocks, gives errors of order 1.
TEST(CudaPlan, PrefixGemmPipelineMatchesDecodeAttention) {
  const int T = 5, H = 6, n_kv = 2, hd = 8, group = H / n_kv, kv_dim = n_kv * hd;
  const std::vector<std::vector<int>> groups = {{0, 2, 3}, {1, 4}};
  const int lens[] = {7, 13};
  std::mt19937 rng(4242);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(T * H * hd));
  for (auto& x : q) x = 2.0f * nd(rng);
  std::vector<std::vector<std::uint16_t>> kp, vp, ks, vs;
  for (int L : lens) kp.push_back(random_bf16(static_cast<std::size_t>(L * kv_dim), rng)), vp.push_back(random_bf16(static_cast<std::size_t>(L * kv_dim), rng));
  std::vector<int> prefix_of(T), plen(T), slen(T);
  for (int g = 0; g < 2; ++g)
    for (int t : groups[static_cast<std::size_t>(g)]) prefix_of[static_cast<std::size_t>(t)] = g, plen[static_cast<std::size_t>(t)] = lens[g];
  std::vector<const std::uint16_t*> kpp, vpp, ksp, vsp;
  for (int t = 0; t < T; ++t) {
    slen[static_cast<std::size_t>(t)] = 1 + t % 4;
    ks.push_back(random_bf16(static_cast<std::size_t>(slen[static_cast<std::size_t>(t)] * kv_dim), rng));
    vs.push_back(random_bf16(static_cast<std::size_t>(slen[static_cast<std::size_t>(t)] * kv_dim), rng));
  }
  for (int t = 0; t < T; ++t) {
    const auto ts = static_cast<std::size_t>(t), p = static_cast<std::size_t>(prefix_of[ts]);
    kpp.push_back(kp[p].data()), vpp.push_back(vp[p].data()), ksp.push_back(ks[ts].data()), vsp.push_back(vs[ts].data());
  }
  std::vector<float> expected(q.size());
  cpu::decode_attention(q.data(), kpp.data(), vpp.data(), plen.data(), ksp.data(), vsp.data(), slen.data(), T, H, n_kv, hd,
                        expected.data());

  const PrefixStateMap plan = prefix_state_map(groups, T, H, n_kv);
  const auto D = static_cast<std::size_t>(hd), rows = static_cast<std::size_t>(plan.rows);
  std::vector<float> qg(rows * D), m(rows), l(rows), o(rows * D);
  for (int t = 0; t < T; ++t)  // gather
    for (int h = 0; h < H; ++h)
      for (std::size_t i = 0; i < D; ++i)
        qg[static_cast<std::size_t>(state_row(plan, T, t, h, group)) * D + i] = q[(static_cast<std::size_t>(t * H + h)) * D + i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::size_t g = 0; g < 2; ++g) {
    const int L = lens[g], R = plan.R[g];
    const auto first = static_cast<std::size_t>(plan.base[g]);
    std::vector<float> kf(kp[g].size()), vf(vp[g].size()), S(static_cast<std::size_t>(n_kv * R * L));
    for (std::size_t i = 0; i < kf.size(); ++i) kf[i] = bf16_to_float(kp[g][i]), vf[i] = bf16_to_float(vp[g][i]);
    const PrefixGemms gemms = prefix_gemms(L, R, n_kv, hd);
    blas_gemm(gemms.scores, scale, kf.data(), qg.data() + first * D, S.data());
    for (std::size_t r = 0; r < static_cast<std::size_t>(n_kv * R); ++r) {  // softmax rows
      float* row = S.data() + r * static_cast<std::size_t>(L);
      float mx = -INFINITY, sum = 0.0f;
      for (int j = 0; j < L; ++j) mx = std::max(mx, row[j]);
      for (int j = 0; j < L; ++j) sum += row[j] = std::exp(row[j] - mx);
      m[first + r] = mx, l[first + r] = sum;
    }
    blas_gemm(gemms.values, 1.0f, vf.data(), S.data(), o.data() + first * D);
  }
  int bad = 0;
  for (int t = 0; t < T; ++t)  // suffix and merge, per (t, h)
    for (int h = 0; h < H; ++h) {
      const auto ts = static_cast<std::size_t>(t);
      const float* qh = q.data() + (ts * H + static_cast<std::size_t>(h)) * D;
      const std::size_t off = static_cast<std::size_t>(h / group) * D;
      std::vector<float> sc(static_cast<std::size_t>(slen[ts])), os(D, 0.0f);
      float ms = -INFINITY, ls = 0.0f;
      for (std::size_t j = 0; j < sc.size(); ++j) {
        float d = 0.0f;
        for (std::size_t i = 0; i < D; ++i) d += qh[i] * bf16_to_float(ks[ts][j * static_cast<std::size_t>(kv_dim) + off + i]);
        ms = std::max(ms, sc[j] = d * scale);
      }
      for (std::size_t j = 0; j < sc.size(); ++j) {
        const float e = std::exp(sc[j] - ms);
        ls += e;
        for (std::size_t i = 0; i < D; ++i) os[i] += e * bf16_to_float(vs[ts][j * static_cast<std::size_t>(kv_dim) + off + i]);
      }
      const auto sr = static_cast<std::size_t>(state_row(plan, T, t, h, group));
      const float mm = std::max(m[sr], ms), a = std::exp(m[sr] - mm), b = std::exp(ms - mm);
      for (std::size_t i = 0; i < D; ++i) {
        const float got = (o[sr * D + i] * a + os[i] * b) / (l[sr] * a + ls * b);
        const float want = expected[(ts * H + static_cast<std::size_t>(h)) * D + i];
        if (std::fabs(got - want) > 1e-5f + 1e-4f * std::fabs(want) && bad++ < 8)
          ADD_FAILURE() << "t " << t << " h " << h << " i " << i << ": pipeline " << got << ", decode_attention " << want;
      }
    }
  EXPECT_EQ(bad, 0);
}

TEST(CudaPlan, PrefixStateMapRejectsRowsMissingOrTwice) {
  EXPECT_THROW(prefix_state_map({{0, 1}, {1}}, 2, 4, 2), Error);
  EXPECT_THROW(prefix_state_map({{0}}, 2, 4, 2), Error);
  EXPECT_THROW(prefix_state_map({{0, 2}}, 2, 4, 2), Error);
  EXPECT_THROW(prefix_state_map({{0}}, 1, 6, 4), Error);  // heads not a multiple of KV heads
}

struct Shard {
  std::vector<std::uint8_t> bytes;
  Linear l;
  Shard(int out, int in, std::uint8_t fill, std::vector<float> scale, std::optional<float> input_scale,
        DType dtype = DType::F8_E4M3) {
    bytes.assign(static_cast<std::size_t>(out * in) * (dtype == DType::F8_E4M3 ? 1 : 2), fill);
    l.weight.name = "shard ";
    l.weight.name.push_back(static_cast<char>('0' + fill));  // (not "w" + to_string: GCC 12's false -Wrestrict)
    l.weight.dtype = dtype;
    l.weight.shape = {out, in};
    l.weight.data = bytes.data();
    l.weight.nbytes = bytes.size();
    l.weight_scale = std::move(scale);
    l.input_scale = input_scale;
  }
};

std::optional<FusedLinear> fuse(const std::vector<const Shard*>& shards) {
  std::vector<const Linear*> ls;
  for (const Shard* s : shards) ls.push_back(&s->l);
  return fuse_linears(ls);
}

TEST(CudaPlan, FusedWeightsConcatenateWithEachShardsScale) {
  const Shard q(4, 16, 1, {0.5f}, std::nullopt), k(2, 16, 2, {0.25f}, std::nullopt), v(2, 16, 3, {0.5f}, std::nullopt);
  const auto f = fuse({&q, &k, &v});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->outs, (std::vector<int>{4, 2, 2}));
  EXPECT_EQ(f->in, 16);
  ASSERT_EQ(f->weight.size(), 8u * 16u);
  EXPECT_EQ(f->weight[0], 1);
  EXPECT_EQ(f->weight[4 * 16], 2);
  EXPECT_EQ(f->weight[6 * 16], 3);
  // Per-tensor scales that differ become per-channel, each repeated over its shard's rows.
  EXPECT_EQ(f->weight_scale, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.5f, 0.5f}));
  EXPECT_EQ(f->input_scale, 0.0f);
}

// Qwen2's q/k/v biases: concatenated in shard order; a shard without one adds zeros (y + 0 = y).
TEST(CudaPlan, FusedBiasesConcatenateAndNoneStaysEmpty) {
  Shard q(4, 16, 1, {0.5f}, std::nullopt), k(2, 16, 2, {0.25f}, std::nullopt), v(2, 16, 3, {0.5f}, std::nullopt);
  EXPECT_TRUE(fuse({&q, &k, &v})->bias.empty());
  q.l.bias = {1, 2, 3, 4};
  v.l.bias = {7, 8};
  EXPECT_EQ(fuse({&q, &k, &v})->bias, (std::vector<float>{1, 2, 3, 4, 0, 0, 7, 8}));
}

TEST(CudaPlan, FusedScalesStayPerTensorWhenEqualAndMixWithPerChannel) {
  const Shard a(2, 16, 1, {0.5f}, 2.0f), b(2, 16, 2, {0.5f}, 2.0f), c(2, 16, 3, {0.1f, 0.2f}, 2.0f);
  const auto same = fuse({&a, &b});
  ASSERT_TRUE(same);
  EXPECT_EQ(same->weight_scale, (std::vector<float>{0.5f}));
  EXPECT_EQ(same->input_scale, 2.0f);
  const auto mixed = fuse({&a, &c});
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->weight_scale, (std::vector<float>{0.5f, 0.5f, 0.1f, 0.2f}));
}

TEST(CudaPlan, ShardsThatCannotShareAGemmAreNotFused) {
  const Shard dyn(2, 16, 1, {0.5f}, std::nullopt), stat(2, 16, 2, {0.5f}, 2.0f), stat3(2, 16, 3, {0.5f}, 3.0f);
  EXPECT_FALSE(fuse({&dyn, &stat}));    // dynamic and static activation scales
  EXPECT_FALSE(fuse({&stat, &stat3}));  // two static scales
  const Shard wide(2, 32, 4, {0.5f}, std::nullopt);
  EXPECT_FALSE(fuse({&dyn, &wide}));    // different input widths
  const Shard bf(2, 16, 5, {}, std::nullopt, DType::BF16);
  EXPECT_FALSE(fuse({&dyn, &bf}));      // different dtypes
  const Shard bf2(3, 16, 6, {}, std::nullopt, DType::BF16);
  const auto f = fuse({&bf, &bf2});
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->weight_scale.empty());
  EXPECT_EQ(f->weight.size(), 5u * 16u * 2u);
}

TEST(CudaPlan, GemmBucketsArePowersOfTwo) {
  EXPECT_EQ(gemm_bucket(1), 1);
  EXPECT_EQ(gemm_bucket(2), 2);
  EXPECT_EQ(gemm_bucket(3), 4);
  EXPECT_EQ(gemm_bucket(64), 64);
  EXPECT_EQ(gemm_bucket(65), 128);
  EXPECT_EQ(gemm_bucket(65536), 65536);
  EXPECT_EQ(gemm_bucket(70000), 70000);
  EXPECT_THROW(gemm_bucket(0), Error);
  EXPECT_EQ(gemm_algo_key("NVIDIA H200", 130000, "FP8 E4M3", 6144, 4096, 64), "NVIDIA H200|lt130000|FP8 E4M3|6144x4096|T64");
}

TEST(CudaPlan, GemmAlgoCacheRoundTripsThroughItsFile) {
  test::TempDir dir;
  const auto file = dir / "sub" / "gemm_algos.json";  // the directory is made on the first put
  const GemmAlgoWords a = {1, 2, 3, 0xffffffffffffffffull, 5, 6, 7, 8}, b = {9, 9, 9, 9, 9, 9, 9, 9};
  {
    GemmAlgoCache c(file);
    EXPECT_EQ(c.size(), 0u);
    EXPECT_FALSE(c.find("k1"));
    c.put("k1", a, 12.5);
    c.put("k2", b, 3.0);
    c.put("k2", a, 2.0);  // replaced
  }
  GemmAlgoCache c(file);
  EXPECT_EQ(c.size(), 2u);
  ASSERT_TRUE(c.find("k1"));
  EXPECT_EQ(*c.find("k1"), a);
  EXPECT_EQ(*c.find("k2"), a);
  EXPECT_FALSE(c.find("k3"));
}

TEST(CudaPlan, AMalformedGemmAlgoCacheIsIgnoredAndReplaced) {
  test::TempDir dir;
  const auto file = dir / "gemm_algos.json";
  for (const char* text : {"{not json", R"({"version": 2, "entries": {}})", R"({"version": 1, "entries": {"k": {"algo": [1, 2], "us": 1}}})"}) {
    std::ofstream(file) << text;
    GemmAlgoCache c(file);
    EXPECT_EQ(c.size(), 0u) << text;
    c.put("k", {1, 2, 3, 4, 5, 6, 7, 8}, 1.0);
    EXPECT_EQ(GemmAlgoCache(file).size(), 1u) << text;
  }
}

TEST(CudaPlan, GemmAlgoCacheFileFollowsTheEnvironment) {
  const char* saved[] = {std::getenv("BESTOFN_GEMM_CACHE"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string keep[] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : ""};
  unsetenv("BESTOFN_GEMM_CACHE");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(GemmAlgoCache::default_file(), "/home/u/.cache/bestofn/gemm_algos.json");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(GemmAlgoCache::default_file(), "/xdg/bestofn/gemm_algos.json");
  setenv("BESTOFN_GEMM_CACHE", "/tmp/g.json", 1);
  EXPECT_EQ(GemmAlgoCache::default_file(), "/tmp/g.json");
  const char* names[] = {"BESTOFN_GEMM_CACHE", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) saved[i] ? setenv(names[i], keep[i].c_str(), 1) : unsetenv(names[i]);
}

TEST(CudaPlan, KvBlockPoolTakesAndGivesBack) {
  KvBlockPool pool(3, 16);
  EXPECT_EQ(pool.blocks_for(0), 0);
  EXPECT_EQ(pool.blocks_for(1), 1);
  EXPECT_EQ(pool.blocks_for(16), 1);
  EXPECT_EQ(pool.blocks_for(17), 2);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 2);
  EXPECT_EQ(pool.take(), -1);  // exhausted: a value, not an exception
  EXPECT_EQ(pool.free_blocks(), 0);
  pool.give(1);
  EXPECT_THROW(pool.give(1), Error);  // twice
  EXPECT_THROW(pool.give(3), Error);  // out of range
  EXPECT_EQ(pool.take(), 1);          // the most recently freed first
  EXPECT_THROW(KvBlockPool(-1, 16), Error);
  EXPECT_THROW(KvBlockPool(4, 0), Error);
}

TEST(CudaPlan, KvBlockPoolAdmitsByFreeBlocksAndBudgets) {
  KvBlockPool pool(10, 16);
  EXPECT_TRUE(pool.admit(4));
  EXPECT_TRUE(pool.admit(6));
  EXPECT_FALSE(pool.admit(1));  // all 10 promised, none taken yet
  EXPECT_EQ(pool.promised(), 10);
  // The first slot takes two of its four blocks: still 8 free and 8 promised.
  pool.take(), pool.taken(4);
  pool.take(), pool.taken(3);
  EXPECT_EQ(pool.promised(), 8);
  EXPECT_FALSE(pool.admit(1));
  // It finishes with 2 of its budget untaken and gives its 2 blocks back: room for 4 more.
  pool.retire(2);
  pool.give(0), pool.give(1);
  EXPECT_EQ(pool.promised(), 6);
  EXPECT_FALSE(pool.admit(5));
  EXPECT_TRUE(pool.admit(4));
  EXPECT_THROW(pool.admit(-1), Error);
}

// --speculate on --paged-kv: a run takes every block its positions reach in one step, and the
// blocks of rejected positions go back into the slot's promise, so admission is as before.
TEST(CudaPlan, RunsTakeEveryBlockTheyReachAndGiveBackTheRejected) {
  KvBlockPool pool(10, 16);
  auto admitted = [&](int budget) {
    PagedSlot s;
    EXPECT_TRUE(pool.admit(budget));
    s.budget = s.budget_left = budget;
    return s;
  };
  PagedSlot a = admitted(3), b = admitted(2);
  PagedSlot* both[] = {&a, &b};
  // a: rows 0..14 (one block); b: a run reaching row 33 (three blocks, one past its promise of 2).
  take_blocks(pool, both, std::vector<int>{14, 33});
  EXPECT_EQ(a.blocks.size(), 1u);
  EXPECT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(a.budget_left, 2);
  EXPECT_EQ(b.budget_left, 0);
  EXPECT_EQ(pool.free_blocks(), 6);
  EXPECT_EQ(pool.promised(), 2);  // a's two left
  // Rows up to 15 again take nothing; row 16 starts a's second block.
  take_blocks(pool, both, std::vector<int>{15, 33});
  EXPECT_EQ(a.blocks.size(), 1u);
  take_blocks(pool, both, std::vector<int>{16, 33});
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(pool.promised(), 1);
  // b keeps rows 0..16 (17 rows: two blocks, its whole promise): its third, taken outside the
  // promise, goes back to the pool and is promised to no one.
  const int third = b.blocks[2];
  shrink_blocks(pool, b, 17);
  EXPECT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.budget_left, 0);
  EXPECT_EQ(pool.free_blocks(), 6);
  EXPECT_EQ(pool.promised(), 1);  // a's one
  EXPECT_EQ(pool.take(), third);  // the block itself is free
  pool.give(third);
  shrink_blocks(pool, b, 32);     // nothing past 32 rows: nothing changes
  EXPECT_EQ(b.blocks.size(), 2u);
  // A block inside the promise comes back promised again: b down to 1 block has 1 of its 2 left.
  shrink_blocks(pool, b, 3);
  EXPECT_EQ(b.blocks.size(), 1u);
  EXPECT_EQ(b.budget_left, 1);
  EXPECT_EQ(pool.promised(), 2);
  EXPECT_EQ(pool.free_blocks(), 7);
  // Nothing is taken when the pool cannot give what lies outside the promises.
  KvBlockPool small(4, 16);
  PagedSlot c;
  ASSERT_TRUE(small.admit(1));
  c.budget = c.budget_left = 1;
  PagedSlot* one[] = {&c};
  try {
    take_blocks(small, one, std::vector<int>{80});  // 6 blocks: 5 outside a pool of 4
    ADD_FAILURE() << "took past the pool";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of KV blocks"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c.blocks.empty());
  EXPECT_EQ(small.free_blocks(), 4);
  take_blocks(small, one, std::vector<int>{63});  // 4 blocks: 1 promised, 3 outside
  EXPECT_EQ(c.blocks.size(), 4u);
  EXPECT_EQ(small.promised(), 0);
  // All back: its promise is what it was admitted with (1), not the 4 blocks it held, so another
  // slot can still be admitted for the other 3.
  shrink_blocks(small, c, 0);
  EXPECT_TRUE(c.blocks.empty());
  EXPECT_EQ(small.free_blocks(), 4);
  EXPECT_EQ(c.budget_left, 1);
  EXPECT_EQ(small.promised(), 1);
  EXPECT_TRUE(small.admit(3));
  EXPECT_THROW(small.repromise(1), Error);  // past the free blocks
}

}  // namespace
}  // namespace bestofn::cuda

namespace bestofn::cuda {
namespace {

// The CUDA engine's layout of prefill passes, pass after pass as prefill_many runs them: every
// (segment, position) of a pass is one row; the first `ending` rows are the last rows of the
// prompts that end in the pass, in prompt order (the logits the lm_head computes over those rows);
// and when a row's attention runs, positions 0..its own of its prompt are in the cache (written by
// an earlier pass, or by this one: rope_kv_write_cuda writes all the pass's rows first), so a chunk
// sees its prompt's earlier rows.
void expect_layout(const std::vector<int>& lengths, int budget) {
  std::vector<int> written(lengths.size(), 0);  // each prompt's cache rows so far
  std::vector<int> logits_rows(lengths.size(), 0);
  for (const auto& pass : plan_prefill_passes(lengths, budget)) {
    const PrefillPassRows r = prefill_pass_rows(pass, lengths);
    ASSERT_EQ(r.segment.size(), r.position.size());
    std::set<std::pair<int, int>> rows;
    for (std::size_t t = 0; t < r.segment.size(); ++t) EXPECT_TRUE(rows.emplace(r.segment[t], r.position[t]).second) << "row " << t << " twice";
    std::size_t want = 0;
    for (std::size_t k = 0; k < pass.size(); ++k)
      for (int j = pass[k].begin; j < pass[k].end; ++j) EXPECT_TRUE(rows.count({static_cast<int>(k), j})) << "segment " << k << " position " << j;
    for (const auto& s : pass) want += static_cast<std::size_t>(s.end - s.begin);
    EXPECT_EQ(rows.size(), want);
    for (int e = 0; e < r.ending; ++e) {
      const PrefillSegment& s = pass[static_cast<std::size_t>(r.segment[static_cast<std::size_t>(e)])];
      EXPECT_EQ(s.prompt, r.first_ending + static_cast<std::size_t>(e));
      EXPECT_EQ(r.position[static_cast<std::size_t>(e)], lengths[s.prompt] - 1);
      logits_rows[s.prompt]++;
    }
    for (std::size_t t = static_cast<std::size_t>(r.ending); t < r.segment.size(); ++t)
      EXPECT_NE(r.position[t], lengths[pass[static_cast<std::size_t>(r.segment[t])].prompt] - 1) << "a last row after the logits rows";
    for (const auto& s : pass) {
      EXPECT_EQ(written[s.prompt], s.begin) << "prompt " << s.prompt << ": positions before the chunk missing from the cache";
      written[s.prompt] = s.end;
    }
  }
  EXPECT_EQ(written, lengths);
  EXPECT_EQ(logits_rows, std::vector<int>(lengths.size(), 1));
}

TEST(CudaPlan, PrefillPassRowsPutTheEndingPromptsFirst) {
  expect_layout({1}, 1);
  expect_layout({10, 20, 70}, 48);
  expect_layout({130, 1, 7, 48, 49}, 5);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<int> lengths(1 + rng() % 10);
    for (int& n : lengths) n = 1 + static_cast<int>(rng() % 70);
    expect_layout(lengths, 1 + static_cast<int>(rng() % 150));
  }
  // A pass where the prompts that end are not consecutive is no pass of plan_prefill_passes.
  const std::vector<int> lengths = {3, 5, 2};
  const std::vector<PrefillSegment> bad = {{0, 0, 3}, {1, 0, 2}, {2, 0, 2}};
  EXPECT_THROW(prefill_pass_rows(bad, lengths), Error);
}

}  // namespace
}  // namespace bestofn::cuda

// The prompt KV parts made before a run (src/cuda/best_fit_parts.h): with one part per prompt, each
// that prompt's length, every prompt finds a part in any order of prefills and releases, and a
// part is never handed to two live prompts. A random order that also re-prefills nothing (each
// prompt once, as a run does); 200 runs over 1..60 prompts of 1..900 tokens, many ties.
TEST(BestFitParts, OnePartPerPromptFitsEveryOrderOfPrefillsAndReleases) {
  std::mt19937 rng(32);
  for (int run = 0; run < 200; ++run) {
    std::vector<int> lengths(1 + rng() % 60);
    for (int& len : lengths) len = 1 + static_cast<int>(rng() % (run % 2 ? 900 : 12));
    bestofn::cuda::BestFitParts<int> parts;  // the part is its own id
    const auto made = bestofn::cuda::reserved_part_lengths(lengths, 1LL << 40);
    ASSERT_EQ(made.size(), lengths.size());
    std::vector<int> capacity;
    for (const int len : made) parts.put(len, static_cast<int>(capacity.size())), capacity.push_back(len);
    std::vector<int> order(lengths.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::pair<int, int>> live;  // (prompt, part)
    std::set<int> held;
    for (const int p : order) {
      while (!live.empty() && rng() % 3 == 0) {  // some prompts finish before the next prefill
        const std::size_t i = rng() % live.size();
        parts.put(capacity[static_cast<std::size_t>(live[i].second)], live[i].second);
        held.erase(live[i].second);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      const auto part = parts.take(lengths[static_cast<std::size_t>(p)]);
      ASSERT_TRUE(part) << "run " << run << ": no part for prompt " << p << " of " << lengths[static_cast<std::size_t>(p)];
      EXPECT_GE(capacity[static_cast<std::size_t>(*part)], lengths[static_cast<std::size_t>(p)]);
      EXPECT_TRUE(held.insert(*part).second) << "part " << *part << " handed out twice";
      live.emplace_back(p, *part);
    }
  }
}

TEST(BestFitParts, BestFitAndTheBudget) {
  bestofn::cuda::BestFitParts<char> parts;
  parts.put(50, 'a');
  parts.put(10, 'b');
  parts.put(30, 'c');
  EXPECT_EQ(parts.take(11), 'c');  // the smallest of at least 11 rows
  EXPECT_EQ(parts.take(51), std::nullopt);
  EXPECT_EQ(parts.take(10), 'b');
  EXPECT_EQ(parts.size(), 1u);
  // Shortest first while the rows fit the budget: 5 + 7 + 9 <= 25 < 5 + 7 + 9 + 20.
  EXPECT_EQ(bestofn::cuda::reserved_part_lengths({20, 9, 5, 7}, 25), (std::vector<int>{5, 7, 9}));
  EXPECT_EQ(bestofn::cuda::reserved_part_lengths({20, 9}, 4), std::vector<int>{});
}
