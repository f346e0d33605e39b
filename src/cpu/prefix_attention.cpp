// Blocked prefix attention products (see prefix_attention.h for the summation-order contract).
// The tiles are 16 floats wide; the arithmetic runs on GCC vector extensions of the target's own
// width (kVecBytes: 64 with AVX-512, 32 with AVX, 16 otherwise), kSub of them per 16 floats. (A
// 16-float vector type on an AVX2 target is not split into registers: GCC keeps arrays of them
// in memory and moves them through general registers, ten times slower.) Elementwise multiply and
// add, no contraction: each lane computes exactly what the scalar loop computes.
//
// Register blocks: up to kRowBlock query rows x kCols columns of 16 (positions for the scores,
// output elements for the values), kRowBlock * kCols * kSub accumulators (24 zmm with AVX-512, 8
// ymm with AVX2: 4 x 1 measured best on Zen 3 among 4-6 rows x 1 column and 3 x 2; 12 xmm otherwise), so that each vector of keys / values loaded serves kRowBlock
// rows and each query / weight broadcast serves kCols columns.
#include "cpu/prefix_attention.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace bestofn::cpu {
namespace {

#if defined(__AVX512F__)
#define BESTOFN_PA_VEC_BYTES 64
constexpr std::size_t kRowBlock = 6, kCols = 4;
#elif defined(__AVX__)
#define BESTOFN_PA_VEC_BYTES 32
constexpr std::size_t kRowBlock = 4, kCols = 1;
#else
#define BESTOFN_PA_VEC_BYTES 16
constexpr std::size_t kRowBlock = 3, kCols = 1;
#endif
typedef float vf __attribute__((vector_size(BESTOFN_PA_VEC_BYTES)));
constexpr std::size_t kLanes = 16;                    // floats per column (a key tile's positions)
constexpr std::size_t kVl = sizeof(vf) / sizeof(float);  // floats per native vector
constexpr std::size_t kSub = kLanes / kVl;            // native vectors per column
constexpr std::size_t kPosTile = kCols * kLanes;   // key positions per score block (kCols key tiles)
constexpr std::size_t kValTile = 64;               // value positions widened at a time

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// kVl BF16 values widened to floats (exact: the top halves of the floats).
inline vf load(const std::uint16_t* p) {
  typedef std::uint16_t u16v __attribute__((vector_size(BESTOFN_PA_VEC_BYTES / 2)));
  typedef std::uint32_t u32v __attribute__((vector_size(BESTOFN_PA_VEC_BYTES)));
  u16v h;
  std::memcpy(&h, p, sizeof h);
  return std::bit_cast<vf>(__builtin_convertvector(h, u32v) << 16);
}
inline void store(float* p, const vf& v) { std::memcpy(p, &v, sizeof v); }

// Scores of RB rows x NC key tiles: tile c's (hd x 16, element-major) at k + c * ts, qt the
// queries transposed (stride Rp), rows r0..r0+RB-1; a[r][c] over i = 0..hd-1 in order. S: float
// (a widened copy) or std::uint16_t (BF16 in place).
template <class S, std::size_t RB, std::size_t NC>
void score_block(const S* k, std::size_t ts, std::size_t hd, const float* qt, std::size_t Rp, std::size_t r0, float scale, float* out,
                 std::size_t L, std::size_t j0) {
  vf a[RB][NC][kSub] = {};
  for (std::size_t i = 0; i < hd; ++i) {
    vf kv[NC][kSub];
    for (std::size_t c = 0; c < NC; ++c)
      for (std::size_t s = 0; s < kSub; ++s) kv[c][s] = load(k + c * ts + i * kLanes + s * kVl);
    const float* q = qt + i * Rp + r0;
    for (std::size_t r = 0; r < RB; ++r) {
      const float qr = q[r];
      for (std::size_t c = 0; c < NC; ++c)
        for (std::size_t s = 0; s < kSub; ++s) a[r][c][s] += qr * kv[c][s];
    }
  }
  const std::size_t np = std::min(NC * kLanes, L - j0);
  for (std::size_t r = 0; r < RB; ++r) {
    float* o = out + (r0 + r) * L + j0;
    std::size_t c = 0;
    for (; (c + 1) * kLanes <= np; ++c)  // whole columns
      for (std::size_t s = 0; s < kSub; ++s) store(o + c * kLanes + s * kVl, a[r][c][s] * scale);
    for (std::size_t p = c * kLanes; p < np; ++p) o[p] = a[r][c][p % kLanes / kVl][p % kVl] * scale;
  }
}

// Values of RB rows x NC output columns of 16 (from column i0 of acc, stride hdp): o[r][c] += p[r, j] v_j
// for the np positions from j0, j in order, continuing the sums in acc. Row j of the window at
// v + (j / 16) * ts + (j % 16) * rs.
template <class S, std::size_t RB, std::size_t NC>
void value_block(const S* v, std::size_t ts, std::size_t rs, std::size_t hdp, std::size_t np, const float* p, std::size_t L,
                 std::size_t j0, std::size_t r0, std::size_t i0, float* acc) {
  vf o[RB][NC][kSub];
  for (std::size_t r = 0; r < RB; ++r)
    for (std::size_t c = 0; c < NC; ++c)
      for (std::size_t s = 0; s < kSub; ++s) o[r][c][s] = load(acc + (r0 + r) * hdp + i0 + c * kLanes + s * kVl);
  for (std::size_t j = 0; j < np; ++j) {
    const S* row = v + j / kKeyTile * ts + j % kKeyTile * rs + i0;
    vf vv[NC][kSub];
    for (std::size_t c = 0; c < NC; ++c)
      for (std::size_t s = 0; s < kSub; ++s) vv[c][s] = load(row + c * kLanes + s * kVl);
    for (std::size_t r = 0; r < RB; ++r) {
      const float pr = p[(r0 + r) * L + j0 + j];
      for (std::size_t c = 0; c < NC; ++c)
        for (std::size_t s = 0; s < kSub; ++s) o[r][c][s] += pr * vv[c][s];
    }
  }
  for (std::size_t r = 0; r < RB; ++r)
    for (std::size_t c = 0; c < NC; ++c)
      for (std::size_t s = 0; s < kSub; ++s) store(acc + (r0 + r) * hdp + i0 + c * kLanes + s * kVl, o[r][c][s]);
}

// Dispatch tables over (rows in the block - 1, vectors - 1).
template <class S>
using ScoreFn = void (*)(const S*, std::size_t, std::size_t, const float*, std::size_t, std::size_t, float, float*, std::size_t,
                         std::size_t);
template <class S>
using ValueFn = void (*)(const S*, std::size_t, std::size_t, std::size_t, std::size_t, const float*, std::size_t, std::size_t,
                         std::size_t, std::size_t, float*);
template <class S, std::size_t... I>
constexpr std::array<ScoreFn<S>, sizeof...(I)> score_table(std::index_sequence<I...>) {
  return {score_block<S, I / kCols + 1, I % kCols + 1>...};
}
template <class S, std::size_t... I>
constexpr std::array<ValueFn<S>, sizeof...(I)> value_table(std::index_sequence<I...>) {
  return {value_block<S, I / kCols + 1, I % kCols + 1>...};
}
template <class S>
constexpr auto kScore = score_table<S>(std::make_index_sequence<kRowBlock * kCols>{});
template <class S>
constexpr auto kValue = value_table<S>(std::make_index_sequence<kRowBlock * kCols>{});

// Both products over positions in windows: `tiles(j0, nc)` gives the source of the window's nc
// tiles (a pointer and its tile stride).
template <class S, class Tiles>
void scores_over(Tiles tiles, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp, float scale, std::vector<float>& scores) {
  scores.resize(Rp * L);
  for (std::size_t j0 = 0; j0 < L; j0 += kPosTile) {
    const std::size_t nc = std::min(kCols, (L - j0 + kLanes - 1) / kLanes);
    const auto [k, ts] = tiles(j0, nc);
    for (std::size_t r0 = 0; r0 < Rp; r0 += kRowBlock) {
      const std::size_t rb = std::min(kRowBlock, Rp - r0);
      kScore<S>[(rb - 1) * kCols + nc - 1](k, ts, hd, qt, Rp, r0, scale, scores.data(), L, j0);
    }
  }
}
// `rows(j0, np)`: the window's source, its tile stride and its row stride.
template <class S, class Rows>
void values_over(Rows rows, std::size_t L, std::size_t hd, const float* p, std::size_t Rp, std::vector<float>& acc) {
  const std::size_t hdp = round_up(hd, kLanes), vecs = hdp / kLanes;
  acc.assign(Rp * hdp, 0.0f);
  for (std::size_t j0 = 0; j0 < L; j0 += kValTile) {
    const std::size_t np = std::min(kValTile, L - j0);
    const auto [v, ts, rs] = rows(j0, np);
    for (std::size_t r0 = 0; r0 < Rp; r0 += kRowBlock) {
      const std::size_t rb = std::min(kRowBlock, Rp - r0);
      for (std::size_t c0 = 0; c0 < vecs; c0 += kCols) {
        const std::size_t nc = std::min(kCols, vecs - c0);
        kValue<S>[(rb - 1) * kCols + nc - 1](v, ts, rs, hdp, np, p, L, j0, r0, c0 * kLanes, acc.data());
      }
    }
  }
}

}  // namespace

