#pragma once
// Host launchers of the device kernels in kernels/ (one op per .cu file). Plain C++ declarations:
// src/cuda/*.cpp call them with the host compiler. Every pointer is a device pointer unless said
// otherwise; every launcher is asynchronous on `stream` and checks its launch (bestofn::Error).
// Each op has a CPU twin it is tested against, named per op: tests/test_gpu_ops.cpp has one row per
// launcher (a launcher not in tests/gpu_op_names.h, or without a row, fails test_gpu_op_names).
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bestofn/util/dtype.h"
#include "bestofn/engine/sampler.h"
#include "cuda/small_m_linear.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {

// --- elementwise and row ops (kernels/embedding.cu, rmsnorm.cu, quantize_act.cu, convert.cu,
//     scale.cu (the epilogue and the bias), swiglu.cu, residual.cu, argmax.cu) ---

// out (T, dim) fp32 = row tokens[t] of table (vocab, dim), F32 or BF16. Twin: cpu::embedding.
void embedding_cuda(const void* table, DType dtype, const int* tokens, int T, int dim, float* out, cudaStream_t stream);

// out (T, dim) = x / sqrt(mean(x^2) + eps) * w, w (dim) F32 or BF16; fp32. Twin: cpu::rmsnorm.
// out may be x (each row is read whole before it is written): Qwen3's q/k norm runs it in place on
// q (T * n_heads rows of head_dim) and k (T * n_kv rows).
void rmsnorm_cuda(const float* x, const void* w, DType wdtype, int T, int dim, float eps, float* out, cudaStream_t stream);

// rmsnorm, then FP8 E4M3 quantization of each output row: codes q (T, dim) and scales (T).
// static_scale > 0: that scale for every row (a checkpoint's input_scale); else amax / 448 per row
// (1 for an all-zero row). Code = e4m3(value / scale), RNE, saturating. Twin: cpu::rmsnorm then
// quantize_fp8_rows (dynamic) or quantize_fp8_row (static).
void rmsnorm_quant_fp8_cuda(const float* x, const void* w, DType wdtype, int T, int dim, float eps, float static_scale,
                            std::uint8_t* q, float* scales, cudaStream_t stream);

// FP8 quantization of x (T, n) rows, dynamic or static as above. Twin: quantize_fp8_rows.
void quantize_act_fp8_cuda(const float* x, int T, int n, float static_scale, std::uint8_t* q, float* scales, cudaStream_t stream);

// out[i] = bf16(x[i]), round to nearest even. Twin: bf16_from_float.
void f32_to_bf16_cuda(const float* x, std::size_t n, std::uint16_t* out, cudaStream_t stream);

// out[i] = float(x[i]), x BF16 bits (exact). Twin: bf16_to_float.
void bf16_to_f32_cuda(const std::uint16_t* x, std::size_t n, float* out, cudaStream_t stream);

// y (T, out) row-major: y[t, o] = y[t, o] * sx[t] * sw[per_channel ? o : 0] (+ bias[o]); sx may be
// null (1), bias null (none). The FP8 GEMM's dequantization epilogue, with Qwen2's q/k/v bias
// fused. Twin: the store step of cpu::linear, then its bias add.
void scale_output_cuda(float* y, int T, int out, const float* sx, const float* sw, bool per_channel, cudaStream_t stream,
                       const float* bias = nullptr);

// Small-M linear: y (T, out) = the FP8 linear layer of 1..8 tokens in one launch, weights w
// (out, in) and activations a (T, in) E4M3 codes, sx (T), sw (out or 1), bias (out) or null, in
// src/cuda/small_m_linear.h's order; accumulate: y += the result (x += W a, the residual add
// fused). Twin: small_m_linear_twin (bit for bit); against cpu::linear, the additions' roundings
// apart. Throws for a shape small_m_linear_fits refuses, or w / a not 16-byte aligned.
void linear_fp8_small_m_cuda(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                             const float* bias, int T, int out, int in, float* y, cudaStream_t stream, bool accumulate = false);

