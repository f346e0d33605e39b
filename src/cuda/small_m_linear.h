#pragma once
// Small-M linear: the FP8 linear layer for a few tokens as one weight-streaming
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
#include <string>

namespace bestofn::cuda {

constexpr int kSmallMMaxRows = 8;      // tokens per launch: the step's batch rows up to this
constexpr int kSmallMLanes = 32;       // lanes per output row (one warp)
constexpr int kSmallMCodes = 16;       // codes per lane per load (16 bytes)
constexpr int kSmallMRowsPerBlock = 8; // output rows (warps) per block of 256 threads
// A prologue's codes and scales: within the 48 KB of shared memory a block gets without opting
// in, beside the row helpers' static arrays.
constexpr int kSmallMPrologueBytes = 47 * 1024;
// The fused kernels' grid cap per SM by default (the small-M grid cap): each block makes its
// activation codes once, so fewer blocks read x fewer times; more keep more loads in flight.
// Unmeasured: benchmarks/GPU_TODO.md's issue-34 section sweeps it.
constexpr int kSmallMBlocksPerSm = 2;

// Whether the kernel takes a layer: 1 <= T <= kSmallMMaxRows, in a multiple of 16 (every FP8
// layer's, as cuBLASLt's FP8 GEMM needs), out >= 1.
bool small_m_linear_fits(int T, int out, int in);

// The host twin, bit for bit the kernel's result: w (out, in) codes row-major, a (T, in) codes,
// sx (T) per-token activation scales, sw (out) when per_channel else (1), bias (out) or null.
// y (T, out) row-major; accumulate: added to what y holds.
void small_m_linear_twin(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                         const float* bias, int T, int out, int in, float* y, bool accumulate = false);

// --- The fused forms: a decoder layer in six launches (src/cuda/layer_plan.h) ---
//
// The prologue. The activations' codes and per-token scales made by each block itself, in shared
// memory, from the F32 input x (T, in): Quant, as quantize_act_fp8_cuda; NormQuant, RMSNorm with
// the norm weights first, as rmsnorm_quant_fp8_cuda. A block is those kernels' 256 threads and runs
// their code (kernels/row_ops.cuh), so the codes and scales are theirs bit for bit: the product is
// then the unfused one's, and the contract above holds unchanged. The host twin of the codes is
// small_m_prologue_twin (its norm's sum: small_m_inv_rms_twin's order).
//
// The epilogues. Rows: y written, or added to (the residual stream). Heads, on a q | k | v product
// (out = (n_heads + 2 n_kv) hd, hd even): one warp computes the two rows of a rotary pair (i and
// i + hd / 2 of one head; each row's sum in the order above) and writes the q, k and v columns
// apart (no column copies), or with rope, as rope_kv_write_cuda does after them: q rotated (F32),
// k rotated and v rounded to BF16 into their cache rows (the same device functions, kernels/rope.cuh).
enum class SmallMPrologue : std::uint8_t { None, Quant, NormQuant };
enum class SmallMEpilogue : std::uint8_t { Rows, Heads };

// One launch's arguments; every pointer a device pointer.
struct SmallMFused {
  const std::uint8_t* w = nullptr;  // (out, in) E4M3 codes, 16-byte aligned
  const float* sw = nullptr;        // (out) per channel, else (1)
  bool per_channel = true;
  const float* bias = nullptr;  // (out) or null
  int T = 0, out = 0, in = 0;
  SmallMPrologue prologue = SmallMPrologue::None;
  const std::uint8_t* a = nullptr;  // None: the codes (T, in), 16-byte aligned, and their scales sx (T)
  const float* sx = nullptr;
  const float* x = nullptr;       // Quant / NormQuant: (T, in) F32
  const void* norm = nullptr;     // NormQuant: (in) F32 or BF16 weights
  bool norm_bf16 = false;
  float eps = 0.0f, static_scale = 0.0f;  // static_scale > 0: a checkpoint's input_scale, else amax / 448
  SmallMEpilogue epilogue = SmallMEpilogue::Rows;
  float* y = nullptr;  // Rows: (T, out)
  bool accumulate = false;
  int n_heads = 0, n_kv = 0, hd = 0;  // Heads
  float* q = nullptr;                 // (T, n_heads hd)
  float* k = nullptr;                 // without rope: (T, n_kv hd) each
  float* v = nullptr;
  bool rope = false;  // with rope: q rotated; k rotated and v into BF16 cache rows
  const int* pos = nullptr;
  const float* inv_freq = nullptr;  // (hd / 2)
  std::uint16_t* const* k_rows = nullptr;  // (T) BF16 cache rows
  std::uint16_t* const* v_rows = nullptr;
  int max_blocks = 0;  // the grid's cap with a prologue (each block makes the codes once); 0: none
  // Programmatic dependent launch (small-M PDL): the block's first weight rows prefetched into
  // L2 before it waits for the kernel before it; the numbers do not change.
  bool pdl = false;
};

// Why the fused kernel refuses f's shape ("" when it takes it): small_m_linear_fits, a prologue's
// codes within kSmallMPrologueBytes, Heads' out = (n_heads + 2 n_kv) hd with hd even.
std::string small_m_fused_refusal(const SmallMFused& f);
// Whether a prologue's codes for T rows of `in` fit a block's shared memory.
bool small_m_prologue_fits(int T, int in);

// rowops::inv_rms's order for one row: 256 threads, thread i sums x[j]^2 for j = i, i + 256, ... as
// fused multiply-adds from 0; each warp's butterfly (d = 16, 8, 4, 2, 1); then the 8 warp sums (24
// zeros after them) through the same butterfly; 1 / sqrt(ss / dim + eps), each step rounded.
float small_m_inv_rms_twin(const float* x, int dim, float eps);

// The prologue's codes (T, in) and scales (T), bit for bit: norm null, quantize_fp8_rows of x (or
// static_scale's codes); else rmsnorm (norm_w widened to F32, w * (x * inv)) first.
void small_m_prologue_twin(const float* x, const float* norm_w, int T, int in, float eps, float static_scale, std::uint8_t* codes,
                           float* scales);

// --- 9 to 64 rows: tensor cores, the weights as the wide operand (kernels/linear_fp8_mma.cu) ---
//
// From 9 rows on a CUDA-core dot product per row costs more than the weights' read (64 rows: 1
// TFLOP a step for an 8B model); cuBLASLt's FP8 tiles put the weights on the m side too but read
// them at 2.0 TB/s (qkv) and 1.7 (o) at 64 rows, with 32-48 tiles for 132 SMs. This kernel:
// one warp per 16 output rows (the mma's m) and all the step's tokens (n: tiles of 8, up to 64),
// mma.sync m16n8k32 E4M3 x E4M3 -> F32, the k range split over `slices` warps (enough warps for
// the bandwidth: small_m_mma_slices), merged by the last of them in slice order (deterministic).
//
// The contract. Per (row o, token t): the k range of slice s is chunks [s C / S, (s + 1) C / S) of
// 64 (C = in / 64); chunk c is two tensor-core products of 32 codes each: k = 64 c + 16 q + j for
// q = 0..3 and j = 0..7 (the first), j = 8..15 (the second). The first product starts from a zeroed
// fragment, the second accumulates onto the first's result, and the chunk's value is then added to
// the slice's F32 sum, one rounded add (from 0, in chunk order). The slices' sums are added in slice
// order from 0, then the scales and the bias as small_m_linear's.
//
// What the tensor core does inside one product (the order and the precision of its 33-term sum,
// C included) is NVIDIA's, and it is not an F32 sum: on Ada and Hopper the FP8 mma keeps about 13-14
// bits of the accumulation and truncates the rest (DeepSeek-V3 report, sec. 3.3.2). Hence the chunk:
// a slice chained through the C operand (up to 64 products in a row at in = 4096) loses a fraction
// of the running sum at every product, an error that grows with the chain; from a zeroed fragment
// each chunk's error is a fraction of its own terms. The twin takes each product's exact sum
// (C included) rounded once to F32. The bound, for products whose sum keeps 13 fraction bits,
// truncated: per chunk, |error| <= 2^-13 (|S1| + |p1 + S2|) <= 2^-12 sum of the chunk's |w a| (S1,
// S2 the two products' exact sums, p1 the first's result); the twin's product roundings within u
// = 2^-24 of their chunk's terms (2 u sum_k |w a| in all), and the C + S F32 adds of each within u
// of a partial sum bounded by sum_k |w a| (1 + 2^-12):
// |kernel - twin| <= (2^-12 + (2C + 2S + 4) u) sum_k |w a| scales (+ the final scale and bias
// roundings). tests/test_small_m_linear.cpp checks the bound on a CPU model of that truncation
// (and that the slice-chained order breaks it); tests/test_gpu_ops.cpp measures the hardware.
constexpr int kMmaMinRows = kSmallMMaxRows + 1;
constexpr int kMmaMaxRows = 64;
constexpr int kMmaRowsPerWarp = 16;
constexpr int kMmaChunk = 64;  // k per step: two m16n8k32 products
constexpr int kMmaMaxSlices = 8;

// Whether the tensor-core kernel takes T rows of out x in: 9 <= T <= 64, out a multiple of 16, in
// a multiple of 64.
bool small_m_mma_fits(int T, int out, int in);
// The contract's bound on |kernel - twin| as a fraction of sum_k |w a| (before the scales), for in
// codes in `slices` slices: 2^-12 + (2C + 2S + 4) u, C = in / 64.
double small_m_mma_bound(int in, int slices);
// Slices of the k range per 16-row group: about 16 warps per SM in all, at most kMmaMaxSlices and
// at most the chunks.
int small_m_mma_slices(int out, int in, int sm_count);
// Workspace floats for the slices' partial sums (T_pad = T rounded up to 8), and counters (out / 16 ints, all 0).
std::size_t small_m_mma_workspace_floats(int T, int out, int slices);

// The host twin of the contract's structure, each tensor-core product its exact sum (C included)
// rounded once to F32.
void small_m_mma_twin(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                      const float* bias, int T, int out, int in, int slices, float* y, bool accumulate = false);

}  // namespace bestofn::cuda
