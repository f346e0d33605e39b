// A decode step of the CUDA engine (the class: src/cuda/cuda_engine.h): the batch checked, its
// index arrays laid out and uploaded at once, the device work enqueued (eagerly, or captured
// into / replayed from a CUDA graph with --cuda-graphs), then the logits or the samples back.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

void CudaEngine::step(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const Draws* draws) {
  use_device();
  const int T = static_cast<int>(slots.size());
  if (T == 0) return;
  std::vector<Slot*> batch;
  std::vector<int> pos;
  for (int i = 0; i < T; ++i) {
    Slot& s = slot_at(slots[static_cast<std::size_t>(i)]);
    if (std::find(batch.begin(), batch.end(), &s) != batch.end())
      throw Error("decode: slot " + std::to_string(slots[static_cast<std::size_t>(i)]) + " appears twice in one step");
    const int p = slot_length(slots[static_cast<std::size_t>(i)]);
    if (p >= c_.max_position_embeddings)
      throw Error("slot " + std::to_string(slots[static_cast<std::size_t>(i)]) + " is at the context limit (" + std::to_string(c_.max_position_embeddings) + ")");
    const int t = tokens[static_cast<std::size_t>(i)];
    if (t < 0 || t >= c_.vocab_size) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
    if (!paged_) reserve(s.kv, s.kv.len + 1);
    batch.push_back(&s);
    pos.push_back(p);
  }
  std::vector<int> tables, starts;  // --paged-kv
  if (paged_) {
    std::vector<PagedSlot*> paged;
    std::vector<int> lens;
    for (Slot* s : batch) paged.push_back(&s->paged), lens.push_back(s->kv.len);
    paged_->take(paged, lens, tables, starts);
  }
  const auto n = static_cast<std::size_t>(T), V = static_cast<std::size_t>(c_.vocab_size);
  scratch(T);
  logits_.resize(n * V * 4);
  if (draws) samples_.resize(n * 8);

  // The step's index arrays, laid out in the arena and copied in one go. Offsets, in order:
  // tokens, positions, lengths, draw indexes, the state-row map, per-layer cache rows and
  // attention pointers, then the paged tables (the one variable-size part, last).
  arena_.clear();
  std::vector<std::size_t> off;
  off.push_back(arena_.add(tokens.data(), n));
  off.push_back(arena_.add(pos));
  std::vector<int> lens(2 * n);  // prefix lengths, then suffix lengths (with this token)
  for (std::size_t i = 0; i < n; ++i) lens[i] = prefixes_.at(batch[i]->prefix).kv.len, lens[n + i] = batch[i]->kv.len + 1;
  off.push_back(arena_.add(lens));
  if (draws) {
    std::vector<std::uint64_t> ids(draws->prompt.begin(), draws->prompt.end());
    ids.insert(ids.end(), draws->candidate.begin(), draws->candidate.end());
    ids.insert(ids.end(), draws->step.begin(), draws->step.end());
    off.push_back(arena_.add(ids));
  }
  // --cuda-prefix-gemm: the batch rows of each prefix, once per step (src/cuda/plan.h). A step in
  // which no prefix has kMinPrefixGemmRows rows (one candidate left per prompt) gains nothing from
  // matrix products and takes the decode kernel instead.
  PrefixStateMap plan;
  std::vector<const Prefix*> group_prefix;
  bool use_prefix = false;
  if (prefix_gemm_) {
    std::map<int, std::vector<int>> by_prefix;
    for (int i = 0; i < T; ++i) by_prefix[batch[static_cast<std::size_t>(i)]->prefix].push_back(i);
    std::vector<std::vector<int>> rows;
    for (auto& [p, r] : by_prefix) {
      use_prefix = use_prefix || static_cast<int>(r.size()) >= kMinPrefixGemmRows;
      group_prefix.push_back(&prefixes_.at(p)), rows.push_back(std::move(r));
    }
    if (use_prefix) {
      plan = prefix_state_map(rows, T, c_.n_heads, c_.n_kv_heads);
      off.push_back(arena_.add(plan.map));
    } else {
      group_prefix.clear();
    }
  }
  // Per layer: the cache rows this step writes (k, then v), and k_prefix, v_prefix, k_suffix,
  // v_suffix per row: the suffix is a slot's own rows (part 1) or the layer's block pools (--paged-kv).
  const auto L = static_cast<std::size_t>(c_.n_layers);
  std::vector<std::uint16_t*> rows(2 * L * n);
  std::vector<const std::uint16_t*> ptrs(4 * L * n);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < n; ++i) {
      Slot& s = *batch[i];
      const Prefix& pre = prefixes_.at(s.prefix);
      std::uint16_t* ks = paged_ ? paged_->k(static_cast<int>(l)) : s.kv.k[l].get<std::uint16_t>();
      std::uint16_t* vs = paged_ ? paged_->v(static_cast<int>(l)) : s.kv.v[l].get<std::uint16_t>();
      const std::size_t row = (paged_ ? paged_->row(s.paged, s.kv.len) : static_cast<std::size_t>(s.kv.len)) * kv_row_bytes();
      rows[2 * l * n + i] = reinterpret_cast<std::uint16_t*>(reinterpret_cast<unsigned char*>(ks) + row);
      rows[(2 * l + 1) * n + i] = reinterpret_cast<std::uint16_t*>(reinterpret_cast<unsigned char*>(vs) + row);
      const std::size_t at = 4 * l * n;
      ptrs[at + i] = pre.kv.k[l].get<std::uint16_t>();
      ptrs[at + n + i] = pre.kv.v[l].get<std::uint16_t>();
      ptrs[at + 2 * n + i] = ks;
      ptrs[at + 3 * n + i] = vs;
    }
  off.push_back(arena_.add(rows));
  off.push_back(arena_.add(ptrs));
  if (paged_) {  // row t's block table at d_tables + d_starts[t]
    starts.insert(starts.end(), tables.begin(), tables.end());
    off.push_back(arena_.add(starts));
  }
  arena_.upload(stream_);
  std::size_t next = 0;
  const int* d_tokens = arena_.at<int>(off[next++]);
  const int* d_pos = arena_.at<int>(off[next++]);
  const int* d_lens = arena_.at<int>(off[next++]);
  const std::uint64_t* d_ids = draws ? arena_.at<std::uint64_t>(off[next++]) : nullptr;
  const int* d_map = use_prefix ? arena_.at<int>(off[next++]) : nullptr;
  std::uint16_t* const* d_rows = arena_.at<std::uint16_t*>(off[next++]);
  const std::uint16_t* const* d_ptrs = arena_.at<const std::uint16_t*>(off[next++]);
  const int* d_starts = paged_ ? arena_.at<int>(off[next++]) : nullptr;
  const int* d_tables = paged_ ? d_starts + T : nullptr;
  const int block = paged_ ? PagedKv::kBlockTokens : 0;
  // The prefix groups' F32 K/V per layer (--cuda-prefix-gemm).
  std::vector<std::vector<PrefixAttention::Group>> groups(use_prefix ? L : 0);
  for (std::size_t l = 0; l < groups.size(); ++l)
    for (const Prefix* p : group_prefix) groups[l].push_back({p->kf[l].get<float>(), p->vf[l].get<float>(), p->kv.len});
  if (use_prefix) prefix_attn_->reserve(plan, groups[0], c_.n_kv_heads, c_.head_dim);
  // --split-attention: the tiled kernel (blocks per KV head) where the shape allows it, else the
  // part-1 kernel split over positions; chunks when few rows leave the GPU idle.
  const bool tiled = split_attention_ && decode_attention_tiled_supported(c_.n_heads, c_.n_kv_heads, c_.head_dim);
  const int splits = split_attention_ ? decode_attention_splits(T, tiled ? c_.n_kv_heads : c_.n_heads, sm_count_) : 1;
  float* partial = splits > 1 ? attn_work_.get<float>() : nullptr;

  // The step's device work: no allocation, no synchronization, no copy from the host (what a CUDA
  // graph may capture).
  auto enqueue = [&] {
    embedding_cuda(embed_.buf.get(), embed_.dtype, d_tokens, T, c_.dim, x_.get<float>(), stream_);
    for (std::size_t l = 0; l < L; ++l) {
      const std::uint16_t* const* d = d_ptrs + 4 * l * n;
      layer(static_cast<int>(l), T, d_pos, d_rows + 2 * l * n, d_rows + (2 * l + 1) * n, [&](int) {
        if (use_prefix) {
          prefix_attn_->run(q_.get<float>(), plan, d_map, groups[l], d + 2 * n, d + 3 * n, d_lens + T, T, c_.n_heads, c_.n_kv_heads,
                            c_.head_dim, att_.get<float>(), d_tables, d_starts, block, tiled ? splits : 0, partial, kv_);
          return;
        }
        if (tiled) {
          TiledAttentionArgs a;
          a.q = q_.get<float>(), a.k_prefix = d, a.v_prefix = d + n, a.prefix_len = d_lens;
          a.k_suffix = d + 2 * n, a.v_suffix = d + 3 * n, a.suffix_len = d_lens + T;
          a.T = T, a.n_heads = c_.n_heads, a.n_kv = c_.n_kv_heads, a.hd = c_.head_dim, a.out = att_.get<float>();
          a.suffix_table = d_tables, a.suffix_table_start = d_starts, a.block_tokens = block;
          a.splits = splits, a.partial = partial, a.kv = kv_;
          decode_attention_tiled_cuda(a, stream_);
          return;
        }
        decode_attention_cuda(q_.get<float>(), d, d + n, d_lens, d + 2 * n, d + 3 * n, d_lens + T, T, c_.n_heads, c_.n_kv_heads,
                              c_.head_dim, att_.get<float>(), stream_, d_tables, d_starts, block, splits, partial, kv_);
      });
    }
    logits(0, T);
    if (draws) {  // --device-sampling: sample_token's draws, on the device
      int* d_out = samples_.get<int>();
      sample_token_cuda(logits_.get<float>(), T, c_.vocab_size, draws->params, d_ids, d_ids + n, d_ids + 2 * n, d_out,
                  reinterpret_cast<float*>(d_out + n), stream_);
    }
  };
  timer_.begin_step();
  std::optional<PhaseTimer::Scope> total;
  total.emplace(&timer_, PhaseTimer::Total);
  if (graphs_ && !timer_.enabled()) {  // profiling records events between the phases: eager
    const bool was_enabled = graphs_->enabled();
    graphs_->run(graph_key(T, splits, use_prefix, draws, off, plan, groups), stream_, enqueue);
    if (was_enabled && !graphs_->enabled())
      spdlog::warn("--cuda-graphs: capture failed, decode steps run without graphs from now on ({})", graphs_->disabled_reason());
  } else {
    enqueue();
  }
  for (Slot* s : batch) s->kv.len++;
  total.reset();
  // The step's one synchronization: the logits, or (--device-sampling) only the samples, back.
  if (draws) {
    pinned_.resize(n * 8);
    CUDA_CHECK(cudaMemcpyAsync(pinned_.get(), samples_.get(), n * 8, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto* tok = pinned_.get<const int>();
    const auto* lp = reinterpret_cast<const float*>(tok + n);
    for (std::size_t i = 0; i < n; ++i) draws->out[i] = {tok[i], lp[i]};
  } else {
    CUDA_CHECK(cudaMemcpyAsync(host_logits, logits_.get(), n * V * 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  timer_.end_step();
}

GraphKey CudaEngine::graph_key(int T, int splits, bool use_prefix, const Draws* draws, const std::vector<std::size_t>& offsets, const PrefixStateMap& plan,
                               const std::vector<std::vector<PrefixAttention::Group>>& groups) const {
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  auto bits = [](float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint64_t>(u);
  };
  GraphKey key{static_cast<std::uint64_t>(T), static_cast<std::uint64_t>(splits), use_prefix ? 1u : 0u, draws ? 1u : 0u,
               addr(arena_.device_base())};
  key.insert(key.end(), offsets.begin(), offsets.end());
  for (const DeviceBuffer* b : {&x_, &xn_, &q_, &k_, &v_, &att_, &o_, &gate_, &up_, &logits_, &act_q_, &act_s_, &act_bf16_, &fused_,
                                &attn_work_, &samples_})
    key.push_back(addr(b->get()));
  if (draws) {
    const SamplingParams& p = draws->params;
    key.insert(key.end(), {bits(p.temperature), static_cast<std::uint64_t>(p.top_k), bits(p.top_p), bits(p.min_p), p.seed});
  }
  if (use_prefix) {
    prefix_attn_->add_to_key(key);
    key.push_back(static_cast<std::uint64_t>(plan.rows));
    for (std::size_t g = 0; g < plan.R.size(); ++g) key.insert(key.end(), {static_cast<std::uint64_t>(plan.R[g]), static_cast<std::uint64_t>(plan.base[g])});
    for (const auto& layer_groups : groups)
      for (const PrefixAttention::Group& g : layer_groups) key.insert(key.end(), {addr(g.k), addr(g.v), static_cast<std::uint64_t>(g.len)});
  }
  return key;
}

}  // namespace bestofn::cuda
