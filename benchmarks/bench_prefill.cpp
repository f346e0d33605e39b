// Prefill of many prompts, one by one (Engine::prefill per prompt, as the scheduler did before
// prefill_many) against batched (Engine::prefill_many with --tokens rows per pass), side by side in
// one run on one engine: by default the 164 HumanEval prompts encoded with the model's tokenizer.
// Each repetition runs every mode once, in turn, and frees its prefixes; each mode's wall and
// process CPU times are medians over the repetitions. The last-row logits of every mode are compared with the one-by-one
// ones (max |difference|: 0 on the CPU engine). One JSON line per mode:
//   bench_prefill --model DIR [--tokenizer DIR] [--dataset humaneval] [--data-dir DIR]
//                 [--device cpu|cuda|auto] [--threads N] [--tokens 512,2048,8192] [--repeat 3] [--limit K]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "bestofn/backends/backends.h"
#include "bestofn/engine/engine.h"
#include "bestofn/eval/datasets.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "bestofn_version.h"

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  for (std::size_t at = 0; at <= s.size();) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

// CPU time of the whole process (every thread, spinning pool workers included): less moved than
// the wall time by other processes on a shared machine.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model, tokenizer, dataset = "humaneval", data_dir, device = "cpu", tokens_list = "512,2048,8192";
  int threads = 0, repeat = 3, limit = 0;
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--tokenizer") tokenizer = v;
    else if (k == "--dataset") dataset = v;
    else if (k == "--data-dir") data_dir = v;
    else if (k == "--device") device = v;
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--tokens") tokens_list = v;
    else if (k == "--repeat") repeat = std::stoi(v);
    else if (k == "--limit") limit = std::stoi(v);
    else throw bestofn::Error("bench_prefill: unknown flag " + k);
  }
  if (model.empty()) throw bestofn::Error("bench_prefill: --model DIR is required");
  if (repeat < 1) throw bestofn::Error("bench_prefill: --repeat must be at least 1");
  const bestofn::Tokenizer tok = bestofn::Tokenizer::load(tokenizer.empty() ? model : tokenizer);
  auto weights = std::make_shared<const bestofn::Weights>(bestofn::load_model(model));
  bestofn::EngineOptions eo;
  eo.threads = threads;
  auto engine = bestofn::make_engine(weights, device, eo);
  std::vector<std::vector<int>> prompts;
  for (const bestofn::Problem& p : bestofn::load_dataset(dataset, data_dir.empty() ? bestofn::default_data_dir() : std::filesystem::path(data_dir))) {
    if (limit > 0 && static_cast<int>(prompts.size()) == limit) break;
    prompts.push_back(tok.encode(p.prompt, tok.bos_id().has_value()));
  }
  const std::vector<std::span<const int>> spans(prompts.begin(), prompts.end());
  std::size_t prompt_tokens = 0, longest = 0;
  std::vector<int> lengths;
  for (const auto& p : prompts) prompt_tokens += p.size(), longest = std::max(longest, p.size()), lengths.push_back(static_cast<int>(p.size()));
  const auto V = static_cast<std::size_t>(weights->config.vocab_size);

  // Mode 0: one by one; mode k > 0: prefill_many with budgets[k - 1] rows per pass.
  const std::vector<int> budgets = int_list(tokens_list);
  const std::size_t modes = budgets.size() + 1;
  std::vector<std::vector<double>> secs(modes), cpu_secs(modes);
  std::vector<std::vector<float>> logits(modes, std::vector<float>(prompts.size() * V));
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < repeat; ++r)
    for (std::size_t m = 0; m < modes; ++m) {
      std::vector<int> ids;
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      if (m == 0) {
        for (std::size_t p = 0; p < prompts.size(); ++p)
          ids.push_back(engine->prefill(prompts[p], std::span<float>(logits[0]).subspan(p * V, V)));
      } else {
        ids = engine->prefill_many(spans, logits[m], budgets[m - 1]);
      }
      secs[m].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      cpu_secs[m].push_back(process_cpu_seconds() - c0);
      for (int id : ids) engine->release_prefix(id);
    }
  const double base = median(secs[0]);
  for (std::size_t m = 0; m < modes; ++m) {
    double diff = 0;
    for (std::size_t i = 0; i < logits[m].size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(logits[m][i] - logits[0][i])));
    const double s = median(secs[m]);
    nlohmann::json line = {{"bench", "prefill"},
                           {"mode", m == 0 ? "one_by_one" : "batched"},
                           {"prefill_tokens", m == 0 ? nlohmann::json(nullptr) : nlohmann::json(budgets[m - 1])},
                           {"passes", m == 0 ? prompts.size() : bestofn::plan_prefill_passes(lengths, budgets[m - 1]).size()},
                           {"prompts", prompts.size()},
                           {"prompt_tokens", prompt_tokens},
                           {"longest_prompt", longest},
                           {"seconds_median", s},
                           {"seconds", secs[m]},
                           {"cpu_seconds_median", median(cpu_secs[m])},
                           {"cpu_seconds", cpu_secs[m]},
                           {"prompt_tok_per_s", static_cast<double>(prompt_tokens) / s},
                           {"speedup_vs_one_by_one", base / s},
                           {"max_abs_logit_diff_vs_one_by_one", diff},
                           {"device", engine->describe().device},
                           {"engine", engine->name()},
                           {"model", model},
                           {"dim", weights->config.dim},
                           {"layers", weights->config.n_layers},
                           {"vocab", weights->config.vocab_size},
                           {"cpu", cpu_model()},
                           {"threads", threads},
                           {"commit", BESTOFN_COMMIT},
                           {"command", command}};
    std::printf("%s\n", line.dump().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_prefill: %s\n", e.what());
  return 1;
}