void prefix_scores(const KeyTileReader& k_tile, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp, float scale,
                   std::vector<float>& scores) {
  static_assert(kKeyTile == kLanes, "one key tile per score vector");
  thread_local std::vector<float> kt;  // kCols tiles of keys: (hd, 16) each
  kt.resize(kCols * hd * kLanes);
  auto tiles = [&](std::size_t j0, std::size_t nc) {
    for (std::size_t c = 0; c < nc; ++c) k_tile(j0 + c * kLanes, kt.data() + c * hd * kLanes);
    return std::pair<const float*, std::size_t>{kt.data(), hd * kLanes};
  };
  scores_over<float>(tiles, L, hd, qt, Rp, scale, scores);
}

void prefix_values(const ValueTileReader& v_tile, std::size_t L, std::size_t hd, const float* p, std::size_t Rp,
                   std::vector<float>& acc) {
  static_assert(kValTile % kKeyTile == 0, "whole tiles of values");
  const std::size_t hdp = round_up(hd, kLanes);
  thread_local std::vector<float> vt;
  vt.resize(kValTile * hdp);
  auto rows = [&](std::size_t j0, std::size_t np) {
    for (std::size_t j = 0; j < np; j += kKeyTile) v_tile(j0 + j, vt.data() + j * hdp);
    return std::tuple<const float*, std::size_t, std::size_t>{vt.data(), kKeyTile * hdp, hdp};
  };
  values_over<float>(rows, L, hd, p, Rp, acc);
}

void prefix_scores_bf16(const std::uint16_t* k, std::size_t tile_stride, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp,
                        float scale, std::vector<float>& scores) {
  if (hd % kLanes != 0) throw std::invalid_argument("prefix_scores_bf16: head_dim not a multiple of 16");
  auto tiles = [&](std::size_t j0, std::size_t) {
    return std::pair<const std::uint16_t*, std::size_t>{k + j0 / kKeyTile * tile_stride, tile_stride};
  };
  scores_over<std::uint16_t>(tiles, L, hd, qt, Rp, scale, scores);
}

void prefix_values_bf16(const std::uint16_t* v, std::size_t tile_stride, std::size_t L, std::size_t hd, const float* p, std::size_t Rp,
                        std::vector<float>& acc) {
  if (hd % kLanes != 0) throw std::invalid_argument("prefix_values_bf16: head_dim not a multiple of 16");
  auto rows = [&](std::size_t j0, std::size_t) {
    return std::tuple<const std::uint16_t*, std::size_t, std::size_t>{v + j0 / kKeyTile * tile_stride, tile_stride, hd};
  };
  values_over<std::uint16_t>(rows, L, hd, p, Rp, acc);
}

}  // namespace bestofn::cpu
