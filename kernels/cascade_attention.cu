// --cascade-attention: the shared-prefix half of decode attention on tensor cores, every prefix
// group of a step in one launch (Hydragen, arXiv 2402.05099; FlashInfer's cascade), through
// FlashInfer's header-only batch prefill (flashinfer-python 0.7.4, Apache-2.0; staged by
// scripts/fetch_flashinfer.sh, never copied into this repository); and, with --paged-kv, each
// candidate's own suffix through FlashInfer's paged batch decode over the block pools (below).
//
// Each prefix group is one FlashInfer "request": its query rows are all the query heads of all its
// candidates (GQA packed by the kernel: num_qo_heads = n_heads, num_kv_heads = n_kv), its KV the
// group's prompt in 16-position BF16 pages of the layer's prefix page pool (NHD). No mask (every
// candidate sees its whole prompt), no positional encoding (RoPE is applied before the cache is
// written). The kernel gives each (row, head) the normalized output (BF16) and its log-sum-exp
// (base 2, FlashInfer's convention: log2(sum_j 2^(s_j log2 e - m)) + m, s_j = q.k_j sm_scale);
// cascade_merge_cuda merges that with each candidate's own suffix (kernels/prefix_attention.cu).
//
// This file is compiled with the wheel's CCCL include folders before the toolkit's and with
// --expt-relaxed-constexpr (cmake/Cuda.cmake); nothing else includes FlashInfer.
#include <cuda_bf16.h>

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>

#include <algorithm>
#include <string>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

constexpr int kHeadDim = 128;  // the one head_dim instantiated (Llama 3 8B/70B)
using Bf16 = __nv_bfloat16;
// Q, KV and the output BF16 (FlashInfer's split-KV merge has no F32 output: its 16-wide vectors
// of F32 are 512-bit copies, which cp_async refuses).
using Params = flashinfer::BatchPrefillPagedParams<Bf16, Bf16, Bf16, int>;
using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false, /*soft_cap=*/false, /*alibi=*/false>;

void check_fi(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(what, cudaGetErrorString(status));
}

// FlashInfer reports its own errors (FLASHINFER_ERROR, FLASHINFER_CHECK) as flashinfer::Error, a
// std::exception of several lines: one line each, as bestofn::Error.
Error flat(const char* what, const std::exception& e) {
  std::string msg = e.what();
  for (char& c : msg)
    if (c == '\n') c = ' ';
  return Error(what, msg);
}
template <typename F>
auto one_line(const char* what, F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw flat(what, e);
  }
}

}  // namespace

bool cascade_attention_built() { return true; }

bool cascade_attention_supported(int n_heads, int n_kv, int hd) {
  return hd == kHeadDim && n_kv > 0 && n_heads > 0 && n_heads % n_kv == 0;
}