// Small-M linear's fused forms (src/cuda/small_m_linear.h, SmallMFused): the same product with
// the activations' codes made in the kernel from F32 (Quant, or RMSNorm then Quant: the codes of
// quantize_act_fp8_cuda / rmsnorm_quant_fp8_cuda bit for bit), and the output written as rows
// (or added to them) or as q / k / v heads (rotated and written to BF16 cache rows with rope: the
// bits of rope_kv_write_cuda after the unfused product). Twins: small_m_prologue_twin, then
// small_m_linear_twin; with rope, the unfused kernels on the device (tests/test_gpu_ops.cpp).
// Throws with small_m_fused_refusal's reason, for Heads without a prologue, or w / a unaligned.
void linear_fp8_small_m_fused_cuda(const SmallMFused& f, cudaStream_t stream);
// Small-M linear from 9 to 64 rows: y (T, out) = the FP8 linear layer on tensor cores
// (mma.sync m16n8k32 E4M3, the weights as the wide operand), the k range split over `slices` warps
// per 16 rows (small_m_mma_slices), their sums added in slice order by the last to finish; the
// scales, the bias and (accumulate) the residual add as linear_fp8_small_m_cuda's. slices > 1:
// partial (small_m_mma_workspace_floats) and counters (out / 16 ints, 0; left 0). Contract and
// twin: small_m_mma_twin (src/cuda/small_m_linear.h: each 64-code chunk's products from a zeroed
// fragment, then one F32 add; small_m_mma_bound). Throws for a shape small_m_mma_fits refuses, bad slices, w / a unaligned, or a device
// below compute capability 8.9.
void linear_fp8_mma_cuda(const std::uint8_t* w, const std::uint8_t* a, const float* sx, const float* sw, bool per_channel,
                         const float* bias, int T, int out, int in, float* y, cudaStream_t stream, bool accumulate, int slices,
                         float* partial, int* counters);
// Whether the device runs linear_fp8_mma_cuda (compute capability 8.9 or later, code built for it).
bool small_m_mma_supported();

// Whether f.pdl may be set: the current device is compute capability 9.0 or later and runs the
// kernels' sm_90 code (their wait for the kernel before them exists only there).
bool small_m_pdl_supported();

// y (T, out) row-major: y[t, o] += bias[o] (the bias of a BF16 or F32 linear layer, after its
// GEMM). Twin: the bias add of cpu::linear.
void bias_add_cuda(float* y, int T, int out, const float* bias, cudaStream_t stream);

// gate (T, n) = silu(gate) * up. Twin: cpu::swiglu.
void swiglu_cuda(float* gate, const float* up, int T, int n, cudaStream_t stream);

// silu(gate) * up, then FP8 quantization of each row as quantize_act_fp8_cuda (the down_proj input).
// gate and up rows are ld floats apart (0: n; fused q/k/v reads them from the gate/up GEMM's output).
void swiglu_quant_fp8_cuda(const float* gate, const float* up, int T, int n, float static_scale, std::uint8_t* q, float* scales,
                           cudaStream_t stream, int ld = 0);

// x[i] += y[i]. Twin: the residual loops of the CPU engine.
void residual_add_cuda(float* x, const float* y, std::size_t n, cudaStream_t stream);

// out[t] = the first index of the maximum of logits row t (T, V). Twin: std::max_element.
void argmax_cuda(const float* logits, int T, int V, int* out, cudaStream_t stream);

// --- a decode step's index arrays (kernels/step_pointers.cu) ---

// From desc (T) (StepRowDesc, src/cuda/step_plan.h), for n_layers layers: rows (n_layers, 2, T), the
// cache rows the step writes (K then V per layer), and ptrs (n_layers, 4, T), k_prefix, v_prefix,
// k_suffix, v_suffix per layer, as rope_kv_write_cuda and the decode attention kernels take them.
// Twin: expand_step_pointers (bit for bit).
void expand_step_pointers_cuda(const StepRowDesc* desc, int T, int n_layers, std::uint16_t** rows, const std::uint16_t** ptrs,
                               cudaStream_t stream);

// --- attention and sampling (kernels/rope_kv.cu, attention_decode.cu, attention_prefill.cu, sample.cu) ---

