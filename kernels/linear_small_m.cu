// --small-m-linear: an FP8 linear layer for 1..8 tokens, weights streamed once at the
// copy bandwidth, the dequantization epilogue (and a bias) fused: one launch where cuBLASLt's FP8
// GEMM and kernel_scale_output were two. The numbers are src/cuda/small_m_linear.h's contract, bit
// for bit its host twin small_m_linear_twin.
//
// One warp per output row (Heads: per rotary pair of rows), 8 warps per block. Each lane loads 16
// weight codes (16 bytes) at k = i * 512 + lane * 16 and the same 16 activation codes of each token
// (global and L1/L2-resident, or the block's own in shared memory after a prologue), sums the exact
// products in order, then the warp's butterfly; lane 0 applies sx[t], sw[o] and the bias, rounded
// apart (never contracted), then the epilogue: y written or added to (the residual stream: one
// launch for x += W a), or the q / k / v heads apart, rotated and written to the KV cache.
//
// The fused forms (a layer in six launches: src/cuda/layer_plan.h): with a prologue each block
// first makes every token's activation codes itself, with the row kernels' code on the same 256
// threads (kernels/row_ops.cuh), then loops over its share of the rows: max_blocks caps the grid so
// that the codes are made once per block, not once per 8 rows. With pdl (--small-m-pdl) the kernel
// is launched as a programmatic dependent of the one before it: its first weights are prefetched
// into L2 while that one finishes.
#include <cstdint>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"
#include "kernel_support.cuh"
#include "rope.cuh"
#include "row_ops.cuh"

namespace bestofn::cuda {
namespace {

constexpr int kSmallMThreads = kSmallMLanes * kSmallMRowsPerBlock;
static_assert(kSmallMThreads == rowops::kBlock, "the prologue runs the row kernels' code: their block size");

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

// The block's activation codes (M, in) and scales (M) in shared memory, made from f.x: the codes of
// quantize_act_fp8_cuda (Quant) or rmsnorm_quant_fp8_cuda (NormQuant), bit for bit.
template <int M>
__device__ void small_m_prologue(const SmallMFused& f, std::uint8_t* codes, float* scales) {
  const auto K = static_cast<std::size_t>(f.in);
#pragma unroll 1
  for (int t = 0; t < M; ++t) {
    const float* xt = f.x + static_cast<std::size_t>(t) * K;
    std::uint8_t* qt = codes + static_cast<std::size_t>(t) * K;
    if (f.prologue == SmallMPrologue::Quant) {
      rowops::quantize_row_fp8([xt](int c) { return xt[c]; }, f.in, f.static_scale, qt, scales + t);
    } else {
      const float inv = rowops::inv_rms(xt, f.in, f.eps);
      if (f.norm_bf16) {
        const auto* w = static_cast<const std::uint16_t*>(f.norm);
        rowops::quantize_row_fp8([=](int i) { return rowops::widen(w[i]) * (xt[i] * inv); }, f.in, f.static_scale, qt, scales + t);
      } else {
        const auto* w = static_cast<const float*>(f.norm);
        rowops::quantize_row_fp8([=](int i) { return rowops::widen(w[i]) * (xt[i] * inv); }, f.in, f.static_scale, qt, scales + t);
      }
    }
  }
  __syncthreads();  // the codes and the scales (thread 0's) before any warp reads them
}

// Row r of the R rows of unit u: Rows, row u; Heads, the rotary pair (i, i + hd / 2) of head u /
// (hd / 2) counted over q's, k's then v's heads (their rows are consecutive in w).
template <SmallMEpilogue E>
__device__ __forceinline__ int small_m_row(const SmallMFused& f, int u, int r) {
  if constexpr (E == SmallMEpilogue::Rows) {
    return u;
  } else {
    const int half = f.hd / 2;
    return (u / half) * f.hd + u % half + r * half;
  }
}

// Writes the R x M results of unit u (lane 0).
template <int M, SmallMEpilogue E, int R>
__device__ __forceinline__ void small_m_store(const SmallMFused& f, int u, const float (&val)[R][M]) {
  if constexpr (E == SmallMEpilogue::Rows) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      float& dst = f.y[static_cast<std::size_t>(t) * static_cast<std::size_t>(f.out) + static_cast<std::size_t>(u)];
      dst = f.accumulate ? __fadd_rn(dst, val[0][t]) : val[0][t];
    }
  } else {
    const int half = f.hd / 2, head = u / half, i = u % half;
    const int kind = head < f.n_heads ? 0 : (head < f.n_heads + f.n_kv ? 1 : 2);  // q, k, v
    const int h = kind == 0 ? head : head - f.n_heads - (kind == 2 ? f.n_kv : 0);
    const std::size_t width = static_cast<std::size_t>(kind == 0 ? f.n_heads : f.n_kv) * static_cast<std::size_t>(f.hd);
    const std::size_t c = static_cast<std::size_t>(h) * static_cast<std::size_t>(f.hd) + static_cast<std::size_t>(i);
#pragma unroll
    for (int t = 0; t < M; ++t) {
      float x0 = val[0][t], x1 = val[1][t];
      if (!f.rope) {
        float* dst = (kind == 0 ? f.q : (kind == 1 ? f.k : f.v)) + static_cast<std::size_t>(t) * width;
        dst[c] = x0, dst[c + static_cast<std::size_t>(half)] = x1;
        continue;
      }
      if (kind < 2) {
        const float angle = ropeops::angle(f.pos[t], f.inv_freq, i);
        ropeops::rotate(val[0][t], val[1][t], cosf(angle), sinf(angle), x0, x1);
      }
      if (kind == 0) {
        float* dst = f.q + static_cast<std::size_t>(t) * width;
        dst[c] = x0, dst[c + static_cast<std::size_t>(half)] = x1;
      } else {
        std::uint16_t* row = (kind == 1 ? f.k_rows : f.v_rows)[t];
        row[c] = ropeops::bf16_from_float(x0), row[c + static_cast<std::size_t>(half)] = ropeops::bf16_from_float(x1);
      }
    }
  }
}

