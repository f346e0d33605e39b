// The attention, prefix and sampling rows of the GPU op table (tests/test_gpu_ops.cpp): each
// function here is one row's check, the launcher on seeded random inputs against its CPU twin
// within the tolerance its comment derives. They run only through the table, which skips them
// without a device.
// Over 500 lines on purpose: the attention rows share their batch builders and tolerances
// (tests/gpu_attention_util.h), one function per row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bestofn/engine/sampler.h"
#include "bestofn/model/model_config.h"
#include "bestofn/model/quantize.h"
#include "bestofn/util/numeric.h"
#include "bestofn/util/rng.h"
#include "cpu/attention.h"
#include "cpu/ops.h"
#include "cuda/cascade_plan.h"
#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "cuda/step_plan.h"
#include "gpu_attention_util.h"
#include "gpu_op_rows.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn::gpu_ops {
namespace {

using test::compare, test::DecodeBatch, test::DeviceArray, test::Fp8Rows, test::fp8_rows, test::head_index, test::HeadShape,
    test::kAttnAtol, test::kAttnRtol, test::kHeadShapes, test::random_bf16, test::shape_name, test::sync;

// rope_kv_write_cuda into BF16 rows.
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

void rope_kv_bf16_rows() {
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

// heads. v: the same floats in, so the same codes and scales bit for bit (the quantizer is the
// activation quantizer's, quantize_act_fp8_cuda). k: the rotation may differ in its last fp32 bits where
// cosf / sinf do (the BF16 rows above: ~10% of rotated values differ in the last bit), which can move
// a value across an E4M3 rounding boundary or change a head's amax, and so its scale, by an ulp.
// So: each dequantized k within one E4M3 step (2^-3 relative, plus the smallest step of its row)
// of the CPU's; in heads whose scale agrees, at most 1% of the codes differ; and at most a quarter
// of the heads have a scale an ulp or so off (one rotated value in 64-128 decides it).
void rope_kv_fp8_rows() {
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

// A batch with the empty sides the kernels must handle: a suffix only, a prefix only, neither
// (zeros), one position each.
DecodeBatch with_empty_sides(HeadShape s, std::uint64_t seed) {
  DecodeBatch b(6, s, seed, 300, 20);
  b.prefix_len[0] = 0;
  b.suffix_len[1] = 0;
  b.prefix_len[2] = 0, b.suffix_len[2] = 0;
  b.prefix_len[3] = 1, b.suffix_len[3] = 1;
  return b;
}

// The twin's bound (kAttnAtol, kAttnRtol: softmax sums in another order); rows with no position
// at all must be exactly zero.
void expect_attention(const std::vector<float>& gpu, const DecodeBatch& b) {
  EXPECT_EQ(compare(gpu, b.cpu(), kAttnAtol, kAttnRtol, head_index(b.s.n_heads, b.s.hd)), "");
  const auto per_row = static_cast<std::size_t>(b.s.n_heads * b.s.hd);
  for (std::size_t t = 0; t < static_cast<std::size_t>(b.T); ++t) {
    if (b.prefix_len[t] != 0 || b.suffix_len[t] != 0) continue;
    for (std::size_t i = t * per_row; i < (t + 1) * per_row; ++i) ASSERT_EQ(gpu[i], 0.0f) << "row " << t << ", element " << i - t * per_row;
  }
}

// The empty-side batches at GQA 4 and at the largest head_dim.
const HeadShape kEmptySideShapes[] = {{8, 2, 64}, {4, 1, 256}};

}  // namespace

// One block per (row, query head), positions over 8 warps.
void decode_attention() {
  std::uint64_t seed = 2000;
  for (int T : {1, 5, 33})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      const DecodeBatch b(T, s, seed, 600, 40);
      seed += 10;
      expect_attention(b.gpu(), b);
    }
  for (const HeadShape& s : kEmptySideShapes) {
    SCOPED_TRACE("empty sides, " + shape_name(6, s.n_heads, s.n_kv, s.hd));
    const DecodeBatch b = with_empty_sides(s, 3000 + static_cast<std::uint64_t>(s.hd));
    expect_attention(b.gpu(), b);
  }
}

// The merge in the attention launch (merge counters: the last block of a row merges) against
// decode_merge_cuda's second launch: the same function over the same states, so the same bits;
// run twice on the same counters, which the last blocks leave at 0.
void expect_inline_merge(const DecodeBatch& b, int splits, bool tiled) {
  const std::vector<float> two_launches = tiled ? b.gpu_tiled(splits) : b.gpu(splits);
  const DecodeBatch::InlineMerge m = b.gpu_inline_merge(splits, tiled);
  EXPECT_EQ(std::memcmp(m.first.data(), two_launches.data(), two_launches.size() * 4), 0) << (tiled ? "tiled" : "part 1");
  EXPECT_EQ(std::memcmp(m.second.data(), two_launches.data(), two_launches.size() * 4), 0) << (tiled ? "tiled" : "part 1") << ", again";
  EXPECT_EQ(std::count(m.counters.begin(), m.counters.end(), 0), static_cast<std::ptrdiff_t>(m.counters.size()));
}

// Positions split over several blocks per row (decode_attention_cuda with splits > 1), their
// chunk states merged by decode_merge_cuda: chunks longer, shorter and (32 splits of a 1-40
// position suffix) emptier than a warp's share; the same bound as one block per row. The merge in
// the same launch (merge counters) gives decode_merge_cuda's bits.
void decode_merge() {
  std::uint64_t seed = 2500;
  for (int T : {1, 5, 33})
    for (int splits : {2, 7, cuda::kMaxDecodeSplits})
      for (const HeadShape& s : kHeadShapes) {
        SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", splits " + std::to_string(splits) + ", seed " + std::to_string(seed));
        const DecodeBatch b(T, s, seed, 600, 40);
        seed += 10;
        expect_attention(b.gpu(splits), b);
        expect_inline_merge(b, splits, false);
        if (cuda::decode_attention_tiled_supported(s.n_heads, s.n_kv, s.hd)) expect_inline_merge(b, splits, true);
      }
  for (const HeadShape& s : kEmptySideShapes) {
    SCOPED_TRACE("empty sides, splits 5, " + shape_name(6, s.n_heads, s.n_kv, s.hd));
    const DecodeBatch b = with_empty_sides(s, 3000 + static_cast<std::uint64_t>(s.hd));
    expect_attention(b.gpu(5), b);
  }
}

