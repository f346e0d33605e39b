// The scheduler's batch trace of a best-of-N run, and its host time per step, without a model:
//   batch_trace --tokenizer TOKENIZER_JSON --prompts HumanEval.jsonl.gz [--n 100]
//               [--max-new-tokens 200] [--batch 2048] [--kv-blocks 0] [--out TRACE.jsonl]
// The real scheduler (bestofn::generate) runs the real prompts, tokenized by the real tokenizer,
// against a stand-in engine that does no arithmetic: prefill hands back flat logits, and each
// decode step "samples" one fixed ordinary token on the engine's side (as --device-sampling does),
// so no candidate meets EOS or a stop string and every one runs max_new_tokens tokens, which is
// what the synthetic-weight target run of issue 32 does on the GPU. Admission is the CUDA
// engine's --paged-kv rule (KvBlockPool: a slot is admitted when the free 16-position blocks cover
// its budget) when --kv-blocks > 0, else every slot fits.
//
// Writes one JSON line per prefill and per decode step to --out (what benchmarks/cost_model.py
// reads: the batch, its prefix groups, the prefix and suffix positions its attention reads), and
// prints one JSON summary line: steps, candidates, the host's time per step in the scheduler
// (median, p90; the engine here takes ~no time, so this is the scheduler's own work around a
// step), and the command.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/eval/datasets.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "bestofn_version.h"
#include "cuda/plan.h"

namespace {

using Clock = std::chrono::steady_clock;

// The stand-in engine: the bookkeeping of prefixes and slots an engine keeps, the CUDA engine's
// paged admission, no arithmetic. Each decode step is one trace line.
class TraceEngine final : public bestofn::Engine {
 public:
  TraceEngine(bestofn::ModelConfig c, int token, int kv_blocks, std::ostream& out)
      : Engine("trace", c_), c_(std::move(c)), token_(token), out_(out) {  // Engine keeps c_'s address, read after construction
    capabilities_ = {false, "batch_trace's stand-in engine takes no runs", true};
    if (kv_blocks > 0) pool_ = std::make_unique<bestofn::cuda::KvBlockPool>(kv_blocks, kBlock);
  }
  int prefill(std::span<const int> tokens, std::span<float> last_logits) override {
    std::fill(last_logits.begin(), last_logits.end(), 0.0f);
    const int id = next_prefix_++;
    prefixes_[id] = static_cast<int>(tokens.size());
    out_ << nlohmann::json{{"event", "prefill"}, {"prefix", id}, {"tokens", tokens.size()}}.dump() << '\n';
    return id;
  }
  void release_prefix(int p) override { prefixes_.erase(p); }
  int add_slot(int p) override {
    const int s = next_slot_++;
    slots_[s] = {p, 0, 0};
    return s;
  }
  std::optional<int> try_add_slot(int p, int max_tokens) override {
    if (!pool_) return add_slot(p);
    const int budget = pool_->blocks_for(max_tokens);
    if (!pool_->admit(budget)) return std::nullopt;
    const int s = add_slot(p);
    slots_[s].budget = budget;
    return s;
  }
  void release_slot(int s) override {
    const Slot& slot = slots_.at(s);
    if (pool_) {
      for (int b = 0; b < pool_->blocks_for(slot.len); ++b) pool_->give(blocks_.at(s)[static_cast<std::size_t>(b)]);
      pool_->retire(slot.budget);
      blocks_.erase(s);
    }
    slots_.erase(s);
  }
  int slot_length(int s) const override {
    const Slot& slot = slots_.at(s);
    return prefixes_.at(slot.prefix) + slot.len;
  }
  void run_step(const bestofn::DecodeStep& step) override {
    if (!step.draws) throw bestofn::Error("batch_trace: the stand-in engine samples on its side (decode_sample)");
    const std::span<const int> slots = step.slots, tokens = step.tokens;
    const std::span<bestofn::Sample> out = step.draws->out;
    if (last_return_.time_since_epoch().count() != 0) host_ms_.push_back(ms_since(last_return_));
    long long prefix_tokens = 0, suffix_tokens = 0;
    int max_suffix = 0;
    std::vector<int> groups;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      Slot& slot = slots_.at(slots[i]);
      if (pool_ && slot.len % kBlock == 0) {  // the row this token goes to starts a block
        const int b = pool_->take();
        if (b < 0) throw bestofn::Error("batch_trace: the block pool ran dry past its promises");
        pool_->taken(slot.budget--);
        blocks_[slots[i]].push_back(b);
      }
      slot.len++;
      (void)tokens;
      prefix_tokens += prefixes_.at(slot.prefix);
      suffix_tokens += slot.len;
      max_suffix = std::max(max_suffix, slot.len);
      groups.push_back(slot.prefix);
      out[i] = {token_, -1.0f};
    }
    std::sort(groups.begin(), groups.end());
    const auto n_groups = std::unique(groups.begin(), groups.end()) - groups.begin();
    long long group_prefix_tokens = 0;  // each group's prefix once: what cascade attention reads
    for (auto g = groups.begin(); g != groups.begin() + n_groups; ++g) group_prefix_tokens += prefixes_.at(*g);
    out_ << nlohmann::json{{"event", "step"},
                           {"T", slots.size()},
                           {"groups", n_groups},
                           {"prefix_tokens", prefix_tokens},
                           {"group_prefix_tokens", group_prefix_tokens},
                           {"suffix_tokens", suffix_tokens},
                           {"max_suffix", max_suffix}}
                .dump()
         << '\n';
    last_return_ = Clock::now();
  }
  const std::vector<double>& host_ms() const { return host_ms_; }

