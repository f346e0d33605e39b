// A decode step of the CUDA engine (the class: src/cuda/cuda_engine.h): prepare_step checks the
// batch and uploads its index arrays at once; forward enqueues the device work as the CPU
// engine's decode runs it (layer, attend_decode, ffn, logits), eagerly or captured into /
// replayed from a CUDA graph with CUDA graphs; step then copies the logits or the samples back.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {

// O(batch) host work: the rows' descriptors gathered, checked and grouped by the step planner
// (src/cuda/step_plan.h: stamps, not searches), written straight into a pinned staging buffer and
// uploaded in one copy; the per-layer pointers are expanded on the device by forward.
CudaEngine::StepPlan CudaEngine::prepare_step(std::span<const int> slots, std::span<const int> tokens, const Draws* draws,
                                              std::span<const int> runs) {
  StepPlan s;
  s.real = static_cast<int>(slots.size());
  bool patched = false;
  try {
    // A step of runs is never the speculated one ("every row again, one further").
    patched = runs.empty() && ahead_ && ahead_->valid() && patch_step(s, slots, tokens, draws);
  } catch (...) {
    ahead_->drop();
    throw;
  }
  if (!patched) {
    if (ahead_) ahead_->drop();
    plan_step(s, slots, tokens, draws, runs);
    ahead_stats_.full++;
  }
  // Cascade attention: the plan made while the last step ran holds when the batch is the
  // speculated one row for row and nothing has touched the page pool or planned since.
  if (cascade_) {
    const bool reuse = patched && ahead_->exact() && spec_cascade_ && cascade_->current(*spec_cascade_);
    if (reuse) s.cascade = std::move(spec_cascade_);
    (reuse ? ahead_stats_.cascade_ahead : ahead_stats_.cascade_planned)++;
    spec_cascade_.reset();
  }
  bind_step_arrays(s, draws);
  return s;
}

// The full plan: every row's descriptors gathered, checked, the arrays written and uploaded.
void CudaEngine::plan_step(StepPlan& s, std::span<const int> slots, std::span<const int> tokens, const Draws* draws,
                           std::span<const int> runs) {
  const int T = s.real;
  const auto n_real = static_cast<std::size_t>(T);
  std::vector<StepRow>& rows = step_rows_;
  rows.resize(n_real);
  s.batch.resize(n_real);
  for (std::size_t i = 0; i < n_real; ++i) {
    Slot& slot = slot_at(slots[i]);
    const Prefix& pre = prefix_at(slot.prefix);
    StepRow& r = rows[i];
    r.run = runs.empty() ? 0 : runs[i];
    r.slot = slots[i], r.prefix = slot.prefix, r.prefix_len = pre.kv.len, r.suffix_len = slot.kv.len + r.run, r.token = tokens[i];
    r.prefix_kv = pre.kv.layout();
    r.blocks = {};
    s.batch[i] = &slot;
  }
  planner_->check(rows);  // nothing below runs for a batch that fails its checks
  // Each row's suffix: the slot's own contiguous part, grown first, or the block pools with the
  // blocks taken that this step's rows reach (paged KV). A run's last row reaches the furthest:
  // the blocks and the growth are its, and the rows' layouts are read after every part has grown.
  auto last_of_run = [&](std::size_t i) { return i + 1 == n_real || rows[i + 1].run == 0; };
  if (paged_) {
    std::vector<PagedSlot*> paged;
    std::vector<int> lens;
    for (std::size_t i = 0; i < n_real; ++i)
      if (last_of_run(i)) paged.push_back(&s.batch[i]->paged), lens.push_back(rows[i].suffix_len);
    paged_->take(paged, lens);
    const KvLayout pools = paged_->layout();
    for (std::size_t i = 0; i < n_real; ++i) rows[i].suffix_kv = pools, rows[i].blocks = s.batch[i]->paged.blocks;
  } else {
    for (std::size_t i = 0; i < n_real; ++i)
      if (last_of_run(i)) reserve(s.batch[i]->kv, rows[i].suffix_len + 1);
    for (std::size_t i = 0; i < n_real; ++i) rows[i].suffix_kv = s.batch[i]->kv.layout();
  }
  const int Tn = s.T = planner_->padded(T);
  size_for_bucket(Tn);
  // Device sampling: the sampler's workspace for these rows and parameters, grown here (outside
  // any capture) so that the sampler allocates nothing inside the step.
  if (draws) sample_ws_.resize(sample_token_workspace_bytes(Tn, c_.vocab_size, draws->params));
  // Prefix-GEMM attention: the batch rows of each prefix (the padding rows a group of their own,
  // over padding_'s one position). A step in which no prefix has kMinPrefixGemmRows rows (one
  // candidate left per prompt) gains nothing from matrix products and takes the decode kernel.
  std::vector<const Prefix*> group_prefix;
  if (prefix_gemm_) {
    const StepGroups& g = planner_->group(rows);
    std::vector<std::vector<int>> group_rows(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::span<const int> r = g.rows_of(i);
      const bool padding = g.prefix[i] == kPaddingPrefix;
      s.use_prefix = s.use_prefix || (!padding && static_cast<int>(r.size()) >= kMinPrefixGemmRows);
      group_rows[i].assign(r.begin(), r.end());
      group_prefix.push_back(padding ? padding_.get() : &prefix_at(g.prefix[i]));
    }
    if (s.use_prefix) s.plan = prefix_state_map(group_rows, Tn, c_.n_heads, c_.n_kv_heads);
  }
  const StepLayout& lay = s.layout = planner_->layout(T, draws != nullptr, s.use_prefix, planner_->table_entries(rows));
  char* staged = arena_.stage(lay.capacity);
  std::optional<StepDraws> d;
  if (draws) d = StepDraws{draws->prompt, draws->candidate, draws->step};
  planner_->write(rows, lay, d ? &*d : nullptr, s.use_prefix ? std::span<const int>(s.plan.map) : std::span<const int>(), staged);
  arena_.upload(lay.bytes, stream_);
  // The prefix groups' F32 K/V per layer (prefix-GEMM attention).
  const auto L = static_cast<std::size_t>(c_.n_layers);
  std::vector<std::vector<PrefixAttention::Group>>& groups = s.groups;
  groups.resize(s.use_prefix ? L : 0);
  for (std::size_t l = 0; l < groups.size(); ++l)
    for (const Prefix* p : group_prefix) groups[l].push_back({p->wide.k(static_cast<int>(l)), p->wide.v(static_cast<int>(l)), p->kv.len});
  if (s.use_prefix) prefix_attn_->reserve(s.plan, groups[0], c_.n_kv_heads, c_.head_dim);
}