// The tiled kernel: whole dot products per thread (16-byte loads, or one element at a time for a
// head_dim not a multiple of 8), one running softmax over prefix and suffix, tiles of 64
// positions (prefixes up to 600 cross many), GQA groups of 1 to 8 query heads, chunks as above.
void decode_attention_tiled() {
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
        expect_attention(b.gpu_tiled(splits), b);
      }
  for (const HeadShape& s : kEmptySideShapes)
    for (int splits : {1, 5}) {
      SCOPED_TRACE("empty sides, splits " + std::to_string(splits) + ", " + shape_name(6, s.n_heads, s.n_kv, s.hd));
      const DecodeBatch b = with_empty_sides(s, 3000 + static_cast<std::uint64_t>(s.hd));
      expect_attention(b.gpu_tiled(splits), b);
    }
}

// Both cache formats; the tolerances are derived above each half.
void rope_kv_write() {
  {
    SCOPED_TRACE("BF16 rows");
    rope_kv_bf16_rows();
  }
  SCOPED_TRACE("FP8 rows");
  rope_kv_fp8_rows();
}

// Causal attention over a prompt, up to 257 rows, and the largest head_dim; the twin's bound.
void prefill_attention() {
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

// A pass of several prompts in one launch: whole prompts, first chunks (a prompt that goes on in
// the next pass), later chunks (rows that also see the prompt's earlier rows), one-row segments; the
// pass's rows shuffled (the kernel must follow its row tables). Each segment's rows against the
// twin over that segment with its offset; the tolerance of prefill_attention_cuda (the same
// online softmax).
void prefill_attention_segments() {
  struct Chunk {
    int begin, end;  // rows of the prompt in this pass; the cache holds positions 0..end-1
  };
  const std::vector<Chunk> chunks = {{0, 1}, {17, 40}, {0, 33}, {257, 300}, {0, 3}, {5, 6}};
  std::uint64_t seed = 4500;
  for (const HeadShape& s : kHeadShapes) {
    SCOPED_TRACE(shape_name(0, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
    const auto kvd = static_cast<std::size_t>(s.n_kv * s.hd), per_row = static_cast<std::size_t>(s.n_heads * s.hd);
    std::vector<std::vector<std::uint16_t>> k, v;
    std::vector<std::vector<float>> q, ref;
    std::vector<std::pair<int, int>> rows;  // (segment, row in it) of each pass row
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const auto n = static_cast<std::size_t>(chunks[c].end - chunks[c].begin);
      k.push_back(random_bf16(static_cast<std::size_t>(chunks[c].end) * kvd, seed + 1));
      v.push_back(random_bf16(static_cast<std::size_t>(chunks[c].end) * kvd, seed + 2));
      q.push_back(test::random_floats(n * per_row, seed + 3, 2.0f));
      seed += 10;
      ref.emplace_back(q.back().size());
      cpu::prefill_attention(q.back().data(), k.back().data(), v.back().data(), static_cast<int>(n), s.n_heads, s.n_kv, s.hd,
                             ref.back().data(), chunks[c].begin);
      for (std::size_t r = 0; r < n; ++r) rows.emplace_back(static_cast<int>(c), static_cast<int>(r));
    }
    std::shuffle(rows.begin(), rows.end(), std::mt19937_64(seed));
    const std::size_t T = rows.size();
    std::vector<float> q_pass(T * per_row), want(T * per_row);
    std::vector<int> seg(T), pos(T);
    for (std::size_t t = 0; t < T; ++t) {
      const auto [c, r] = rows[t];
      const auto cs = static_cast<std::size_t>(c), rs = static_cast<std::size_t>(r);
      std::copy_n(q[cs].begin() + static_cast<std::ptrdiff_t>(rs * per_row), per_row, q_pass.begin() + static_cast<std::ptrdiff_t>(t * per_row));
      std::copy_n(ref[cs].begin() + static_cast<std::ptrdiff_t>(rs * per_row), per_row, want.begin() + static_cast<std::ptrdiff_t>(t * per_row));
      seg[t] = c, pos[t] = chunks[cs].begin + r;
    }
    std::vector<std::unique_ptr<DeviceArray<std::uint16_t>>> d_k, d_v;
    std::vector<const std::uint16_t*> k_ptr, v_ptr;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      d_k.push_back(std::make_unique<DeviceArray<std::uint16_t>>(k[c]));
      d_v.push_back(std::make_unique<DeviceArray<std::uint16_t>>(v[c]));
      k_ptr.push_back(d_k.back()->get()), v_ptr.push_back(d_v.back()->get());
    }
    DeviceArray<const std::uint16_t*> d_kp(k_ptr), d_vp(v_ptr);
    DeviceArray<int> d_seg(seg), d_pos(pos);
    DeviceArray<float> d_q(q_pass), d_out(q_pass.size());
    cuda::prefill_attention_segments_cuda(d_q.get(), d_kp.get(), d_vp.get(), d_seg.get(), d_pos.get(), static_cast<int>(T), s.n_heads,
                                          s.n_kv, s.hd, d_out.get(), nullptr);
    sync();
    EXPECT_EQ(compare(d_out.download(), want, kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
  }
}

// --cuda-prefix-gemm's prefix K/V from FP8 rows: each value exactly fp8(code) * scale, the BF16
// twin's value (fp8_rows: both formats hold it exactly).
void fp8_rows_to_f32() {
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

namespace {

// Batch rows in prefix groups of up to `size` (interleaved, as a scheduler's batch may hold them).
std::vector<std::vector<int>> interleaved_groups(int T, int size) {
  const int n = (T + size - 1) / size;
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(n));
  for (int t = 0; t < T; ++t) groups[static_cast<std::size_t>(t % n)].push_back(t);
  return groups;
}

// The state row of batch row t, query head h, as src/cuda/kernels.h defines it.
std::size_t state_row(const cuda::PrefixStateMap& plan, int T, int t, int h, int group) {
  const auto at = [&](int k) { return plan.map[static_cast<std::size_t>(k * T + t)]; };
  return static_cast<std::size_t>(at(0) + (h / group) * at(1) + at(2) * group + h % group);
}

// Within `ulps` float ulps of `want` (relative to its magnitude).
bool within_ulps(double got, double want, double ulps) {
  return std::fabs(got - want) <= ulps * std::numeric_limits<float>::epsilon() * std::fabs(want);
}

}  // namespace

// A copy of each query row to its state row: bit for bit. GQA groups 1, 4 and 4 with two KV heads.
void gather_prefix_queries() {
  struct Shape {
    int T, n_heads, n_kv, hd;
  };
  std::uint64_t seed = 7200;
  for (const Shape& s : {Shape{1, 8, 8, 64}, Shape{7, 32, 8, 128}, Shape{33, 8, 2, 64}}) {
    SCOPED_TRACE("T " + std::to_string(s.T) + ", heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv));
    const auto hd = static_cast<std::size_t>(s.hd);
    const std::vector<float> q = test::random_floats(static_cast<std::size_t>(s.T * s.n_heads) * hd, seed++);
    const cuda::PrefixStateMap plan = cuda::prefix_state_map(interleaved_groups(s.T, 3), s.T, s.n_heads, s.n_kv);
    const cuda::DeviceBuffer dq = test::to_gpu(q), dmap = test::to_gpu(plan.map);
    cuda::DeviceBuffer dqg(static_cast<std::size_t>(plan.rows) * hd * 4);
    cuda::gather_prefix_queries_cuda(dq.get<float>(), dmap.get<int>(), s.T, s.n_heads, s.n_kv, s.hd, dqg.get<float>(), nullptr);
    const std::vector<float> qg = test::from_gpu<float>(dqg, static_cast<std::size_t>(plan.rows) * hd);
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.n_heads; ++h) {
        const std::size_t row = state_row(plan, s.T, t, h, s.n_heads / s.n_kv);
        const float* want = q.data() + (static_cast<std::size_t>(t * s.n_heads + h)) * hd;
        EXPECT_EQ(std::memcmp(qg.data() + row * hd, want, hd * 4), 0) << "row t " << t << ", head " << h;
      }
  }
}

// The twin in double: each row's maximum (exact: comparisons only), exp(s - m) of the rounded
// difference, as the kernel takes it (CUDA's expf is within 2 ulp: 4 allowed), and their sum
// (the block's tree adds L terms in another order: (4 + L) ulps relative).
void prefix_softmax() {
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
        const double want = std::exp(static_cast<double>(s[at] - want_m));
        want_l += want;
        if (!within_ulps(e[at], want, 4) && bad++ < 4) ADD_FAILURE() << "row " << r << ", " << j << ": " << e[at] << " != " << want;
      }
      EXPECT_TRUE(within_ulps(l[static_cast<std::size_t>(r)], want_l, 4 + L)) << "row " << r << ": sum " << l[static_cast<std::size_t>(r)]
                                                                              << " != " << want_l;
    }
  }
}

