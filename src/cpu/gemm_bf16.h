#pragma once
// BF16-weight GEMM on AVX-512: the same sums as the portable kernels in ops.cpp (16 fp32 lanes,
// lane l takes elements i = l mod 16 in order with fused multiply-adds, then lanes 0..15 in order,
// then the tail), with the weights widened in registers instead of through a buffer. Used for
// every token count when the CPU has AVX-512, so a token's numbers never depend on the batch.
#include <cstddef>
#include <cstdint>

namespace bestofn::cpu::bf16 {

bool available();  // AVX-512F with FMA on this CPU

// y[t * out_stride + o] = sum_i x[t, i] * w[o, i] for rows o in [r0, r1), w (out, in) BF16 bits,
// x (T, in) fp32. Uses the calling thread only.
void dot_rows(const std::uint16_t* w, std::size_t in, std::size_t r0, std::size_t r1, const float* x, std::size_t T, float* y,
              std::size_t out_stride);

}  // namespace bestofn::cpu::bf16
