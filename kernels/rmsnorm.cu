// RMSNorm, alone and fused with FP8 E4M3 quantization of its output (the input of the q/k/v and
// gate/up GEMMs). GPU twins of cpu::rmsnorm (then quantize_fp8_rows / quantize_fp8_row).
// One block per row. The sum of squares is a tree reduction, not the CPU's sequential loop, so the
// two differ by a few ulp of the row's 1/rms: a tolerance, stated in tests/test_gpu_elementwise.cpp.
#include <string>

#include "bestofn/util/dtype.h"
#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "row_ops.cuh"

namespace bestofn::cuda {
namespace {

using rowops::kBlock;

using rowops::inv_rms;

}  // namespace

// x: (T, dim), w: (dim) of W, out: (T, dim); grid = T, block = kBlock.
template <typename W>
__global__ void __launch_bounds__(kBlock) kernel_rmsnorm(const float* x, const W* w, int dim, float eps, float* out) {
  const std::size_t row = blockIdx.x;
  const float* x_row = x + row * static_cast<std::size_t>(dim);  // (dim)
  float* out_row = out + row * static_cast<std::size_t>(dim);    // (dim)
  const float inv = inv_rms(x_row, dim, eps);
  // Same product order as the CPU: g * (x * inv).
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += kBlock) out_row[i] = rowops::widen(w[i]) * (x_row[i] * inv);
}

// x: (T, dim), w: (dim) of W, q: (T, dim) E4M3 codes, scales: (T); grid = T, block = kBlock.
// The normalized row is recomputed for the amax pass and the code pass instead of being stored:
// the same two multiplications give the same float both times.
template <typename W>
__global__ void __launch_bounds__(kBlock)
    kernel_rmsnorm_quant_fp8(const float* x, const W* w, int dim, float eps, float static_scale, std::uint8_t* q, float* scales) {
  const std::size_t row = blockIdx.x;
  const float* x_row = x + row * static_cast<std::size_t>(dim);  // (dim)
  const float inv = inv_rms(x_row, dim, eps);
  const auto normed = [&](int i) { return rowops::widen(w[i]) * (x_row[i] * inv); };
  rowops::quantize_row_fp8(normed, dim, static_scale, q + row * static_cast<std::size_t>(dim), scales + row);
}

namespace {

void check_shapes(const char* op, DType wdtype, int T, int dim) {
  rowops::check_count(op, "T", T);
  rowops::check_count(op, "dim", dim);
  if (wdtype != DType::F32 && wdtype != DType::BF16)
    throw Error(op, std::string("expected an F32 or BF16 norm weight, got ") + std::string(dtype_name(wdtype)));
}

}  // namespace

void rmsnorm_cuda(const float* x, const void* w, DType wdtype, int T, int dim, float eps, float* out, cudaStream_t stream) {
  check_shapes("rmsnorm_cuda", wdtype, T, dim);
  if (T == 0 || dim == 0) return;
  const auto grid = static_cast<unsigned>(T);
  if (wdtype == DType::F32)
    kernel_rmsnorm<<<grid, kBlock, 0, stream>>>(x, static_cast<const float*>(w), dim, eps, out);
  else
    kernel_rmsnorm<<<grid, kBlock, 0, stream>>>(x, static_cast<const std::uint16_t*>(w), dim, eps, out);
  CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_quant_fp8_cuda(const float* x, const void* w, DType wdtype, int T, int dim, float eps, float static_scale,
                            std::uint8_t* q, float* scales, cudaStream_t stream) {
  check_shapes("rmsnorm_quant_fp8_cuda", wdtype, T, dim);
  if (T == 0) return;  // dim == 0 still writes each row's scale (1, or static_scale), as the CPU does
  const auto grid = static_cast<unsigned>(T);
  if (wdtype == DType::F32)
    kernel_rmsnorm_quant_fp8<<<grid, kBlock, 0, stream>>>(x, static_cast<const float*>(w), dim, eps, static_scale, q, scales);
  else
    kernel_rmsnorm_quant_fp8<<<grid, kBlock, 0, stream>>>(x, static_cast<const std::uint16_t*>(w), dim, eps, static_scale, q,
                                                          scales);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
