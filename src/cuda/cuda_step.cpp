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
StepProgram CudaEngine::prepare_step(std::span<const int> slots, std::span<const int> tokens, const Draws* draws,
                                              std::span<const int> runs) {
  StepProgram s;
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
  bind_step_arrays(s, draws);
  // The attention's plan: the one made while the last step ran may hold when the batch is the
  // speculated one row for row (cascade attention: and nothing has touched its pages since).
  attention_->plan(s, patched && ahead_->exact());
  return s;
}

// The full plan: every row's descriptors gathered, checked, the arrays written and uploaded.
void CudaEngine::plan_step(StepProgram& s, std::span<const int> slots, std::span<const int> tokens, const Draws* draws,
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
  // Prefix-GEMM attention: the rows grouped by prompt, and their state-row map written with the
  // arrays where the step is grouped.
  const std::span<const int> map = attention_->can().grouped ? attention_->group(planner_->group(rows), Tn) : std::span<const int>();
  s.grouped = !map.empty();
  const StepLayout& lay = s.layout = planner_->layout(T, draws != nullptr, s.grouped, planner_->table_entries(rows));
  char* staged = arena_.stage(lay.capacity);
  std::optional<StepDraws> d;
  if (draws) d = StepDraws{draws->prompt, draws->candidate, draws->step};
  planner_->write(rows, lay, d ? &*d : nullptr, map, staged);
  arena_.upload(lay.bytes, stream_);
}

// The device addresses of the staged arrays.
void CudaEngine::bind_step_arrays(StepProgram& s, const Draws* draws) {
  const StepLayout& lay = s.layout;
  const auto n = static_cast<std::size_t>(s.T);
  s.tokens = arena_.at<int>(lay.tokens);
  s.pos = arena_.at<int>(lay.pos);
  s.lens = arena_.at<int>(lay.lens);
  s.draws = draws ? arena_.at<std::uint64_t>(lay.draws) : nullptr;
  s.map = s.grouped ? arena_.at<int>(lay.map) : nullptr;
  s.desc = arena_.at<StepRowDesc>(lay.desc);
  const auto L = static_cast<std::size_t>(c_.n_layers);
  s.rows = step_ptrs_.get<std::uint16_t*>();
  s.ptrs = step_ptrs_.get<const std::uint16_t*>() + 2 * L * n;
  s.starts = paged_ ? arena_.at<int>(lay.starts) : nullptr;
  s.tables = paged_ ? arena_.at<int>(lay.tables) : nullptr;
  s.block = paged_ ? PagedKv::kBlockTokens : 0;
}

// The step's device work: no allocation, no synchronization, no copy from the host (what a CUDA
// graph may capture). The forward of the CPU engine's decode (src/cpu/cpu_engine.cpp), step for step.
void CudaEngine::forward(const StepProgram& s, const Draws* draws) {
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
    layer(l, T, s.pos, s.rows + 2 * li * n, s.rows + (2 * li + 1) * n, [&] { attention_->attend(l, s, q_.get<float>(), att_.get<float>()); });
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
  const StepProgram s = prepare_step(slots, tokens, draws, runs);
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
      spdlog::warn("CUDA graphs: capture failed, decode steps run without graphs from now on ({})", graphs_->disabled_reason());
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

GraphKey CudaEngine::graph_key(const StepProgram& s, const Draws* draws) const {
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
  GraphKey key{static_cast<std::uint64_t>(s.T), s.grouped ? 1u : 0u, draws ? 1u : 0u, addr(arena_.device_base())};
  key.insert(key.end(), {lay.tokens, lay.pos, lay.lens, lay.draws, lay.map, lay.desc, lay.starts, lay.tables});
  step_buffers_.add_to_key(key);
  if (draws) {
    const SamplingParams& p = draws->params;
    key.insert(key.end(), {bits(p.temperature), static_cast<std::uint64_t>(p.top_k), bits(p.top_p), bits(p.min_p), p.seed});
  }
  attention_->add_to_key(key);
  linear_->add_to_key(key);
  return key;
}

}  // namespace bestofn::cuda