 private:
  static constexpr int kBlock = 16;  // the CUDA engine's PagedKv::kBlockTokens
  struct Slot {
    int prefix = 0, len = 0, budget = 0;
  };
  static double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
  bestofn::ModelConfig c_;
  int token_;
  std::ostream& out_;
  std::unique_ptr<bestofn::cuda::KvBlockPool> pool_;
  std::unordered_map<int, int> prefixes_;  // prefix -> its length
  std::unordered_map<int, Slot> slots_;
  std::unordered_map<int, std::vector<int>> blocks_;
  int next_prefix_ = 0, next_slot_ = 0;
  Clock::time_point last_return_{};
  std::vector<double> host_ms_;  // from a step's return to the next step's call: the scheduler's work
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path, prompts_path, out_path = "/dev/null", command = argv[0];
  int n = 100, max_new = 200, batch = 2048, kv_blocks = 0;
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") tok_path = argv[i + 1];
    else if (a == "--prompts") prompts_path = argv[i + 1];
    else if (a == "--out") out_path = argv[i + 1];
    else if (a == "--n") n = std::atoi(argv[i + 1]);
    else if (a == "--max-new-tokens") max_new = std::atoi(argv[i + 1]);
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--kv-blocks") kv_blocks = std::atoi(argv[i + 1]);
    else {
      std::cerr << "batch_trace: unknown option " << a << "\n";
      return 2;
    }
  }
  if (tok_path.empty() || prompts_path.empty() || n < 1 || max_new < 1 || batch < 1 || kv_blocks < 0) {
    std::cerr << "usage: batch_trace --tokenizer TOKENIZER_JSON --prompts FILE.jsonl[.gz] [--n 100] [--max-new-tokens 200]"
                 " [--batch 2048] [--kv-blocks 0] [--out TRACE.jsonl]\n";
    return 2;
  }
  try {
    const bestofn::Tokenizer tok = bestofn::Tokenizer::load(tok_path);
    const std::vector<bestofn::Problem> problems = bestofn::load_dataset(prompts_path, bestofn::default_data_dir());
    std::vector<bestofn::GenerationRequest> reqs;
    for (const bestofn::Problem& p : problems) {
      bestofn::GenerationRequest r;
      r.id = p.task_id, r.prompt_ids = tok.encode(p.prompt, true), r.n = n;
      reqs.push_back(std::move(r));
    }
    bestofn::ModelConfig c;  // the Llama 3.1 8B shape; only the vocabulary and the context matter here
    c.architecture = "LlamaForCausalLM", c.dim = 4096, c.hidden_dim = 14336, c.n_layers = 32, c.n_heads = 32;
    c.n_kv_heads = 8, c.head_dim = 128, c.vocab_size = tok.vocab_size(), c.max_position_embeddings = 131072;
    const std::vector<int> x = tok.encode(" x");  // an ordinary token: no EOS, no stop string
    std::ofstream out(out_path);
    if (!out) throw bestofn::Error(out_path + ": cannot write");
    TraceEngine engine(c, x.at(0), kv_blocks, out);
    bestofn::GenerationOptions go;
    go.max_new_tokens = max_new, go.batch = batch, go.overlap_stop_checks = true;
    if (tok.eos_id()) go.eos_ids = {*tok.eos_id()};
    const auto t0 = Clock::now();
    std::size_t candidates = 0;
    const bestofn::GenerationStats s = bestofn::generate(engine, tok, reqs, go, [&](bestofn::Candidate&&) { ++candidates; });
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    nlohmann::json j{{"bench", "batch_trace"},
                     {"command", command},
                     {"commit", BESTOFN_COMMIT},
                     {"prompts", reqs.size()},
                     {"candidates", candidates},
                     {"generated_tokens", s.generated_tokens},
                     {"prompt_tokens", s.prompt_tokens},
                     {"steps", s.steps},
                     {"batch", batch},
                     {"kv_blocks", kv_blocks},
                     {"seconds", seconds},
                     {"host_ms_per_step_median", quantile(engine.host_ms(), 0.5)},
                     {"host_ms_per_step_p90", quantile(engine.host_ms(), 0.9)},
                     {"note", "host_ms_per_step: the scheduler's work between two decode steps, engine excluded"}};
    std::cout << j.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "batch_trace: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