namespace {

// A prefix state per state row, as the GEMMs and prefix_softmax_cuda leave it: m the maximum of
// the scaled scores, l the sum of exp(s - m) (at least 1: the maximum's own term), o the
// unnormalized sum of exp(s - m) v.
struct PrefixState {
  std::vector<float> m, l, o;
};

PrefixState random_prefix_state(std::size_t rows, int hd, std::uint64_t seed) {
  PrefixState p{test::random_floats(rows, seed, 2.0f), test::random_floats(rows, seed + 1, 4.0f),
                test::random_floats(rows * static_cast<std::size_t>(hd), seed + 2, 2.0f)};
  for (float& l : p.l) l = 1.0f + std::fabs(l);
  return p;
}

// The twin of prefix_merge_cuda, in double: for each (t, h) the suffix's softmax state over its
// rows (m_s = max of q.k / sqrt(hd), l_s = sum exp(s - m_s), o_s = sum exp(s - m_s) v; none for an
// empty suffix) merged with the prefix state at state_row(t, h) by log-sum-exp:
// M = max(m_p, m_s), out = (o_p e^(m_p - M) + o_s e^(m_s - M)) / (l_p e^(m_p - M) + l_s e^(m_s - M)).
std::vector<float> merged_attention(const DecodeBatch& b, const cuda::PrefixStateMap& plan, const PrefixState& p) {
  const int group = b.s.n_heads / b.s.n_kv;
  const auto hd = static_cast<std::size_t>(b.s.hd), kvd = static_cast<std::size_t>(b.s.n_kv) * hd;
  const double scale = 1.0f / std::sqrt(static_cast<float>(b.s.hd));  // the kernel's fp32 scale
  std::vector<float> out(b.q.size());
  for (int t = 0; t < b.T; ++t)
    for (int h = 0; h < b.s.n_heads; ++h) {
      const float* q = b.q.data() + static_cast<std::size_t>(t * b.s.n_heads + h) * hd;
      const auto len = static_cast<std::size_t>(b.suffix_len[static_cast<std::size_t>(t)]);
      const std::size_t head = static_cast<std::size_t>(h / group) * hd;
      std::vector<double> score(len);
      double m_s = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < len; ++j) {
        const std::uint16_t* k = b.k_pool.data() + b.suffix_off[static_cast<std::size_t>(t)] + j * kvd + head;
        double dot = 0;
        for (std::size_t i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * bf16_to_float(k[i]);
        score[j] = dot * scale;
        m_s = std::max(m_s, score[j]);
      }
      const std::size_t sr = state_row(plan, b.T, t, h, group);
      const double m_p = p.m[sr], M = std::max(m_p, m_s), a = std::exp(m_p - M);
      double denom = p.l[sr] * a;
      std::vector<double> acc(hd);
      for (std::size_t i = 0; i < hd; ++i) acc[i] = p.o[sr * hd + i] * a;
      for (std::size_t j = 0; j < len; ++j) {
        const double w = std::exp(score[j] - M);
        const std::uint16_t* v = b.v_pool.data() + b.suffix_off[static_cast<std::size_t>(t)] + j * kvd + head;
        denom += w;
        for (std::size_t i = 0; i < hd; ++i) acc[i] += w * bf16_to_float(v[i]);
      }
      float* o = out.data() + static_cast<std::size_t>(t * b.s.n_heads + h) * hd;
      for (std::size_t i = 0; i < hd; ++i) o[i] = static_cast<float>(acc[i] / denom);
    }
  return out;
}

}  // namespace

