#pragma once
// --small-m-linear (issue 34): the FP8 linear layer for a few tokens as one weight-streaming
// kernel (kernels/linear_small_m.cu) in place of cuBLASLt's FP8 GEMM and the scale kernel: at
// M = 1..8 tokens the step reads every weight once, and cuBLASLt's tiles, built for large M, read
// them at half the copy bandwidth (benchmarks/results/2026-11-30-nvidia-h200/run1/gemm_fp8.json).
// Plain C++ (bestofn_core): the kernel's numerics contract and its host twin, tested without a GPU.
//
// The contract. y[t, o] = ((sum_k w[o, k] a[t, k]) * sx[t]) * sw[o or 0] (+ bias[o]), w and a FP8
// E4M3 codes, each rounding step an IEEE fp32 round to nearest:
// - every product w a is exact in fp32 (two 4-bit significands), so a fused multiply-add and a
//   multiply then an add give the same sum;
// - one warp per output row o; lane l (0..31) sums, in this order, the products at k = i * 512 +
//   l * 16 + j for i = 0, 1, ... and j = 0..15 (16 codes per 16-byte load), k < in;
// - the 32 lane sums are combined by a butterfly: for d = 16, 8, 4, 2, 1, each lane's sum v becomes
//   v + (lane l ^ d)'s v; lane 0's result is the sum;
// - then the scales left to right as the scale kernel (and cpu::linear's store step), then the
//   bias, one rounded add;
// - accumulate (the residual stream, x += W a): y[t, o] + that value, one rounded add, as the CPU
//   engine's residual loop adds a layer's output.
// The CPU engine sums the same exact products in its own order (cpu/gemm_fp8.h), so the two differ
// by the additions' roundings alone: |twin - cpu| <= 2 gamma_K sum_k |w a| scaled, gamma_K = K u /
// (1 - K u), u = 2^-24 (tests/test_small_m_linear.cpp).
#include <cstddef>
#include <cstdint>

namespace bestofn::cuda {

constexpr int kSmallMMaxRows = 8;      // tokens per launch: the step's batch rows up to this
constexpr int kSmallMLanes = 32;       // lanes per output row (one warp)
constexpr int kSmallMCodes = 16;       // codes per lane per load (16 bytes)
constexpr int kSmallMRowsPerBlock = 8; // output rows (warps) per block of 256 threads

// Whether the kernel takes a layer: 1 <= T <= kSmallMMaxRows, in a multiple of 16 (every FP8
// layer's, as cuBLASLt's FP8 GEMM needs), out >= 1.
bool small_m_linear_fits(int T, int out, int in);

// The host twin, bit for bit the kernel's result: w (out, in) codes row-major, a (T, in) codes,
// sx (T) per-token activation scales, sw (out) when per_channel else (1), bias (out) or null.
// y (T, out) row-major; accumulate: added to what y holds.
void small_m_linear_twin(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                         const float* bias, int T, int out, int in, float* y, bool accumulate = false);

}  // namespace bestofn::cuda