CascadeSchedule cascade_schedule(const CascadeWorkspace& ws, int* qo_indptr, int* page_indptr, int groups, int row_bound, int n_heads,
                                 int n_kv, int hd, bool fixed_grid, cudaStream_t stream) {
  const char* what = "cascade_schedule";
  if (!cascade_attention_supported(n_heads, n_kv, hd))
    throw Error(what, "needs head_dim 128 and n_heads a multiple of n_kv_heads, got head_dim " + std::to_string(hd) + ", heads " +
                          std::to_string(n_heads) + "/" + std::to_string(n_kv));
  if (groups < 1 || row_bound < qo_indptr[groups] || row_bound < groups)
    throw Error(what, std::to_string(groups) + " groups of " + std::to_string(qo_indptr[groups]) + " rows, bound " + std::to_string(row_bound));
  const auto G = static_cast<std::uint32_t>(groups), rows = static_cast<std::uint32_t>(row_bound);
  const auto H = static_cast<std::uint32_t>(n_heads), KV = static_cast<std::uint32_t>(n_kv);
  CascadeSchedule s;
  flashinfer::PrefillPlanInfo info;
  try {  // straight into the workspace: FlashInfer's split of the rows runs once
    check_fi(flashinfer::PrefillPlan<int>(ws.float_buf, ws.float_bytes, ws.int_buf, ws.int_pinned, ws.int_bytes, info, qo_indptr,
                                          page_indptr, rows, G, H, KV, kHeadDim, kHeadDim, kCascadePageTokens, fixed_grid, sizeof(Bf16),
                                          -1, -1, false, 0, 0, false, stream),
             what);
  } catch (const flashinfer::Error& e) {  // too small (a larger step than any before), or a real error
    std::size_t float_bytes = 0, int_bytes = 0;
    one_line(what, [&] {
      check_fi(flashinfer::PrefillPlanWorkspaceSize<int>(float_bytes, int_bytes, qo_indptr, page_indptr, rows, G, H, KV, kHeadDim, kHeadDim,
                                                         kCascadePageTokens, fixed_grid, sizeof(Bf16), /*window_left=*/-1,
                                                         /*fixed_split_size=*/-1, /*disable_split_kv=*/false, /*num_colocated_ctas=*/0,
                                                         /*uniform_q_len=*/0, /*fixed_uniform_q_len=*/false, stream),
               what);
      return 0;
    });
    if (float_bytes <= ws.float_bytes && int_bytes <= ws.int_bytes) throw flat(what, e);
    s.float_bytes = float_bytes, s.int_bytes = int_bytes;
    return s;  // the caller grows the workspace and asks again
  }
  const std::vector<std::int64_t> v = info.ToVector();
  if (v.size() != s.info.size()) throw Error(what, "FlashInfer's plan has " + std::to_string(v.size()) + " fields, expected 15");
  std::copy(v.begin(), v.end(), s.info.begin());
  s.planned = true;
  return s;
}