// The suffix side of --cuda-prefix-gemm: random prefix states (the GEMMs' output) merged with each
// row's BF16 suffix, against the host merge above. Suffixes empty and 1-40 rows long; prefix
// states far above (m_p + 30: the suffix weighs nothing) and far below the suffix's scores; GQA
// groups 1 and 4, head_dim up to 256; prefix groups of up to 4 rows. Bound: kAttnAtol, kAttnRtol,
// as decode_attention_cuda (the suffix's fp32 sums in another order, expf in the merge weights;
// the twin in double).
void prefix_merge() {
  std::vector<HeadShape> shapes(std::begin(kHeadShapes), std::end(kHeadShapes));
  shapes.push_back({4, 1, 256});
  std::uint64_t seed = 7400;
  for (int T : {1, 6, 33})
    for (const HeadShape& s : shapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      DecodeBatch b(T, s, seed, 8, 40);  // its suffixes and queries; its prefixes unused
      if (T > 1) b.suffix_len[1] = 0;
      const cuda::PrefixStateMap plan = cuda::prefix_state_map(interleaved_groups(T, 4), T, s.n_heads, s.n_kv);
      PrefixState p = random_prefix_state(static_cast<std::size_t>(plan.rows), s.hd, seed + 5);
      seed += 10;
      if (plan.rows > 2) p.m[0] += 30.0f, p.m[1] -= 30.0f;
      DeviceArray<int> map(plan.map), slen(b.suffix_len);
      DeviceArray<float> q(b.q), dm(p.m), dl(p.l), dout(p.o), out(b.q.size());
      DeviceArray<std::uint16_t> k(b.k_pool), v(b.v_pool);
      DeviceArray<const std::uint16_t*> ks(DecodeBatch::at(static_cast<const std::uint16_t*>(k.get()), b.suffix_off)),
          vs(DecodeBatch::at(static_cast<const std::uint16_t*>(v.get()), b.suffix_off));
      cuda::prefix_merge_cuda(q.get(), map.get(), dm.get(), dl.get(), dout.get(), ks.get(), vs.get(), slen.get(), T, s.n_heads,
                              s.n_kv, s.hd, out.get(), nullptr);
      sync();
      EXPECT_EQ(compare(out.download(), merged_attention(b, plan, p), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
    }
}

// The suffix side of --cascade-attention: random cascade states (FlashInfer's base-2 log-sum-exp
// and normalized BF16 output, rows in group order) merged with each row's BF16 suffix, against the
// host merge above with m = lse ln 2, l = 1 and o the BF16 values; the state rows from
// cascade_step (a permutation of the batch). The shapes, suffixes and bound of prefix_merge.
void cascade_merge() {
  std::uint64_t seed = 7500;
  for (int T : {1, 6, 33})
    for (const HeadShape& s : kHeadShapes) {
      SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + ", seed " + std::to_string(seed));
      DecodeBatch b(T, s, seed, 8, 40);
      if (T > 1) b.suffix_len[1] = 0;
      std::vector<cuda::CascadeRow> rows;
      for (int t = 0; t < T; ++t) rows.push_back({t % 3, 16 * (t % 3), 20});  // three prompts, interleaved
      cuda::PrefixStateMap plan;
      plan.map = cuda::cascade_step(rows, s.n_heads, s.n_kv, 16, 48).map;
      const auto n = static_cast<std::size_t>(T * s.n_heads);
      std::vector<float> lse2 = test::random_floats(n, seed + 5, 2.0f);
      if (n > 2) lse2[0] += 40.0f, lse2[1] -= 40.0f;
      const std::vector<std::uint16_t> o = random_bf16(n * static_cast<std::size_t>(s.hd), seed + 6);
      seed += 10;
      PrefixState p{std::vector<float>(n), std::vector<float>(n, 1.0f), std::vector<float>(o.size())};
      for (std::size_t i = 0; i < n; ++i) p.m[i] = lse2[i] * 0.693147180559945309f;  // the kernel's fp32 product
      for (std::size_t i = 0; i < o.size(); ++i) p.o[i] = bf16_to_float(o[i]);
      DeviceArray<int> map(plan.map), slen(b.suffix_len);
      DeviceArray<float> q(b.q), dlse(lse2), out(b.q.size());
      DeviceArray<std::uint16_t> k(b.k_pool), v(b.v_pool), dout(o);
      DeviceArray<const std::uint16_t*> ks(DecodeBatch::at(static_cast<const std::uint16_t*>(k.get()), b.suffix_off)),
          vs(DecodeBatch::at(static_cast<const std::uint16_t*>(v.get()), b.suffix_off));
      cuda::cascade_merge_cuda(q.get(), map.get(), dlse.get(), dout.get(), ks.get(), vs.get(), slen.get(), T, s.n_heads, s.n_kv, s.hd,
                               out.get(), nullptr);
      sync();
      EXPECT_EQ(compare(out.download(), merged_attention(b, plan, p), kAttnAtol, kAttnRtol, head_index(s.n_heads, s.hd)), "");
    }
}

namespace {

// ---- sample_token_cuda ----------------------------------------------------------------------------
//
// The multi-block sampler draws sample_token's tokens exactly (its passes are emulated on the host
// against sample_token by tests/test_sampler_passes.cpp). logprob: within 2^-22 (|L| + |lse| +
// |logprob|), L = lse - zmax, where lse = z_tok - logprob: the log-sum-exp's sum runs per chunk and
// then in chunk order, the host's per lane over the row, which moves float(log(sum)) by at most
// one ulp (the derivation is in tests/test_sampler_passes.cpp). The launch shape (blocks per row),
// the tile size and the top-p total's path must not change a draw. The legacy kernel
// (SampleOptions::legacy) keeps its old bar: 99% of tokens, logprobs 1e-4.

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
  std::span<const float> row(int t) const {
    return {logits.data() + static_cast<std::size_t>(t) * static_cast<std::size_t>(V), static_cast<std::size_t>(V)};
  }
  SampleRun cpu(const SamplingParams& p) const {
    SampleRun r;
    SamplerScratch scratch;
    for (int t = 0; t < T; ++t) {
      const auto i = static_cast<std::size_t>(t);
      const Sample s = sample_token(row(t), p, prompt[i], candidate[i], step[i], scratch);
      r.tokens.push_back(s.token), r.logprobs.push_back(s.logprob);
    }
    return r;
  }
  // With o.workspace == nullptr and `own_workspace`, a workspace of the launcher's size is passed.
  SampleRun gpu(const SamplingParams& p, cuda::SampleOptions o = {}, bool own_workspace = false) const {
    DeviceArray<float> d_logits(logits), d_logprobs(static_cast<std::size_t>(T));
    DeviceArray<std::uint64_t> d_prompt(prompt), d_candidate(candidate), d_step(step);
    DeviceArray<int> d_tokens(static_cast<std::size_t>(T));
    const std::size_t bytes = cuda::sample_token_workspace_bytes(T, V, p);
    DeviceArray<std::uint8_t> work(own_workspace ? bytes : 1);
    if (own_workspace) o.workspace = work.get(), o.workspace_bytes = bytes;
    cuda::sample_token_cuda(d_logits.get(), T, V, p, d_prompt.get(), d_candidate.get(), d_step.get(), d_tokens.get(),
                            d_logprobs.get(), nullptr, o);
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

// "" when every token agrees (legacy: all but max_off_fraction) and every agreeing row's logprob
// is within the bound above (legacy: 1e-4); else a report with the first differing rows.
std::string compare_samples(const SampleCase& c, const SamplingParams& p, const SampleRun& gpu, const SampleRun& cpu,
                            double max_off_fraction = 0.0, bool legacy = false) {
  std::ostringstream report;
  report.precision(9);
  const float inv_t = p.temperature <= 0.0f ? 1.0f : 1.0f / p.temperature;
  std::size_t off = 0, bad_logprob = 0, shown = 0;
  for (std::size_t t = 0; t < cpu.tokens.size(); ++t) {
    const bool same = gpu.tokens[t] == cpu.tokens[t];
    double bound = 1e-4;
    if (!legacy && cpu.tokens[t] >= 0) {
      const std::span<const float> row = c.row(static_cast<int>(t));
      const double zmax = static_cast<double>(*std::max_element(row.begin(), row.end()) * inv_t);
      const double lp = static_cast<double>(cpu.logprobs[t]);
      const double lse = static_cast<double>(row[static_cast<std::size_t>(cpu.tokens[t])] * inv_t) - lp;
      bound = 0x1p-22 * (std::fabs(lse - zmax) + std::fabs(lse) + std::fabs(lp));
    }
    const double d = std::fabs(static_cast<double>(gpu.logprobs[t]) - static_cast<double>(cpu.logprobs[t]));
    const bool lp_ok = cpu.tokens[t] < 0 ? std::isfinite(gpu.logprobs[t]) == std::isfinite(cpu.logprobs[t]) : d <= bound;
    off += !same;
    bad_logprob += same && !lp_ok;
    if ((!same || !lp_ok) && shown++ < 8)
      report << "  row " << t << ": gpu token " << gpu.tokens[t] << " (logprob " << gpu.logprobs[t] << "), cpu token "
             << cpu.tokens[t] << " (logprob " << cpu.logprobs[t] << ")\n";
  }
  const auto allowed = static_cast<std::size_t>(max_off_fraction * static_cast<double>(cpu.tokens.size()));
  if (off <= allowed && bad_logprob == 0) return "";
  return std::to_string(off) + " of " + std::to_string(cpu.tokens.size()) + " tokens differ (allowed " +
         std::to_string(allowed) + "), " + std::to_string(bad_logprob) + " logprobs outside the bound:\n" + report.str();
}

void greedy_is_identical() {
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
    EXPECT_EQ(compare_samples(c, p, c.gpu(p), c.cpu(p)), "");
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
          make(1.0f, 0, 0.5f, 0.0f, 0xDEADBEEF12345678ull), make(2.0f, 5000, 0.99f, 0.0f, 10),
          make(1.0f, 0, 0.999f, 0.001f, 11)};
}

void random_logits_match() {
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
      const SampleRun cpu = c.cpu(p);
      EXPECT_EQ(compare_samples(c, p, c.gpu(p), cpu), "");
      cuda::SampleOptions legacy;
      legacy.legacy = true;
      EXPECT_EQ(compare_samples(c, p, c.gpu(p, legacy), cpu, 0.01, true), "") << "legacy";
    }
  }
}

