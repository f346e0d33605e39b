#pragma once
// The shared-prefix half of decode attention as two blocked matrix products (Hydragen, arXiv
// 2402.05099): the R queries of every slot of a prefix (for one KV head) against the prefix's L
// keys, S = Q K^T, and then O = P V. Each K / V tile is widened from the cache once per call
// and used by every query; sums stay in registers over blocks of queries x positions (scores) or
// queries x output elements (values): 6 x 64 with AVX-512, 4 x 16 with AVX2, 3 x 16 otherwise.
//
// Summation order is fixed per query, whatever R is: score (r, j) adds q_r[i] k_j[i] for
// i = 0..hd-1 in order; output (r, i) adds p[r, j] v_j[i] for j = 0..L-1 in order. Built without
// FMA contraction (CMakeLists.txt), each product is rounded before it is added, so the results are
// bit-identical to the scalar loops of cpu::decode_attention (src/cpu/attention.cpp) and a
// candidate's numbers never depend on how many others share its prefix.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace bestofn::cpu {

// Callers may pad the query rows to a multiple of this (the padding rows compute garbage that is
// never read); the products take any row count.
constexpr std::size_t kPrefixRowBlock = 1;

inline std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

// Keys per tile: the engine keeps its K cache in tiles of this many positions (element-major, so
// a tile's slice for one head is already the transposed block the score products read).
constexpr std::size_t kKeyTile = 16;

// Writes V rows j0 .. j0 + kKeyTile - 1 of one KV head into out, row p at out + p * hdp (hdp =
// round_up(hd, 16)): hd floats, then zeros to hdp; rows at or past the end all zeros. j0 is a
// multiple of kKeyTile.
using ValueTileReader = std::function<void(std::size_t j0, float* out)>;
// Writes the keys j0 .. j0 + kKeyTile - 1 of one KV head, transposed: out[i * kKeyTile + p] =
// k_{j0 + p}[i] (hd x kKeyTile floats), zeros for positions at or past the end. j0 is a multiple
// of kKeyTile.
using KeyTileReader = std::function<void(std::size_t j0, float* out)>;

// scores (Rp, L) row-major = (Q K^T) * scale. qt (hd, Rp): the queries transposed, Rp a multiple
// of kPrefixRowBlock; the keys come in tiles from k_tile.
void prefix_scores(const KeyTileReader& k_tile, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp, float scale,
                   std::vector<float>& scores);

// acc (Rp, hdp) row-major, hdp = round_up(hd, 16): acc[r, i] = sum_j p[r, j] v_j[i], p (Rp, L)
// row-major (the unnormalized softmax weights); columns hd..hdp-1 are zero.
void prefix_values(const ValueTileReader& v_tile, std::size_t L, std::size_t hd, const float* p, std::size_t Rp,
                   std::vector<float>& acc);

// The same two products reading a BF16 cache in place, with no widened copy (the engine's use:
// up to 12 queries of a KV head, a slot's suffix or a prefix with few candidates, too few to
// amortize a copy): K tile t's head slice (hd x kKeyTile, element-major) at k + t * tile_stride,
// V tile t's head slice (kKeyTile rows of hd) at v + t * tile_stride, zeros past the last row; hd
// a multiple of 16 (else std::invalid_argument). The same sums in the same order as
// prefix_scores / prefix_values.
void prefix_scores_bf16(const std::uint16_t* k, std::size_t tile_stride, std::size_t L, std::size_t hd, const float* qt, std::size_t Rp,
                        float scale, std::vector<float>& scores);
void prefix_values_bf16(const std::uint16_t* v, std::size_t tile_stride, std::size_t L, std::size_t hd, const float* p, std::size_t Rp,
                        std::vector<float>& acc);

}  // namespace bestofn::cpu