// An activation load: shared memory after a prologue, else global memory by a plain (coherent)
// load, not __ldg's read-only path: under --small-m-pdl the kernel that writes them is still
// running when this one starts (it reads them only after its wait, but ld.global.nc's contract is
// "read-only for the kernel's whole life").
__device__ __forceinline__ uint4 small_m_load(const std::uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }

// --small-m-pdl: the block's first rows of weights (read-only for the whole run) asked into L2
// while the kernel before it finishes, then the wait for that kernel (griddepcontrol.wait: its
// writes visible). Nothing the kernel before writes is read before the wait.
template <SmallMEpilogue E>
__device__ __forceinline__ void small_m_prefetch_then_wait(const SmallMFused& f, int units, int warp, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int R = E == SmallMEpilogue::Rows ? 1 : 2;
  constexpr std::size_t kLine = 128;  // one prefetch per L2 line, the warp's lanes side by side
  const int u = static_cast<int>(blockIdx.x) * kSmallMRowsPerBlock + warp;
  const auto K = static_cast<std::size_t>(f.in);
  if (u < units)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* row = f.w + static_cast<std::size_t>(small_m_row<E>(f, u, r)) * K;
      for (std::size_t off = static_cast<std::size_t>(lane) * kLine; off < K; off += kSmallMLanes * kLine)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + off));
    }
  asm volatile("griddepcontrol.wait;" ::: "memory");
#else
  __trap();  // launched early with no way to wait: never run on (the host refuses: small_m_pdl_supported)
#endif
}

// --small-m-pdl: lets the next kernel in the stream (launched with the same attribute) start its
// prefetch once every block of this one has passed its row loop.
__device__ __forceinline__ void small_m_let_next_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

template <int M, bool Made, SmallMEpilogue E>
__global__ void __launch_bounds__(kSmallMThreads) kernel_linear_fp8_small_m(const SmallMFused f) {
  constexpr int R = E == SmallMEpilogue::Rows ? 1 : 2;
  extern __shared__ uint4 small_m_shared[];  // Made: M x in codes, then M scales
  const std::uint8_t* a = f.a;
  const float* sx = f.sx;
  if (f.pdl) small_m_prefetch_then_wait<E>(f, f.out / R, static_cast<int>(threadIdx.x) / kSmallMLanes, static_cast<int>(threadIdx.x) % kSmallMLanes);
  if constexpr (Made) {
    auto* codes = reinterpret_cast<std::uint8_t*>(small_m_shared);
    auto* scales = reinterpret_cast<float*>(codes + static_cast<std::size_t>(M) * static_cast<std::size_t>(f.in));
    small_m_prologue<M>(f, codes, scales);
    a = codes, sx = scales;
  }
  const int lane = static_cast<int>(threadIdx.x) % kSmallMLanes, warp = static_cast<int>(threadIdx.x) / kSmallMLanes;
  const int units = f.out / R;
  const auto K = static_cast<std::size_t>(f.in);
  for (int u = static_cast<int>(blockIdx.x) * kSmallMRowsPerBlock + warp; u < units; u += static_cast<int>(gridDim.x) * kSmallMRowsPerBlock) {
    const std::uint8_t* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = f.w + static_cast<std::size_t>(small_m_row<E>(f, u, r)) * K;
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
    for (std::size_t k0 = static_cast<std::size_t>(lane) * kSmallMCodes; k0 < K; k0 += kSmallMLanes * kSmallMCodes) {
      uint4 wv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r] = __ldg(reinterpret_cast<const uint4*>(wr[r] + k0));
#pragma unroll
      for (int t = 0; t < M; ++t) {
        const uint4 av = small_m_load(a + static_cast<std::size_t>(t) * K + k0);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] = small_m_dot16(wv[r], av, acc[r][t]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
#pragma unroll
        for (int d = kSmallMLanes / 2; d >= 1; d /= 2) acc[r][t] = __fadd_rn(acc[r][t], __shfl_xor_sync(0xffffffffu, acc[r][t], d));
    if (f.pdl && u + static_cast<int>(gridDim.x) * kSmallMRowsPerBlock >= units) small_m_let_next_start();  // the warp's last unit
    if (lane != 0) continue;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int o = small_m_row<E>(f, u, r);
      const float s = f.sw[f.per_channel ? o : 0];
#pragma unroll
      for (int t = 0; t < M; ++t) {
        float v = __fmul_rn(__fmul_rn(acc[r][t], sx[t]), s);
        if (f.bias) v = __fadd_rn(v, f.bias[o]);
        acc[r][t] = v;
      }
    }
    small_m_store<M, E, R>(f, u, acc);
  }
}

