// The rows of the GPU op table (tests/test_gpu_ops.cpp) for --cascade-attention's suffix side
// under --paged-kv: FlashInfer's paged decode over a block pool (cascade_suffix_attention_cuda,
// its states found by cascade_suffix_states) against cpu::decode_attention over each suffix alone,
// and the one-pass merge of the prefix and suffix states (cascade_state_merge_cuda) against a host
// merge in double. They run only through the table, which skips them without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bestofn/util/numeric.h"
#include "cpu/attention.h"
#include "cuda/cascade_plan.h"
#include "cuda/kernels.h"
#include "gpu_attention_util.h"
#include "gpu_cascade_util.h"
#include "gpu_op_rows.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace bestofn::gpu_ops {
namespace {

using test::HeadShape, test::kAttnAtol, test::kAttnRtol, test::kHeadShapes, test::random_bf16, test::shape_name, test::sync;

// FlashInfer's workspaces for one schedule, grown once when it asks for more.
struct Workspace {
  cuda::DeviceBuffer f, i;
  cuda::PinnedBuffer pinned;
  cuda::CascadeWorkspace ws() const { return {f.get(), f.size(), i.get(), pinned.get(), i.size()}; }
};

// Row t's states (o (hd) and base-2 lse per head) merged on the host in double, as the merge pass
// combines them: the chunks [c0, c1) of (o, lse2).
void merge_chunks(const std::vector<float>& o, const std::vector<float>& lse2, int c0, int c1, std::size_t H, std::size_t h,
                  std::size_t HD, std::vector<double>& out, double& lse) {
  double M = -INFINITY;
  for (int c = c0; c < c1; ++c) M = std::max(M, static_cast<double>(lse2[static_cast<std::size_t>(c) * H + h]));
  out.assign(HD, 0.0);
  lse = M;
  if (M == -INFINITY) return;
  double d = 0;
  for (int c = c0; c < c1; ++c) {
    const double w = std::exp2(lse2[static_cast<std::size_t>(c) * H + h] - M);
    d += w;
    for (std::size_t e = 0; e < HD; ++e) out[e] += w * o[(static_cast<std::size_t>(c) * H + h) * HD + e];
  }
  for (double& x : out) x /= d;
  lse = M + std::log2(d);
}

}  // namespace