// The launch shape, the tile size (tiles by radix select) and the top-p total's path change no
// draw; a workspace passed in gives the same as the one the launcher allocates. A flat row
// (every token a candidate, top-p needing most of them) walks many tiles.
void launch_shapes_and_tiles_change_nothing() {
  SampleCase c(24, 128256, 650, 3.0f);
  for (int t = 0; t < 8; ++t)  // flat rows
    for (std::size_t i = 0; i < 128256; ++i) c.logits[static_cast<std::size_t>(t) * 128256 + i] *= 0.02f;
  for (const SamplingParams& p : sampling_modes()) {
    SCOPED_TRACE(params_name(p));
    const SampleRun cpu = c.cpu(p);
    for (int blocks : {1, 5, 126}) {
      cuda::SampleOptions o;
      o.blocks_per_row = blocks;
      EXPECT_EQ(compare_samples(c, p, c.gpu(p, o, blocks == 5), cpu), "") << blocks << " blocks per row";
    }
    cuda::SampleOptions small;
    small.tile_cap = 500;
    EXPECT_EQ(compare_samples(c, p, c.gpu(p, small), cpu), "") << "tiles of 500";
    cuda::SampleOptions exact;
    exact.exact_total = true;
    EXPECT_EQ(compare_samples(c, p, c.gpu(p, exact), cpu), "") << "host-order top-p total";
  }
}

