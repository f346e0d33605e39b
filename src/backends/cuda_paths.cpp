// The CUDA engine's named paths, its switches, and the default path of a run
// (bestofn/backends/cuda_paths.h). Plain C++ in bestofn_core: the choice is tested without a GPU.
#include "bestofn/backends/cuda_paths.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "bestofn/model/weights.h"
#include "bestofn/util/error.h"

namespace bestofn {
namespace {

// The defaults table's types; its data is generated (tools/cuda_defaults.py).
struct DefaultsRun {
  const char* date;
  const char* device;
  const char* commit;
  int capability;  // major * 10 + minor
};
struct DefaultRow {
  int candidates_per_prompt, prompts_per_step;
  const char* ranking[6];  // the paths whose tests passed, fastest first; nullptr after the last
  const char* measured;    // what they measured there
};
#include "backends/default_paths.inc"

CudaOptions features(bool split, bool fused, bool sampling, bool graphs) {
  CudaOptions o;
  o.split_attention = split, o.fused_qkv = fused, o.device_sampling = sampling, o.graphs = graphs;
  return o;
}

std::vector<CudaPath> make_paths() {
  CudaOptions graphs = features(true, true, true, true);
  CudaOptions prefix = graphs;
  prefix.prefix_gemm = prefix.paged_kv = true;
  CudaOptions cascade = features(false, true, true, true);
  cascade.cascade_attention = cascade.paged_kv = true;
  CudaOptions small_m = graphs;
  small_m.small_m_linear = true;
  return {
      {"reference", "the plain path, none of the optional features (for A/B and bug reports)", {}},
      {"graphs", "each step a replayed CUDA graph; tiled split attention, fused q/k/v and gate/up GEMMs, sampling on the device",
       graphs},
      {"prefix-gemm", "graphs, with each prompt's shared-prefix attention as batched GEMMs (Hydragen) and paged suffix KV", prefix},
      {"cascade", "every prompt's shared prefix in one FlashInfer launch per layer, paged suffixes, fused GEMMs, device sampling, graphs",
       cascade},
      {"small-m", "graphs, with FP8 layers of 1-64 rows on bestofn's own kernels (weight-streaming, then mma) in place of cuBLASLt",
       small_m},
  };
}

const std::vector<CudaPath>& paths() {
  static const std::vector<CudaPath> all = make_paths();
  return all;
}

const CudaSwitch kSwitches[] = {
    {"--cuda-prefix-gemm", "CUDA: shared-prefix attention as batched GEMMs (Hydragen), for prompts with 2+ candidates in a step",
     &CudaOptions::prefix_gemm},
    {"--fused-qkv", "CUDA: fused q/k/v and gate/up GEMMs; on FP8 also RMSNorm and SwiGLU fused with the activation quantization",
     &CudaOptions::fused_qkv},
    {"--gemm-autotune", "CUDA: time GEMM algorithms at first use, cached in ~/.cache/bestofn/gemm_algos.json", &CudaOptions::gemm_autotune},
    {"--paged-kv", "CUDA: suffix KV in 16-token blocks, candidates admitted by free blocks", &CudaOptions::paged_kv},
    {"--device-sampling", "CUDA: sample on the device, only the sampled ids come back; the host checks stop strings during the next step",
     &CudaOptions::device_sampling},
    {"--split-attention", "CUDA: tiled decode attention per KV head, each candidate's positions split over blocks when few candidates",
     &CudaOptions::split_attention},
    {"--cuda-graphs", "CUDA: capture each decode step into a CUDA graph per batch shape, then replay it", &CudaOptions::graphs},
    {"--cascade-attention",
     "CUDA: every prompt's shared-prefix attention in one tensor-core launch per layer (FlashInfer; head_dim 128); with --paged-kv and "
     "BF16 KV the candidates' suffixes in one paged-decode launch (FlashInfer; 4 query heads per KV head), else by a per-candidate kernel",
     &CudaOptions::cascade_attention},
    {"--small-m-linear",
     "CUDA: FP8 linear layers of steps with 1-8 rows as one weight-streaming kernel with the scales fused (in place of cuBLASLt's GEMM "
     "and the scale kernel), 9-64 rows on tensor cores; with --fused-qkv on an FP8 model, a layer in six launches (the norms, "
     "quantizations, RoPE and residual adds inside them)",
     &CudaOptions::small_m_linear},
    {"--small-m-split", "CUDA, with --small-m-linear: the norms, quantizations and RoPE as their own launches (to measure the fused layer "
                        "against)",
     &CudaOptions::small_m_split},
    {"--small-m-pdl", "CUDA, with --small-m-linear: its kernels as programmatic dependent launches, each prefetching its first weights "
                      "into L2 while the kernel before it finishes (to measure against)",
     &CudaOptions::small_m_pdl},
};

// The switches on in `on` that `base` lacks, as typed (with --kv-blocks and
// --small-m-blocks-per-sm when set).
std::vector<std::string> switches_over(const CudaOptions& on, const CudaOptions& base) {
  std::vector<std::string> out;
  for (const CudaSwitch& s : kSwitches) {
    if (on.*s.feature && !(base.*s.feature)) out.emplace_back(s.flag);
    if (s.feature == &CudaOptions::paged_kv && on.kv_blocks > 0) out.push_back("--kv-blocks " + std::to_string(on.kv_blocks));
  }
  if (on.small_m_blocks_per_sm > 0) out.push_back("--small-m-blocks-per-sm " + std::to_string(on.small_m_blocks_per_sm));
  return out;
}

std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

// A path with the switches given added; options.path names both.
CudaChoice with_switches(const CudaPath& p, const CudaFlags& flags) {
  CudaChoice c{std::string(p.name), p.options, ""};
  for (const CudaSwitch& s : kSwitches) c.options.*s.feature = c.options.*s.feature || flags.added.*s.feature;
  c.options.kv_blocks = flags.added.kv_blocks;
  c.options.small_m_blocks_per_sm = flags.added.small_m_blocks_per_sm;
  const std::string extra = joined(switches_over(flags.added, p.options), " ");
  c.options.path = c.path + (extra.empty() ? "" : " " + extra);
  return c;
}

template <std::size_t N>
bool listed(const char* const (&list)[N], const std::string& name) {
  for (const char* item : list)
    if (name == item) return true;
  return false;
}

// The row whose shape is nearest the run's: log2 distance over candidates per prompt and prompts
// per step (the first of equals).
const DefaultRow& nearest_row(const CudaShape& shape) {
  const double c = std::log2(std::max(shape.candidates_per_prompt, 1)), p = std::log2(std::max(shape.prompts_per_step, 1));
  const DefaultRow* best = &kRows[0];
  double best_d = INFINITY;
  for (const DefaultRow& r : kRows) {
    const double dc = std::log2(r.candidates_per_prompt) - c, dp = std::log2(r.prompts_per_step) - p;
    if (dc * dc + dp * dp < best_d) best_d = dc * dc + dp * dp, best = &r;
  }
  return *best;
}

std::string shape_text(const CudaShape& s) {
  return std::to_string(s.candidates_per_prompt) + " candidate" + (s.candidates_per_prompt == 1 ? "" : "s") + " per prompt, " +
         std::to_string(s.prompts_per_step) + " prompt" + (s.prompts_per_step == 1 ? "" : "s") + " per step";
}

}  // namespace

std::span<const CudaPath> cuda_paths() { return paths(); }

const CudaPath* find_cuda_path(std::string_view name) {
  for (const CudaPath& p : paths())
    if (p.name == name) return &p;
  return nullptr;
}

std::string cuda_path_names() {
  std::string s = "auto";
  for (const CudaPath& p : paths()) s += ", " + std::string(p.name);
  return s;
}

std::span<const CudaSwitch> cuda_switches() { return kSwitches; }

std::string cuda_switches_text(const CudaOptions& on, const char* separator) { return joined(switches_over(on, {}), separator); }

CudaChoice choose_cuda_path(const CudaFlags& flags, const CudaRun& run) {
  if (flags.path != "auto") {
    const CudaPath* p = find_cuda_path(flags.path);
    if (!p) throw Error("--cuda-path: '" + flags.path + "' is not one of " + cuda_path_names());
    CudaChoice c = with_switches(*p, flags);
    if (const std::string no = cuda_refusal(c.options, run); !no.empty()) throw Error("--cuda-path " + flags.path + ": " + no);
    c.why = c.options.why = "named by --cuda-path";
    return c;
  }
  const std::string source = "the " + cuda_defaults_source();
  auto fallback = [&](const std::string& why) {
    CudaChoice c = with_switches(*find_cuda_path("reference"), flags);
    c.why = c.options.why = why;
    return c;
  };
  if (run.capability != kRun.capability)
    return fallback("compute capability " + capability_text(run.capability) + ": the defaults come from " + source + " (compute capability " +
                    capability_text(kRun.capability) + "); no device run has verified a faster path on this one");
  if (!listed(kVerifiedWeights, run.weights))
    return fallback(run.weights + " weights: " + source + " verified the faster paths on " + joined({std::begin(kVerifiedWeights), std::end(kVerifiedWeights)}, ", ") +
                    " weights only");
  const std::string kv = run.kv == EngineOptions::Kv::FP8 ? "fp8" : "bf16";
  if (!listed(kVerifiedKv, kv))
    return fallback("--kv-cache " + kv + ": " + source + " verified the faster paths with a " + joined({std::begin(kVerifiedKv), std::end(kVerifiedKv)}, ", ") +
                    " KV cache only");
  const DefaultRow& row = nearest_row(run.shape);
  std::vector<std::string> order;
  for (const char* name : row.ranking)
    if (name) order.emplace_back(name);
  if (std::find(order.begin(), order.end(), "reference") == order.end()) order.emplace_back("reference");
  std::vector<std::string> passed_over;
  for (const std::string& name : order) {
    const CudaPath* p = find_cuda_path(name);
    if (!p) continue;  // a name the registry lacks (test_cuda_paths forbids it)
    CudaChoice c = with_switches(*p, flags);
    const std::string no = cuda_refusal(c.options, run);
    if (!no.empty()) {
      passed_over.push_back(name + " (" + no + ")");
      continue;
    }
    c.why = "the fastest that accepts this run (" + shape_text(run.shape) + ") at the nearest shape " + source + " measured: " + row.measured +
            (passed_over.empty() ? "" : "; passed over: " + joined(passed_over, ", "));
    c.options.why = c.why;
    return c;
  }
  return fallback("every path refuses this run with the switches given (" + joined(passed_over, ", ") + ")");
}

std::string cuda_defaults_source() {
  return std::string(kRun.date) + " " + kRun.device + " run at " + kRun.commit;
}

std::vector<CudaDefaultRow> cuda_defaults_table() {
  std::vector<CudaDefaultRow> rows;
  for (const DefaultRow& r : kRows) {
    CudaDefaultRow row{r.candidates_per_prompt, r.prompts_per_step, {}, r.measured};
    for (const char* name : r.ranking)
      if (name) row.ranking.emplace_back(name);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace bestofn
