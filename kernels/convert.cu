// fp32 -> BF16, round to nearest even: the GPU twin of bestofn::bf16_from_float, bit for bit; and
// the widenings to F32 of BF16 values and of FP8 KV cache rows (exact, then one rounded multiply).
#include <cuda_bf16.h>

#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {

using rowops::kBlock;

// x: (n), out: (n) BF16 bits; grid-stride loop.
__global__ void __launch_bounds__(kBlock) kernel_f32_to_bf16(const float* x, std::size_t n, std::uint16_t* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    const unsigned bits = __float_as_uint(v);
    // Finite values and infinities: __float2bfloat16_rn (cvt.rn.bf16.f32) is RNE like the CPU.
    // NaN: the hardware returns a canonical NaN, the CPU keeps sign and payload and sets the quiet
    // bit; do what the CPU does so that the two agree on every input.
    out[i] = (bits & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((bits >> 16) | 0x40u)
                                                : __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

void f32_to_bf16_cuda(const float* x, std::size_t n, std::uint16_t* out, cudaStream_t stream) {
  if (n == 0) return;
  kernel_f32_to_bf16<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(x, n, out);
  CUDA_CHECK(cudaGetLastError());
}

// out[i] = the float of BF16 x[i] (exact). grid-stride loop.
__global__ void __launch_bounds__(kBlock) kernel_bf16_to_f32(const std::uint16_t* x, std::size_t n, float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride)
    out[i] = __uint_as_float(static_cast<unsigned>(x[i]) << 16);
}

void bf16_to_f32_cuda(const std::uint16_t* x, std::size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  kernel_bf16_to_f32<<<rowops::grid_stride_blocks(n), kBlock, 0, stream>>>(x, n, out);
  CUDA_CHECK(cudaGetLastError());
}

// FP8 cache rows (codes, then a scale per KV head: kv_row_bytes) widened to F32 (rows, kv_dim):
// out[r, e] = fp8(code) * scale[r, e / hd], exactly what the attention kernels read. Grid-stride.
__global__ void __launch_bounds__(kBlock)
    kernel_fp8_rows_to_f32(const std::uint8_t* x, std::size_t rows, std::size_t kv_dim, int hd, std::size_t row_bytes, float* out) {
  const std::size_t n = rows * kv_dim, stride = static_cast<std::size_t>(gridDim.x) * kBlock;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    const std::size_t r = i / kv_dim, e = i % kv_dim;
    const std::uint8_t* row = x + r * row_bytes;
    const std::uint8_t c = row[e];
    const float v = __uint_as_float((static_cast<unsigned>(c & 0x80u) << 24) | (static_cast<unsigned>(c & 0x7fu) << 20)) * 0x1p120f;
    out[i] = v * reinterpret_cast<const float*>(row + kv_dim)[e / static_cast<std::size_t>(hd)];
  }
}

void fp8_rows_to_f32_cuda(const std::uint16_t* rows_base, std::size_t rows, int n_kv, int hd, float* out, cudaStream_t stream) {
  if (hd <= 0 || n_kv <= 0 || (static_cast<long long>(n_kv) * hd) % 4 != 0)
    throw Error("fp8_rows_to_f32_cuda", "expected n_kv_heads x head_dim a positive multiple of 4, got " + std::to_string(n_kv) +
                                            " x " + std::to_string(hd));
  const std::size_t kv_dim = static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd);
  if (rows == 0) return;
  kernel_fp8_rows_to_f32<<<rowops::grid_stride_blocks(rows * kv_dim), kBlock, 0, stream>>>(
      reinterpret_cast<const std::uint8_t*>(rows_base), rows, kv_dim, hd, kv_row_bytes(KvFormat::FP8, kv_dim, hd), out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
