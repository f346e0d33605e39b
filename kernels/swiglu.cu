// SwiGLU: gate = silu(gate) * up, alone and fused with FP8 E4M3 quantization of each row (the
// down_proj input). GPU twins of cpu::swiglu (then quantize_fp8_rows / quantize_fp8_row).
// Same expression as the CPU, `g / (1 + exp(-g)) * up`, but CUDA's expf (max 2 ulp, no fast math)
// is not glibc's: a few ulp of tolerance, stated in tests/test_gpu_elementwise.cpp.
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {
namespace {

using rowops::kBlock;

// IEEE division (__fdiv_rn) whatever -prec-div says; expf is the accurate libdevice expf unless
// the build adds --use_fast_math, which bestofn_cuda must not.
__device__ inline float silu_mul(float g, float u) { return __fdiv_rn(g, 1.0f + expf(-g)) * u; }

}  // namespace

// gate: (n) in place, up: (n), n = T * cols; grid-stride loop.
__global__ void __launch_bounds__(kBlock) kernel_swiglu(float* gate, const float* up, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride)
    gate[i] = silu_mul(gate[i], up[i]);
}

// gate, up: T rows of n, ld apart, q: (T, n) E4M3 codes, scales: (T); grid = T, block = kBlock.
// The product is recomputed for the amax pass and the code pass: the same expression gives the
// same float.
__global__ void __launch_bounds__(kBlock) kernel_swiglu_quant_fp8(const float* gate, const float* up, int n, std::size_t ld,
                                                                   float static_scale, std::uint8_t* q, float* scales) {
  const std::size_t row = blockIdx.x;
  const float* g_row = gate + row * ld;  // (n)
  const float* u_row = up + row * ld;    // (n)
  const auto value = [&](int c) { return silu_mul(g_row[c], u_row[c]); };
  rowops::quantize_row_fp8(value, n, static_scale, q + row * static_cast<std::size_t>(n), scales + row);
}

void swiglu_cuda(float* gate, const float* up, int T, int n, cudaStream_t stream) {
  rowops::check_count("swiglu_cuda", "T", T);
  rowops::check_count("swiglu_cuda", "n", n);
  const std::size_t total = static_cast<std::size_t>(T) * static_cast<std::size_t>(n);
  if (total == 0) return;
  kernel_swiglu<<<rowops::grid_stride_blocks(total), kBlock, 0, stream>>>(gate, up, total);
  CUDA_CHECK(cudaGetLastError());
}

void swiglu_quant_fp8_cuda(const float* gate, const float* up, int T, int n, float static_scale, std::uint8_t* q, float* scales,
                           cudaStream_t stream, int ld) {
  rowops::check_count("swiglu_quant_fp8_cuda", "T", T);
  rowops::check_count("swiglu_quant_fp8_cuda", "n", n);
  if (ld != 0 && ld < n) throw Error("swiglu_quant_fp8_cuda", "expected ld 0 or >= n, got " + std::to_string(ld));
  if (T == 0) return;
  kernel_swiglu_quant_fp8<<<static_cast<unsigned>(T), kBlock, 0, stream>>>(gate, up, n, static_cast<std::size_t>(ld ? ld : n),
                                                                           static_scale, q, scales);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
