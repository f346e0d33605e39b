#include "bestofn/generate/devices.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "bestofn/backends/backends.h"
#include "bestofn/util/error.h"

namespace bestofn {

std::vector<int> parse_devices(const std::string& text, int visible) {
  std::vector<int> out;
  if (text.empty()) {
    for (int d = 0; d < visible; ++d) out.push_back(d);
    if (out.empty()) throw Error("--devices: no CUDA device is visible (see CUDA_VISIBLE_DEVICES)");
    return out;
  }
  std::stringstream ss(text);
  std::set<int> seen;
  for (std::string part; std::getline(ss, part, ',');) {
    if (part.empty() || part.size() > 4 || part.find_first_not_of("0123456789") != std::string::npos)
      throw Error("--devices: '" + part + "' is not a device number (e.g. --devices 0,1,2,3)");
    const int d = std::stoi(part);
    if (d >= visible)
      throw Error("--devices: device " + part + " is not visible: this process sees " + std::to_string(visible) +
                  " CUDA device(s), numbered from 0 within CUDA_VISIBLE_DEVICES");
    if (!seen.insert(d).second) throw Error("--devices: device " + part + " is listed twice");
    out.push_back(d);
  }
  if (out.empty()) throw Error("--devices: empty list");
  if (text.back() == ',') throw Error("--devices: '" + text + "' ends in a comma: a device number is missing (e.g. --devices 0,1,2,3)");
  return out;
}

std::vector<int> choose_devices(std::string& device, const std::string& devices_flag) {
  const BackendInfo info = backend_info();
  if (!devices_flag.empty()) {
    if (device == "cpu") throw Error("--devices: selects GPUs for --device cuda (one engine per GPU); the CPU engine uses every core (--threads)");
    if (!info.cuda_built)
      throw Error("--devices: selects GPUs for --device cuda, and this build has no CUDA backend (nvcc was not found at build time, or "
                  "-DBESTOFN_CUDA=OFF); the CPU engine uses every core (--threads)");
    device = "cuda";
    return parse_devices(devices_flag, static_cast<int>(info.cuda_devices.size()));
  }
  if (device == "cpu" || info.cuda_devices.empty()) return {};  // CPU, or --device cuda's own error at load
  return parse_devices("", static_cast<int>(info.cuda_devices.size()));
}

std::vector<std::unique_ptr<Engine>> more_engines(const std::shared_ptr<const Weights>& weights, const std::vector<int>& devices,
                                                  const EngineOptions& options) {
  std::vector<std::unique_ptr<Engine>> out;
  for (std::size_t i = 1; i < devices.size(); ++i) {
    EngineOptions eo = options;
    eo.cuda.device_index = devices[i];
    out.push_back(make_engine(weights, "cuda", eo));
  }
  return out;
}

namespace {

// The requests of engine e of E: each request's candidates at positions j with j mod E == e,
// keeping its RNG prompt index; origin[i] is the request it came from.
std::vector<GenerationRequest> deal(const std::vector<GenerationRequest>& reqs, const GenerationOptions& go, std::size_t e, std::size_t E,
                                    std::vector<std::size_t>& origin) {
  std::vector<GenerationRequest> out;
  for (std::size_t r = 0; r < reqs.size(); ++r) {
    std::vector<int> all = reqs[r].indices;
    if (all.empty())
      for (int c = 0; c < reqs[r].n; ++c) all.push_back(c);
    GenerationRequest mine = reqs[r];
    mine.indices.clear();
    for (std::size_t j = e; j < all.size(); j += E) mine.indices.push_back(all[j]);
    if (mine.indices.empty()) continue;
    mine.rng_prompt = reqs[r].rng_prompt.value_or(go.prompt_index_base + r);
    out.push_back(std::move(mine));
    origin.push_back(r);
  }
  return out;
}

void add_stats(GenerationStats& total, const GenerationStats& s) {
  total.generated_tokens += s.generated_tokens, total.prompt_tokens += s.prompt_tokens, total.steps += s.steps;
  total.cancelled += s.cancelled, total.prefill_seconds += s.prefill_seconds, total.decode_seconds += s.decode_seconds;
  total.drafted_tokens += s.drafted_tokens, total.accepted_tokens += s.accepted_tokens, total.candidate_steps += s.candidate_steps;
  total.draft_seconds += s.draft_seconds, total.sample_seconds += s.sample_seconds;
}

}  // namespace

GenerationStats generate_data_parallel(const std::vector<Engine*>& engines, const Tokenizer& tokenizer,
                                       const std::vector<GenerationRequest>& requests, const GenerationOptions& options,
                                       const std::function<void(Candidate&&)>& on_done,
                                       const std::function<void(const GenerationStats&, std::size_t done)>& on_step) {
  if (engines.size() == 1) return generate(*engines[0], tokenizer, requests, options, on_done, on_step);
  const std::size_t E = engines.size();
  std::mutex mu;
  std::vector<GenerationStats> stats(E);
  std::vector<std::size_t> done(E, 0);
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (std::size_t e = 0; e < E; ++e) {
    threads.emplace_back([&, e] {
      try {
        std::vector<std::size_t> origin;
        const std::vector<GenerationRequest> mine = deal(requests, options, e, E, origin);
        GenerationOptions go = options;
        go.cancelled = [&](std::size_t p) { return failed.load() || (options.cancelled && options.cancelled(origin[p])); };
        auto done_one = [&](Candidate&& c) {
          c.prompt = origin[c.prompt];
          std::lock_guard<std::mutex> lock(mu);
          on_done(std::move(c));
        };
        auto step = [&](const GenerationStats& s, std::size_t n) {
          std::lock_guard<std::mutex> lock(mu);
          stats[e] = s, done[e] = n;
          if (!on_step) return;
          GenerationStats total;
          std::size_t total_done = 0;
          for (std::size_t i = 0; i < E; ++i) add_stats(total, stats[i]), total_done += done[i];
          on_step(total, total_done);
        };
        const GenerationStats s = generate(*engines[e], tokenizer, mine, go, done_one, step);
        std::lock_guard<std::mutex> lock(mu);
        stats[e] = s;
      } catch (...) {
        failed = true;
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  GenerationStats total;
  for (const auto& s : stats) add_stats(total, s);
  return total;
}

}  // namespace bestofn
