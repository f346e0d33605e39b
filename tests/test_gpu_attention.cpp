// The attention kernels beyond their CPU twins (those comparisons are rows of tests/test_gpu_ops.cpp):
// FP8 cache rows against BF16 rows of the same values, bit for bit, in every kernel that reads the
// cache; and the host helpers that choose the split paths. Each device test skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "gpu_attention_util.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn {
namespace {

using test::compare, test::DecodeBatch, test::DeviceArray, test::Fp8Rows, test::fp8_rows, test::head_index, test::HeadShape,
    test::kAttnAtol, test::kAttnRtol, test::kHeadShapes, test::shape_name, test::sync;

// The splits that fill an H200 (132 SMs) and the GQA groups the tiled kernel takes: host
// arithmetic, no device needed.
TEST(GpuDecodeAttention, SplitsAndTiledSupport) {
  EXPECT_EQ(cuda::decode_attention_splits(1, 32, 132), 9);  // 264 blocks wanted, 32 heads
  EXPECT_EQ(cuda::decode_attention_splits(1, 4, 132), cuda::kMaxDecodeSplits);
  EXPECT_EQ(cuda::decode_attention_splits(64, 32, 132), 1);
  EXPECT_TRUE(cuda::decode_attention_tiled_supported(16, 2, 128));  // group 8, the most the kernel takes
  EXPECT_FALSE(cuda::decode_attention_tiled_supported(32, 2, 128));  // group 16
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
}  // namespace
}  // namespace bestofn