// Cascade attention: the rows of `batch` (then padding rows up to T, grouped by padding_) by
// prompt, each row's suffix (its block table and length with this step's row; the padding rows
// attend to no suffix) for FlashInfer's decode, and FlashInfer's schedules. A batch row's slot
// length is read as it stands before the step (prepare_step), or after the step that speculated it
// (speculate_next): both are the length the step it is planned for starts from.
CascadeStepPlan CudaEngine::plan_cascade(std::span<Slot* const> batch, int T, bool ahead) {
  const auto n = static_cast<std::size_t>(T);
  std::vector<CascadeRow> by_row(n);
  std::vector<SuffixRow> suffix(cascade_->suffix_decode() ? n : 0);
  for (std::size_t i = 0; i < n; ++i) {
    const bool pad = i >= batch.size();
    const Prefix& pre = pad ? *padding_ : prefix_at(batch[i]->prefix);
    by_row[i] = {pad ? kPaddingPrefix : batch[i]->prefix, pre.cascade_page, pre.kv.len};
    if (!suffix.empty() && !pad) suffix[i] = {batch[i]->paged.blocks, batch[i]->kv.len + 1};
  }
  return cascade_->plan(by_row, suffix, graphs_ != nullptr, ahead);
}

// The device addresses of the staged arrays, and the attention path.
void CudaEngine::bind_step_arrays(StepPlan& s, const Draws* draws) {
  const StepLayout& lay = s.layout;
  const auto n = static_cast<std::size_t>(s.T);
  s.tokens = arena_.at<int>(lay.tokens);
  s.pos = arena_.at<int>(lay.pos);
  s.lens = arena_.at<int>(lay.lens);
  s.draws = draws ? arena_.at<std::uint64_t>(lay.draws) : nullptr;
  s.map = s.use_prefix ? arena_.at<int>(lay.map) : nullptr;
  s.desc = arena_.at<StepRowDesc>(lay.desc);
  const auto L = static_cast<std::size_t>(c_.n_layers);
  s.rows = step_ptrs_.get<std::uint16_t*>();
  s.ptrs = step_ptrs_.get<const std::uint16_t*>() + 2 * L * n;
  s.starts = paged_ ? arena_.at<int>(lay.starts) : nullptr;
  s.tables = paged_ ? arena_.at<int>(lay.tables) : nullptr;
  s.block = paged_ ? PagedKv::kBlockTokens : 0;
  if (cascade_ && !s.cascade) s.cascade = plan_cascade(s.batch, s.T);  // unless made ahead (prepare_step)
  // Split attention: the tiled kernel (blocks per KV head) where the shape allows it, else the
  // plain decode kernel split over positions; chunks when few rows leave the GPU idle.
  s.tiled = split_attention_ && decode_attention_tiled_supported(c_.n_heads, c_.n_kv_heads, c_.head_dim);
  s.splits = split_attention_ ? decode_attention_splits(s.T, s.tiled ? c_.n_kv_heads : c_.n_heads, sm_count_) : 1;
  s.partial = s.splits > 1 ? attn_work_.get<float>() : nullptr;
}

