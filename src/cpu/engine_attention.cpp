// The CPU engine's attention: causal attention over a prompt at prefill, and decode attention
// shared by the slots of each prefix (Hydragen), both as the blocked products of
// src/cpu/prefix_attention.h over the KV rows of src/cpu/kv_rows.h.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "cpu/cpu_engine.h"
#include "cpu/prefix_attention.h"
#include "util/exp_poly.h"

namespace bestofn::cpu {
namespace {

// Online softmax state of one query row over a run of positions.
struct Softmax {
  float m = -INFINITY, l = 0.0f;
};

// Row softmax statistics and weights, in place, for R rows of L scores (stride L): row r covers
// its first n_r scores, n_r = L (first >= L: decode) or min(L, first + r) (a causal prefill
// chunk, first = 1 + the chunk's first position); m = their max, they become exp_poly(s - m), l =
// their sum in order; entries past n_r become 0.
// The max in 16 lanes (a max does not depend on its order; NaNs are skipped as std::max(m, s) in
// order skips them); the weights 16 at a time (exp_poly's vector form, the same bits); the sums
// in order, eight rows at a time so that eight chains of adds overlap (over the shortest row's
// length, then each row's own tail, still in order).
void softmax_rows(float* scores, std::size_t R, std::size_t L, Softmax* st, std::size_t first = SIZE_MAX) {
  typedef float V16 __attribute__((vector_size(64)));
  auto len = [&](std::size_t r) { return first >= L ? L : std::min(L, first + r); };
  for (std::size_t r = 0; r < R; ++r) {
    float* e = scores + r * L;
    const std::size_t n = len(r);
    V16 mv = {};
    mv -= INFINITY;
    std::size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      V16 v;
      std::memcpy(&v, e + j, sizeof v);
      mv = mv < v ? v : mv;
    }
    float m = -INFINITY;
    for (int k = 0; k < 16; ++k) m = std::max(m, mv[k]);
    for (; j < n; ++j) m = std::max(m, e[j]);
    st[r] = Softmax{m, 0.0f};
    for (j = 0; j + 16 <= n; j += 16) {
      V16 v;
      std::memcpy(&v, e + j, sizeof v);
      v = exp_poly(v - m);
      std::memcpy(e + j, &v, sizeof v);
    }
    for (; j < n; ++j) e[j] = exp_poly(e[j] - m);
    std::fill(e + n, e + L, 0.0f);
  }
  std::size_t r = 0;
  for (; r + 8 <= R; r += 8) {
    const float* e0 = scores + r * L;
    const std::size_t common = len(r);  // the group's shortest row
    float l[8] = {};
    for (std::size_t j = 0; j < common; ++j)
      for (std::size_t k = 0; k < 8; ++k) l[k] += e0[k * L + j];
    for (std::size_t k = 0; k < 8; ++k) {
      for (std::size_t j = common; j < len(r + k); ++j) l[k] += e0[k * L + j];
      st[r + k].l = l[k];
    }
  }
  for (; r < R; ++r)
    for (std::size_t j = 0; j < len(r); ++j) st[r].l += scores[r * L + j];
}

}  // namespace