// Logits on a grid of 0.25 give many exact ties in z: the probability order must break them by
// id on both sides, in top-k, top-p and the walk.
void tied_logits_break_ties_by_id() {
  SampleCase c(200, 5000, 700, 2.0f);
  for (float& x : c.logits) x = std::round(x * 4.0f) / 4.0f;
  for (const SamplingParams& p : sampling_modes()) {
    SCOPED_TRACE(params_name(p));
    EXPECT_EQ(compare_samples(c, p, c.gpu(p), c.cpu(p)), "");
  }
}

// Equal logits make every weight exactly 1, so each sum is an exact integer and the token is
// floor(u * kept) on both sides: the device Philox and uniform01 must equal src/util/rng.cpp's for
// every row, including seeds and prompts with their high words set.
void equal_logits_expose_the_draw() {
  SampleCase c(256, 4096, 800, 1.0f);
  std::fill(c.logits.begin(), c.logits.end(), 0.5f);
  for (std::size_t t = 0; t < c.prompt.size(); ++t) c.prompt[t] = (t % 2 ? (1ull << 40) * t : t), c.candidate[t] = t / 2;
  for (const std::uint64_t seed : {0ull, 42ull, 0xFFFFFFFF00000001ull}) {
    for (const float top_p : {1.0f, 0.5f}) {  // the id-order walk, and the ordered one (ties by id)
      SamplingParams p;
      p.temperature = 1.0f, p.top_p = top_p, p.seed = seed;
      SCOPED_TRACE(params_name(p));
      const SampleRun gpu = c.gpu(p), cpu = c.cpu(p);
      EXPECT_EQ(compare_samples(c, p, gpu, cpu), "");
      // The draw itself: token = floor(u * kept), kept = 4096 or 2048.
      const double kept = top_p < 1.0f ? 2048.0 : 4096.0;
      for (std::size_t t = 0; t < 4; ++t)
        EXPECT_EQ(cpu.tokens[t], static_cast<int>(std::floor(static_cast<double>(uniform01(seed, c.prompt[t], c.candidate[t], c.step[t])) * kept)));
    }
  }
}