void cascade_prefix_attention_cuda(const CascadePrefixArgs& a, cudaStream_t stream) {
  const char* what = "cascade_prefix_attention_cuda";
  if (!cascade_attention_supported(a.n_heads, a.n_kv, a.hd))
    throw Error(what, "needs head_dim 128 and n_heads a multiple of n_kv_heads, got head_dim " + std::to_string(a.hd) + ", heads " +
                          std::to_string(a.n_heads) + "/" + std::to_string(a.n_kv));
  if (!a.schedule || !a.schedule->planned) throw Error(what, "no plan (cascade_schedule) for this step");
  if (a.groups < 1 || a.rows < 1) throw Error(what, "expected at least one group and one row");
  flashinfer::PrefillPlanInfo info;
  info.FromVector(std::vector<std::int64_t>(a.schedule->info.begin(), a.schedule->info.end()));
  using flashinfer::GetPtrFromBaseOffset;
  one_line(what, [&] {
    // The layer's page pool: pages of (16 positions, n_kv, 128) BF16, K and V in their own pools
    // with the same page ids.
    flashinfer::paged_kv_t<Bf16, int> kv(static_cast<std::uint32_t>(a.n_kv), kCascadePageTokens, kHeadDim,
                                         static_cast<std::uint32_t>(a.groups), flashinfer::QKVLayout::kNHD,
                                         reinterpret_cast<Bf16*>(const_cast<std::uint16_t*>(a.k_pages)),
                                         reinterpret_cast<Bf16*>(const_cast<std::uint16_t*>(a.v_pages)), const_cast<int*>(a.page_indices),
                                         const_cast<int*>(a.page_indptr), const_cast<int*>(a.last_page_len));
    Params p(reinterpret_cast<Bf16*>(const_cast<std::uint16_t*>(a.q)), kv, /*maybe_custom_mask=*/nullptr, const_cast<int*>(a.qo_indptr),
             /*maybe_mask_indptr=*/nullptr, /*maybe_q_rope_offset=*/nullptr, reinterpret_cast<Bf16*>(a.out), a.lse, /*maybe_alibi_slopes=*/nullptr,
             static_cast<std::uint32_t>(a.n_heads), /*q_stride_n=*/a.n_heads * kHeadDim, /*q_stride_h=*/kHeadDim,
             /*window_left=*/-1, /*logits_soft_cap=*/0.0f, /*sm_scale=*/a.sm_scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    void* ib = a.ws.int_buf;
    p.request_indices = GetPtrFromBaseOffset<int>(ib, info.request_indices_offset);
    p.qo_tile_indices = GetPtrFromBaseOffset<int>(ib, info.qo_tile_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int>(ib, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int>(ib, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int>(ib, info.kv_chunk_size_ptr_offset);
    Bf16* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (info.split_kv) {
      p.merge_indptr = GetPtrFromBaseOffset<int>(ib, info.merge_indptr_offset);
      tmp_v = GetPtrFromBaseOffset<Bf16>(a.ws.float_buf, info.v_offset);
      tmp_s = GetPtrFromBaseOffset<float>(a.ws.float_buf, info.s_offset);
    }
    p.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
    p.max_total_num_rows = static_cast<std::uint32_t>(info.total_num_rows);
    if (info.enable_cuda_graph) {
      p.block_valid_mask = GetPtrFromBaseOffset<bool>(ib, info.block_valid_mask_offset);
      p.total_num_rows = GetPtrFromBaseOffset<std::uint32_t>(ib, info.total_num_rows_offset);
    }
    cudaError_t status = cudaSuccess;
    DISPATCH_CTA_TILE_Q(info.cta_tile_q, CTA_TILE_Q, {
      status = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
          /*SAME_KV_STRIDES=*/true, CTA_TILE_Q, kHeadDim, kHeadDim, flashinfer::PosEncodingMode::kNone,
          /*USE_FP16_QK_REDUCTION=*/false, flashinfer::MaskMode::kNone, /*USE_TOKEN_HEAD_SF=*/false, Variant, Params>(
          p, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
    });
    check_fi(status, what);
    return 0;
  });
  CUDA_CHECK(cudaGetLastError());
}

// --- The suffix side: FlashInfer's paged batch decode -----------------------------------------
//
// Each batch row is one FlashInfer decode request: its query (F32, all n_heads, GQA in the block's
// y dimension), its own suffix positions in the --paged-kv block pools of the layer (a block is a
// page of kCascadePageTokens (n_kv, 128) BF16 rows: NHD), its normalized F32 output and base-2
// log-sum-exp. BatchDecodeWithPagedKVCacheDispatched is not called: it instantiates the kernel for
// 7 GQA group sizes x 2 pipeline depths and its split-KV merge for 4 head dims (nvcc measured here:
// 18 kernels, +9.5 s of CPU over this one, 21.1 s against 11.6 s for a file holding only the
// headers and the launch), and that merge does not compile for F32 outputs (its 512-bit copies at
// head_dim 512). So this file launches the one kernel the dispatcher picks for our shape on sm_80
// and later, with the dispatcher's block, grid and shared memory, and merges the split chunks with
// the prefix state in one pass of its own (cascade_state_merge_cuda). FlashInfer's DecodePlan
// still makes the schedule, with the work estimate below for this kernel (the dispatcher's rule,
// without instantiating the 1-stage kernel for its occupancy).
namespace {

using DecodeParams = flashinfer::BatchDecodeParams<float, Bf16, float, int>;
constexpr std::uint32_t kDecodeGroup = 4;                                 // query heads per KV head (bdy)
constexpr std::uint32_t kDecodeStages = 2;                                // shared-memory stages on sm_80+
constexpr std::uint32_t kDecodeVec = 16 / sizeof(Bf16);                   // 8 elements a thread: 16-byte loads
constexpr std::uint32_t kDecodeBdx = kHeadDim / kDecodeVec;               // 16 threads a row
constexpr std::uint32_t kDecodeThreads = 128;                             // max(128, bdx x bdy)
constexpr std::uint32_t kDecodeBdz = kDecodeThreads / (kDecodeBdx * kDecodeGroup);  // 2 positions in flight
constexpr std::uint32_t kDecodeTile = 1;                                  // tile_size_per_bdx for GQA groups > 1
constexpr std::uint32_t kDecodeSmem =
    std::max<std::uint32_t>(2 * kDecodeStages * kDecodeTile * kDecodeGroup * kDecodeBdz * kHeadDim * sizeof(Bf16),
                            kDecodeBdz * kDecodeGroup * kHeadDim * sizeof(float)) +
    std::max<std::uint32_t>(kDecodeTile * kDecodeThreads * sizeof(Bf16*), 2 * kDecodeGroup * kDecodeBdz * sizeof(float));
const auto kDecodeKernel =
    flashinfer::BatchDecodeWithPagedKVCacheKernel<flashinfer::PosEncodingMode::kNone, kDecodeStages, kDecodeTile, kDecodeVec, kDecodeBdx,
                                                  kDecodeGroup, kDecodeBdz, Variant, DecodeParams>;

// BatchDecodeWithPagedKVCacheWorkEstimationDispatched's rule for kDecodeKernel: one wave of blocks
// (its occupancy x the SMs); rows x n_kv at least that, no split; else KV chunks of at least 128
// positions, as few as fit one wave (FlashInfer's search), split when that makes chunks, or always
// under CUDA graphs (a grid of one wave whatever the lengths).
cudaError_t estimate_decode(bool& split_kv, std::uint32_t& max_grid_size, std::uint32_t& pages_per_chunk, std::uint32_t& work_items,
                            std::uint32_t& gdy, std::uint32_t rows, int* indptr, std::uint32_t n_heads, std::uint32_t page_size,
                            bool fixed_grid, cudaStream_t) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kDecodeKernel, kDecodeThreads, kDecodeSmem); e != cudaSuccess)
    return e;
  max_grid_size = static_cast<std::uint32_t>(per_sm * sms);
  gdy = n_heads / kDecodeGroup;
  std::vector<int> pages(rows);
  for (std::uint32_t t = 0; t < rows; ++t) pages[t] = indptr[t + 1] - indptr[t];
  if (rows * gdy >= max_grid_size) {
    split_kv = false, work_items = rows;
    pages_per_chunk = static_cast<std::uint32_t>(std::max(1, *std::max_element(pages.begin(), pages.end())));
    return cudaSuccess;
  }
  std::tie(pages_per_chunk, work_items) =
      flashinfer::PartitionPagedKVCacheBinarySearchMinNumPagePerBatch(max_grid_size, gdy, pages, std::max(128 / page_size, 1u));
  split_kv = fixed_grid || work_items != rows;
  return cudaSuccess;
}

}  // namespace

bool cascade_suffix_supported(int n_heads, int n_kv, int hd, KvFormat kv) {
  return kv == KvFormat::BF16 && hd == kHeadDim && n_kv > 0 && n_heads == static_cast<int>(kDecodeGroup) * n_kv;
}

CascadeSuffixSchedule cascade_suffix_schedule(const CascadeWorkspace& ws, int* indptr, int rows, int n_heads, int n_kv, int hd,
                                              bool fixed_grid, cudaStream_t stream) {
  const char* what = "cascade_suffix_schedule";
  if (!cascade_suffix_supported(n_heads, n_kv, hd, KvFormat::BF16))
    throw Error(what, "needs head_dim 128 and 4 query heads per KV head, got head_dim " + std::to_string(hd) + ", heads " +
                          std::to_string(n_heads) + "/" + std::to_string(n_kv));
  if (rows < 1) throw Error(what, "expected at least one row");
  const auto T = static_cast<std::uint32_t>(rows), H = static_cast<std::uint32_t>(n_heads);
  CascadeSuffixSchedule s;
  flashinfer::DecodePlanInfo info;
  try {  // straight into the workspace, as cascade_schedule
    check_fi(flashinfer::DecodePlan<kHeadDim, flashinfer::PosEncodingMode::kNone, Variant, DecodeParams>(
                 ws.float_buf, ws.float_bytes, ws.int_buf, ws.int_pinned, ws.int_bytes, info, indptr, T, H, kCascadePageTokens, fixed_grid,
                 stream, estimate_decode),
             what);
  } catch (const flashinfer::Error& e) {
    std::size_t float_bytes = 0, int_bytes = 0;
    one_line(what, [&] {
      check_fi(flashinfer::DecodePlanWorkspaceSize<kHeadDim, flashinfer::PosEncodingMode::kNone, Variant, DecodeParams>(
                   float_bytes, int_bytes, indptr, T, H, kCascadePageTokens, fixed_grid, stream, estimate_decode),
               what);
      return 0;
    });
    if (float_bytes <= ws.float_bytes && int_bytes <= ws.int_bytes) throw flat(what, e);
    s.float_bytes = float_bytes, s.int_bytes = int_bytes;
    return s;
  }
  const std::vector<std::int64_t> v = info.ToVector();
  if (v.size() != s.info.size()) throw Error(what, "FlashInfer's decode plan has " + std::to_string(v.size()) + " fields, expected 10");
  std::copy(v.begin(), v.end(), s.info.begin());
  s.planned = true;
  return s;
}

namespace {
flashinfer::DecodePlanInfo decode_info(const char* what, const CascadeSuffixArgs& a) {
  if (!cascade_suffix_supported(a.n_heads, a.n_kv, a.hd, KvFormat::BF16))
    throw Error(what, "needs head_dim 128 and 4 query heads per KV head, got head_dim " + std::to_string(a.hd) + ", heads " +
                          std::to_string(a.n_heads) + "/" + std::to_string(a.n_kv));
  if (!a.schedule || !a.schedule->planned) throw Error(what, "no plan (cascade_suffix_schedule) for this step");
  if (a.rows < 1) throw Error(what, "expected at least one row");
  flashinfer::DecodePlanInfo info;
  one_line(what, [&] {
    info.FromVector(std::vector<std::int64_t>(a.schedule->info.begin(), a.schedule->info.end()));
    return 0;
  });
  return info;
}
}  // namespace

CascadeSuffixStates cascade_suffix_states(const CascadeSuffixArgs& a) {
  const flashinfer::DecodePlanInfo info = decode_info("cascade_suffix_states", a);
  if (!info.split_kv) return {a.out, a.lse, nullptr};
  using flashinfer::GetPtrFromBaseOffset;
  return {GetPtrFromBaseOffset<float>(a.ws.float_buf, info.v_offset), GetPtrFromBaseOffset<float>(a.ws.float_buf, info.s_offset),
          GetPtrFromBaseOffset<int>(a.ws.int_buf, info.o_indptr_offset)};
}

void cascade_suffix_attention_cuda(const CascadeSuffixArgs& a, cudaStream_t stream) {
  const char* what = "cascade_suffix_attention_cuda";
  const flashinfer::DecodePlanInfo info = decode_info(what, a);
  using flashinfer::GetPtrFromBaseOffset;
  flashinfer::paged_kv_t<Bf16, int> kv(static_cast<std::uint32_t>(a.n_kv), kCascadePageTokens, kHeadDim, static_cast<std::uint32_t>(a.rows),
                                       flashinfer::QKVLayout::kNHD, reinterpret_cast<Bf16*>(const_cast<std::uint16_t*>(a.k_pages)),
                                       reinterpret_cast<Bf16*>(const_cast<std::uint16_t*>(a.v_pages)), const_cast<int*>(a.indices),
                                       const_cast<int*>(a.indptr), const_cast<int*>(a.last_page_len));
  DecodeParams p(const_cast<float*>(a.q), /*q_rope_offset=*/nullptr, kv, a.out, a.lse, /*maybe_alibi_slopes=*/nullptr,
                 static_cast<std::uint32_t>(a.n_heads), /*q_stride_n=*/a.n_heads * kHeadDim, /*q_stride_h=*/kHeadDim, /*window_left=*/-1,
                 /*logits_soft_cap=*/0.0f, a.sm_scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
  void* ib = a.ws.int_buf;
  p.request_indices = GetPtrFromBaseOffset<int>(ib, info.request_indices_offset);
  p.kv_tile_indices = GetPtrFromBaseOffset<int>(ib, info.kv_tile_indices_offset);
  p.o_indptr = GetPtrFromBaseOffset<int>(ib, info.o_indptr_offset);
  p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int>(ib, info.kv_chunk_size_ptr_offset);
  p.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
  if (info.split_kv) {  // chunk states into the float workspace, at the work item's index
    const CascadeSuffixStates st = cascade_suffix_states(a);
    p.partition_kv = true;
    p.o = const_cast<float*>(st.o), p.lse = const_cast<float*>(st.lse2);
    if (info.enable_cuda_graph) p.block_valid_mask = GetPtrFromBaseOffset<bool>(ib, info.block_valid_mask_offset);
  }
  CUDA_CHECK(cudaFuncSetAttribute(kDecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDecodeSmem)));
  void* args[] = {&p};
  CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kDecodeKernel), dim3(p.padded_batch_size, static_cast<unsigned>(a.n_kv)),
                              dim3(kDecodeBdx, kDecodeGroup, kDecodeBdz), args, kDecodeSmem, stream));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
