// --small-m-linear from 9 to 64 rows: FP8 linear layers on tensor cores with the weights
// as the wide operand. src/cuda/small_m_linear.h states the contract (the k order of the products,
// the slices, the bound on what the tensor core does inside one product); its host twin is
// small_m_mma_twin.
//
// One warp per 16 output rows and one slice of the k range; all the step's tokens (tiles of 8) in
// its registers. mma.sync m16n8k32 (E4M3 x E4M3 -> F32) takes A (16 x 32) and B (32 x 8) in
// fragments where lane (g = lane / 4, q = lane % 4) holds, of A, rows g and g + 8 at k = 4q..4q+3
// and 16+4q..16+4q+3, and of B token g at the same k. The k order inside a product does not change
// its sum, so the fragments may be fed any permutation of the k's, the same for A and B: here lane
// (g, q) loads 16 contiguous codes, k = 64c + 16q + 0..15, of rows g and g + 8 and of its token g of
// each tile (16-byte loads: the weights streamed in 64-byte runs per row), the first 8 going to one
// product and the last 8 to the next. The two products of a chunk accumulate into a zeroed fragment
// that is then added to the slice's sum in F32 (the mma's own accumulation is not full F32 on Ada
// and Hopper: chaining a whole slice through its C operand would err by a fraction of the running
// sum at every product). The slices' partial sums go to a workspace; the last warp of
// a row group to finish (an atomic counter, left at 0) adds them in slice order and applies the
// scales, the bias and the residual add, as kernel_linear_fp8_small_m does.
#include <cstdint>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"
#include "kernel_support.cuh"

namespace bestofn::cuda {
namespace {

constexpr int kMmaWarpsPerBlock = 4;
constexpr int kMmaThreads = 32 * kMmaWarpsPerBlock;

// d += A B, one m16n8k32 E4M3 product accumulated into d (sm_89 and later; the sum keeps about
// 13-14 bits, the rest truncated: the DeepSeek-V3 report, section 3.3.2).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // the host refuses the kernel below sm_89 (small_m_mma_supported)
#endif
}

struct MmaArgs {
  const std::uint8_t* w;  // (out, in)
  const std::uint8_t* a;  // (T, in)
  const float* sx;        // (T)
  const float* sw;        // (out) or (1)
  bool per_channel;
  const float* bias;  // (out) or null
  int T, out, in, slices;
  float* y;  // (T, out)
  bool accumulate;
  float* partial;  // slices > 1: (slices, T_pad, out)
  int* counters;   // slices > 1: (out / 16), 0
};

// grid (groups / kMmaWarpsPerBlock rounded up, slices), block kMmaThreads. NT token tiles of 8.
template <int NT>
__global__ void __launch_bounds__(kMmaThreads) kernel_linear_fp8_mma(const MmaArgs p) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int group = static_cast<int>(blockIdx.x) * kMmaWarpsPerBlock + warp;
  if (group * kMmaRowsPerWarp >= p.out) return;  // no block-wide barrier below: a warp may leave
  const int slice = static_cast<int>(blockIdx.y), chunks = p.in / kMmaChunk;
  const int c_begin = slice * chunks / p.slices, c_end = (slice + 1) * chunks / p.slices;
  const auto K = static_cast<std::size_t>(p.in);
  const int r0 = group * kMmaRowsPerWarp + g;
  const std::uint8_t* w0 = p.w + static_cast<std::size_t>(r0) * K + static_cast<std::size_t>(16 * q);
  const std::uint8_t* w1 = w0 + 8 * K;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // The next chunk's weights are loaded before this chunk's products (twice the bytes in flight).
  uint4 wa = make_uint4(0, 0, 0, 0), wb = wa;
  if (c_begin < c_end) {
    const std::size_t k = static_cast<std::size_t>(c_begin) * kMmaChunk;
    wa = __ldg(reinterpret_cast<const uint4*>(w0 + k)), wb = __ldg(reinterpret_cast<const uint4*>(w1 + k));
  }
#pragma unroll 1
  for (int c = c_begin; c < c_end; ++c) {
    const std::size_t k = static_cast<std::size_t>(c) * kMmaChunk;
    uint4 na = wa, nb = wb;
    if (c + 1 < c_end) na = __ldg(reinterpret_cast<const uint4*>(w0 + k + kMmaChunk)), nb = __ldg(reinterpret_cast<const uint4*>(w1 + k + kMmaChunk));
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int t = j * 8 + g;
      uint4 x = make_uint4(0, 0, 0, 0);  // tokens past T: zero codes, their results never written
      if (t < p.T) x = *reinterpret_cast<const uint4*>(p.a + static_cast<std::size_t>(t) * K + k + static_cast<std::size_t>(16 * q));
      // The chunk's two products into a zeroed fragment, then one F32 add each into the running
      // sum: the tensor core's truncated accumulation (about 13-14 bits kept on Ada and Hopper)
      // then errs by a fraction of this chunk's terms, never of the slice's sum so far.
      float chunk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_e4m3(chunk, wa.x, wb.x, wa.y, wb.y, x.x, x.y);
      mma_e4m3(chunk, wa.z, wb.z, wa.w, wb.w, x.z, x.w);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = __fadd_rn(acc[j][e], chunk[e]);
    }
    wa = na, wb = nb;
  }
  // acc[j]: rows r0 (0, 1) and r0 + 8 (2, 3), tokens 8j + 2q and 8j + 2q + 1.
  const std::size_t out = static_cast<std::size_t>(p.out);
  if (p.slices > 1) {
    const std::size_t t_pad = static_cast<std::size_t>(NT) * 8;
    float* mine = p.partial + static_cast<std::size_t>(slice) * t_pad * out;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::size_t t = static_cast<std::size_t>(j * 8 + 2 * q + (e & 1)), r = static_cast<std::size_t>(r0 + (e >> 1) * 8);
        mine[t * out + r] = acc[j][e];
      }
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(p.counters + group, 1) == p.slices - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::size_t t = static_cast<std::size_t>(j * 8 + 2 * q + (e & 1)), r = static_cast<std::size_t>(r0 + (e >> 1) * 8);
        float total = 0.0f;
        for (int s = 0; s < p.slices; ++s) total = __fadd_rn(total, __ldcg(p.partial + (static_cast<std::size_t>(s) * t_pad + t) * out + r));
        acc[j][e] = total;
      }
    if (lane == 0) p.counters[group] = 0;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = j * 8 + 2 * q + (e & 1), r = r0 + (e >> 1) * 8;
      if (t >= p.T) continue;
      float v = __fmul_rn(__fmul_rn(acc[j][e], p.sx[t]), p.sw[p.per_channel ? r : 0]);
      if (p.bias) v = __fadd_rn(v, p.bias[r]);
      float& dst = p.y[static_cast<std::size_t>(t) * out + static_cast<std::size_t>(r)];
      dst = p.accumulate ? __fadd_rn(dst, v) : v;
    }
}