// Causal attention over the prompts of a prefill pass: a segment's row at position t sees
// positions 0..t of its prefix (from the cache, so that prefill and decode read K and V at the
// same precision; positions before the segment's first come from the prompt's earlier passes).
// Queries go in chunks of 48 (eight register blocks of 6 rows) through the two blocked products of
// src/cpu/prefix_attention.h, over positions 0 .. the chunk's last: S = Q K^T * scale; per row t,
// m = max_{j<=t} s_j, e_j = exp_poly(s_j - m), l = sum_{j<=t} e_j in order, p_j = e_j / l and 0
// past t; out = sum_j p_j v_j in order (the zeros past t add nothing). Each row's sums are the same
// whichever chunk, segment or pass it is in: a prompt gets the same numbers alone in one pass or
// split across passes among others. cpu::prefill_attention is the scalar twin.
// The work items, (segment, query head, chunk), are split over the pool.
void CpuEngine::attend_prefill(int layer, std::span<const PassSegment> segments) {
  const auto hd = static_cast<std::size_t>(c_.head_dim), qd = static_cast<std::size_t>(c_.q_dim());
  const std::size_t hdp = cpu::round_up(hd, 16);  // the row stride of prefix_values' output
  const auto group = static_cast<std::size_t>(c_.n_heads / c_.n_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  constexpr std::size_t kChunk = 48;
  struct Item {
    std::size_t segment, head, c0;  // c0: the chunk's first row in the segment
  };
  std::vector<Item> items;
  for (std::size_t s = 0; s < segments.size(); ++s)
    for (std::size_t h = 0; h < static_cast<std::size_t>(c_.n_heads); ++h)
      for (std::size_t c0 = 0; c0 < static_cast<std::size_t>(segments[s].end - segments[s].begin); c0 += kChunk) items.push_back({s, h, c0});
  pool_.run(items.size(), [&](std::size_t i0, std::size_t i1) {
    std::vector<float> scores, qt, acc;
    std::vector<Softmax> sm(kChunk);
    for (std::size_t i = i0; i < i1; ++i) {
      const PassSegment& seg = segments[items[i].segment];
      const std::size_t h = items[i].head, c0 = items[i].c0, off = (h / group) * hd;
      const KvRows& K = seg.prefix->kv.k[static_cast<std::size_t>(layer)];
      const KvRows& V = seg.prefix->kv.v[static_cast<std::size_t>(layer)];
      const auto n = static_cast<std::size_t>(seg.end - seg.begin);
      const std::size_t R = std::min(n, c0 + kChunk) - c0;
      const std::size_t t0 = static_cast<std::size_t>(seg.begin) + c0;  // the chunk's first position
      const std::size_t L = t0 + R;                                      // positions 0 .. its last
      const std::size_t row0 = seg.row + c0;                             // its first row in the pass
      qt.resize(hd * R);
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t e = 0; e < hd; ++e) qt[e * R + r] = q_[(row0 + r) * qd + h * hd + e];
      cpu::prefix_scores([&](std::size_t j0, float* out) { K.read_tile(j0, off, hd, out); }, L, hd, qt.data(), R, scale, scores);
      softmax_rows(scores.data(), R, L, sm.data(), t0 + 1);
      for (std::size_t r = 0; r < R; ++r) {
        float* e = scores.data() + r * L;
        const float l = sm[r].l;
        for (std::size_t j = 0; j <= t0 + r; ++j) e[j] = e[j] / l;
      }
      cpu::prefix_values([&](std::size_t j0, float* out) { V.read_value_tile(j0, off, hd, hdp, out); }, L, hd, scores.data(), R, acc);
      for (std::size_t r = 0; r < R; ++r) std::copy_n(acc.data() + r * hdp, hd, att_.data() + (row0 + r) * qd + h * hd);
    }
  });
}

// Decode attention (Hydragen, arXiv 2402.05099): for each prefix, the queries of all its slots
// meet the prefix keys together as two blocked matrix products (src/cpu/prefix_attention.h: each
// K/V tile widened once per prefix and KV head into a copy the queries share, or, for up to 12
// queries, read in place); each slot then attends over its own suffix; the two softmaxes merge by
// log-sum-exp.
// Row arithmetic depends only on that row: a slot gets the same numbers in any batch.
std::vector<CpuEngine::PrefixGroup> CpuEngine::group_by_prefix(std::span<Slot* const> batch) const {
  std::map<int, std::vector<std::size_t>> by_prefix;  // prefix -> batch rows
  for (std::size_t t = 0; t < batch.size(); ++t) by_prefix[batch[t]->prefix].push_back(t);
  std::vector<PrefixGroup> groups;
  for (auto& [p, rows] : by_prefix) groups.push_back({&prefixes_.at(p), std::move(rows)});
  return groups;
}

// Up to this many queries of one KV head read a BF16 cache in place (two register blocks of 6).
constexpr std::size_t kInPlaceRows = 12;

