// Cascade attention: the host side (see cascade_attention.h).
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
    throw Error("cascade attention: this build has no FlashInfer headers (scripts/fetch_flashinfer.sh stages them; then reconfigure)");
  if (!cascade_attention_supported(n_heads, n_kv, hd))
    throw Error("cascade attention: supports head_dim 128 with n_heads a multiple of n_kv_heads (the one FlashInfer instantiation), got head_dim " +
                std::to_string(hd) + ", heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv));
  k_pages_.resize(static_cast<std::size_t>(n_layers));
  v_pages_.resize(static_cast<std::size_t>(n_layers));
  for (Staging& st : staging_) CUDA_CHECK(cudaEventCreateWithFlags(&st.uploaded, cudaEventDisableTiming));
}

CascadeAttention::~CascadeAttention() {
  for (Staging& st : staging_)
    if (st.uploaded) cudaEventDestroy(st.uploaded);
}

void CascadeAttention::grow_scratch(int T) {
  if (T <= scratch_T_) return;  // grow-only: addresses change rarely, and then the graph key does too
  const std::size_t t = static_cast<std::size_t>(T), heads = static_cast<std::size_t>(n_heads_), hd = static_cast<std::size_t>(hd_);
  q_bf16_.resize(t * heads * hd * 2), o_bf16_.resize(t * heads * hd * 2), lse_.resize(t * heads * 4);
  if (suffix_decode()) suffix_o_.resize(t * heads * hd * 4), suffix_lse_.resize(t * heads * 4);
  scratch_T_ = T;
}

void CascadeAttention::reserve(int rows, int longest_prompt) {
  if (rows < 1) return;
  ++epoch_;  // the buffers below may move
  grow_scratch(rows);
  const CascadeLayout lay = cascade_layout(rows, static_cast<std::size_t>(runs_.pages()) + static_cast<std::size_t>(rows),
                                           static_cast<std::size_t>(suffix_blocks_));
  ints_.resize(std::max(lay.size * sizeof(int), std::size_t{64} << 10));
  fi_float_.resize(kCascadeFloatWorkspace), fi_int_.resize(kCascadeIntWorkspace);
  if (suffix_decode()) dec_float_.resize(kCascadeFloatWorkspace), dec_int_.resize(kCascadeIntWorkspace);
  for (Staging& st : staging_) st.ints.resize(ints_.size()), st.fi.resize(fi_int_.size()), st.dec.resize(dec_int_.size());
  if (kv_ == KvFormat::FP8 && longest_prompt > 0)
    widened_.resize(static_cast<std::size_t>(longest_prompt) * static_cast<std::size_t>(n_kv_) * static_cast<std::size_t>(hd_) * 4);
}

std::size_t CascadeAttention::page_bytes() const {
  return static_cast<std::size_t>(kCascadePageTokens) * static_cast<std::size_t>(n_kv_) * static_cast<std::size_t>(hd_) * 2;
}

void CascadeAttention::reserve_pages(int pages) {
  if (pages > runs_.free_pages()) grow_pool(runs_.pages() + pages - runs_.free_pages());
}

// Every layer's pool grown to `pages`, keeping the pages in use (at prefill or reserve, never in a step).
void CascadeAttention::grow_pool(int pages) {
  const int old = runs_.pages();
  for (std::size_t l = 0; l < k_pages_.size(); ++l) {
    k_pages_[l].grow(static_cast<std::size_t>(pages) * page_bytes(), static_cast<std::size_t>(old) * page_bytes(), stream_);
    v_pages_[l].grow(static_cast<std::size_t>(pages) * page_bytes(), static_cast<std::size_t>(old) * page_bytes(), stream_);
  }
  runs_.grow(pages);
  ++epoch_;
}

