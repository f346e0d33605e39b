// --cascade-attention: the host side (see cascade_attention.h).
#include "cuda/cascade_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"

namespace bestofn::cuda {

CascadeAttention::CascadeAttention(cudaStream_t stream, int n_layers, int n_heads, int n_kv, int hd, KvFormat kv)
    : stream_(stream), n_layers_(n_layers), n_heads_(n_heads), n_kv_(n_kv), hd_(hd), kv_(kv) {
  if (!cascade_attention_built())
    throw Error("--cascade-attention: this build has no FlashInfer headers (scripts/fetch_flashinfer.sh stages them; then reconfigure)");
  if (!cascade_attention_supported(n_heads, n_kv, hd))
    throw Error("--cascade-attention: supports head_dim 128 with n_heads a multiple of n_kv_heads (the one FlashInfer instantiation), got head_dim " +
                std::to_string(hd) + ", heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv));
  k_pages_.resize(static_cast<std::size_t>(n_layers));
  v_pages_.resize(static_cast<std::size_t>(n_layers));
  CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
}

CascadeAttention::~CascadeAttention() {
  if (uploaded_) cudaEventDestroy(uploaded_);
}

std::size_t CascadeAttention::page_bytes() const {
  return static_cast<std::size_t>(kCascadePageTokens) * static_cast<std::size_t>(n_kv_) * static_cast<std::size_t>(hd_) * 2;
}

int CascadeAttention::add_prefix(std::span<const std::uint16_t* const> k, std::span<const std::uint16_t* const> v, int len) {
  if (static_cast<int>(k.size()) != n_layers_ || static_cast<int>(v.size()) != n_layers_ || len < 1)
    throw Error("CascadeAttention::add_prefix", "expected " + std::to_string(n_layers_) + " layers of at least one row");
  const int pages = pages_for(len, kCascadePageTokens);
  int first = runs_.take(pages);
  if (first < 0) {  // grow every layer's pool, keeping the pages in use (at prefill, never in a step)
    const int old = runs_.pages(), grown = runs_.grown_size(pages);
    for (std::size_t l = 0; l < k_pages_.size(); ++l) {
      k_pages_[l].grow(static_cast<std::size_t>(grown) * page_bytes(), static_cast<std::size_t>(old) * page_bytes(), stream_);
      v_pages_[l].grow(static_cast<std::size_t>(grown) * page_bytes(), static_cast<std::size_t>(old) * page_bytes(), stream_);
    }
    runs_.grow(grown);
    first = runs_.take(pages);
    if (first < 0) throw Error("CascadeAttention::add_prefix", "no run of " + std::to_string(pages) + " pages after growing the pool");
  }
  const std::size_t kv_dim = static_cast<std::size_t>(n_kv_) * static_cast<std::size_t>(hd_);
  const std::size_t n = static_cast<std::size_t>(len) * kv_dim, at = static_cast<std::size_t>(first) * page_bytes();
  const std::size_t tail = static_cast<std::size_t>(pages) * page_bytes() - n * 2;  // the last page past len: zeros
  if (kv_ == KvFormat::FP8) widened_.resize(n * 4);
  for (std::size_t l = 0; l < k_pages_.size(); ++l)
    for (const auto& [src, pool] : {std::pair{k[l], &k_pages_[l]}, std::pair{v[l], &v_pages_[l]}}) {
      auto* dst = reinterpret_cast<std::uint16_t*>(pool->get<char>() + at);
      if (kv_ == KvFormat::FP8) {
        // FlashInfer 0.7.4 can read FP8 pages with an F32 scale per position and head
        // (USE_TOKEN_HEAD_SF, the k/v_sf_stride_* of its params), which is this cache's contract,
        // but only the BF16 kernel is instantiated here: an FP8 one is ten more kernels to compile
        // and has not run on a device. The pages hold bf16(code x scale): the value every other
        // kernel reads (fp8_rows_to_f32_cuda), rounded once more to BF16 (2^-9 relative).
        fp8_rows_to_f32_cuda(src, static_cast<std::size_t>(len), n_kv_, hd_, widened_.get<float>(), stream_);
        f32_to_bf16_cuda(widened_.get<float>(), n, dst, stream_);
      } else {  // the prompt's BF16 rows are already (positions, n_kv, hd): the pages' layout
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * 2, cudaMemcpyDeviceToDevice, stream_));
      }
      if (tail) CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<char*>(dst) + n * 2, 0, tail, stream_));
    }
  return first;
}