// The KV cache's row formats (EngineOptions::Kv). A row holds one position's K or V, all KV heads:
//   BF16: kv_dim values, 2 bytes each;
//   FP8:  kv_dim E4M3 codes, then one F32 scale per KV head: kv_dim + 4 (kv_dim / hd) bytes; a
//         value reads as fp8_e4m3_to_float(code) * scale (one rounded multiply).
// Row addresses travel as `std::uint16_t*` in both formats; an FP8 row's is a byte address.
enum class KvFormat { BF16, FP8 };
#ifdef __CUDACC__
__host__ __device__
#endif
inline std::size_t kv_row_bytes(KvFormat f, std::size_t kv_dim, int hd) {
  return f == KvFormat::FP8 ? kv_dim + 4 * (kv_dim / static_cast<std::size_t>(hd)) : 2 * kv_dim;
}

// The FP8 rows rope_kv_write_cuda can write: kv_dim a multiple of 4 (the scales' alignment) and
// its rotated k row (kv_dim floats) plus the quantizer's 32 bytes within 48 KB of shared memory.
constexpr int kMaxFp8KvDim = (48 * 1024 - 64) / 4;
inline bool rope_kv_fp8_fits(int n_kv, int hd) {
  const long long kv_dim = static_cast<long long>(n_kv) * hd;
  return kv_dim > 0 && kv_dim % 4 == 0 && kv_dim <= kMaxFp8KvDim;
}

// FP8 cache rows widened to F32 (rows, kv_dim): out[r, e] = fp8(code) * scale[r, e / hd], the value
// every attention kernel reads (prefix-GEMM attention's prefix K/V). Twin: the CPU engine's KV read.
void fp8_rows_to_f32_cuda(const std::uint16_t* rows_base, std::size_t rows, int n_kv, int hd, float* out, cudaStream_t stream);

// RoPE (HF rotate_half layout, angle = float(pos[t]) * inv_freq[i] in fp32) on q (T, n_heads, hd)
// in place and on k (T, n_kv, hd); then k and v (T, n_kv * hd) written to the cache rows
// k_rows[t], v_rows[t] in format kv: rounded to BF16, or (FP8) quantized per KV head as
// quantize_fp8_rows does (amax / 448, RNE saturating), codes then scales. inv_freq: (hd / 2).
// Twin: cpu::rope + bf16_from_float, or + quantize_fp8_rows over the row's heads.
void rope_kv_write_cuda(float* q, const float* k, const float* v, const int* pos, const float* inv_freq, int T, int n_heads,
                        int n_kv, int hd, std::uint16_t* const* k_rows, std::uint16_t* const* v_rows, cudaStream_t stream,
                        KvFormat kv = KvFormat::BF16);

// Decode attention for T query rows (one per slot): q (T, n_heads, hd); for row t the prefix K/V
// are prefix_len[t] rows starting at k_prefix[t] / v_prefix[t], the slot's suffix suffix_len[t]
// rows at k_suffix[t] / v_suffix[t]; rows are kv_dim = n_kv * hd values in format kv; GQA: query head h
// reads KV head h / (n_heads / n_kv). Softmax(q.k / sqrt(hd)) over prefix and suffix separately,
// merged by log-sum-exp. out (T, n_heads, hd) fp32. Twin: cpu::decode_attention.
// Paged KV: with suffix_table, k_suffix[t] / v_suffix[t] are the layer's block pools and suffix
// row j of row t is pool row b * block_tokens + j % block_tokens, b = (suffix_table +
// suffix_table_start[t])[j / block_tokens].
// splits > 1: each row's positions are split into `splits` chunks, one block each, merged by
// log-sum-exp in chunk order (flash-decoding); workspace holds
// decode_attention_workspace_floats(T, n_heads, hd, splits) floats. splits = 1 needs none.
// merge_counters (T x n_heads ints, all 0; left 0): with splits > 1 the chunk states are merged in
// the same launch by the last block of each row to finish (decode_merge_cuda's numbers, bit for
// bit), not by a second launch. The tiled kernel counts per (row, KV head): T x n_kv of them.
constexpr int kMaxDecodeSplits = 32;
void decode_attention_cuda(const float* q, const std::uint16_t* const* k_prefix, const std::uint16_t* const* v_prefix,
                           const int* prefix_len, const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix,
                           const int* suffix_len, int T, int n_heads, int n_kv, int hd, float* out, cudaStream_t stream,
                           const int* suffix_table = nullptr, const int* suffix_table_start = nullptr, int block_tokens = 0,
                           int splits = 1, float* workspace = nullptr, KvFormat kv = KvFormat::BF16, int* merge_counters = nullptr);
