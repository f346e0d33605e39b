// A decode step of the CUDA engine (the class: src/cuda/cuda_engine.h): prepare_step checks the
// batch and uploads its index arrays at once; forward enqueues the device work as the CPU
// engine's decode runs it (layer, attend_decode, ffn, logits), eagerly or captured into /
// replayed from a CUDA graph with --cuda-graphs; step then copies the logits or the samples back.
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

CudaEngine::StepPlan CudaEngine::prepare_step(std::span<const int> slots, std::span<const int> tokens, const Draws* draws) {
  StepPlan s;
  const int T = s.T = static_cast<int>(slots.size());
  std::vector<Slot*>& batch = s.batch;
  std::vector<int> pos;
  for (int i = 0; i < T; ++i) {
    Slot& slot = slot_at(slots[static_cast<std::size_t>(i)]);
    if (std::find(batch.begin(), batch.end(), &slot) != batch.end())
      throw Error("decode: slot " + std::to_string(slots[static_cast<std::size_t>(i)]) + " appears twice in one step");
    const int p = slot_length(slots[static_cast<std::size_t>(i)]);
    if (p >= c_.max_position_embeddings)
      throw Error("slot " + std::to_string(slots[static_cast<std::size_t>(i)]) + " is at the context limit (" + std::to_string(c_.max_position_embeddings) + ")");
    const int t = tokens[static_cast<std::size_t>(i)];
    if (t < 0 || t >= c_.vocab_size) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
    if (!paged_) reserve(slot.kv, slot.kv.len + 1);
    batch.push_back(&slot);
    pos.push_back(p);
  }
  std::vector<int> tables, starts;  // --paged-kv
  if (paged_) {
    std::vector<PagedSlot*> paged;
    std::vector<int> lens;
    for (Slot* slot : batch) paged.push_back(&slot->paged), lens.push_back(slot->kv.len);
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
  std::vector<std::size_t>& off = s.offsets;
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
  PrefixStateMap& plan = s.plan;
  std::vector<const Prefix*> group_prefix;
  bool& use_prefix = s.use_prefix;
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
      Slot& slot = *batch[i];
      const Prefix& pre = prefixes_.at(slot.prefix);
      std::uint16_t* ks = paged_ ? paged_->k(static_cast<int>(l)) : slot.kv.k[l].get<std::uint16_t>();
      std::uint16_t* vs = paged_ ? paged_->v(static_cast<int>(l)) : slot.kv.v[l].get<std::uint16_t>();
      const std::size_t row = (paged_ ? paged_->row(slot.paged, slot.kv.len) : static_cast<std::size_t>(slot.kv.len)) * kv_row_bytes();
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
  if (cascade_) {  // --cascade-attention: the rows grouped by prompt, FlashInfer's schedule (its own upload)
    std::vector<CascadeRow> by_row(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Prefix& pre = prefixes_.at(batch[i]->prefix);
      by_row[i] = {batch[i]->prefix, pre.cascade_page, pre.kv.len};
    }
    s.cascade = cascade_->plan(by_row, graphs_ != nullptr);
    off.push_back(arena_.add(s.cascade->ints));
  }
  arena_.upload(stream_);
  std::size_t next = 0;
  s.tokens = arena_.at<int>(off[next++]);
  s.pos = arena_.at<int>(off[next++]);
  s.lens = arena_.at<int>(off[next++]);
  s.draws = draws ? arena_.at<std::uint64_t>(off[next++]) : nullptr;
  s.map = use_prefix ? arena_.at<int>(off[next++]) : nullptr;
  s.rows = arena_.at<std::uint16_t*>(off[next++]);
  s.ptrs = arena_.at<const std::uint16_t*>(off[next++]);
  s.starts = paged_ ? arena_.at<int>(off[next++]) : nullptr;
  s.tables = paged_ ? s.starts + T : nullptr;
  if (s.cascade) s.cascade->dev = arena_.at<int>(off[next++]);
  s.block = paged_ ? PagedKv::kBlockTokens : 0;
  // The prefix groups' F32 K/V per layer (--cuda-prefix-gemm).
  std::vector<std::vector<PrefixAttention::Group>>& groups = s.groups;
  groups.resize(use_prefix ? L : 0);
  for (std::size_t l = 0; l < groups.size(); ++l)
    for (const Prefix* p : group_prefix) groups[l].push_back({p->kf[l].get<float>(), p->vf[l].get<float>(), p->kv.len});
  if (use_prefix) prefix_attn_->reserve(plan, groups[0], c_.n_kv_heads, c_.head_dim);
  // --split-attention: the tiled kernel (blocks per KV head) where the shape allows it, else the
  // part-1 kernel split over positions; chunks when few rows leave the GPU idle.
  s.tiled = split_attention_ && decode_attention_tiled_supported(c_.n_heads, c_.n_kv_heads, c_.head_dim);
  s.splits = split_attention_ ? decode_attention_splits(T, s.tiled ? c_.n_kv_heads : c_.n_heads, sm_count_) : 1;
  s.partial = s.splits > 1 ? attn_work_.get<float>() : nullptr;
  return s;
}

// The step's device work: no allocation, no synchronization, no copy from the host (what a CUDA
// graph may capture). The forward of the CPU engine's decode (src/cpu/cpu_engine.cpp), step for step.
void CudaEngine::forward(const StepPlan& s, const Draws* draws) {
  const int T = s.T;
  const auto n = static_cast<std::size_t>(T);
  embedding_cuda(embed_.buf.get(), embed_.dtype, s.tokens, T, c_.dim, x_.get<float>(), stream_);
  for (int l = 0; l < c_.n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    layer(l, T, s.pos, s.rows + 2 * li * n, s.rows + (2 * li + 1) * n, [&] { attend_decode(l, s); });
  }
  logits_rows(0, T);
  if (draws) {  // --device-sampling: sample_token's draws, on the device
    int* d_out = samples_.get<int>();
    sample_token_cuda(logits_.get<float>(), T, c_.vocab_size, draws->params, s.draws, s.draws + n, s.draws + 2 * n, d_out,
                      reinterpret_cast<float*>(d_out + n), stream_);
  }
}

// Decode attention of layer l: the prefix GEMMs and a merge (--cuda-prefix-gemm), the tiled kernel
// (--split-attention), or one block per row and query head; att_ from q_ and the caches.
void CudaEngine::attend_decode(int l, const StepPlan& s) {
  const int T = s.T;
  const auto n = static_cast<std::size_t>(T);
  const std::uint16_t* const* d = s.ptrs + 4 * static_cast<std::size_t>(l) * n;  // k_prefix, v_prefix, k_suffix, v_suffix
  if (s.cascade) {
    cascade_->run(l, *s.cascade, q_.get<float>(), d + 2 * n, d + 3 * n, s.lens + T, att_.get<float>(), s.tables, s.starts, s.block);
    return;
  }
  if (s.use_prefix) {
    prefix_attn_->run(q_.get<float>(), s.plan, s.map, s.groups[static_cast<std::size_t>(l)], d + 2 * n, d + 3 * n, s.lens + T, T,
                      c_.n_heads, c_.n_kv_heads, c_.head_dim, att_.get<float>(), s.tables, s.starts, s.block, s.tiled ? s.splits : 0,
                      s.partial, kv_);
    return;
  }
  if (s.tiled) {
    TiledAttentionArgs a;
    a.q = q_.get<float>(), a.k_prefix = d, a.v_prefix = d + n, a.prefix_len = s.lens;
    a.k_suffix = d + 2 * n, a.v_suffix = d + 3 * n, a.suffix_len = s.lens + T;
    a.T = T, a.n_heads = c_.n_heads, a.n_kv = c_.n_kv_heads, a.hd = c_.head_dim, a.out = att_.get<float>();
    a.suffix_table = s.tables, a.suffix_table_start = s.starts, a.block_tokens = s.block;
    a.splits = s.splits, a.partial = s.partial, a.kv = kv_;
    decode_attention_tiled_cuda(a, stream_);
    return;
  }
  decode_attention_cuda(q_.get<float>(), d, d + n, s.lens, d + 2 * n, d + 3 * n, s.lens + T, T, c_.n_heads, c_.n_kv_heads, c_.head_dim,
                        att_.get<float>(), stream_, s.tables, s.starts, s.block, s.splits, s.partial, kv_);
}

void CudaEngine::step(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const Draws* draws) {
  use_device();
  if (slots.empty()) return;
  const StepPlan s = prepare_step(slots, tokens, draws);
  const auto n = static_cast<std::size_t>(s.T), V = static_cast<std::size_t>(c_.vocab_size);
  timer_.begin_step();
  std::optional<PhaseTimer::Scope> total;
  total.emplace(&timer_, PhaseTimer::Total);
  if (graphs_ && !timer_.enabled()) {  // profiling records events between the phases: eager
    const bool was_enabled = graphs_->enabled();
    graphs_->run(graph_key(s, draws), stream_, [&] { forward(s, draws); });
    if (was_enabled && !graphs_->enabled())
      spdlog::warn("--cuda-graphs: capture failed, decode steps run without graphs from now on ({})", graphs_->disabled_reason());
  } else {
    forward(s, draws);
  }
  for (Slot* slot : s.batch) slot->kv.len++;
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

GraphKey CudaEngine::graph_key(const StepPlan& s, const Draws* draws) const {
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  auto bits = [](float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint64_t>(u);
  };
  GraphKey key{static_cast<std::uint64_t>(s.T), static_cast<std::uint64_t>(s.splits), s.use_prefix ? 1u : 0u, draws ? 1u : 0u,
               addr(arena_.device_base())};
  key.insert(key.end(), s.offsets.begin(), s.offsets.end());
  for (const DeviceBuffer* b : {&x_, &xn_, &q_, &k_, &v_, &att_, &o_, &gate_, &up_, &logits_, &act_q_, &act_s_, &act_bf16_, &fused_,
                                &attn_work_, &samples_})
    key.push_back(addr(b->get()));
  if (draws) {
    const SamplingParams& p = draws->params;
    key.insert(key.end(), {bits(p.temperature), static_cast<std::uint64_t>(p.top_k), bits(p.top_p), bits(p.min_p), p.seed});
  }
  if (s.cascade) cascade_->add_to_key(key, *s.cascade);
  if (s.use_prefix) {
    prefix_attn_->add_to_key(key);
    key.push_back(static_cast<std::uint64_t>(s.plan.rows));
    for (std::size_t g = 0; g < s.plan.R.size(); ++g)
      key.insert(key.end(), {static_cast<std::uint64_t>(s.plan.R[g]), static_cast<std::uint64_t>(s.plan.base[g])});
    for (const auto& layer_groups : s.groups)
      for (const PrefixAttention::Group& g : layer_groups) key.insert(key.end(), {addr(g.k), addr(g.v), static_cast<std::uint64_t>(g.len)});
  }
  return key;
}

}  // namespace bestofn::cuda
