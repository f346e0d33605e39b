// Blocked prefix attention products (see prefix_attention.h for the summation-order contract).
// The tiles use GCC vector extensions (16 floats): on AVX-512 one register, on AVX2 two, on other
// targets what the compiler has. Elementwise multiply and add, no contraction: each lane computes
// exactly what the scalar loop computes.
//
// Register blocks: up to kRowBlock query rows x kCols vectors of 16 (positions for the scores,
// output elements for the values), 24 accumulators, so that each vector of keys / values loaded
// serves kRowBlock rows and each query / weight broadcast serves kCols vectors.
#include "cpu/prefix_attention.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace bestofn::cpu {
namespace {

typedef float v16 __attribute__((vector_size(64)));
constexpr std::size_t kLanes = 16;
constexpr std::size_t kRowBlock = 6;
constexpr std::size_t kCols = 4;                   // vectors per row in a register block
constexpr std::size_t kPosTile = kCols * kLanes;   // key positions per score block (kCols key tiles)
constexpr std::size_t kValTile = 64;               // value positions widened at a time

inline v16 load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, const v16& v) { std::memcpy(p, &v, sizeof v); }

// Scores of RB rows x NC key tiles: kt holds the tiles (hd x 16 each, kt + c * hd * 16), qt the
// queries transposed (stride Rp), rows r0..r0+RB-1; a[r][c] over i = 0..hd-1 in order.
template <std::size_t RB, std::size_t NC>
void score_block(const float* kt, std::size_t hd, const float* qt, std::size_t Rp, std::size_t r0, float scale, float* out,
                 std::size_t L, std::size_t j0) {
  v16 a[RB][NC] = {};
  for (std::size_t i = 0; i < hd; ++i) {
    v16 k[NC];
    for (std::size_t c = 0; c < NC; ++c) k[c] = load(kt + (c * hd + i) * kLanes);
    const float* q = qt + i * Rp + r0;
    for (std::size_t r = 0; r < RB; ++r) {
      const float qr = q[r];
      for (std::size_t c = 0; c < NC; ++c) a[r][c] += qr * k[c];
    }
  }
  const std::size_t np = std::min(NC * kLanes, L - j0);
  for (std::size_t r = 0; r < RB; ++r) {
    float* o = out + (r0 + r) * L + j0;
    std::size_t c = 0;
    for (; (c + 1) * kLanes <= np; ++c) store(o + c * kLanes, a[r][c] * scale);  // whole vectors
    for (std::size_t p = c * kLanes; p < np; ++p) o[p] = a[r][c][p % kLanes] * scale;
  }
}

// Values of RB rows x NC output vectors (columns i0.. of acc, stride hdp): o[r][c] += p[r, j] v_j
// for the np positions of vt (rows of hdp floats), j in order, continuing the sums in acc.
template <std::size_t RB, std::size_t NC>
void value_block(const float* vt, std::size_t hdp, std::size_t np, const float* p, std::size_t L, std::size_t j0, std::size_t r0,
                 std::size_t i0, float* acc) {
  v16 o[RB][NC];
  for (std::size_t r = 0; r < RB; ++r)
    for (std::size_t c = 0; c < NC; ++c) o[r][c] = load(acc + (r0 + r) * hdp + i0 + c * kLanes);
  for (std::size_t j = 0; j < np; ++j) {
    v16 v[NC];
    for (std::size_t c = 0; c < NC; ++c) v[c] = load(vt + j * hdp + i0 + c * kLanes);
    for (std::size_t r = 0; r < RB; ++r) {
      const float pr = p[(r0 + r) * L + j0 + j];
      for (std::size_t c = 0; c < NC; ++c) o[r][c] += pr * v[c];
    }
  }
  for (std::size_t r = 0; r < RB; ++r)
    for (std::size_t c = 0; c < NC; ++c) store(acc + (r0 + r) * hdp + i0 + c * kLanes, o[r][c]);
}

// Dispatch tables over (rows in the block - 1, vectors - 1).
using ScoreFn = void (*)(const float*, std::size_t, const float*, std::size_t, std::size_t, float, float*, std::size_t, std::size_t);
using ValueFn = void (*)(const float*, std::size_t, std::size_t, const float*, std::size_t, std::size_t, std::size_t, std::size_t, float*);
template <std::size_t... I>
constexpr std::array<ScoreFn, sizeof...(I)> score_table(std::index_sequence<I...>) {
  return {score_block<I / kCols + 1, I % kCols + 1>...};
}
template <std::size_t... I>
constexpr std::array<ValueFn, sizeof...(I)> value_table(std::index_sequence<I...>) {
  return {value_block<I / kCols + 1, I % kCols + 1>...};
}
constexpr auto kScore = score_table(std::make_index_sequence<kRowBlock * kCols>{});
constexpr auto kValue = value_table(std::make_index_sequence<kRowBlock * kCols>{});

}  // namespace

void prefix_scores(const KeyTileReader& k_tile, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp, float scale,
                   std::vector<float>& scores) {
  static_assert(kKeyTile == kLanes, "one key tile per score vector");
  thread_local std::vector<float> kt;  // kCols tiles of keys: (hd, 16) each
  kt.resize(kCols * hd * kLanes);
  scores.resize(Rp * L);
  for (std::size_t j0 = 0; j0 < L; j0 += kPosTile) {
    const std::size_t nc = std::min(kCols, (L - j0 + kLanes - 1) / kLanes);
    for (std::size_t c = 0; c < nc; ++c) k_tile(j0 + c * kLanes, kt.data() + c * hd * kLanes);
    for (std::size_t r0 = 0; r0 < Rp; r0 += kRowBlock) {
      const std::size_t rb = std::min(kRowBlock, Rp - r0);
      kScore[(rb - 1) * kCols + nc - 1](kt.data(), hd, qt, Rp, r0, scale, scores.data(), L, j0);
    }
  }
}

void prefix_values(const ValueTileReader& v_tile, std::size_t L, std::size_t hd, const float* p, std::size_t Rp,
                   std::vector<float>& acc) {
  static_assert(kValTile % kKeyTile == 0, "whole tiles of values");
  const std::size_t hdp = round_up(hd, kLanes), vecs = hdp / kLanes;
  thread_local std::vector<float> vt;
  vt.resize(kValTile * hdp);
  acc.assign(Rp * hdp, 0.0f);
  for (std::size_t j0 = 0; j0 < L; j0 += kValTile) {
    const std::size_t np = std::min(kValTile, L - j0);
    for (std::size_t j = 0; j < np; j += kKeyTile) v_tile(j0 + j, vt.data() + j * hdp);
    for (std::size_t r0 = 0; r0 < Rp; r0 += kRowBlock) {
      const std::size_t rb = std::min(kRowBlock, Rp - r0);
      for (std::size_t c0 = 0; c0 < vecs; c0 += kCols) {
        const std::size_t nc = std::min(kCols, vecs - c0);
        kValue[(rb - 1) * kCols + nc - 1](vt.data(), hdp, np, p, L, j0, r0, c0 * kLanes, acc.data());
      }
    }
  }
}

}  // namespace bestofn::cpu