int CascadeAttention::add_prefix(std::span<const std::uint16_t* const> k, std::span<const std::uint16_t* const> v, int len) {
  if (static_cast<int>(k.size()) != n_layers_ || static_cast<int>(v.size()) != n_layers_ || len < 1)
    throw Error("CascadeAttention::add_prefix", "expected " + std::to_string(n_layers_) + " layers of at least one row");
  const int pages = pages_for(len, kCascadePageTokens);
  ++epoch_;
  int first = runs_.take(pages);
  if (first < 0) {
    grow_pool(runs_.grown_size(pages));
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

bool CascadeAttention::use_paged_suffix(const KvLayout& pools, int blocks) {
  if (!cascade_suffix_supported(n_heads_, n_kv_, hd_, kv_) || blocks < 1) return false;
  suffix_pool_ = pools, suffix_blocks_ = blocks;
  return true;
}

template <class Plan>
auto CascadeAttention::plan_into(DeviceBuffer& f, DeviceBuffer& i, PinnedBuffer& pinned, bool ahead, Plan&& plan) {
  if (pinned.size() < i.size() && ahead) throw Error("cascade attention", "a plan made ahead would grow its staging");
  pinned.resize(i.size());  // the other staging may have grown since this one was used
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto s = plan(CascadeWorkspace{f.get(), f.size(), i.get(), pinned.get(), i.size()});
    if (s.planned) return s;
    if (ahead) throw Error("cascade attention", "a plan made ahead would grow FlashInfer's workspace");
    // Grow to what it asks (at least 1 MB of ints, 16 MB of floats), once: a larger step than any before.
    f.resize(std::max<std::size_t>(s.float_bytes, std::size_t{16} << 20));
    i.resize(std::max<std::size_t>(s.int_bytes, std::size_t{1} << 20));
    pinned.resize(i.size());
  }
  throw Error("cascade attention", "FlashInfer's plan did not fit the workspace it asked for");
}

CascadeStepPlan CascadeAttention::plan(std::span<const CascadeRow> rows, std::span<const SuffixRow> suffix, bool fixed_grid, bool ahead) {
  if (rows.empty()) throw Error("CascadeAttention::plan", "no rows");
  ++epoch_;  // whatever happens below, an earlier plan no longer holds what its buffers do
  if (suffix.size() != (suffix_decode() ? rows.size() : 0))
    throw Error("CascadeAttention::plan", std::to_string(suffix.size()) + " suffix rows for " + std::to_string(rows.size()) + " rows");
  const int T = static_cast<int>(rows.size());
  // Under graphs the groups are padded to the rows, over the first row's first page (never read).
  const CascadeStep step = cascade_step(rows, n_heads_, n_kv_, kCascadePageTokens, runs_.pages(), fixed_grid ? T : 0, rows[0].first_page);
  const SuffixPages pages = suffix_decode() ? suffix_pages(suffix, kCascadePageTokens, suffix_blocks_) : SuffixPages{};
  CascadeStepPlan s;
  s.shape = cascade_shape(T, step.groups(), fixed_grid);
  s.suffix = suffix_decode();
  s.layout = cascade_layout(T, static_cast<std::size_t>(runs_.pages()) + static_cast<std::size_t>(T),
                            s.suffix ? static_cast<std::size_t>(suffix_blocks_) : 0);
  // Made ahead, while a step runs: nothing may grow (a freed buffer may be the step's); the step
  // then plans in full.
  const std::size_t bytes = s.layout.size * sizeof(int);
  if (ahead && (T > scratch_T_ || bytes > ints_.size() || bytes > staging_[side_ ^ 1].ints.size()))
    throw Error("cascade attention", "a plan made ahead would grow its buffers");
  grow_scratch(T);
  // The other staging: its copies (the plan before last's) must have left for the device before it
  // is written again; they have, after the last step's synchronization.
  side_ ^= 1;
  Staging& st = staging_[side_];
  wait_event(st.uploaded);
  if (bytes > ints_.size()) ints_.resize(std::max(bytes, std::size_t{64} << 10));
  if (!ahead) st.ints.resize(ints_.size());  // ahead: checked above (at least `bytes`)
  int* host = st.ints.get<int>();
  write_cascade_ints(step, s.suffix ? &pages : nullptr, s.layout, host);
  s.host = {host, s.layout.size};
  // FlashInfer's plans read the host arrays just written (each plans once, uploading its own
  // workspace on the stream).
  int* qo_indptr = host + s.layout.qo_indptr;
  int* page_indptr = host + s.layout.page_indptr;
  s.schedule = plan_into(fi_float_, fi_int_, st.fi, ahead, [&](const CascadeWorkspace& ws) {
    return cascade_schedule(ws, qo_indptr, page_indptr, s.shape.groups, s.shape.row_bound, n_heads_, n_kv_, hd_, fixed_grid, stream_);
  });
  if (s.suffix) {
    int* indptr = host + s.layout.suffix_indptr;
    s.suffix_schedule = plan_into(dec_float_, dec_int_, st.dec, ahead, [&](const CascadeWorkspace& ws) {
      return cascade_suffix_schedule(ws, indptr, T, n_heads_, n_kv_, hd_, fixed_grid, stream_);
    });
  }
  CUDA_CHECK(cudaMemcpyAsync(ints_.get(), host, bytes, cudaMemcpyHostToDevice, stream_));
  s.dev = ints_.get<const int>();
  CUDA_CHECK(cudaEventRecord(st.uploaded, stream_));
  // A plan in full comes between steps (the last one's copies all done): the other staging grows
  // with this one here, so that the plan made ahead next, into it, has the room it would need.
  if (!ahead) {
    Staging& other = staging_[side_ ^ 1];
    other.ints.resize(ints_.size()), other.fi.resize(fi_int_.size()), other.dec.resize(dec_int_.size());
  }
  s.epoch = ++epoch_, s.side = side_;
  return s;
}

void CascadeAttention::run(int l, const CascadeStepPlan& s, const float* q, const std::uint16_t* const* k_suffix,
                           const std::uint16_t* const* v_suffix, const int* suffix_len, float* att, const int* suffix_table,
                           const int* suffix_table_start, int block_tokens) {
  const int T = s.shape.rows;
  const CascadeLayout& lay = s.layout;
  const int* map = s.dev + lay.map;
  gather_queries_bf16_cuda(q, s.dev + lay.order, T, n_heads_, hd_, q_bf16_.get<std::uint16_t>(), stream_);
  CascadePrefixArgs a;
  a.q = q_bf16_.get<std::uint16_t>();
  a.k_pages = k_pages_[static_cast<std::size_t>(l)].get<std::uint16_t>();
  a.v_pages = v_pages_[static_cast<std::size_t>(l)].get<std::uint16_t>();
  a.qo_indptr = s.dev + lay.qo_indptr, a.page_indptr = s.dev + lay.page_indptr, a.page_indices = s.dev + lay.page_indices;
  a.last_page_len = s.dev + lay.last_page_len;
  a.groups = s.shape.groups, a.rows = T, a.n_heads = n_heads_, a.n_kv = n_kv_, a.hd = hd_;
  a.sm_scale = 1.0f / std::sqrt(static_cast<float>(hd_));  // the CPU engine's fp32 scale
  a.out = o_bf16_.get<std::uint16_t>(), a.lse = lse_.get<float>();
  a.schedule = &s.schedule;
  a.ws = {fi_float_.get(), fi_float_.size(), fi_int_.get(), staging_[s.side].fi.get(), fi_int_.size()};
  cascade_prefix_attention_cuda(a, stream_);
  if (!s.suffix) {  // today's per-row kernel: each suffix attended and merged in one block per (row, head)
    cascade_merge_cuda(q, map, lse_.get<float>(), o_bf16_.get<std::uint16_t>(), k_suffix, v_suffix, suffix_len, T, n_heads_, n_kv_, hd_,
                       att, stream_, suffix_table, suffix_table_start, block_tokens, kv_);
    return;
  }
  CascadeSuffixArgs b;
  b.q = q;
  const std::uint64_t layer = static_cast<std::uint64_t>(l) * suffix_pool_.layer_stride;
  b.k_pages = reinterpret_cast<const std::uint16_t*>(static_cast<std::uintptr_t>(suffix_pool_.k + layer));
  b.v_pages = reinterpret_cast<const std::uint16_t*>(static_cast<std::uintptr_t>(suffix_pool_.v + layer));
  b.indptr = s.dev + lay.suffix_indptr, b.indices = s.dev + lay.suffix_indices, b.last_page_len = s.dev + lay.suffix_last;
  b.rows = T, b.n_heads = n_heads_, b.n_kv = n_kv_, b.hd = hd_, b.sm_scale = a.sm_scale;
  b.out = suffix_o_.get<float>(), b.lse = suffix_lse_.get<float>();
  b.schedule = &s.suffix_schedule;
  b.ws = {dec_float_.get(), dec_float_.size(), dec_int_.get(), staging_[s.side].dec.get(), dec_int_.size()};
  cascade_suffix_attention_cuda(b, stream_);
  const CascadeSuffixStates st = cascade_suffix_states(b);
  cascade_state_merge_cuda(map, lse_.get<float>(), o_bf16_.get<std::uint16_t>(), st.o, st.lse2, st.chunk_indptr, T, n_heads_, n_kv_, hd_,
                           att, stream_);
}

void CascadeAttention::add_to_key(GraphKey& key, const CascadeStepPlan& s) const {
  // The launches' host values: the shape (under graphs the rows, the rows again as FlashInfer's
  // groups, and its bound 2 rows - 1: the bucket alone), the arrays' offsets (fixed by the rows),
  // where the ints landed, FlashInfer's schedules (grid, tile, split, the offsets of their arrays:
  // fixed by the shape in graph mode), every buffer the launches touch and the pools.
  const CascadeLayout& lay = s.layout;
  key.insert(key.end(), {static_cast<std::uint64_t>(s.shape.rows), static_cast<std::uint64_t>(s.shape.groups),
                         static_cast<std::uint64_t>(s.shape.row_bound), key_address(s.dev), s.suffix ? 1u : 0u});
  key.insert(key.end(), {lay.order, lay.map, lay.qo_indptr, lay.page_indptr, lay.last_page_len, lay.suffix_indptr, lay.suffix_last,
                         lay.suffix_indices, lay.page_indices});
  for (std::int64_t v : s.schedule.info) key.push_back(static_cast<std::uint64_t>(v));
  if (s.suffix)
    for (std::int64_t v : s.suffix_schedule.info) key.push_back(static_cast<std::uint64_t>(v));
  for (const DeviceBuffer* b : {&q_bf16_, &o_bf16_, &lse_, &fi_float_, &fi_int_, &dec_float_, &dec_int_, &suffix_o_, &suffix_lse_})
    key.insert(key.end(), {key_address(b->get()), b->size()});
  key.insert(key.end(), {suffix_pool_.k, suffix_pool_.v, suffix_pool_.layer_stride});
  for (std::size_t l = 0; l < k_pages_.size(); ++l) key.insert(key.end(), {key_address(k_pages_[l].get()), key_address(v_pages_[l].get())});
}

}  // namespace bestofn::cuda
