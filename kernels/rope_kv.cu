// RoPE on q and k, and the KV cache write: the GPU twin of cpu::rope (src/cpu/ops.cpp) followed by
// bestofn::bf16_from_float on each k / v value (BF16 cache), or by quantize_fp8_rows over each
// row's KV heads (FP8 cache), as the CPU engine appends its cache rows.
//
// HF rotate_half layout: element i pairs with i + hd/2. angle = float(pos) * inv_freq[i] in fp32
// (one IEEE multiply, identical on both sides); cos / sin are cosf / sinf (CUDA: at most 2 ulp off,
// against glibc's correctly rounded sincosf), so results may differ in the last bits where the
// two disagree.
#include <climits>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "rope.cuh"
#include "row_ops.cuh"

namespace bestofn::cuda {
namespace {

constexpr int kRopeBlock = 256;
using ropeops::bf16_from_float;
using ropeops::rotate;

}  // namespace

// q (T, n_heads, hd) rotated in place; k, v (T, n_kv * hd); inv_freq (hd / 2); pos (T); k_rows /
// v_rows (T) pointers to cache rows of format F (src/cuda/kernels.h). grid = T, block = kRopeBlock;
// FP8: kv_dim floats of dynamic shared memory (the rotated k row, quantized per head after).
template <KvFormat F>
__global__ void __launch_bounds__(kRopeBlock)
    kernel_rope_kv_write(float* q, const float* k, const float* v, const int* pos, const float* inv_freq, int n_heads,
                         int n_kv, int hd, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows) {
  static_assert(kRopeBlock == rowops::kBlock, "the FP8 row quantizer reduces over rowops::kBlock threads");
  const int t = static_cast<int>(blockIdx.x), half = hd / 2;
  const std::size_t kv_dim = static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd);
  // q: each (head, i) pair in place
  float* qt = q + static_cast<std::size_t>(t) * static_cast<std::size_t>(n_heads) * static_cast<std::size_t>(hd);
  for (int idx = static_cast<int>(threadIdx.x); idx < n_heads * half; idx += kRopeBlock) {
    const int h = idx / half, i = idx % half;
    const float angle = ropeops::angle(pos[t], inv_freq, i);
    float* x = qt + h * hd;
    rotate(x[i], x[i + half], cosf(angle), sinf(angle), x[i], x[i + half]);
  }
  const float* kt = k + static_cast<std::size_t>(t) * kv_dim;
  const float* vt = v + static_cast<std::size_t>(t) * kv_dim;
  if constexpr (F == KvFormat::FP8) {
    // k rotated into shared memory, then each head of k and of v quantized as one row (codes,
    // then the scales after the row's kv_dim codes): every thread runs every head's quantizer.
    extern __shared__ float k_rot[];  // (kv_dim)
    for (int idx = static_cast<int>(threadIdx.x); idx < n_kv * half; idx += kRopeBlock) {
      const int h = idx / half, i = idx % half;
      const float angle = ropeops::angle(pos[t], inv_freq, i);
      rotate(kt[h * hd + i], kt[h * hd + i + half], cosf(angle), sinf(angle), k_rot[h * hd + i], k_rot[h * hd + i + half]);
    }
    __syncthreads();
    auto* kr = reinterpret_cast<std::uint8_t*>(k_rows[t]);
    auto* vr = reinterpret_cast<std::uint8_t*>(v_rows[t]);
    for (int h = 0; h < n_kv; ++h) {
      const float* kh = k_rot + h * hd;
      const float* vh = vt + h * hd;
      rowops::quantize_row_fp8([kh](int c) { return kh[c]; }, hd, 0.0f, kr + h * hd, reinterpret_cast<float*>(kr + kv_dim) + h);
      rowops::quantize_row_fp8([vh](int c) { return vh[c]; }, hd, 0.0f, vr + h * hd, reinterpret_cast<float*>(vr + kv_dim) + h);
    }
  } else {
    // k: rotated, rounded to BF16 into the cache row
    std::uint16_t* kr = k_rows[t];
    for (int idx = static_cast<int>(threadIdx.x); idx < n_kv * half; idx += kRopeBlock) {
      const int h = idx / half, i = idx % half;
      const float angle = ropeops::angle(pos[t], inv_freq, i);
      float x0, x1;
      rotate(kt[h * hd + i], kt[h * hd + i + half], cosf(angle), sinf(angle), x0, x1);
      kr[h * hd + i] = bf16_from_float(x0);
      kr[h * hd + i + half] = bf16_from_float(x1);
    }
    // v: rounded to BF16 into the cache row
    std::uint16_t* vr = v_rows[t];
    for (std::size_t i = threadIdx.x; i < kv_dim; i += kRopeBlock) vr[i] = bf16_from_float(vt[i]);
  }
}

void rope_kv_write_cuda(float* q, const float* k, const float* v, const int* pos, const float* inv_freq, int T, int n_heads,
                        int n_kv, int hd, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows, cudaStream_t stream,
                        KvFormat kv) {
  if (hd <= 0 || hd % 2 != 0) throw Error("rope_kv_write_cuda", "expected an even head_dim, got " + std::to_string(hd));
  if (n_heads <= 0 || n_kv <= 0 || static_cast<long long>(n_heads) * hd > INT_MAX ||
      static_cast<long long>(n_kv) * hd > INT_MAX)
    throw Error("rope_kv_write_cuda", "expected positive head counts, got n_heads " + std::to_string(n_heads) +
                                          ", n_kv_heads " + std::to_string(n_kv));
  if (T < 0) throw Error("rope_kv_write_cuda", "expected T >= 0, got " + std::to_string(T));
  // FP8: the rotated k row in dynamic shared memory; with the quantizer's static block_max array
  // it must fit the default 48 KB (rope_kv_fp8_fits). The scales follow the codes: 4-byte aligned
  // rows need kv_dim % 4 == 0.
  const std::size_t shared = kv == KvFormat::FP8 ? static_cast<std::size_t>(n_kv) * static_cast<std::size_t>(hd) * 4 : 0;
  if (kv == KvFormat::FP8 && !rope_kv_fp8_fits(n_kv, hd))
    throw Error("rope_kv_write_cuda", "an FP8 KV cache row needs n_kv_heads x head_dim a multiple of 4 and at most " +
                                          std::to_string(kMaxFp8KvDim) + ", got " + std::to_string(n_kv * hd));
  if (T == 0) return;
  const auto kernel = kv == KvFormat::FP8 ? kernel_rope_kv_write<KvFormat::FP8> : kernel_rope_kv_write<KvFormat::BF16>;
  kernel<<<static_cast<unsigned>(T), kRopeBlock, shared, stream>>>(q, k, v, pos, inv_freq, n_heads, n_kv, hd, k_rows, v_rows);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
