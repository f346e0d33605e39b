// Blocked prefix attention products (see prefix_attention.h for the summation-order contract).
// The tiles use GCC vector extensions (16 floats): on AVX-512 one register, on AVX2 two, on other
// targets what the compiler has. Elementwise multiply and add, no contraction: each lane computes
// exactly what the scalar loop computes.
#include "cpu/prefix_attention.h"

#include <algorithm>
#include <cstring>

namespace bestofn::cpu {
namespace {

typedef float v16 __attribute__((vector_size(64)));
constexpr std::size_t kLanes = 16;
constexpr std::size_t kRows = kPrefixRowBlock;
constexpr std::size_t kPosTile = 2 * kLanes;  // key positions per score tile
constexpr std::size_t kValTile = 32;          // value positions widened at a time

}  // namespace

void prefix_scores(const KeyTileReader& k_tile, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp, float scale,
                   std::vector<float>& scores) {
  static_assert(kKeyTile == kLanes, "one key tile per score vector");
  thread_local std::vector<float> kt0, kt1;  // two tiles of keys: (hd, 16) each
  kt0.resize(hd * kLanes), kt1.resize(hd * kLanes);
  scores.resize(Rp * L);
  for (std::size_t j0 = 0; j0 < L; j0 += kPosTile) {
    const std::size_t np = std::min(kPosTile, L - j0);
    k_tile(j0, kt0.data());
    if (np > kLanes) k_tile(j0 + kLanes, kt1.data());
    else std::fill(kt1.begin(), kt1.end(), 0.0f);
    for (std::size_t r0 = 0; r0 < Rp; r0 += kRows) {
      v16 a[kRows][2] = {};
      for (std::size_t i = 0; i < hd; ++i) {
        v16 k0, k1;
        std::memcpy(&k0, kt0.data() + i * kLanes, sizeof k0);
        std::memcpy(&k1, kt1.data() + i * kLanes, sizeof k1);
        const float* q = qt + i * Rp + r0;
        for (std::size_t r = 0; r < kRows; ++r) {
          a[r][0] += q[r] * k0;
          a[r][1] += q[r] * k1;
        }
      }
      for (std::size_t r = 0; r < kRows; ++r)
        for (std::size_t p = 0; p < np; ++p) scores[(r0 + r) * L + j0 + p] = a[r][p / kLanes][p % kLanes] * scale;
    }
  }
}

void prefix_values(const KvRowReader& v_row, std::size_t L, std::size_t hd, const float* p, std::size_t Rp,
                   std::vector<float>& acc) {
  const std::size_t hdp = round_up(hd, kLanes);
  thread_local std::vector<float> vt;
  vt.assign(kValTile * hdp, 0.0f);
  acc.assign(Rp * hdp, 0.0f);
  for (std::size_t j0 = 0; j0 < L; j0 += kValTile) {
    const std::size_t np = std::min(kValTile, L - j0);
    for (std::size_t j = 0; j < np; ++j) v_row(j0 + j, vt.data() + j * hdp);  // columns hd.. stay 0
    for (std::size_t r0 = 0; r0 < Rp; r0 += kRows)
      for (std::size_t i0 = 0; i0 < hdp; i0 += kLanes) {
        v16 o[kRows];
        for (std::size_t r = 0; r < kRows; ++r) std::memcpy(&o[r], acc.data() + (r0 + r) * hdp + i0, sizeof o[r]);
        for (std::size_t j = 0; j < np; ++j) {
          v16 v;
          std::memcpy(&v, vt.data() + j * hdp + i0, sizeof v);
          for (std::size_t r = 0; r < kRows; ++r) o[r] += p[(r0 + r) * L + j0 + j] * v;
        }
        for (std::size_t r = 0; r < kRows; ++r) std::memcpy(acc.data() + (r0 + r) * hdp + i0, &o[r], sizeof o[r]);
      }
  }
}

}  // namespace bestofn::cpu
