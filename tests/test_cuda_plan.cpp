// Host-side planning of the CUDA engine's part-2 paths, run without a GPU: the state-row map of the
// shared-prefix GEMMs and the concatenation of fused linear layers (src/cuda/plan.h), and the
// token-count buckets and on-disk cache of --gemm-autotune (src/cuda/gemm_algo_cache.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "bestofn/error.h"
#include "cuda/gemm_algo_cache.h"
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

}  // namespace
}  // namespace bestofn::cuda
