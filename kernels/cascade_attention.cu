// --cascade-attention: the shared-prefix half of decode attention on tensor cores, every prefix
// group of a step in one launch (Hydragen, arXiv 2402.05099; FlashInfer's cascade), through
// FlashInfer's header-only batch prefill (flashinfer-python 0.7.4, Apache-2.0; staged by
// scripts/fetch_flashinfer.sh, never copied into this repository).
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

#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>

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

// FlashInfer reports its own errors (FLASHINFER_ERROR, FLASHINFER_CHECK) as std::runtime_error:
// one line each, as bestofn::Error.
template <typename F>
auto one_line(const char* what, F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    throw Error(what, msg);
  }
}

}  // namespace

bool cascade_attention_built() { return true; }

bool cascade_attention_supported(int n_heads, int n_kv, int hd) {
  return hd == kHeadDim && n_kv > 0 && n_heads > 0 && n_heads % n_kv == 0;
}

CascadeSchedule cascade_schedule(const CascadeWorkspace& ws, std::vector<int>& qo_indptr, std::vector<int>& page_indptr,
                                 int n_heads, int n_kv, int hd, bool fixed_grid, cudaStream_t stream) {
  const char* what = "cascade_schedule";
  if (!cascade_attention_supported(n_heads, n_kv, hd))
    throw Error(what, "needs head_dim 128 and n_heads a multiple of n_kv_heads, got head_dim " + std::to_string(hd) + ", heads " +
                          std::to_string(n_heads) + "/" + std::to_string(n_kv));
  if (qo_indptr.size() < 2 || qo_indptr.size() != page_indptr.size())
    throw Error(what, "qo_indptr and page_indptr need one entry per group plus one, and the same length");
  const auto groups = static_cast<std::uint32_t>(qo_indptr.size() - 1);
  const auto rows = static_cast<std::uint32_t>(qo_indptr.back());
  return one_line(what, [&] {
    std::size_t float_bytes = 0, int_bytes = 0;
    check_fi(flashinfer::PrefillPlanWorkspaceSize<int>(float_bytes, int_bytes, qo_indptr.data(), page_indptr.data(), rows, groups,
                                                       static_cast<std::uint32_t>(n_heads), static_cast<std::uint32_t>(n_kv),
                                                       kHeadDim, kHeadDim, kCascadePageTokens, fixed_grid, sizeof(Bf16),
                                                       /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
                                                       /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, /*fixed_uniform_q_len=*/false,
                                                       stream),
             what);
    CascadeSchedule s;
    s.float_bytes = float_bytes, s.int_bytes = int_bytes;
    if (float_bytes > ws.float_bytes || int_bytes > ws.int_bytes) return s;  // the caller grows the workspace and asks again
    flashinfer::PrefillPlanInfo info;
    check_fi(flashinfer::PrefillPlan<int>(ws.float_buf, ws.float_bytes, ws.int_buf, ws.int_pinned, ws.int_bytes, info,
                                          qo_indptr.data(), page_indptr.data(), rows, groups, static_cast<std::uint32_t>(n_heads),
                                          static_cast<std::uint32_t>(n_kv), kHeadDim, kHeadDim, kCascadePageTokens, fixed_grid,
                                          sizeof(Bf16), -1, -1, false, 0, 0, false, stream),
             what);
    const std::vector<std::int64_t> v = info.ToVector();
    if (v.size() != s.info.size()) throw Error(what, "FlashInfer's plan has " + std::to_string(v.size()) + " fields, expected 15");
    std::copy(v.begin(), v.end(), s.info.begin());
    s.planned = true;
    return s;
  });
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

}  // namespace bestofn::cuda