// NaN, +Inf and all -Inf rows give token -1 among good rows, whatever the truncation.
void non_finite_rows_give_no_token() {
  SampleCase c(12, 3000, 900, 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  c.logits[1 * 3000 + 17] = nan;
  c.logits[3 * 3000 + 2999] = inf;
  std::fill(c.logits.begin() + 5 * 3000, c.logits.begin() + 6 * 3000, -inf);
  for (const SamplingParams& p : sampling_modes()) {
    SCOPED_TRACE(params_name(p));
    const SampleRun gpu = c.gpu(p);
    EXPECT_EQ(compare_samples(c, p, gpu, c.cpu(p)), "");
    EXPECT_EQ(gpu.tokens[1], -1);
    EXPECT_EQ(gpu.tokens[3], -1);
    EXPECT_EQ(gpu.tokens[5], -1);
  }
}
}  // namespace

// Greedy (ties included), every truncation mode on random logits, launch shapes and tile sizes,
// tied, equal and non-finite logits; the tolerance is derived above.
void sample_token() {
  const std::pair<const char*, void (*)()> cases[] = {{"greedy", greedy_is_identical},
                                                       {"random logits", random_logits_match},
                                                       {"launch shapes and tiles", launch_shapes_and_tiles_change_nothing},
                                                       {"tied logits", tied_logits_break_ties_by_id},
                                                       {"equal logits", equal_logits_expose_the_draw},
                                                       {"non-finite rows", non_finite_rows_give_no_token}};
  for (const auto& [name, check] : cases) {
    SCOPED_TRACE(name);
    check();
  }
}

