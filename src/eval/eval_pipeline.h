#pragma once
// eval's pipeline: generation and verification at once, on what an earlier run left (the resume
// state), stopped by SIGINT or SIGTERM with what is written valid (src/eval/eval_pipeline.cpp).
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/eval_files.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/eval/evalplus_rules.h"
#include "bestofn/eval/run_eval.h"
#include "bestofn/eval/scoring.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/verifier/sandbox.h"
#include "bestofn/verifier/verifier.h"

namespace bestofn {

// What is already done in the output directory: samples generated, and of those, the ones verified.
struct ResumeState {
  Tally tally;
  std::map<std::string, std::size_t> index_of;  // task id -> position in the selection
  std::vector<std::set<int>> generated;
  std::map<std::pair<std::string, int>, nlohmann::json> unverified;
  std::size_t resumed_samples = 0;
};

// How the pipeline went: its generation, its verifier pool and its clocks.
struct PipelineStats {
  GenerationStats gs;
  double generation_s = 0, busy = 0, overlap = 0, wall = 0, waited = 0;
  std::size_t verified = 0, verified_now = 0;
};

// Whether SIGINT or SIGTERM came during a Pipeline::run (eval then exits 130).
bool eval_interrupted();

// Generation and verification at once: each finished candidate is appended to samples.jsonl and
// handed to the verifier pool, whose verdicts are appended to results.jsonl.
class Pipeline {
 public:
  // has_plus: a selected problem has HumanEval+ plus tests (the result rows then carry plus fields).
  Pipeline(const EvalOptions& o, const std::vector<Problem>& problems, const std::vector<const Problem*>& selected, bool has_plus,
           RunFiles& files, ResumeState& state, std::size_t total_samples);

  // Whether generation for a problem stops: on a signal, a failed write, or (--stop-on-pass) a pass.
  bool cancelled(std::size_t problem) const;

  // Verifies what an earlier run generated but did not verify, and generates and verifies `reqs`
  // (req_problem: each request's problem) on `engines`, stopping early on a signal.
  // rules: whose rules judge (evalplus_rules.h); EvalPlus's compute every reference first.
  PipelineStats run(const std::vector<Engine*>& engines, const Tokenizer& tokenizer, const std::vector<GenerationRequest>& reqs,
                    const std::vector<std::size_t>& req_problem, const GenerationOptions& go, const Sandbox& sandbox, int workers,
                    RulesSetup& rules);

 private:
  using Clock = std::chrono::steady_clock;
  nlohmann::json sample_row(const Problem& p, const Candidate& c) const;
  // --prompt-style evalplus: a job that sanitizes `text` (sanitize.h) into solutions_[key], then
  // runs sample_job on the solution.
  VerifyJob evalplus_job(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& p, const std::string& key, std::string text);
  // A verifier thread's verdicts: the result row, written and counted (with mu_). solution_key:
  // the sample's solution is solutions_[*solution_key], added to its row; write_sample: the sample
  // row is written first (a sample is written with its solution, once it has one).
  void on_verified(const Problem& problem, nlohmann::json sample, const std::vector<Verdict>& verdicts, const std::string* solution_key = nullptr,
                   bool write_sample = false);
  // The progress line on a terminal, at most every 250 ms unless forced (with mu_ held).
  void progress(bool force);

  const EvalOptions& o_;
  const std::vector<Problem>& problems_;
  const std::vector<const Problem*>& selected_;
  const bool has_plus_;
  const bool evalplus_;  // --prompt-style evalplus: samples are judged by their sanitized "solution"
  const JudgeRules* rules_ = nullptr;  // run()'s
  RunFiles& files_;
  ResumeState& st_;
  const std::size_t total_samples_;
  std::vector<std::atomic<int>> passes_;  // passing samples per problem (for --until-pass / --stop-on-pass)
  // One mutex for the results file, the tally and the counters.
  std::mutex mu_;
  PipelineStats stats_;
  std::uint64_t tokens_ = 0;
  const bool tty_;
  const Clock::time_point t0_;
  Clock::time_point last_print_;
  std::exception_ptr write_error_;  // the first failed write of a verifier thread (with mu_)
  // --prompt-style evalplus: each sanitized solution by its job's key, kept for the run as the
  // pool keeps its verdicts (identical samples share one job: their callbacks read it here).
  std::map<std::string, std::string> solutions_;  // with mu_
};

}  // namespace bestofn