// cascade_suffix_attention_cuda on the 8B shape (32 query heads, 8 KV heads, head_dim 128): each
// row's suffix in a shuffled pool of 16-position BF16 blocks, page tables by cuda::suffix_pages;
// lengths 0 (a padding row: no pages), 1, 15, 16 (an exactly full page), 17, 129, 300 and 1000
// and random ones; 12 rows (under one wave of blocks: split into chunks of >= 128 positions, and
// always under the CUDA-graph grid) and 600 rows; plans with and without that grid.
// The reference: cpu::decode_attention over the suffix alone for the output, and the log-sum-exp
// in double. Checks: the states (each row's chunks merged on the host) within the decode bound
// kAttnAtol + kAttnRtol |ref| (F32 scores in another order, ex2.approx, a scale rounded once more
// by log2 e); the log-sum-exp (base 2, x ln 2) within 1e-4 + 1e-5 |lse|; an empty row: lse -inf
// and a zero output.
void cascade_suffix_attention() {
  const int n_heads = 32, n_kv = 8, hd = 128, block = cuda::kCascadePageTokens;
  const auto kvd = static_cast<std::size_t>(n_kv * hd), H = static_cast<std::size_t>(n_heads), HD = static_cast<std::size_t>(hd);
  std::uint64_t seed = 7800;
  for (const int T : {12, 600})
    for (const bool fixed_grid : {false, true}) {
      SCOPED_TRACE("T " + std::to_string(T) + (fixed_grid ? ", CUDA-graph grid" : ""));
      std::mt19937_64 rng(seed++);
      const int fixed[] = {0, 1, 15, 16, 17, 129, 300, 1000};
      std::vector<int> lens;
      for (int t = 0; t < T; ++t) lens.push_back(t < 8 ? fixed[t] : static_cast<int>(rng() % 200));
      int blocks = 0;
      for (int len : lens) blocks += cuda::pages_for(len, block);
      std::vector<int> perm(static_cast<std::size_t>(blocks) + 3);  // a few blocks nobody holds
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<std::vector<int>> tables;
      std::vector<cuda::SuffixRow> rows;
      int next = 0;
      for (int len : lens) {
        tables.emplace_back(perm.begin() + next, perm.begin() + next + cuda::pages_for(len, block));
        next += cuda::pages_for(len, block);
      }
      for (std::size_t t = 0; t < lens.size(); ++t) rows.push_back({tables[t], lens[t]});
      const int pool = static_cast<int>(perm.size());
      const cuda::SuffixPages pages = cuda::suffix_pages(rows, block, pool);
      const std::vector<std::uint16_t> k = random_bf16(static_cast<std::size_t>(pool * block) * kvd, seed++);
      const std::vector<std::uint16_t> v = random_bf16(k.size(), seed++);
      const std::vector<float> q = test::random_floats(static_cast<std::size_t>(T) * H * HD, seed++);
      std::vector<int> indptr = pages.indptr;
      Workspace w;
      cuda::CascadeSuffixSchedule sched;
      for (int attempt = 0; attempt < 2 && !sched.planned; ++attempt) {
        sched = cuda::cascade_suffix_schedule(w.ws(), indptr.data(), T, n_heads, n_kv, hd, fixed_grid, nullptr);
        if (!sched.planned) w.f.resize(sched.float_bytes + 16), w.i.resize(sched.int_bytes + 16), w.pinned.resize(w.i.size());
      }
      ASSERT_TRUE(sched.planned);
      const cuda::DeviceBuffer dk = test::to_gpu(k), dv = test::to_gpu(v), dq = test::to_gpu(q), dptr = test::to_gpu(pages.indptr),
                               dind = test::to_gpu(pages.indices), dlast = test::to_gpu(pages.last_page_len);
      cuda::DeviceBuffer out(q.size() * 4), lse(static_cast<std::size_t>(T) * H * 4);
      cuda::CascadeSuffixArgs a;
      a.q = dq.get<float>(), a.k_pages = dk.get<std::uint16_t>(), a.v_pages = dv.get<std::uint16_t>();
      a.indptr = dptr.get<int>(), a.indices = dind.get<int>(), a.last_page_len = dlast.get<int>();
      a.rows = T, a.n_heads = n_heads, a.n_kv = n_kv, a.hd = hd, a.sm_scale = 1.0f / std::sqrt(static_cast<float>(hd));
      a.out = out.get<float>(), a.lse = lse.get<float>(), a.schedule = &sched, a.ws = w.ws();
      cuda::cascade_suffix_attention_cuda(a, nullptr);
      sync();
      const cuda::CascadeSuffixStates st = cuda::cascade_suffix_states(a);
      std::vector<int> chunk(static_cast<std::size_t>(T) + 1);
      std::iota(chunk.begin(), chunk.end(), 0);
      if (st.chunk_indptr) chunk = download(st.chunk_indptr, chunk.size());
      const auto states = static_cast<std::size_t>(chunk.back());
      const std::vector<float> so = download(st.o, states * H * HD), sl = download(st.lse2, states * H);
      if (fixed_grid && T == 12) {
        EXPECT_NE(st.chunk_indptr, nullptr) << "the CUDA-graph grid of a small step splits";
      }
      // The reference over each suffix, contiguous.
      std::vector<std::vector<std::uint16_t>> ks(lens.size()), vs(lens.size());
      for (std::size_t t = 0; t < lens.size(); ++t)
        for (int j = 0; j < lens[t]; ++j) {
          const std::size_t r = static_cast<std::size_t>(tables[t][static_cast<std::size_t>(j / block)] * block + j % block);
          ks[t].insert(ks[t].end(), k.begin() + static_cast<long>(r * kvd), k.begin() + static_cast<long>((r + 1) * kvd));
          vs[t].insert(vs[t].end(), v.begin() + static_cast<long>(r * kvd), v.begin() + static_cast<long>((r + 1) * kvd));
        }
      std::vector<const std::uint16_t*> kp, vp;
      for (std::size_t t = 0; t < lens.size(); ++t) kp.push_back(ks[t].data()), vp.push_back(vs[t].data());
      std::vector<int> zeros(lens.size(), 0);
      std::vector<float> ref(q.size());
      cpu::decode_attention(q.data(), kp.data(), vp.data(), zeros.data(), kp.data(), vp.data(), lens.data(), T, n_heads, n_kv, hd, ref.data());
      std::size_t bad = 0, bad_lse = 0;
      double worst = 0, worst_lse = 0;
      std::vector<double> o;
      double l2 = 0;
      for (std::size_t t = 0; t < lens.size(); ++t)
        for (std::size_t h = 0; h < H; ++h) {
          merge_chunks(so, sl, chunk[t], chunk[t + 1], H, h, HD, o, l2);
          const double want = host_lse(q.data() + (t * H + h) * HD, ks[t].data(), lens[t], kvd, (h / 4) * HD, hd);
          if (lens[t] == 0) {
            bad_lse += l2 != -INFINITY;
            bad += static_cast<std::size_t>(std::count_if(o.begin(), o.end(), [](double x) { return x != 0.0; }));
            continue;
          }
          const double e_lse = std::fabs(l2 * 0.6931471805599453 - want);
          worst_lse = std::max(worst_lse, e_lse);
          bad_lse += !(e_lse <= 1e-4 + 1e-5 * std::fabs(want));
          for (std::size_t e = 0; e < HD; ++e) {
            const double r = ref[(t * H + h) * HD + e], err = std::fabs(o[e] - r);
            worst = std::max(worst, err);
            bad += !(err <= kAttnAtol + kAttnRtol * std::fabs(r));
          }
        }
      EXPECT_EQ(bad, 0u) << "suffix output, worst error " << worst;
      EXPECT_EQ(bad_lse, 0u) << "suffix log-sum-exp, worst error " << worst_lse;
      std::cout << "  suffix decode T " << T << (fixed_grid ? " graph-grid" : "") << (st.chunk_indptr ? ", split into " : ", ") << states
                << " states: worst errors output " << worst << ", lse " << worst_lse << "\n";
    }
}

