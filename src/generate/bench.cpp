// bestofn bench: decode-step time against the number of candidates N sharing one prompt — the
// measurement behind "N candidates for the price of one". One JSON line per configuration.
#include "bestofn/generate/bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "bestofn/backends/backends.h"
#include "bestofn/engine/sampler.h"
#include "bestofn/generate/model_options.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/model/weights.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/parallel.h"
#include "bestofn_version.h"
#include "util/json_file.h"

namespace bestofn {

std::vector<int> parse_n(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    try {
      std::size_t used = 0;
      const int n = std::stoi(part, &used);
      if (used != part.size() || n < 1 || n > 4096) throw std::invalid_argument(part);
      out.push_back(n);
    } catch (const std::exception&) {
      throw Error("--n: '" + part + "' is not a count between 1 and 4096 (e.g. --n 1,2,4,8)");
    }
  }
  if (out.empty()) throw Error("--n: empty list");
  if (s.back() == ',') throw Error("--n: '" + s + "' ends in a comma: a count is missing (e.g. --n 1,2,4,8)");
  return out;
}

namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

json machine() {
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"host", host}, {"cpu", cpu}, {"cores", available_cpus()}};
}

constexpr int kProfileSteps = 4;

// Weights that multiply each token: the linear layers and the lm_head.
double linear_params(const ModelConfig& c) {
  const double d = c.dim, per_layer = d * c.q_dim() * 2 + d * c.kv_dim() * 2 + 3.0 * d * c.hidden_dim;
  return per_layer * c.n_layers + d * c.vocab_size;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The round trip of a cache line between two threads (ns): two threads hand a counter back and
// forth. On the development VM this tells where the hypervisor put the two vCPUs: ~85 ns when
// they share a last-level cache, ~370 ns when they do not, and the decode numbers move with it
// (docs/commands.md, CPU speed). 0 with one core.
double core_round_trip_ns() {
  if (default_threads() < 2) return 0.0;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the engine's idle workers stop polling (cpu/thread_pool.cpp)
  // Up to kTrips trips or 100 ms, whichever comes first (two threads on one core hand over only
  // at time slices); -1 tells the other thread to stop.
  constexpr int kTrips = 20000;
  alignas(64) std::atomic<int> turn{0};
  std::thread other([&] {
    for (int i = 0;; ++i) {
      int v;
      while ((v = turn.load(std::memory_order_acquire)) != 2 * i + 1 && v != -1) {
      }
      if (v == -1) return;
      turn.store(2 * i + 2, std::memory_order_release);
    }
  });
  const auto t0 = Clock::now();
  int trips = 0;
  while (trips < kTrips && (trips % 256 != 0 || ms_since(t0) < 100.0)) {
    turn.store(2 * trips + 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2 * trips + 2) {
    }
    ++trips;
  }
  const double ns = ms_since(t0) * 1e6 / trips;
  turn.store(-1, std::memory_order_release);
  other.join();
  return ns;
}

// The model: a directory, or a synthetic one made (or reused) for the run. A kept model carries
// what it was made from (kKeptMarker), so that a rerun with another --synthetic or --dtype makes
// no silent measurement of the old one.
constexpr const char* kKeptMarker = "bestofn-bench-model.json";

fs::path model_dir(const BenchOptions& o, std::optional<fs::path>& temp) {
  if (!o.model.empty()) return o.model;
  fs::path dir = o.keep_model;
  const nlohmann::json made = {{"synthetic", o.synthetic}, {"dtype", o.dtype}};
  std::error_code ec;
  if (!dir.empty() && fs::exists(dir, ec)) {
    const bool empty_dir = fs::is_directory(dir, ec) && fs::is_empty(dir, ec);
    if (!empty_dir) {
      if (!fs::is_regular_file(dir / kKeptMarker, ec))
        throw Error(dir.string(), "--keep-model: exists and is not a model that bench made; give a new directory or remove it");
      const nlohmann::json had = read_json_file(dir / kKeptMarker);
      if (had != made)
        throw Error(dir.string(), "--keep-model: holds the model of --synthetic " + had.value("synthetic", std::string("?")) +
                                      " --dtype " + had.value("dtype", std::string("?")) + ", not of --synthetic " + o.synthetic +
                                      " --dtype " + o.dtype + "; give another directory or remove it");
      return dir;
    }
  }
  if (dir.empty()) {
    temp = fs::temp_directory_path() / ("bestofn-bench-" + std::to_string(getpid()));
    dir = *temp;
  }
  SyntheticOptions so;
  so.shape = o.synthetic;
  so.dtype = o.dtype;
  so.out = dir;
  make_synthetic(so);
  if (!temp) write_json_file(dir / kKeptMarker, made);
  return dir;
}

// Positions: the prompt, then per candidate 2 warm-up steps, --steps timed ones and (CUDA)
// kProfileSteps profiling ones; more than the model's context is an Error.
void check_positions(const BenchOptions& o, const ModelConfig& c) {
  const int extra = o.steps + 2 + kProfileSteps + o.engine.speculate;  // --speculate: a step's run reaches K further
  if (o.prompt_len + extra > c.max_position_embeddings)
    throw Error("--prompt-len " + std::to_string(o.prompt_len) + " with --steps " + std::to_string(o.steps) + " needs " +
                std::to_string(o.prompt_len + extra) + " positions (2 warm-up and " + std::to_string(kProfileSteps) +
                " profiling steps included), more than the model's context of " + std::to_string(c.max_position_embeddings) +
                (c.max_position_embeddings > extra ? "; the largest --prompt-len with these --steps is " + std::to_string(c.max_position_embeddings - extra)
                                                   : std::string()));
}

// What one configuration (N candidates on the prompt) measured.
struct Measurement {
  double round_trip_ns = 0, prefill_ms = 0, ms = 0, sample_ms = 0;  // ms, sample_ms: per timed step
  PhaseTimes split;
  long long graph_replays = 0;
  EngineStatistics::AheadStats ahead;  // the run's steps (warm-up, timed, profiled), as the engine prepared them
};

// Whether the engine samples on the device (its CUDA path has --device-sampling).
bool samples_on_device(const EngineDescription& d) { return d.cuda && d.cuda->device_sampling; }

Measurement measure(const BenchOptions& o, Engine& engine, const EngineDescription& described, const std::vector<int>& prompt, int n) {
  const ModelConfig& c = engine.config();
  const bool device_sampling = samples_on_device(described);
  const std::size_t V = static_cast<std::size_t>(c.vocab_size);
  Measurement m;
  // Measured for the CPU engine only, whose threads hand work to each other through caches.
  m.round_trip_ns = described.cpu_kernels ? core_round_trip_ns() : 0.0;
  std::vector<float> logits(V);
  auto t0 = Clock::now();
  const int prefix = engine.prefill(prompt, logits);
  m.prefill_ms = ms_since(t0);
  std::vector<int> slots, tokens(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) slots.push_back(engine.add_slot(prefix));
  for (int i = 0; i < n; ++i) tokens[static_cast<std::size_t>(i)] = (prompt.back() + i) % c.vocab_size;
  logits.resize(V * static_cast<std::size_t>(n));
  // One step: logits to the host, or (--device-sampling) sampled on the device at T = 1, only
  // the samples back. The tokens fed stay the bench's own either way.
  std::vector<std::uint64_t> draw_prompt(static_cast<std::size_t>(n), 0), draw_candidate(static_cast<std::size_t>(n)),
      draw_step(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) draw_candidate[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(i);
  std::vector<Sample> samples(static_cast<std::size_t>(n));
  // --speculate K: each candidate takes K + 1 positions per step, as when its K drafts are
  // verified; then the K drafts are rolled back (all rejected: what a step costs, whatever is kept).
  const int run = 1 + o.engine.speculate;
  const std::vector<int> counts(static_cast<std::size_t>(n), run);
  std::vector<int> run_tokens(static_cast<std::size_t>(n * run));
  if (run > 1) logits.resize(V * run_tokens.size());
  auto one_step = [&] {
    if (run > 1) {
      for (std::size_t i = 0; i < run_tokens.size(); ++i) run_tokens[i] = (tokens[i / static_cast<std::size_t>(run)] + static_cast<int>(i)) % c.vocab_size;
      engine.decode_runs(slots, counts, run_tokens, logits);
      for (int slot : slots) engine.truncate_slot(slot, engine.slot_length(slot) - o.engine.speculate);
    } else if (device_sampling && engine.decode_sample(slots, tokens, SamplingParams{}, draw_prompt, draw_candidate, draw_step, samples))
      for (auto& d : draw_step) ++d;
    else
      engine.decode(slots, tokens, logits);
  };
  // Without --device-sampling, what generate does after each step on the host: sample_token
  // on every row (T = 1, no truncation), the rows split over threads as the scheduler splits
  // them; timed apart from the step.
  auto host_sample = [&](int step) {
    parallel_for(static_cast<std::size_t>(n), [&](std::size_t b0, std::size_t b1) {
      SamplerScratch scratch;
      for (std::size_t b = b0; b < b1; ++b)
        samples[b] = sample_token(std::span<const float>(logits).subspan(b * V, V), SamplingParams{}, 0, b, static_cast<std::uint64_t>(step), scratch);
    });
  };
  EngineStatistics& stats = engine.statistics();
  const long long replays_before = stats.graph_stats().replays;
  const EngineStatistics::AheadStats ahead_before = stats.ahead_stats();
  double timed = 0, sampling = 0;
  for (int step = 0; step < o.steps + 2; ++step) {
    if (step == 2) stats.take_phase_times();  // the split covers the timed steps only
    t0 = Clock::now();
    one_step();
    if (step >= 2) timed += ms_since(t0);
    if (!device_sampling) {
      t0 = Clock::now();
      host_sample(step);
      if (step >= 2) sampling += ms_since(t0);
    }
    for (auto& t : tokens) t = (t + 7) % c.vocab_size;
  }
  m.split = stats.take_phase_times();
  if (m.split.steps == 0) {  // an engine that measures only when asked (CUDA): a few profiling steps
    stats.profile_phases(true);
    for (int step = 0; step < kProfileSteps; ++step) one_step();
    m.split = stats.take_phase_times();
    stats.profile_phases(false);
  }
  m.graph_replays = stats.graph_stats().replays - replays_before;
  const EngineStatistics::AheadStats a = stats.ahead_stats();
  m.ahead = {a.in_place - ahead_before.in_place, a.copied - ahead_before.copied, a.full - ahead_before.full,
             a.cascade_ahead - ahead_before.cascade_ahead, a.cascade_planned - ahead_before.cascade_planned};
  for (int slot : slots) engine.release_slot(slot);
  engine.release_prefix(prefix);
  m.ms = timed / o.steps;
  m.sample_ms = sampling / o.steps;
  return m;
}

// The JSON line of one configuration: what was measured, and what it achieves (bytes and FLOPs
// per step, against the device's ceilings where the engine measured them).
json bench_row(const BenchOptions& o, const std::string& command, Engine& engine, const Weights& w, const fs::path& dir,
               const EngineDescription& described, const EngineStatistics::Ceilings& ceilings, int n, const Measurement& m) {
  const ModelConfig& c = w.config;
  const double ms = m.ms;
  // KV bytes per position (K and V, all layers), in the precision the engine resolved.
  const std::size_t kv_row = kv_bytes_per_position(c, engine.kv_cache());
  // Bytes one step reads: the weights once, the prefix KV once, each slot's suffix KV
  // (on average half the timed steps plus the warm-up long).
  const double suffix = 2.0 + o.steps / 2.0;
  const double bytes = static_cast<double>(w.decode_bytes_per_step()) + static_cast<double>(kv_row) * (o.prompt_len + n * suffix);
  json row = {{"bench", "decode"}, {"device", engine.name()}, {"model", dir.string()}, {"synthetic", o.synthetic},
              {"quantization", w.quantization}, {"n", n}, {"prompt_len", o.prompt_len}, {"steps", o.steps},
              {"ms_per_step", ms}, {"tok_per_s", n * 1000.0 / ms}, {"positions_per_candidate", 1 + o.engine.speculate},
              {"prefill_ms", m.prefill_ms},
              {"prefill_tok_per_s", o.prompt_len * 1000.0 / m.prefill_ms}, {"bytes_per_step", bytes},
              {"gb_per_s", bytes / ms / 1e6}, {"threads", engine_threads(o.engine.threads)},
              {"kv_cache", kv_cache_name(engine.kv_cache())},
              {"machine", machine()}, {"version", BESTOFN_VERSION}, {"commit", BESTOFN_COMMIT}, {"command", command}};
  if (const auto& kernels = described.cpu_kernels) {
    row["core_round_trip_ns"] = m.round_trip_ns;
    row["cpu_kernels"] = {{"fp8", kernels->fp8}, {"bf16", kernels->bf16}};  // which GEMM kernels ran
  }
  // FLOPs of a step: 2 per weight per token, plus attention's 4 hd per (query head, position).
  const double ctx = o.prompt_len + suffix;
  const double flops = 2.0 * static_cast<double>(linear_params(c)) * n * (1 + o.engine.speculate) +
                       4.0 * c.n_layers * c.n_heads * static_cast<double>(c.head_dim) * ctx * n;
  row["tflop_per_s"] = flops / ms / 1e9;
  if (!samples_on_device(described)) {
    row["host_sample_ms_per_step"] = m.sample_ms;
    row["tok_per_s_with_host_sampling"] = n * 1000.0 / (ms + m.sample_ms);
  }
  if (ceilings.copy_gbps > 0) {
    row["ceilings"] = {{"copy_gbps", ceilings.copy_gbps}, {"gemm_tflops", ceilings.gemm_tflops}, {"gemm", ceilings.gemm}};
    row["gb_per_s_frac_of_copy"] = bytes / ms / 1e6 / ceilings.copy_gbps;
    row["tflop_per_s_frac_of_gemm"] = flops / ms / 1e9 / ceilings.gemm_tflops;
  }
  if (const auto& p = described.cuda) {  // the path (cuda_paths.h) with any switch added, and why it ran
    row["cuda_path"] = p->path.empty() ? "custom" : p->path;
    row["cuda_path_why"] = p->why;
  }
  if (const auto& p = described.cuda)
    row["paths"] = {{"cuda_prefix_gemm", p->prefix_gemm}, {"fused_qkv", p->fused_qkv}, {"gemm_autotune", p->gemm_autotune},
                    {"paged_kv", p->paged_kv}, {"device_sampling", p->device_sampling},
                    {"split_attention", p->split_attention}, {"cuda_graphs", p->graphs}, {"cascade_attention", p->cascade_attention},
                    {"small_m_linear", p->small_m_linear}, {"small_m_split", p->small_m_split},
                    {"small_m_blocks_per_sm", p->small_m_blocks_per_sm}, {"small_m_pdl", p->small_m_pdl}};
  if (described.cuda)  // how the host prepared the steps: from the speculation made during the last one, or in full
    row["step_ahead"] = {{"patched_in_place", m.ahead.in_place}, {"patched_copied", m.ahead.copied}, {"full_plans", m.ahead.full},
                         {"cascade_plans_ahead", m.ahead.cascade_ahead}, {"cascade_plans_full", m.ahead.cascade_planned}};
  if (described.cuda && described.cuda->graphs) {  // steps of this N replayed from a graph; why capture stopped, if it did
    row["graph_replays"] = m.graph_replays;
    const EngineStatistics::GraphStats g = engine.statistics().graph_stats();
    row["graph_nodes"] = g.last_nodes;  // the launches of a step of this N, counted by CUDA
    if (!g.disabled.empty()) row["graphs_disabled"] = g.disabled;
  }
  if (m.split.steps > 0) {  // the engine's own split (CPU: wall clock per phase of the timed steps;
                            // CUDA: events in kProfileSteps extra steps)
    const double att = m.split.attention_ms / m.split.steps, gemm = m.split.gemm_ms / m.split.steps;
    row["split_ms_per_step"] = {{"attention", att}, {"gemm", gemm}, {"rest", m.split.total_ms / m.split.steps - att - gemm}};
    row["attention_ms_per_candidate"] = att / n;
    if (!m.split.detail_ms.empty()) {  // CUDA: kernel group by kernel group; "gaps": what they leave of the step
      json detail = json::object();
      double covered = 0;
      for (const auto& [name, t] : m.split.detail_ms) detail[name] = t / m.split.steps, covered += t;
      detail["gaps"] = (m.split.total_ms - covered) / m.split.steps;
      row["split_detail_ms_per_step"] = detail;
    }
  }
  return row;
}

// A line of the table (without --json): the row's numbers, the split where the engine made one,
// and on CUDA the path.
void print_row(const json& row, int n, const Measurement& m) {
  const double ms = m.ms, bytes = row["bytes_per_step"].get<double>();
  const std::string path = row.contains("cuda_path") ? " " + row["cuda_path"].get<std::string>() : "";
  if (m.split.steps > 0)
    std::printf("%6d %12.3f %12.1f %12.1f %12.1f %10.2f %10.3f %10.3f%s\n", n, ms, n * 1000.0 / ms, m.prefill_ms, bytes / 1e6,
                bytes / ms / 1e6, m.split.attention_ms / m.split.steps, m.split.gemm_ms / m.split.steps, path.c_str());
  else
    std::printf("%6d %12.3f %12.1f %12.1f %12.1f %10.2f%s\n", n, ms, n * 1000.0 / ms, m.prefill_ms, bytes / 1e6, bytes / ms / 1e6,
                path.c_str());
}

// bench's run as the CUDA defaults see it: n candidates on one prompt of --prompt-len tokens.
CudaShape bench_shape(const BenchOptions& o, int n) {
  CudaShape s;
  s.candidates_per_prompt = n, s.longest_prompt = o.prompt_len, s.speculate = o.engine.speculate;
  return s;
}

}  // namespace

int run_bench(const BenchOptions& o, const std::string& command) {
  const std::vector<int> ns = parse_n(o.n_list);
  std::optional<fs::path> temp;
  struct Cleanup {
    std::optional<fs::path>& p;
    ~Cleanup() {
      std::error_code ec;
      if (p) fs::remove_all(*p, ec);
    }
  } cleanup{temp};
  const fs::path dir = model_dir(o, temp);
  LoadOptions lo;
  lo.quantize_lm_head_fp8 = o.engine.quantize_lm_head;
  auto w = std::make_shared<const Weights>(load_model(dir, lo));
  const ModelConfig& c = w->config;
  check_positions(o, c);
  // On CUDA each N runs the path --cuda-path gives it (auto: the defaults' choice for N candidates
  // on one prompt): an engine per path, made when the path changes.
  const EngineOptions eo = engine_options(o.engine);
  auto engine = make_engine(w, o.device, eo, o.engine.cuda, bench_shape(o, ns.front()));
  EngineDescription described = engine->describe();
  const EngineStatistics::Ceilings ceilings = engine->statistics().measure_ceilings();  // zeros on the CPU
  std::mt19937 rng(1234);
  std::vector<int> prompt(static_cast<std::size_t>(o.prompt_len));
  for (auto& t : prompt) t = static_cast<int>(rng() % static_cast<unsigned>(c.vocab_size));
  if (!o.json)
    std::printf("%6s %12s %12s %12s %12s %10s %10s %10s%s\n", "N", "ms/step", "tok/s", "prefill ms", "MB/step", "GB/s", "attn ms", "gemm ms",
                described.cuda ? " cuda path" : "");
  for (int n : ns) {
    if (described.cuda && cuda_choice(*w, eo, o.engine.cuda, bench_shape(o, n)).options.path != described.cuda->path) {
      engine.reset();  // its memory (the paged pool takes half of what is free) before the next one's
      engine = make_engine(w, "cuda", eo, o.engine.cuda, bench_shape(o, n));
      described = engine->describe();
    }
    const Measurement m = measure(o, *engine, described, prompt, n);
    const json row = bench_row(o, command, *engine, *w, dir, described, ceilings, n, m);
    if (o.json) std::cout << json_text(row) << std::endl;
    else print_row(row, n, m);
  }
  return kExitOk;
}

}  // namespace bestofn
