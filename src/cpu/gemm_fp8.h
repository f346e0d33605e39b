#pragma once
// The FP8 GEMM behind cpu::linear: E4M3 weights x E4M3 activations, summed in fp32 in one fixed
// order (below), on AVX-512 BF16 where the CPU has it and in portable vector code elsewhere. The
// two paths give the same bits: every E4M3 x E4M3 product is exact in fp32, so a sum depends only
// on its order, and both paths follow this one.
//
// The order (what `vdpbf16ps` does on 64-element blocks, see gemm_fp8.cpp): 16 fp32 lanes per dot
// product; in block b (elements 64b..64b+63, zero past `in`), lane j with e = 64b + 16(j/4) + 2(j%4)
// adds the products at e+1, e, e+9, e+8, in that order, each rounded once. The lanes are then
// summed as a tree: (j, j+8), then (j, j+4), then (j, j+2), then (0, 1).
#include <cstddef>
#include <cstdint>

namespace bestofn::cpu::fp8 {

enum class Path { Generic, Avx512Bf16 };

// The fastest path this CPU runs with the order above (AVX-512 BF16 is used only after a self
// check of its rounding order on this CPU).
Path best_path();
bool available(Path p);

// `in` rounded up to whole 64-element blocks.
inline std::size_t padded(std::size_t in) { return (in + 63) / 64 * 64; }
// Words per token of packed activations for path p.
std::size_t packed_size(Path p, std::size_t in);

// Packs T rows of E4M3 values held as floats (T, in) into the layout path p reads:
// (T, packed_size) 16-bit words.
void pack_activations(Path p, const float* xq, std::size_t T, std::size_t in, std::uint16_t* packed);

// acc[t * out_stride + o] = sum_i xq[t, i] * w[o, i] in the order above, for rows o in [r0, r1)
// and all T tokens, w (out, in) E4M3 codes, x packed by pack_activations with the same path.
// Uses the calling thread only.
void dot_rows(Path p, const std::uint8_t* w, std::size_t in, std::size_t r0, std::size_t r1, const std::uint16_t* packed,
              std::size_t T, float* acc, std::size_t out_stride);

}  // namespace bestofn::cpu::fp8