template <int M>
void launch_small_m(const SmallMFused& f, cudaStream_t stream) {
  const bool made = f.prologue != SmallMPrologue::None;
  const int units = f.epilogue == SmallMEpilogue::Rows ? f.out : f.out / 2;
  unsigned blocks = static_cast<unsigned>((units + kSmallMRowsPerBlock - 1) / kSmallMRowsPerBlock);
  if (made && f.max_blocks > 0 && blocks > static_cast<unsigned>(f.max_blocks)) blocks = static_cast<unsigned>(f.max_blocks);
  const std::size_t shared = made ? static_cast<std::size_t>(M) * (static_cast<std::size_t>(f.in) + 4) : 0;
  const auto kernel = !made ? kernel_linear_fp8_small_m<M, false, SmallMEpilogue::Rows>
                            : (f.epilogue == SmallMEpilogue::Rows ? kernel_linear_fp8_small_m<M, true, SmallMEpilogue::Rows>
                                                                  : kernel_linear_fp8_small_m<M, true, SmallMEpilogue::Heads>);
  if (!f.pdl) {
    kernel<<<blocks, kSmallMThreads, shared, stream>>>(f);
    return;
  }
  // Programmatic dependent launch: the kernel may start before the one before it ends (it waits
  // for it after its L2 prefetch); captured into a graph as a programmatic edge.
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(kSmallMThreads), cfg.dynamicSmemBytes = shared, cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, f));
}

}  // namespace

bool small_m_pdl_supported() {
  // The kernels wait (griddepcontrol.wait) only where compiled for sm_90 or later: a JIT of an
  // older target would launch early and race.
  static support::Answers answers;
  return support::runs_as_built_for(reinterpret_cast<const void*>(kernel_linear_fp8_small_m<1, false, SmallMEpilogue::Rows>), 90, answers);
}

void linear_fp8_small_m_fused_cuda(const SmallMFused& f, cudaStream_t stream) {
  if (const std::string why = small_m_fused_refusal(f); !why.empty()) throw Error("linear_fp8_small_m_fused_cuda: " + why);
  if (f.pdl && !small_m_pdl_supported())
    throw Error("linear_fp8_small_m_fused_cuda: programmatic dependent launch needs a compute capability 9.0 device and kernels built for it");
  if (f.prologue == SmallMPrologue::None && f.epilogue == SmallMEpilogue::Heads)
    throw Error("linear_fp8_small_m_fused_cuda: the Heads epilogue is built with a prologue only (the q/k/v product's norm)");
  if (reinterpret_cast<std::uintptr_t>(f.w) % 16 != 0 || reinterpret_cast<std::uintptr_t>(f.a) % 16 != 0)
    throw Error("linear_fp8_small_m_fused_cuda: the weights and activations must start on 16 bytes (its loads are 16 bytes)");
  switch (f.T) {
    case 1: launch_small_m<1>(f, stream); break;
    case 2: launch_small_m<2>(f, stream); break;
    case 3: launch_small_m<3>(f, stream); break;
    case 4: launch_small_m<4>(f, stream); break;
    case 5: launch_small_m<5>(f, stream); break;
    case 6: launch_small_m<6>(f, stream); break;
    case 7: launch_small_m<7>(f, stream); break;
    default: launch_small_m<8>(f, stream); break;
  }
  CUDA_CHECK(cudaGetLastError());
}

void linear_fp8_small_m_cuda(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                             const float* bias, int T, int out, int in, float* y, cudaStream_t stream, bool accumulate) {
  SmallMFused f;
  f.w = w, f.a = a, f.sx = sx, f.sw = sw, f.per_channel = per_channel, f.bias = bias, f.T = T, f.out = out, f.in = in;
  f.y = y, f.accumulate = accumulate;
  if (!small_m_linear_fits(T, out, in))
    throw Error("linear_fp8_small_m_cuda: " + std::to_string(T) + " tokens, " + std::to_string(out) + " x " + std::to_string(in) +
                " (1-" + std::to_string(kSmallMMaxRows) + " tokens, in a multiple of " + std::to_string(kSmallMCodes) + ")");
  linear_fp8_small_m_fused_cuda(f, stream);
}

}  // namespace bestofn::cuda