// The splits that give about two blocks per SM for T rows of `blocks_per_row` blocks each (query
// heads for decode_attention_cuda, KV heads for the tiled kernel), 1 when T rows already do, at
// most kMaxDecodeSplits; and the workspace they need (per query head and chunk: m, l, o).
int decode_attention_splits(int T, int blocks_per_row, int sm_count);
std::size_t decode_attention_workspace_floats(int T, int n_heads, int hd, int splits);
// Merges the `splits` chunk states in partial (T, n_heads, splits, hd + 2) into out (T, n_heads, hd).
void decode_merge_cuda(const float* partial, int T, int n_heads, int hd, int splits, float* out, cudaStream_t stream);

// Split attention (kernels/attention_tiled.cu): decode attention with one block per (row, KV head,
// chunk), all the query heads of the KV head together, positions in tiles; the same contract as
// decode_attention_cuda. With prefix_m (prefix-GEMM attention) the prefix is given as the GEMMs'
// state (m, l, unnormalized O at state rows by prefix_map, as prefix_merge_cuda takes it) and
// k_prefix / v_prefix / prefix_len are not read. Needs n_heads / n_kv <= kMaxTiledGroup.
constexpr int kMaxTiledGroup = 8;
struct TiledAttentionArgs {
  const float* q = nullptr;  // (T, n_heads, hd)
  const std::uint16_t* const* k_prefix = nullptr;
  const std::uint16_t* const* v_prefix = nullptr;
  const int* prefix_len = nullptr;
  const std::uint16_t* const* k_suffix = nullptr;
  const std::uint16_t* const* v_suffix = nullptr;
  const int* suffix_len = nullptr;
  int T = 0, n_heads = 0, n_kv = 0, hd = 0;
  float* out = nullptr;  // (T, n_heads, hd)
  const int* suffix_table = nullptr;
  const int* suffix_table_start = nullptr;
  int block_tokens = 0;
  int splits = 1;
  float* partial = nullptr;  // splits > 1: decode_attention_workspace_floats(T, n_heads, hd, splits)
  KvFormat kv = KvFormat::BF16;  // the cache rows' format
  int* merge_counters = nullptr;   // splits > 1: T x n_kv zeros, the merge in the same launch (as decode_attention_cuda's)
  const int* prefix_map = nullptr;
  const float* prefix_m = nullptr;
  const float* prefix_l = nullptr;
  const float* prefix_o = nullptr;
};
bool decode_attention_tiled_supported(int n_heads, int n_kv, int hd);
void decode_attention_tiled_cuda(const TiledAttentionArgs& args, cudaStream_t stream);

// --- shared-prefix attention around cuBLAS GEMMs (kernels/prefix_attention.cu, prefix-GEMM attention) ---
// State rows: batch row t, query head h -> map[t] + (h / group) * map[T + t] + map[2T + t] * group
// + h % group (group = n_heads / n_kv; map from prefix_state_map, src/cuda/prefix_attention.h).

// qg (rows, hd): qg[state_row(t, h)] = q (T, n_heads, hd) row (t, h).
void gather_prefix_queries_cuda(const float* q, const int* map, int T, int n_heads, int n_kv, int hd, float* qg,
                                cudaStream_t stream);

// Each row of s (rows, L): m = max, s <- exp(s - m), l = sum of the new row. m, l (rows).
void prefix_softmax_cuda(float* s, int rows, int L, float* m, float* l, cudaStream_t stream);