// The step's device work: no allocation, no synchronization, no copy from the host (what a CUDA
// graph may capture). The forward of the CPU engine's decode (src/cpu/cpu_engine.cpp), step for step.
void CudaEngine::forward(const StepPlan& s, const Draws* draws) {
  const int T = s.T;
  const auto n = static_cast<std::size_t>(T);
  // The per-layer cache rows and attention pointers from the rows' descriptors (into step_ptrs_).
  timed("step_pointers", [&] {
    expand_step_pointers_cuda(s.desc, T, c_.n_layers, const_cast<std::uint16_t**>(s.rows), const_cast<const std::uint16_t**>(s.ptrs),
                              stream_);
  });
  timed("embedding", [&] { embedding_cuda(embed_.buf.get(), embed_.dtype, s.tokens, T, c_.dim, x_.get<float>(), stream_); });
  for (int l = 0; l < c_.n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    layer(l, T, s.pos, s.rows + 2 * li * n, s.rows + (2 * li + 1) * n, [&] { attend_decode(l, s); });
  }
  logits_rows(0, T);
  if (draws) {  // Device sampling: sample_token's draws, on the device
    int* d_out = samples_.get<int>();
    const auto d = timer_.detail("sample");
    SampleOptions so;
    so.workspace = sample_ws_.get(), so.workspace_bytes = sample_ws_.size();
    sample_token_cuda(logits_.get<float>(), T, c_.vocab_size, draws->params, s.draws, s.draws + n, s.draws + 2 * n, d_out,
                      reinterpret_cast<float*>(d_out + n), stream_, so);
  }
}

// Decode attention of layer l: the prefix GEMMs and a merge (prefix-GEMM attention), the tiled kernel
// (split attention), or one block per row and query head; att_ from q_ and the caches.
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
    a.merge_counters = inline_merge_ ? merge_counters_.get<int>() : nullptr;
    decode_attention_tiled_cuda(a, stream_);
    return;
  }
  decode_attention_cuda(q_.get<float>(), d, d + n, s.lens, d + 2 * n, d + 3 * n, s.lens + T, T, c_.n_heads, c_.n_kv_heads, c_.head_dim,
                        att_.get<float>(), stream_, s.tables, s.starts, s.block, s.splits, s.partial, kv_,
                        inline_merge_ ? merge_counters_.get<int>() : nullptr);
}

// What overlaps: the host plans step t+1 while the device runs step t (speculate_next, then
// patch_step at the next call: src/cuda/step_ahead.h), and the staging is double-buffered, so
// writing step t+1's arrays never waits for step t's upload. What stays on the critical path after
// the ids return: matching the batch against the speculation and patching what changed
// (bench_step_plan's "ahead" rows).
//
// Allocation and synchronization inside a run: after reserve() (the scheduler's maximum batch,
// longest prompt and max_new_tokens), a step allocates nothing and synchronizes once (the ids or
// logits coming back); device_counts() counts both (tests/test_gpu_engine.cpp checks a run). What
// may still allocate, counted: a slot fed past its reserved part (unpaged), prefix-GEMM attention's
// scratch (its group sizes), cascade attention's own buffers, a prefill (each prompt's KV part,
// and a pass longer than reserved), a graph's capture and instantiation.
void CudaEngine::decode_rows(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const Draws* draws,
                             std::span<const int> runs) {
  use_device();
  if (slots.empty()) return;
  const StepPlan s = prepare_step(slots, tokens, draws, runs);
  // The batch's rows come back, not the padding's: n of them, first; the samples' logprobs sit
  // after all T ids.
  const auto n = static_cast<std::size_t>(s.real), padded = static_cast<std::size_t>(s.T), V = static_cast<std::size_t>(c_.vocab_size);
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
  for (Slot* slot : s.batch) slot->kv.len++;  // a run's slot once per row
  total.reset();
  // The step's one synchronization: the logits, or (device sampling) only the samples, back;
  // step t+1 is speculated on the host in between, while the device runs this one.
  if (draws)
    CUDA_CHECK(cudaMemcpyAsync(pinned_.get(), samples_.get(), padded * 8, cudaMemcpyDeviceToHost, stream_));
  else
    CUDA_CHECK(cudaMemcpyAsync(host_logits, logits_.get(), n * V * 4, cudaMemcpyDeviceToHost, stream_));
  if (runs.empty()) speculate_next(slots, s, draws);  // after runs, the caller truncates what it rejects first
  sync_stream(stream_);
  if (draws) {
    const auto* tok = pinned_.get<const int>();
    const auto* lp = reinterpret_cast<const float*>(tok + padded);
    for (std::size_t i = 0; i < n; ++i) draws->out[i] = {tok[i], lp[i]};
  }
  timer_.end_step();
}

