#pragma once
// The FP8 GEMM behind cpu::linear: E4M3 weights x E4M3 activations, summed in fp32 in one fixed
// order (below), on AVX-512 (BF16 dot products or fp32 FMAs, whichever is faster on this CPU)
// where the CPU has it, else on AVX2 + FMA (the codes widened by shifts or, where subnormal fp32
// operands are slow, by F16C), else in portable vector code. The paths give the same bits: every
// E4M3 x E4M3 product is exact in fp32, so a sum depends only on its order, and every path follows
// this one.
//
// The order (what two `vdpbf16ps` per 4 inputs do, see gemm_fp8.cpp): one fp32 accumulator per
// output, starting at 0; for each quad k = 0, 4, 8, ... (inputs past `in` are zero) it adds the
// products at k+1, k, k+3, k+2, in that order, each addition rounded once.
//
// The weights are re-laid once, at load, in strips of kStrip rows (pack_weights): a strip's codes
// for 4 inputs are one 64-byte block, which the AVX-512 kernel turns into the BF16 operands of its
// 16 lanes (one row each) without a shuffle (the AVX2 kernel with shifts and unpacks). The activations of every token are then broadcast from
// memory, and each strip is read once per step for all tokens. Same bytes per weight as the
// checkpoint (plus the padding of the last strip and of `in` to a multiple of 4).
#include <cstddef>
#include <cstdint>

namespace bestofn::cpu::fp8 {

enum class Path { Generic, Avx2, Avx2F16c, Avx512Bf16, Avx512Fma };

// The fastest path this CPU runs with the order above (a fast path is used only after a self
// check against the generic path on this CPU). Where both AVX-512 paths (or both AVX2 ones) run,
// the first call times them (a few ms) and keeps, for the process, the one that never falls far
// behind (avx512_fma, avx2_f16c) unless the other is clearly faster here (prefer(), gemm_fp8.cpp).
Path best_path();
bool available(Path p);

constexpr std::size_t kStrip = 16;  // weight rows per strip: the 16 fp32 lanes of one vector

// `in` rounded up to whole quads.
inline std::size_t padded(std::size_t in) { return (in + 3) / 4 * 4; }
inline std::size_t strip_count(std::size_t out) { return (out + kStrip - 1) / kStrip; }
// Bytes of packed weights for an (out, in) matrix, and of one strip.
inline std::size_t strip_bytes(std::size_t in) { return kStrip * padded(in); }
inline std::size_t packed_weight_bytes(std::size_t out, std::size_t in) { return strip_count(out) * strip_bytes(in); }

// Strips [s0, s1) of w (out, in) E4M3 codes, row-major, into `packed` (which holds all strips:
// strip s at s * strip_bytes(in)). Rows past `out` and inputs past `in` are zero codes. Both
// paths read this layout.
void pack_weights(const std::uint8_t* w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, std::uint8_t* packed);

// 16-bit words of packed activations for T tokens on path p.
std::size_t packed_size(Path p, std::size_t T, std::size_t in);

// Quantizes rows [t0, t1) of T rows of activations x (T, in) to E4M3, fp8_e4m3_round(x / scale[t])
// (the numerics contract), and packs them into the layout path p reads (packed_size words for all
// T rows). Rows are independent: threads may pack disjoint row ranges at once. Generic and AVX2:
// the rows as floats, `in` padded. AVX-512: chunks of 16 tokens (the last one: n <= 16), each holding,
// quad of inputs by quad, its n tokens' four BF16 values (8 bytes each; 16 tokens: two 64-byte
// lines, tokens 0-7 and 8-15), so that the values a kernel call broadcasts for one block sit
// together. (Threads packing neighbouring rows may write one line: false sharing only.)
void pack_activations(Path p, const float* x, const float* scale, std::size_t T, std::size_t in, std::size_t t0, std::size_t t1,
                      std::uint16_t* packed);

// For the rows of strips [s0, s1) (rows past `out` are not written) and all T tokens:
//   y[t * y_stride + o] = (sum_i xq[t, i] * w[o, i]) * token_scale[t] * row_scale[o]
// with the sum in the order above and the two products rounded left to right; without
// token_scale (nullptr) the sum alone (token_scale without row_scale: std::invalid_argument).
// row_scale holds one scale (row_scales == 1) or one per row. `packed_w` from pack_weights, x
// from pack_activations with the same path and T. Uses the calling thread only.
void dot_strips(Path p, const std::uint8_t* packed_w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                const std::uint16_t* x, std::size_t T, float* y, std::size_t y_stride, const float* token_scale = nullptr,
                const float* row_scale = nullptr, std::size_t row_scales = 1);

}  // namespace bestofn::cpu::fp8
