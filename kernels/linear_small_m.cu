// --small-m-linear (issue 34): an FP8 linear layer for 1..8 tokens, weights streamed once at the
// copy bandwidth, the dequantization epilogue (and a bias) fused: one launch where cuBLASLt's FP8
// GEMM and kernel_scale_output were two. The numbers are src/cuda/small_m_linear.h's contract, bit
// for bit its host twin small_m_linear_twin.
//
// One warp per output row, 8 rows per block. Each lane loads 16 weight codes (16 bytes) at k = i *
// 512 + lane * 16 and the same 16 activation codes of each token (the activations are a few KB,
// L1/L2-resident across the warps), sums the exact products in order, then the warp's butterfly;
// lane 0 applies sx[t], sw[o] and the bias, rounded apart (never contracted), and with accumulate
// adds the result to y (the residual stream: one launch for x += W a).
#include <cstdint>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {
namespace {

constexpr int kSmallMThreads = kSmallMLanes * kSmallMRowsPerBlock;

// bestofn::fp8_e4m3_to_float_finite: the 7 magnitude bits at float bits 20..26, then 2^120.
__device__ __forceinline__ float small_m_fp8(unsigned code) {
  return __uint_as_float(((code & 0x80u) << 24) | ((code & 0x7fu) << 20)) * 0x1p120f;
}

// Adds the 16 products of one 16-byte load of weights and activations to acc, k order.
__device__ __forceinline__ float small_m_dot16(uint4 w, uint4 a, float acc) {
  const unsigned ws[4] = {w.x, w.y, w.z, w.w}, as[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int b = 0; b < 4; ++b)
      acc = __fadd_rn(acc, __fmul_rn(small_m_fp8((ws[q] >> (8 * b)) & 0xffu), small_m_fp8((as[q] >> (8 * b)) & 0xffu)));
  return acc;
}

template <int M>
__global__ void __launch_bounds__(kSmallMThreads)
    kernel_linear_fp8_small_m(const std::uint8_t* __restrict__ w, const std::uint8_t* __restrict__ a, const float* __restrict__ sx,
                              const float* __restrict__ sw, bool per_channel, const float* __restrict__ bias, float* __restrict__ y,
                              int out, int in, bool accumulate) {
  const int lane = static_cast<int>(threadIdx.x) % kSmallMLanes;
  const int o = static_cast<int>(blockIdx.x) * kSmallMRowsPerBlock + static_cast<int>(threadIdx.x) / kSmallMLanes;
  if (o >= out) return;
  const auto K = static_cast<std::size_t>(in);
  const std::uint8_t* wo = w + static_cast<std::size_t>(o) * K;
  float acc[M];
#pragma unroll
  for (int t = 0; t < M; ++t) acc[t] = 0.0f;
  for (std::size_t k0 = static_cast<std::size_t>(lane) * kSmallMCodes; k0 < K; k0 += kSmallMLanes * kSmallMCodes) {
    const uint4 wv = __ldg(reinterpret_cast<const uint4*>(wo + k0));
#pragma unroll
    for (int t = 0; t < M; ++t) acc[t] = small_m_dot16(wv, __ldg(reinterpret_cast<const uint4*>(a + static_cast<std::size_t>(t) * K + k0)), acc[t]);
  }
#pragma unroll
  for (int t = 0; t < M; ++t)
#pragma unroll
    for (int d = kSmallMLanes / 2; d >= 1; d /= 2) acc[t] = __fadd_rn(acc[t], __shfl_xor_sync(0xffffffffu, acc[t], d));
  if (lane != 0) return;
  const float s = sw[per_channel ? o : 0];
#pragma unroll
  for (int t = 0; t < M; ++t) {
    float v = __fmul_rn(__fmul_rn(acc[t], sx[t]), s);
    if (bias) v = __fadd_rn(v, bias[o]);
    float& dst = y[static_cast<std::size_t>(t) * static_cast<std::size_t>(out) + static_cast<std::size_t>(o)];
    dst = accumulate ? __fadd_rn(dst, v) : v;
  }
}

template <int M>
void launch_small_m(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel, const float* bias,
                    float* y, int out, int in, bool accumulate, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + kSmallMRowsPerBlock - 1) / kSmallMRowsPerBlock);
  kernel_linear_fp8_small_m<M><<<blocks, kSmallMThreads, 0, stream>>>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate);
}

}  // namespace

void linear_fp8_small_m_cuda(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                             const float* bias, int T, int out, int in, float* y, cudaStream_t stream, bool accumulate) {
  if (!small_m_linear_fits(T, out, in))
    throw Error("linear_fp8_small_m_cuda: " + std::to_string(T) + " tokens, " + std::to_string(out) + " x " + std::to_string(in) +
                " (1-" + std::to_string(kSmallMMaxRows) + " tokens, in a multiple of " + std::to_string(kSmallMCodes) + ")");
  if (reinterpret_cast<std::uintptr_t>(w) % 16 != 0 || reinterpret_cast<std::uintptr_t>(a) % 16 != 0)
    throw Error("linear_fp8_small_m_cuda: the weights and activations must start on 16 bytes (its loads are 16 bytes)");
  switch (T) {
    case 1: launch_small_m<1>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    case 2: launch_small_m<2>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    case 3: launch_small_m<3>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    case 4: launch_small_m<4>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    case 5: launch_small_m<5>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    case 6: launch_small_m<6>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    case 7: launch_small_m<7>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
    default: launch_small_m<8>(w, a, sx, sw, per_channel, bias, y, out, in, accumulate, stream); break;
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
