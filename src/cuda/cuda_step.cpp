// A decode step of the CUDA engine (the class: src/cuda/cuda_engine.h): run_step checks the
// request's sizes; decode_rows has the step's program made (StepProgrammer::prepare, src/cuda/step_program.cpp),
// enqueues the forward (src/cuda/cuda_forward.cpp) eagerly or captured into / replayed from a CUDA
// graph (graph_key), copies the logits or the samples back, and has the next step's program
// speculated while the device runs.
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

// What overlaps: the host plans step t+1 while the device runs step t (StepProgrammer::speculate, then
// its patch at the next call: src/cuda/step_ahead.h), and the staging is double-buffered, so
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
void CudaEngine::decode_rows(std::span<const int> slots, std::span<const int> tokens, float* host_logits, const DeviceDraws* draws,
                             std::span<const int> runs) {
  use_device();
  if (slots.empty()) return;
  const StepProgram s = program_->prepare(slots, tokens, draws, runs);
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
  if (runs.empty()) program_->speculate(slots, s, draws);  // after runs, the caller truncates what it rejects first
  sync_stream(stream_);
  if (draws) {
    const auto* tok = pinned_.get<const int>();
    const auto* lp = reinterpret_cast<const float*>(tok + padded);
    for (std::size_t i = 0; i < n; ++i) draws->out[i] = {tok[i], lp[i]};
  }
  timer_.end_step();
}

// Speculation's runs: slot i's counts[i] positions as consecutive rows of one step (StepProgrammer
// checks them, StepRow::run). The rows write their K/V before any row attends (rope_kv_write_cuda
// of the layer, then the attention path's attend), so each attends to its slot up to its own position.
void CudaEngine::run_step(const DecodeStep& request) {
  const std::span<const int> slots = request.slots, tokens = request.tokens, counts = request.counts;
  const std::span<float> logits = request.logits;
  if (request.draws) {  // capabilities().device_sampling: step() checked
    const DecodeStep::Draws& d = *request.draws;
    const std::size_t T = slots.size();
    if (tokens.size() != T || d.prompt.size() != T || d.candidate.size() != T || d.step.size() != T || d.out.size() != T || !counts.empty())
      throw Error("decode_sample: slots, tokens, draw indexes and samples sizes disagree");
    const DeviceDraws draws{*d.params, d.prompt, d.candidate, d.step, d.out};
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
  program_->drop();  // a speculation of this slot would write past its new end
}

GraphKey CudaEngine::graph_key(const StepProgram& s, const DeviceDraws* draws) const {
  auto bits = [](float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return static_cast<std::uint64_t>(u);
  };
  // The step program's shape: the padded T (the bucket), not the batch, so that a graph replays
  // while candidates finish; which arrays it stages, their bucket's arena and their offsets (fixed
  // per bucket: the descriptors and tables are data the graph reads). Then every StepBuffer's
  // address, the sampling parameters the sampler bakes in, and the two paths' parts (prefix-GEMM
  // attention's cuBLAS calls bake in each group's shape: on that path a graph replays only while
  // no group changes).
  GraphKey key{static_cast<std::uint64_t>(s.T), s.grouped ? 1u : 0u, draws ? 1u : 0u, key_address(arena_.device_base(bucket_of(s.T)))};
  const auto offsets = s.layout.offsets();
  key.insert(key.end(), offsets.begin(), offsets.end());
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