// out (T, n_heads, hd): the prefix state (m, l, unnormalized O (rows, hd)) at state_row(t, h)
// merged by log-sum-exp with the attention of q over the slot's suffix (as decode_attention_cuda).
// Twin: cpu::decode_attention. Paged suffixes as in decode_attention_cuda.
void prefix_merge_cuda(const float* q, const int* map, const float* prefix_m, const float* prefix_l, const float* prefix_o,
                       const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len, int T,
                       int n_heads, int n_kv, int hd, float* out, cudaStream_t stream, const int* suffix_table = nullptr,
                       const int* suffix_table_start = nullptr, int block_tokens = 0, KvFormat kv = KvFormat::BF16);

// --- cascade attention (kernels/cascade_attention.cu: FlashInfer's paged batch prefill on tensor
//     cores and its paged batch decode; kernels/cascade_gather.cu; plans in src/cuda/cascade_plan.h) ---
// Every prefix group's query rows (all heads of all its candidates) against the group's prompt K/V
// in pages of kCascadePageTokens positions of a per-layer BF16 page pool (pages, 16, n_kv, hd),
// one launch per layer; the prefix state (normalized BF16 output, base-2 LSE) then merges with
// each candidate's suffix: with paged KV and BF16 KV, the suffixes by FlashInfer's paged decode
// over the block pools (cascade_suffix_attention_cuda) and one merge pass for the batch
// (cascade_state_merge_cuda); otherwise in cascade_merge_cuda, today's per-row kernel.
constexpr int kCascadePageTokens = 16;
// False when this build has no FlashInfer headers (cmake/Cuda.cmake says so when it configures).
bool cascade_attention_built();
// The shapes the one instantiation takes: head_dim 128, n_heads a multiple of n_kv.
bool cascade_attention_supported(int n_heads, int n_kv, int hd);
// FlashInfer's workspaces: float (split-KV partial outputs) and int (the plan's index arrays) on
// the device, and a page-locked host copy of the int one the plan is written to before its upload.
struct CascadeWorkspace {
  void* float_buf = nullptr;
  std::size_t float_bytes = 0;
  void* int_buf = nullptr;
  void* int_pinned = nullptr;
  std::size_t int_bytes = 0;
};
// A step's schedule (FlashInfer's PrefillPlanInfo as its 15 ints: grid, tile size, split, the
// offsets of its arrays in the workspaces), and the workspace bytes it needs.
struct CascadeSchedule {
  bool planned = false;  // false: the workspace was too small (float_bytes, int_bytes say what it needs)
  std::array<std::int64_t, 15> info{};
  std::size_t float_bytes = 0, int_bytes = 0;
};
// On the host (FlashInfer's PrefillPlan), outside any graph capture; uploads its arrays on `stream`
// from ws.int_pinned, which must not be rewritten before that copy ran. qo_indptr: query rows per
// group (groups + 1 prefix sums); page_indptr: pages per group; row_bound: the most query rows
// (qo_indptr[groups] under eager plans; cascade_shape's bound with fixed_grid, FlashInfer's CUDA
// graph mode: a grid that does not depend on the lengths, a valid-block mask instead). Plans
// straight into the workspace given; only when it is too small are the sizes asked for (FlashInfer
// splits the rows once per call), and the result says so.
CascadeSchedule cascade_schedule(const CascadeWorkspace& ws, int* qo_indptr, int* page_indptr, int groups, int row_bound, int n_heads,
                                 int n_kv, int hd, bool fixed_grid, cudaStream_t stream);
