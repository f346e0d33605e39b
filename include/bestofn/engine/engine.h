#pragma once
// The engine contract (docs/architecture.md): a prompt is prefilled once into a prefix whose KV is kept once;
// a slot is one candidate, referencing its prefix and owning its suffix KV; one decode step takes
// a batch of slots, from one or many prefixes, and returns logits per slot. The engine sees token
// ids and positions, never strings. CPU and CUDA engines implement it; src/backends/backends.cpp picks one.
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bestofn/model/model_config.h"
#include "bestofn/engine/sampler.h"

namespace bestofn {

struct Weights;

// The CUDA engine's paths and device; the CPU engine reads none of them (--device auto on the CPU
// warns about those set, src/backends/backends.cpp). Named sets of them, and the one a run takes
// by default: bestofn/backends/cuda_paths.h.
struct CudaOptions {
  // The device ordinal, as this process numbers them (within CUDA_VISIBLE_DEVICES). The engine
  // makes it current on every call, so several engines may run on several threads.
  int device_index = 0;
  // The optional paths; all off: the plain path, cuda_paths.h's reference (benchmarks/GPU_TODO.md lists what is unverified).
  bool prefix_gemm = false;       // shared-prefix attention as cuBLAS batched GEMMs per prefix (Hydragen)
  bool fused_qkv = false;         // one GEMM for q/k/v and one for gate/up (weights concatenated at load)
  bool gemm_autotune = false;     // each GEMM shape's algorithm measured at first use, cached on disk
  bool paged_kv = false;          // suffix KV in 16-position blocks from a pool; admission by free blocks
  int kv_blocks = 0;              // --paged-kv pool size in blocks (0: half the device memory free after loading)
  bool device_sampling = false;   // decode_sample samples on the device: only ids and logprobs come back
  bool split_attention = false;   // decode attention splits each row's positions over blocks when T is small (flash-decoding)
  bool graphs = false;            // each decode step's launches captured once per batch shape into a CUDA graph, then replayed
  bool cascade_attention = false; // every prefix group's attention in one tensor-core launch per layer (FlashInfer), merged with each suffix
  bool small_m_linear = false;    // FP8 linear layers of 1..8 tokens as one weight-streaming kernel (src/cuda/small_m_linear.h)
  bool small_m_split = false;     // with it: the layer's norms, quantizations and RoPE as their own launches (A/B; src/cuda/layer_plan.h)
  int small_m_blocks_per_sm = 0;  // with it: the fused kernels' grid cap per SM (0: kSmallMBlocksPerSm)
  bool small_m_pdl = false;       // with it: the fused kernels as programmatic dependent launches, their weights prefetched into L2
  // Where these options came from (bestofn/backends/cuda_paths.h, choose_cuda_path), for the log
  // and bench: the path's name and the switches added ("graphs --paged-kv"), and why that path.
  // Empty: set field by field (tests). The engine reads neither.
  std::string path, why;
};

struct EngineOptions {
  int threads = 0;          // CPU threads (0: default_threads())
  // KV cache precision. CPU engine, Auto: F32 for an F32 checkpoint (the reference, exact against
  // llama2.c and HF in fp32), BF16 otherwise (the numerics contract for BF16 and FP8 models).
  // CUDA engine: Auto is BF16; F32 is refused. Parity tests set BF16 (or FP8) on the CPU.
  // FP8 (--kv-cache fp8, half the bytes of BF16): each cache row (one position's K or V, after
  // RoPE for K, from the F32 values) is stored per KV head as E4M3 codes with one F32 scale,
  // quantize_fp8_rows over the row's heads (scale = amax / 448, code = RNE(x / scale),
  // saturating); attention reads fp8_e4m3_to_float(code) * scale, one rounded multiply, and
  // sums as for BF16. Both engines follow this; the GPU's codes and scales equal the CPU's for
  // equal inputs.
  enum class Kv { Auto, F32, BF16, FP8 } kv = Kv::Auto;
  CudaOptions cuda;
};

// What a caller (bench) needs to know about a running engine, from the engine rather than from its
// name: the backend, its device, and the paths it takes.
struct EngineDescription {
  std::string backend;  // "cpu" or "cuda", as Engine::name()
  std::string device;   // the GPU's name; on the CPU, "cpu"
  // CPU engine: the GEMM kernels its matmuls run, by weight type (cpu::fp8_kernel_name(),
  // cpu::wide_kernel_name()); absent on CUDA, which runs cuBLASLt.
  struct CpuKernels {
    std::string fp8, bf16;
  };
  std::optional<CpuKernels> cpu_kernels;
  // CUDA engine: the options it was made with (its paths); absent on the CPU.
  std::optional<CudaOptions> cuda;
};

// Where decode time went, summed over the decode calls since the last take_phase_times (bench).
// gemm: the linear layers (lm_head included); attention: decode attention; the rest is
// total - gemm - attention (norms, RoPE, KV writes, residuals, embedding, host work).
struct PhaseTimes {
  double total_ms = 0, gemm_ms = 0, attention_ms = 0;
  int steps = 0;  // decode calls measured; 0: the engine does not measure
  // CUDA engine: the step kernel group by kernel group (embedding, norm, act_quant, gemm, scale,
  // split_columns, rope_kv, attention, residual, swiglu, lm_head.*, sample), each summed over the
  // layers; what they leave of total_ms is launch gaps and host work. Empty elsewhere.
  std::map<std::string, double> detail_ms;
};

// The most a run will ask of an engine (generate's run_shape): the engine's reserve() sizes its
// buffers for it once, so that no decode step allocates.
struct RunShape {
  int max_batch = 1;        // slots in one decode step
  int longest_prompt = 1;   // tokens
  int max_new_tokens = 1;   // tokens a candidate generates (it feeds one fewer)
  int prefill_tokens = 8192;  // rows of one prefill pass (max_pass_tokens)
  int prefill_prompts = 1;  // prompts in one prefill_many
  int prefill_rows = 1;     // rows (the prompts' tokens) in one prefill_many
  std::vector<int> prompt_lengths;  // every prompt's tokens, shortest first (each may be held at once)
  std::optional<SamplingParams> sampling;  // decode_sample's parameters, when the run samples on the engine
};

// What an engine can do, as data (Engine::capabilities): Engine::step and the scheduler read it,
// and refuse what the engine cannot do in one line before any work.
struct EngineCapabilities {
  // decode_runs takes runs of more than one token per slot (--speculate's verification).
  bool runs = false;
  // Why not, in one line naming the engine (and the options that stop it), when runs is false.
  std::string why_no_runs;
  // decode_sample samples on the engine's device (it returns false, doing nothing, otherwise).
  bool device_sampling = false;
};

// What an engine measures of itself, for bench and the tests (Engine::statistics): a view apart
// from the engine contract, so that decoding never depends on it. Every method has an empty default
// (an engine that measures nothing).
class EngineStatistics {
 public:
  virtual ~EngineStatistics() = default;
  // The decode time split since the last call, and resets it (engines that measure nothing: {}).
  // The CPU engine always measures; the CUDA engine only while profile_phases(true) (CUDA events
  // around each phase, read back at the step's end).
  virtual PhaseTimes take_phase_times() { return {}; }
  virtual void profile_phases(bool /*on*/) {}
  // Ceilings of this device measured now (bench): copy bandwidth (read + write bytes) and dense
  // GEMM throughput of the engine's GEMM type; zeros where the engine does not measure them.
  struct Ceilings {
    double copy_gbps = 0, gemm_tflops = 0;
    std::string gemm;  // what was timed
  };
  virtual Ceilings measure_ceilings() { return {}; }
  // Decode steps replayed from a captured CUDA graph so far (CUDA graphs; 0 elsewhere), and why
  // capture was given up, when it was (the steps then run eagerly).
  struct GraphStats {
    long long replays = 0;
    std::string disabled;
    long long last_nodes = 0;  // the nodes (kernels, copies) of the step captured last
  };
  virtual GraphStats graph_stats() const { return {}; }
  // The CUDA engine's host work for step t+1 done while step t ran (src/cuda/step_ahead.h), steps
  // so far: patched from the speculation in place or into another buffer, or planned in full; with
  // cascade attention, the steps whose cascade plan was made ahead or in full. Zeros elsewhere.
  struct AheadStats {
    long long in_place = 0, copied = 0, full = 0, cascade_ahead = 0, cascade_planned = 0;
  };
  virtual AheadStats ahead_stats() const { return {}; }
  // Device allocations, frees and host waits on the device so far (process-wide; zeros where the
  // engine has no device): a decode step after reserve() adds one wait, the ids coming back.
  struct DeviceCounts {
    long long allocs = 0, frees = 0, syncs = 0;
  };
  virtual DeviceCounts device_counts() const { return {}; }
};

// One decode step (Engine::step): slots[i] takes counts[i] >= 1 consecutive tokens (tokens holds
// them slot after slot; counts empty: one each) at positions slot_length(slots[i]) onwards, each
// attending causally to its slot's earlier positions and to the ones before it in its run. Either
// the logits come back, a row per token in the same order (logits: sum(counts) x vocab_size), and
// the caller samples; or, with draws, row i is sampled on the engine's device by the rule and
// draws of sample_token (params->seed, prompt[i], candidate[i], step[i]) and only the samples
// come back (out; logits empty).
struct DecodeStep {
  std::span<const int> slots, tokens, counts;
  std::span<float> logits;
  struct Draws {
    const SamplingParams* params = nullptr;
    std::span<const std::uint64_t> prompt, candidate, step;
    std::span<Sample> out;
  };
  std::optional<Draws> draws;
};

class Engine {
 public:
  virtual ~Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // What the engine is, fixed when it is made (the protected members below): its model, its name
  // ("cpu", "cuda"; a test's wrapper names itself), its KV cache's precision as resolved from
  // EngineOptions::kv (never Auto), what it can do (EngineCapabilities above) and what it measures
  // of itself (EngineStatistics above; an engine that measures nothing answers empty defaults).
  const ModelConfig& config() const { return *config_; }
  const std::string& name() const { return name_; }
  EngineOptions::Kv kv_cache() const { return kv_cache_; }
  const EngineCapabilities& capabilities() const { return capabilities_; }
  EngineStatistics& statistics() { return statistics_ ? *statistics_ : no_statistics_; }
  // The CPU and CUDA engines describe themselves; an engine that wraps or fakes one (tests) is
  // described by its name alone.
  virtual EngineDescription describe() const { return {name(), name(), std::nullopt, std::nullopt}; }
  // Prefills `tokens` (1 <= size <= context) as a new prefix and writes the logits of its last
  // position into last_logits (vocab_size floats). Returns the prefix id.
  virtual int prefill(std::span<const int> tokens, std::span<float> last_logits) = 0;
  // Prefills several prompts, each as prefill does, and returns their prefix ids in order; row i
  // of last_logits (prompts.size() x vocab_size) gets prompt i's last-position logits. The rows of
  // all prompts go through the model in forward passes of at most max_pass_tokens (>= 1) rows
  // each (plan_prefill_passes): short prompts packed together, so that each linear layer is one
  // GEMM over all their rows; a prompt longer than what is left of a pass continues in the next
  // pass, as a chunk whose rows attend to themselves causally and to the prompt's earlier rows,
  // already in its cache. Bad input (an empty prompt, one past the context, an id outside the
  // vocabulary, a wrong logits size) throws before anything is prefilled; no prefix is left
  // behind by a throw. The default prefills one prompt after another (one pass each, whatever
  // max_pass_tokens); the CPU engine gives prefill's numbers bit for bit, the CUDA engine within
  // its parity tolerances (a GEMM over more rows may take another algorithm).
  virtual std::vector<int> prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                        int max_pass_tokens);
  // Frees a prefix; its slots must have been released first.
  virtual void release_prefix(int prefix) = 0;
  // A new candidate on `prefix`, with an empty suffix.
  virtual int add_slot(int prefix) = 0;
  // The same for a candidate that will feed at most `max_tokens` tokens, or nullopt when the
  // engine cannot promise room for them now (CUDA --paged-kv: not enough free KV blocks once the
  // admitted slots' budgets are counted); the scheduler then waits for a candidate to finish.
  virtual std::optional<int> try_add_slot(int prefix, int max_tokens) {
    (void)max_tokens;
    return add_slot(prefix);
  }
  virtual void release_slot(int slot) = 0;
  // Positions the slot holds (prefix + suffix): its next token goes at this position.
  virtual int slot_length(int slot) const = 0;
  // One step (DecodeStep above), checked against capabilities() in one place before any work:
  // runs of more than one token where the engine takes none, and draws where it does not sample
  // on its device, are refused in one line. Throws when a slot would pass the context.
  void step(const DecodeStep& s);
  // The step's three uses: one token per slot, the logits back; verification of drafted tokens
  // (--speculate: the caller drops the tokens it rejects with truncate_slot); sampling on the
  // device, which returns false, doing nothing, where the engine does not sample itself (the CPU
  // engine; CUDA without device sampling): the caller then decodes and samples the logits.
  void decode(std::span<const int> slots, std::span<const int> tokens, std::span<float> logits);
  void decode_runs(std::span<const int> slots, std::span<const int> counts, std::span<const int> tokens, std::span<float> logits);
  bool decode_sample(std::span<const int> slots, std::span<const int> tokens, const SamplingParams& params,
                     std::span<const std::uint64_t> prompt, std::span<const std::uint64_t> candidate,
                     std::span<const std::uint64_t> step, std::span<Sample> out);
  // Drops the slot's positions from `length` on (its prefix's length <= length <= slot_length):
  // its next token goes at `length`. The default only accepts length == slot_length.
  virtual void truncate_slot(int slot, int length);
  // Sizes every buffer a run of this shape needs, at its start (the CUDA engine: activations,
  // logits, staging, the sampler's workspace, the slots' parts; the CPU engine needs nothing).
  // A run that asks for more later still works: the buffer grows then (counted below).
  virtual void reserve(const RunShape& shape) { (void)shape; }