CascadeStepPlan CascadeAttention::plan(std::span<const CascadeRow> rows, bool fixed_grid) {
  CascadeStep step = cascade_step(rows, n_heads_, n_kv_, kCascadePageTokens, runs_.pages());
  CascadeStepPlan s;
  s.T = static_cast<int>(rows.size()), s.groups = step.groups();
  for (const std::vector<int>* part : {&step.order, &step.map, &step.qo_indptr, &step.page_indptr, &step.last_page_len, &step.page_indices})
    s.ints.insert(s.ints.end(), part->begin(), part->end());
  // Scratch for T rows (grow-only: addresses change rarely, and then the graph key does too).
  if (s.T > scratch_T_) {
    const std::size_t t = static_cast<std::size_t>(s.T), heads = static_cast<std::size_t>(n_heads_), hd = static_cast<std::size_t>(hd_);
    q_bf16_.resize(t * heads * hd * 2), o_bf16_.resize(t * heads * hd * 2), lse_.resize(t * heads * 4);
    scratch_T_ = s.T;
  }
  // FlashInfer's schedule: written to the pinned buffer, which the previous upload must have left.
  CUDA_CHECK(cudaEventSynchronize(uploaded_));
  for (int attempt = 0; attempt < 2 && !s.schedule.planned; ++attempt) {
    const CascadeWorkspace ws{fi_float_.get(), fi_float_.size(), fi_int_.get(), fi_pinned_.get(), fi_int_.size()};
    s.schedule = cascade_schedule(ws, step.qo_indptr, step.page_indptr, n_heads_, n_kv_, hd_, fixed_grid, stream_);
    if (!s.schedule.planned) {  // grow to what it asks (at least 1 MB of ints, 16 MB of floats)
      fi_float_.resize(std::max<std::size_t>(s.schedule.float_bytes, std::size_t{16} << 20));
      fi_int_.resize(std::max<std::size_t>(s.schedule.int_bytes, std::size_t{1} << 20));
      fi_pinned_.resize(fi_int_.size());
    }
  }
  if (!s.schedule.planned) throw Error("--cascade-attention", "FlashInfer's plan did not fit the workspace it asked for");
  const std::size_t bytes = s.ints.size() * sizeof(int);
  if (bytes > ints_.size()) ints_.resize(std::max(bytes, std::size_t{64} << 10)), ints_pinned_.resize(ints_.size());
  std::copy(s.ints.begin(), s.ints.end(), ints_pinned_.get<int>());
  CUDA_CHECK(cudaMemcpyAsync(ints_.get(), ints_pinned_.get(), bytes, cudaMemcpyHostToDevice, stream_));
  s.dev = ints_.get<const int>();
  CUDA_CHECK(cudaEventRecord(uploaded_, stream_));
  return s;
}

void CascadeAttention::run(int l, const CascadeStepPlan& s, const float* q, const std::uint16_t* const* k_suffix,
                           const std::uint16_t* const* v_suffix, const int* suffix_len, float* att, const int* suffix_table,
                           const int* suffix_table_start, int block_tokens) {
  const int T = s.T, G = s.groups;
  const int* order = s.dev;
  const int* map = order + T;
  const int* qo_indptr = map + 3 * T;
  const int* page_indptr = qo_indptr + G + 1;
  const int* last_page_len = page_indptr + G + 1;
  const int* page_indices = last_page_len + G;
  gather_queries_bf16_cuda(q, order, T, n_heads_, hd_, q_bf16_.get<std::uint16_t>(), stream_);
  CascadePrefixArgs a;
  a.q = q_bf16_.get<std::uint16_t>();
  a.k_pages = k_pages_[static_cast<std::size_t>(l)].get<std::uint16_t>();
  a.v_pages = v_pages_[static_cast<std::size_t>(l)].get<std::uint16_t>();
  a.qo_indptr = qo_indptr, a.page_indptr = page_indptr, a.page_indices = page_indices, a.last_page_len = last_page_len;
  a.groups = G, a.rows = T, a.n_heads = n_heads_, a.n_kv = n_kv_, a.hd = hd_;
  a.sm_scale = 1.0f / std::sqrt(static_cast<float>(hd_));  // the CPU engine's fp32 scale
  a.out = o_bf16_.get<std::uint16_t>(), a.lse = lse_.get<float>();
  a.schedule = &s.schedule;
  a.ws = {fi_float_.get(), fi_float_.size(), fi_int_.get(), fi_pinned_.get(), fi_int_.size()};
  cascade_prefix_attention_cuda(a, stream_);
  cascade_merge_cuda(q, map, lse_.get<float>(), o_bf16_.get<std::uint16_t>(), k_suffix, v_suffix, suffix_len, T, n_heads_, n_kv_, hd_,
                     att, stream_, suffix_table, suffix_table_start, block_tokens, kv_);
}

void CascadeAttention::add_to_key(GraphKey& key, const CascadeStepPlan& s) const {
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  // The launches' host values: the rows, the groups, and FlashInfer's schedule (grid, tile size,
  // split, the offsets of its arrays); where the step's ints landed; every buffer they touch.
  key.insert(key.end(), {static_cast<std::uint64_t>(s.T), static_cast<std::uint64_t>(s.groups), addr(s.dev)});
  for (std::int64_t v : s.schedule.info) key.push_back(static_cast<std::uint64_t>(v));
  for (const DeviceBuffer* b : {&q_bf16_, &o_bf16_, &lse_, &fi_float_, &fi_int_}) key.push_back(addr(b->get()));
  key.push_back(fi_float_.size()), key.push_back(fi_int_.size());
  for (std::size_t l = 0; l < k_pages_.size(); ++l) key.insert(key.end(), {addr(k_pages_[l].get()), addr(v_pages_[l].get())});
}

}  // namespace bestofn::cuda