struct CascadePrefixArgs {
  const std::uint16_t* q = nullptr;  // (rows, n_heads, hd) BF16, the rows in group order
  const std::uint16_t* k_pages = nullptr;
  const std::uint16_t* v_pages = nullptr;
  const int* qo_indptr = nullptr;      // (groups + 1), device
  const int* page_indptr = nullptr;    // (groups + 1)
  const int* page_indices = nullptr;   // (page_indptr[groups])
  const int* last_page_len = nullptr;  // (groups): positions in each group's last page, 1..16
  int groups = 0, rows = 0, n_heads = 0, n_kv = 0, hd = 0;
  float sm_scale = 0.0f;  // 1 / sqrt(hd)
  std::uint16_t* out = nullptr;  // (rows, n_heads, hd) BF16, normalized
  float* lse = nullptr;          // (rows, n_heads), base 2
  const CascadeSchedule* schedule = nullptr;
  CascadeWorkspace ws;
};
// Twin: cpu::decode_attention over the prefix alone (and its log-sum-exp), on BF16-rounded queries.
void cascade_prefix_attention_cuda(const CascadePrefixArgs& args, cudaStream_t stream);
// prefix_merge_cuda with the cascade's prefix state at state_row(t, h) (map from cascade_step,
// src/cuda/cascade_plan.h): the base-2 log-sum-exp prefix_lse2 (rows) and the normalized BF16
// output prefix_o (rows, hd), read as m = lse ln 2, l = 1. Twin: cpu::decode_attention.
void cascade_merge_cuda(const float* q, const int* map, const float* prefix_lse2, const std::uint16_t* prefix_o,
                        const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix, const int* suffix_len, int T,
                        int n_heads, int n_kv, int hd, float* out, cudaStream_t stream, const int* suffix_table = nullptr,
                        const int* suffix_table_start = nullptr, int block_tokens = 0, KvFormat kv = KvFormat::BF16);

// The suffix side on FlashInfer's BatchDecodeWithPagedKVCacheKernel, the one instantiation
// BatchDecodeWithPagedKVCacheDispatched picks for this shape (kernels/cascade_attention.cu says why
// it is launched directly): F32 queries, BF16 pages of the paged KV block pools (page = block,
// kCascadePageTokens positions, NHD), head_dim 128, 4 query heads per KV head (Llama 3 8B), F32
// output. Other shapes and FP8 KV keep cascade_merge_cuda.
bool cascade_suffix_supported(int n_heads, int n_kv, int hd, KvFormat kv);
// FlashInfer's DecodePlanInfo as its 10 ints (grid, split, the offsets of its arrays).
struct CascadeSuffixSchedule {
  bool planned = false;  // false: the workspace was too small (float_bytes, int_bytes say what it needs)
  std::array<std::int64_t, 10> info{};
  std::size_t float_bytes = 0, int_bytes = 0;
};
// On the host (FlashInfer's DecodePlan), outside any capture, as cascade_schedule: indptr (rows +
// 1) the suffix page table's row starts. Split-KV (chunks of at least 8 pages, merged by
// cascade_state_merge_cuda) when rows x n_kv blocks leave the device idle; with fixed_grid the grid
// and the split depend on the rows alone (split iff rows x n_kv is under one wave of blocks).
CascadeSuffixSchedule cascade_suffix_schedule(const CascadeWorkspace& ws, int* indptr, int rows, int n_heads, int n_kv, int hd,
                                              bool fixed_grid, cudaStream_t stream);
struct CascadeSuffixArgs {
  const float* q = nullptr;              // (rows, n_heads, hd) F32, batch order
  const std::uint16_t* k_pages = nullptr;  // the layer's K block pool: (blocks, 16, n_kv, hd) BF16
  const std::uint16_t* v_pages = nullptr;
  const int* indptr = nullptr;         // (rows + 1), device: suffix_pages (src/cuda/cascade_plan.h)
  const int* indices = nullptr;
  const int* last_page_len = nullptr;  // (rows)
  int rows = 0, n_heads = 0, n_kv = 0, hd = 0;
  float sm_scale = 0.0f;  // 1 / sqrt(hd)
  float* out = nullptr;   // (rows, n_heads, hd) F32, normalized: the states when the schedule does not split
  float* lse = nullptr;   // (rows, n_heads), base 2 (-inf for an empty suffix)
  const CascadeSuffixSchedule* schedule = nullptr;
  CascadeWorkspace ws;
};
// Each row's attention over its own suffix. Twin: cpu::decode_attention over the suffix alone.
void cascade_suffix_attention_cuda(const CascadeSuffixArgs& args, cudaStream_t stream);
// Where cascade_suffix_attention_cuda leaves row t's states: chunks [chunk_indptr[t],
// chunk_indptr[t + 1]) of o (chunks, n_heads, hd) and lse2 (chunks, n_heads) in FlashInfer's
// float workspace when it splits, else (chunk_indptr null) the one state at row t of out and lse.
struct CascadeSuffixStates {
  const float* o = nullptr;
  const float* lse2 = nullptr;
  const int* chunk_indptr = nullptr;
};
CascadeSuffixStates cascade_suffix_states(const CascadeSuffixArgs& args);
// out (T, n_heads, hd) F32: the cascade's prefix state at state_row(t, h) (as cascade_merge_cuda
// reads it) merged by log-sum-exp with row t's suffix states (CascadeSuffixStates: normalized F32
// outputs, base-2 log-sum-exp, -inf for an empty chunk), one pass for the batch. Twin: the host
// merge of the states in double.
void cascade_state_merge_cuda(const int* map, const float* prefix_lse2, const std::uint16_t* prefix_o, const float* suffix_o,
                              const float* suffix_lse2, const int* chunk_indptr, int T, int n_heads, int n_kv, int hd, float* out,
                              cudaStream_t stream);