template <int NT>
void launch_mma(const MmaArgs& p, cudaStream_t stream) {
  const int groups = p.out / kMmaRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((groups + kMmaWarpsPerBlock - 1) / kMmaWarpsPerBlock), static_cast<unsigned>(p.slices));
  kernel_linear_fp8_mma<NT><<<grid, kMmaThreads, 0, stream>>>(p);
}

}  // namespace

bool small_m_mma_supported() {
  static support::Answers answers;  // sm_89: FP8 mma.sync (the kernel traps below it)
  return support::runs_as_built_for(reinterpret_cast<const void*>(kernel_linear_fp8_mma<2>), 89, answers);
}

void linear_fp8_mma_cuda(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                         const float* bias, int T, int out, int in, float* y, cudaStream_t stream, bool accumulate, int slices,
                         float* partial, int* counters) {
  if (!small_m_mma_fits(T, out, in))
    throw Error("linear_fp8_mma_cuda: " + std::to_string(T) + " tokens, " + std::to_string(out) + " x " + std::to_string(in) + " (" +
                std::to_string(kMmaMinRows) + "-" + std::to_string(kMmaMaxRows) + " tokens, out a multiple of 16, in of 64)");
  if (slices < 1 || slices > kMmaMaxSlices || slices > in / kMmaChunk || (slices > 1 && (!partial || !counters)))
    throw Error("linear_fp8_mma_cuda: " + std::to_string(slices) + " slices (1-" + std::to_string(kMmaMaxSlices) +
                ", at most in / 64; more than 1 needs a workspace and counters)");
  if (reinterpret_cast<std::uintptr_t>(w) % 16 != 0 || reinterpret_cast<std::uintptr_t>(a) % 16 != 0)
    throw Error("linear_fp8_mma_cuda: the weights and activations must start on 16 bytes (its loads are 16 bytes)");
  if (!small_m_mma_supported()) throw Error("linear_fp8_mma_cuda: FP8 tensor-core products need a compute capability 8.9 device");
  const MmaArgs p{w, a, sx, sw, per_channel, bias, T, out, in, slices, y, accumulate, partial, counters};
  switch ((T + 7) / 8) {
    case 2: launch_mma<2>(p, stream); break;
    case 3: launch_mma<3>(p, stream); break;
    case 4: launch_mma<4>(p, stream); break;
    case 5: launch_mma<5>(p, stream); break;
    case 6: launch_mma<6>(p, stream); break;
    case 7: launch_mma<7>(p, stream); break;
    default: launch_mma<8>(p, stream); break;
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