// cascade_state_merge_cuda: random prefix states (base-2 lse, BF16 output) at the state rows of a
// cascade_step permutation (three prompts, interleaved), each row's suffix as 1 to 3 chunk states
// (F32 output, base-2 lse; some chunks empty: -inf and zeros, as FlashInfer leaves them), and as
// one state per row (no chunk table); lse offsets of +-40 for weights far apart. Against the merge
// in double: the kernel's weights are expf of lse x ln 2 in F32 (a few ulp each, and lse x ln 2
// rounded: 2^-24 |lse|), so 1e-6 + 2^-17 max|o| over the row's states.
void cascade_state_merge() {
  std::uint64_t seed = 7900;
  for (const bool chunked : {true, false})
    for (int T : {1, 6, 33})
      for (const HeadShape& s : kHeadShapes) {
        SCOPED_TRACE(shape_name(T, s.n_heads, s.n_kv, s.hd) + (chunked ? ", chunked" : ", one state a row"));
        const auto H = static_cast<std::size_t>(s.n_heads), HD = static_cast<std::size_t>(s.hd), Ts = static_cast<std::size_t>(T);
        std::mt19937_64 rng(seed++);
        std::vector<cuda::CascadeRow> rows;
        for (int t = 0; t < T; ++t) rows.push_back({t % 3, 16 * (t % 3), 20});
        const std::vector<int> map = cuda::cascade_step(rows, s.n_heads, s.n_kv, 16, 48).map;
        std::vector<int> chunk = {0};
        for (int t = 0; t < T; ++t) chunk.push_back(chunk.back() + (chunked ? 1 + static_cast<int>(rng() % 3) : 1));
        const auto C = static_cast<std::size_t>(chunk.back());
        std::vector<float> plse = test::random_floats(Ts * H, seed++, 2.0f), slse = test::random_floats(C * H, seed++, 2.0f);
        const std::vector<std::uint16_t> po = random_bf16(Ts * H * HD, seed++);
        std::vector<float> so = test::random_floats(C * H * HD, seed++);
        if (Ts * H > 2) plse[0] += 40.0f, plse[1] -= 40.0f;
        for (std::size_t c = 0; chunked && c < C; c += 3) {  // empty chunks
          for (std::size_t h = 0; h < H; ++h) slse[c * H + h] = -INFINITY;
          std::fill(so.begin() + static_cast<long>(c * H * HD), so.begin() + static_cast<long>((c + 1) * H * HD), 0.0f);
        }
        const cuda::DeviceBuffer dmap = test::to_gpu(map), dplse = test::to_gpu(plse), dpo = test::to_gpu(po), dso = test::to_gpu(so),
                                 dslse = test::to_gpu(slse), dchunk = test::to_gpu(chunk);
        cuda::DeviceBuffer out(Ts * H * HD * 4);
        cuda::cascade_state_merge_cuda(dmap.get<int>(), dplse.get<float>(), dpo.get<std::uint16_t>(), dso.get<float>(), dslse.get<float>(),
                                       chunked ? dchunk.get<int>() : nullptr, T, s.n_heads, s.n_kv, s.hd, out.get<float>(), nullptr);
        sync();
        const std::vector<float> got = test::from_gpu<float>(out, Ts * H * HD);
        const int group = s.n_heads / s.n_kv;
        std::size_t bad = 0;
        double worst = 0;
        for (std::size_t t = 0; t < Ts; ++t)
          for (std::size_t h = 0; h < H; ++h) {
            const auto hi = static_cast<int>(h);
            const std::size_t sr = static_cast<std::size_t>(map[t] + hi / group * map[Ts + t] + map[2 * Ts + t] * group + hi % group);
            double M = plse[sr];
            for (int c = chunk[t]; c < chunk[t + 1]; ++c) M = std::max(M, static_cast<double>(slse[static_cast<std::size_t>(c) * H + h]));
            const double a = std::exp2(plse[sr] - M);
            double d = a;
            std::vector<double> w;
            for (int c = chunk[t]; c < chunk[t + 1]; ++c) d += w.emplace_back(std::exp2(slse[static_cast<std::size_t>(c) * H + h] - M));
            for (std::size_t e = 0; e < HD; ++e) {
              double acc = a * bf16_to_float(po[sr * HD + e]), vmax = std::fabs(bf16_to_float(po[sr * HD + e]));
              for (int c = chunk[t]; c < chunk[t + 1]; ++c) {
                const float x = so[(static_cast<std::size_t>(c) * H + h) * HD + e];
                acc += w[static_cast<std::size_t>(c - chunk[t])] * x, vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
              }
              const double err = std::fabs(got[(t * H + h) * HD + e] - acc / d);
              worst = std::max(worst, err);
              bad += !(err <= 1e-6 + 0x1p-17 * vmax);
            }
          }
        EXPECT_EQ(bad, 0u) << "worst error " << worst;
      }
}

}  // namespace bestofn::gpu_ops