// out (rows, n_heads, hd) BF16 = bf16(q[order[r]]) for q (T, n_heads, hd) F32, round to nearest
// even: the queries gathered into group order. Twin: bf16_from_float.
void gather_queries_bf16_cuda(const float* q, const int* order, int rows, int n_heads, int hd, std::uint16_t* out, cudaStream_t stream);

// Causal attention over a prompt: q (T, n_heads, hd), k/v T cache rows of format kv (the prefix's);
// row t sees positions 0..t. out (T, n_heads, hd). Twin: cpu::prefill_attention.
void prefill_attention_cuda(const float* q, const std::uint16_t* k, const std::uint16_t* v, int T, int n_heads, int n_kv, int hd,
                            float* out, cudaStream_t stream, KvFormat kv = KvFormat::BF16);

// Causal attention over one forward pass of several prompts (batched, chunked prefill), one launch:
// q (T, n_heads, hd), the pass's rows in any order; row t belongs to segment seg[t] (one prompt's
// rows in this pass) and sits at position pos[t] of its prompt; it sees positions 0..pos[t] of
// the segment's cache rows, seg_k[seg[t]] / seg_v[seg[t]] (format kv): the rows of the prompt's
// earlier passes and this pass's, written before (rope_kv_write_cuda). out (T, n_heads, hd).
// Twin: cpu::prefill_attention over each segment's rows, q_offset = the segment's first position.
constexpr int kMaxPrefillPassRows = 65535;  // T of both prefill launchers: the grid's y dimension
void prefill_attention_segments_cuda(const float* q, const std::uint16_t* const* seg_k, const std::uint16_t* const* seg_v,
                                     const int* seg, const int* pos, int T, int n_heads, int n_kv, int hd, float* out,
                                     cudaStream_t stream, KvFormat kv = KvFormat::BF16);

// Sampling per row of logits (T, V) with the rule and RNG of bestofn::sample_token (the twin):
// row t draws with (params.seed, prompt[t], candidate[t], step[t]). tokens (T), logprobs (T).
// The multi-block sampler (kernels/sample.cu, src/cuda/sample_passes.h): the token is
// sample_token's exactly, the logprob within a few float ulps of its log-sum-exp; V <= 2^21,
// T <= 65535. It needs sample_token_workspace_bytes(T, V, params) of device memory: pass it in
// options (what a CUDA graph should capture), else each call takes it with cudaMallocAsync and
// gives it back with cudaFreeAsync on `stream`.
struct SampleOptions {
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  int blocks_per_row = 0;    // 0: enough that the T rows fill the SMs twice; the draws do not depend on it
  int tile_cap = 0;          // 0: 4096 keys sorted at once; smaller makes more tiles (tests)
  bool exact_total = false;  // top-p without top-k: always the host-order total, not the certified chunk sum (tests)
  bool legacy = false;       // the one-block-per-row bisection kernel (near-ties may differ), until timed against
};
std::size_t sample_token_workspace_bytes(int T, int V, const SamplingParams& params);
void sample_token_cuda(const float* logits, int T, int V, const SamplingParams& params, const std::uint64_t* prompt,
                       const std::uint64_t* candidate, const std::uint64_t* step, int* tokens, float* logprobs,
                       cudaStream_t stream, const SampleOptions& options = {});

}  // namespace bestofn::cuda