 protected:
  // An engine of this name on this model (the reference must outlive the engine). Its
  // capabilities start as the default: runs of one token only (why_no_runs says so, naming the
  // engine), no device sampling; its statistics as none; its KV cache as BF16. The derived
  // constructor sets what differs, before the engine is used.
  Engine(std::string name, const ModelConfig& config);
  // The step, once step() has checked it: counts hold runs longer than one token only where
  // capabilities().runs (else they are empty), draws only where capabilities().device_sampling.
  virtual void run_step(const DecodeStep& s) = 0;
  EngineOptions::Kv kv_cache_ = EngineOptions::Kv::BF16;
  EngineCapabilities capabilities_;
  EngineStatistics* statistics_ = nullptr;  // nullptr: none (the empty defaults)

 private:
  std::string name_;
  const ModelConfig* config_;
  static EngineStatistics no_statistics_;  // stateless: every method returns its empty default
};

// Bytes of K and V one position takes in every layer, for a resolved cache kind (not Auto): F32 4
// and BF16 2 bytes per value; FP8 one byte per value and a 4-byte scale per KV head.
inline std::size_t kv_bytes_per_position(const ModelConfig& c, EngineOptions::Kv kind) {
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim()), heads = static_cast<std::size_t>(c.n_kv_heads);
  const std::size_t row = kind == EngineOptions::Kv::FP8 ? kv_dim + 4 * heads : kv_dim * (kind == EngineOptions::Kv::F32 ? 4 : 2);
  return 2 * static_cast<std::size_t>(c.n_layers) * row;
}

// The rows of one prompt in one forward pass of prefill_many: positions [begin, end) of
// prompts[prompt].
struct PrefillSegment {
  std::size_t prompt = 0;
  int begin = 0, end = 0;
  bool operator==(const PrefillSegment&) const = default;
};
// The forward passes of prefill_many for prompts of these lengths (each >= 1): the prompts' rows
// in order, max_tokens (>= 1) to a pass, the last pass holding what is left. Every position of
// every prompt is in exactly one segment; a prompt's segments come in position order, in
// consecutive passes; a pass holds at most one segment per prompt.
std::vector<std::vector<PrefillSegment>> plan_prefill_passes(std::span<const int> lengths, int max_tokens);
// prefill_many's checks of its arguments (the message names the prompt): throws bestofn::Error.
void check_prefill_many(const ModelConfig& c, std::span<const std::span<const int>> prompts, std::size_t logits_size,
                        int max_pass_tokens);
// Prompt rows per prefill pass when nothing says otherwise (--prefill-tokens).
constexpr int kDefaultPrefillTokens = 8192;

std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options);

}  // namespace bestofn