void CpuEngine::attend_decode(int layer, std::span<Slot* const> batch, const std::vector<int>& pos, const std::vector<PrefixGroup>& groups) {
  const std::size_t hd = static_cast<std::size_t>(c_.head_dim), qd = static_cast<std::size_t>(c_.q_dim());
  const std::size_t hdp = cpu::round_up(hd, 16);  // the row stride of prefix_values' output
  const std::size_t group = static_cast<std::size_t>(c_.n_heads / c_.n_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::size_t items = groups.size() * static_cast<std::size_t>(c_.n_kv_heads);

  // The two products for R queries over L positions of one KV head (off) of a cache: a BF16
  // cache in place when the queries are few (a widened copy of each tile serves many queries
  // better), else through widened tiles. Either gives the same bits.
  const bool in_place = kv_cache_ == EngineOptions::Kv::BF16 && hd % 16 == 0;
  auto scores_of = [&](const KvRows& K, std::size_t off, std::size_t L, const float* qt, std::size_t R, std::vector<float>& out) {
    if (in_place && R <= kInPlaceRows && L > 0)
      cpu::prefix_scores_bf16(K.bf16_head(off), K.tile_stride(), L, hd, qt, R, scale, out);
    else
      cpu::prefix_scores([&](std::size_t j0, float* o) { K.read_tile(j0, off, hd, o); }, L, hd, qt, R, scale, out);
  };
  auto values_of = [&](const KvRows& V, std::size_t off, std::size_t L, const float* p, std::size_t R, std::vector<float>& out) {
    if (in_place && R <= kInPlaceRows && L > 0)
      cpu::prefix_values_bf16(V.bf16_head(off), V.tile_stride(), L, hd, p, R, out);
    else
      cpu::prefix_values([&](std::size_t j0, float* o) { V.read_value_tile(j0, off, hd, hdp, o); }, L, hd, p, R, out);
  };
  pool_.run(items, [&](std::size_t i0, std::size_t i1) {
    std::vector<float> scores, acc, qt, s_scores, acc_s;
    std::vector<Softmax> ss(group);
    for (std::size_t item = i0; item < i1; ++item) {
      const Prefix& P = *groups[item / static_cast<std::size_t>(c_.n_kv_heads)].prefix;
      const auto& rows = groups[item / static_cast<std::size_t>(c_.n_kv_heads)].rows;
      const std::size_t h = item % static_cast<std::size_t>(c_.n_kv_heads), off = h * hd;
      const std::size_t R = rows.size() * group, Lp = static_cast<std::size_t>(P.len);
      const std::size_t Rp = cpu::round_up(R, cpu::kPrefixRowBlock);
      auto q_of = [&](std::size_t r) { return q_.data() + rows[r / group] * qd + (h * group + r % group) * hd; };
      const KvRows& PK = P.kv.k[static_cast<std::size_t>(layer)];
      const KvRows& PV = P.kv.v[static_cast<std::size_t>(layer)];
      // Prefix: S = Q K^T (R x Lp), row softmax statistics, O_p = exp(S - m) V: two blocked
      // matrix products over all R queries of the prefix (src/cpu/prefix_attention.h).
      qt.assign(hd * Rp, 0.0f);
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t i = 0; i < hd; ++i) qt[i * Rp + r] = q_of(r)[i];
      scores_of(PK, off, Lp, qt.data(), Rp, scores);
      std::vector<Softmax> sp(R);
      softmax_rows(scores.data(), R, Lp, sp.data());
      values_of(PV, off, Lp, scores.data(), Rp, acc);
      // Suffix, per row: its `group` query heads against its slot's K and V up to its position, the same two
      // blocked products (every query's sums in the same order as alone); then the log-sum-exp
      // merge into att.
      const std::size_t Gp = cpu::round_up(group, cpu::kPrefixRowBlock);
      for (std::size_t b = 0; b < rows.size(); ++b) {
        const Slot& S = *batch[rows[b]];
        const KvRows& SK = S.kv.k[static_cast<std::size_t>(layer)];
        const KvRows& SV = S.kv.v[static_cast<std::size_t>(layer)];
        const auto Ls = static_cast<std::size_t>(pos[rows[b]] + 1 - P.len);  // its own position and the slot's before it
        qt.assign(hd * Gp, 0.0f);
        for (std::size_t g = 0; g < group; ++g)
          for (std::size_t i = 0; i < hd; ++i) qt[i * Gp + g] = q_of(b * group + g)[i];
        scores_of(SK, off, Ls, qt.data(), Gp, s_scores);
        softmax_rows(s_scores.data(), group, Ls, ss.data());
        std::fill(s_scores.begin() + static_cast<std::ptrdiff_t>(group * Ls), s_scores.end(), 0.0f);  // padding rows
        values_of(SV, off, Ls, s_scores.data(), Gp, acc_s);
        for (std::size_t g = 0; g < group; ++g) {
          const std::size_t r = b * group + g;
          const float m = std::max(sp[r].m, ss[g].m);
          const float a = std::exp(sp[r].m - m), bw = std::exp(ss[g].m - m);
          const float denom = sp[r].l * a + ss[g].l * bw;
          float* out = att_.data() + rows[b] * qd + (h * group + g) * hd;
          for (std::size_t i = 0; i < hd; ++i) out[i] = (acc[r * hdp + i] * a + acc_s[g * hdp + i] * bw) / denom;
        }
      }
    }
  });
}

}  // namespace bestofn::cpu