// Speculation's runs: slot i's counts[i] positions as consecutive rows of one step (prepare_step
// checks them, StepRow::run). The rows write their K/V before any row attends (rope_kv_write_cuda
// of the layer, then attend_decode), so each attends to its slot up to its own position.
void CudaEngine::run_step(const DecodeStep& request) {
  const std::span<const int> slots = request.slots, tokens = request.tokens, counts = request.counts;
  const std::span<float> logits = request.logits;
  if (request.draws) {  // capabilities().device_sampling: step() checked
    const DecodeStep::Draws& d = *request.draws;
    const std::size_t T = slots.size();
    if (tokens.size() != T || d.prompt.size() != T || d.candidate.size() != T || d.step.size() != T || d.out.size() != T || !counts.empty())
      throw Error("decode_sample: slots, tokens, draw indexes and samples sizes disagree");
    const Draws draws{*d.params, d.prompt, d.candidate, d.step, d.out};
    return decode_rows(slots, tokens, nullptr, &draws);
  }
  if (counts.empty()) {
    if (tokens.size() != slots.size() || logits.size() != slots.size() * static_cast<std::size_t>(c_.vocab_size))
      throw Error("decode: slots, tokens and logits sizes disagree");
    return decode_rows(slots, tokens, logits.data(), nullptr);
  }
  // Runs (capabilities().runs: step() checked).
  if (counts.size() != slots.size()) throw Error("decode: slots and counts sizes disagree");
  std::vector<int> rows, runs;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (counts[i] < 1) throw Error("decode: slot " + std::to_string(slots[i]) + " has a run of " + std::to_string(counts[i]) + " tokens");
    for (int j = 0; j < counts[i]; ++j) rows.push_back(slots[i]), runs.push_back(j);
  }
  if (tokens.size() != rows.size() || logits.size() != rows.size() * static_cast<std::size_t>(c_.vocab_size))
    throw Error("decode: slots, tokens and logits sizes disagree");
  const bool plain = rows.size() == slots.size();
  decode_rows(rows, tokens, logits.data(), nullptr, plain ? std::span<const int>() : std::span<const int>(runs));
}

void CudaEngine::truncate_slot(int s, int length) {
  use_device();
  Slot& slot = slot_at(s);
  const int prefix = prefix_at(slot.prefix).kv.len;
  if (length < prefix || length > slot_length(s))
    throw Error("truncate_slot: slot " + std::to_string(s) + " holds " + std::to_string(slot_length(s)) + " positions, its prefix " +
                std::to_string(prefix) + "; asked to keep " + std::to_string(length));
  if (length == slot_length(s)) return;
  slot.kv.len = length - prefix;  // the rows past it are overwritten by the next step's
  if (paged_) paged_->shrink(slot.paged, slot.kv.len);
  if (ahead_) ahead_->drop();  // a speculation of this slot would write past its new end
}

GraphKey CudaEngine::graph_key(const StepPlan& s, const Draws* draws) const {
  auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  auto bits = [](float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint64_t>(u);
  };
  // The padded T (the bucket), not the batch: a graph replays while candidates finish. The
  // arrays' offsets are fixed per bucket; the descriptors and tables are data the graph reads.
  // Prefix-GEMM attention's cuBLAS calls bake in each group's shape, so its key keeps the groups
  // (below): on that path a graph still replays only while no group changes.
  const StepLayout& lay = s.layout;
  GraphKey key{static_cast<std::uint64_t>(s.T), static_cast<std::uint64_t>(s.splits), s.use_prefix ? 1u : 0u, draws ? 1u : 0u,
               addr(arena_.device_base()), addr(step_ptrs_.get())};
  key.insert(key.end(), {lay.tokens, lay.pos, lay.lens, lay.draws, lay.map, lay.desc, lay.starts, lay.tables});
  for (const DeviceBuffer* b : {&x_, &xn_, &q_, &k_, &v_, &att_, &o_, &gate_, &up_, &logits_, &act_q_, &act_s_, &act_bf16_, &fused_,
                                &attn_work_, &merge_counters_, &mma_work_, &mma_counters_, &samples_, &sample_ws_})
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