// A decode step's per-layer pointers from random row descriptors (64-bit addresses anywhere, strides
// up to 2^40, so a wrong multiply or a 32-bit product shows), at one row, a few, a block edge and a
// large batch, against expand_step_pointers: integers, bit for bit. The pointers are never followed.
void expand_step_pointers() {
  std::mt19937_64 rng(7400);
  for (const auto& [T, L] : {std::pair{1, 1}, std::pair{3, 32}, std::pair{256, 3}, std::pair{2048, 32}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", layers " + std::to_string(L));
    const auto n = static_cast<std::size_t>(T), layers = static_cast<std::size_t>(L);
    std::vector<cuda::StepRowDesc> desc(n);
    for (cuda::StepRowDesc& d : desc) {
      auto addr = [&] { return rng() >> 8; };
      auto stride = [&] { return rng() >> 24; };
      d = {addr(), addr(), stride(), addr(), addr(), stride(), (rng() >> 40) * 16};
    }
    std::vector<std::uint64_t> want_rows(2 * layers * n), want_ptrs(4 * layers * n);
    cuda::expand_step_pointers(desc, L, want_rows.data(), want_ptrs.data());
    const cuda::DeviceBuffer d_desc = test::to_gpu(desc);
    cuda::DeviceBuffer d_out(6 * layers * n * 8);
    CUDA_CHECK(cudaMemset(d_out.get(), 0xa5, d_out.size()));
    auto** rows = d_out.get<std::uint16_t*>();
    cuda::expand_step_pointers_cuda(d_desc.get<cuda::StepRowDesc>(), T, L, rows, const_cast<const std::uint16_t**>(rows + 2 * layers * n),
                                    nullptr);
    const std::vector<std::uint64_t> got = test::from_gpu<std::uint64_t>(d_out, 6 * layers * n);
    EXPECT_TRUE(std::equal(want_rows.begin(), want_rows.end(), got.begin())) << "the cache rows differ";
    EXPECT_TRUE(std::equal(want_ptrs.begin(), want_ptrs.end(), got.begin() + static_cast<std::ptrdiff_t>(2 * layers * n)))
        << "the attention pointers differ";
  }
}

}  // namespace bestofn::gpu_ops
