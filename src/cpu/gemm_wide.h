#pragma once
// The GEMM behind cpu::linear for weights that widen exactly to fp32: BF16, F16 and F32 (fp32
// activations). One order of fused multiply-adds for every output, on AVX-512 or AVX2 + FMA
// (+ F16C) where the CPU has them and in portable code elsewhere, the same bits on all three.
//
// The order: one fp32 accumulator per output, starting at 0; for k = 0, 1, ..., in - 1 it becomes
// fma(x[k], w[k], accumulator) (one rounding per input). Every weight format widens to fp32
// without rounding, so a layer's numbers depend on its values alone, not on how they were stored.
//
// As for FP8 (gemm_fp8.h), the weights are re-laid once in strips of kStrip rows, input by
// input: a strip's 16 weights for one input are 32 contiguous bytes (64 for F32), widened into
// the 16 lanes (one row each) of one vector, and each token's activation is broadcast to multiply
// them. Same bytes as the checkpoint's (plus the padding of the last strip).
#include <cstddef>
#include <cstdint>

namespace bestofn::cpu::wide {

// How the weights are stored (in the checkpoint and in the strips).
enum class Format { Bf16, F16, F32 };
inline std::size_t weight_bytes(Format f) { return f == Format::F32 ? 4 : 2; }

// The paths, fastest first; all give the same bits (NaN weights aside: their payloads). Avx512:
// AVX-512F + FMA. Avx2Fma: AVX2 + FMA kernels (two 8-lane vectors per strip; F16 weights also need
// F16C, without which they take the portable path). Portable: plain C++ (std::fma; a libm call
// per product where the CPU has no FMA).
enum class Path { Avx512, Avx2Fma, Portable };
bool available(Path p);
Path best_path();

constexpr std::size_t kStrip = 16;
inline std::size_t strip_count(std::size_t out) { return (out + kStrip - 1) / kStrip; }
inline std::size_t packed_weight_bytes(Format f, std::size_t out, std::size_t in) { return strip_count(out) * kStrip * in * weight_bytes(f); }

// Strips [s0, s1) of w (out, in) weights in format f, row-major, into `packed` (strip s at
// s * kStrip * in elements, input k's 16 rows at k * kStrip within it; rows past `out` are
// zero). `w` and `packed` are aligned for the element type (load_model copies a checkpoint
// tensor that is not: src/model/weights.cpp).
void pack_weights(Format f, const void* w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1, void* packed);

// Floats of packed activations for T tokens: chunks of 16 tokens (the last: n <= 16), each
// holding, input by input, its n tokens' values (16 tokens: 64 bytes per input).
inline std::size_t packed_size(std::size_t T, std::size_t in) { return (T + kStrip - 1) / kStrip * kStrip * in; }
// Inputs [k0, k1) of all T rows of x (T, in) into that layout: threads may pack disjoint input
// ranges at once (on a 64-byte aligned buffer, whole lines but where a partial chunk's runs
// straddle one: false sharing, not a race).
void pack_activations(const float* x, std::size_t T, std::size_t in, std::size_t k0, std::size_t k1, float* packed);

// y[t * y_stride + o] = sum_k x[t, k] * w[o, k] in the order above, for the rows of strips
// [s0, s1) (rows past `out` are not written) and all T tokens; packed_w from pack_weights with
// the same format. Uses the calling thread only.
void dot_strips(Path p, Format f, const void* packed_w, std::size_t out, std::size_t in, std::size_t s0, std::size_t s1,
                const float* x, std::size_t T, float* y, std::size_t y_stride);

}  // namespace bestofn::cpu::wide
