// eval's pipeline: the engine streams each finished candidate into a bounded queue that the
// verifier pool drains while generation goes on; samples and results are appended row by row.
#include "eval/eval_pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <tuple>

#include "bestofn/eval/extract.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/eval/prompt_style.h"
#include "bestofn/eval/sanitize.h"
#include "bestofn/eval/verify_jobs.h"
#include "bestofn/generate/devices.h"
#include "bestofn/util/temp_paths.h"

namespace bestofn {
namespace {
using nlohmann::json;

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
}  // namespace

bool eval_interrupted() { return g_interrupted.load(); }

Pipeline::Pipeline(const EvalOptions& o, const std::vector<Problem>& problems, const std::vector<const Problem*>& selected, bool has_plus,
                   RunFiles& files, ResumeState& state, std::size_t total_samples)
    : o_(o), problems_(problems), selected_(selected), has_plus_(has_plus),
      evalplus_(parse_prompt_style(o.prompt_style) == PromptStyle::Evalplus), files_(files), st_(state), total_samples_(total_samples),
      passes_(selected.size()), tty_(isatty(STDERR_FILENO)), t0_(Clock::now()), last_print_(t0_) {
  stats_.verified = state.resumed_samples;
  for (std::size_t i = 0; i < selected.size(); ++i) passes_[i] = state.tally.passed(selected[i]->task_id);
}

bool Pipeline::cancelled(std::size_t problem) const {
  return g_stop.load() || (o_.stop_after() > 0 && passes_[problem].load() >= o_.stop_after());
}

PipelineStats Pipeline::run(const std::vector<Engine*>& engines, const Tokenizer& tokenizer, const std::vector<GenerationRequest>& reqs,
                            const std::vector<std::size_t>& req_problem, const GenerationOptions& go, const Sandbox& sandbox, int workers,
                            RulesSetup& rules) {
  const std::size_t capacity = o_.queue > 0 ? static_cast<std::size_t>(o_.queue) : 64u * static_cast<std::size_t>(workers);
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  ReferenceOutputs refs;  // declared before the pool: its workers use it until the pool is gone
  rules_ = &rules.rules;
  rules.prepare(sandbox, refs, selected_, workers);  // EvalPlus's references (and times) before any candidate runs
  VerifierPool pool(workers, capacity, &g_stop);
  // A sample's job; its callback holds the row until the verdicts come. fresh: not written yet.
  auto submit = [&](const Problem& p, json row, bool fresh) {
    if (evalplus_ && !row.contains("solution")) {  // sanitized on the worker; a fresh row is written with its solution
      std::string text = evalplus_sanitizer_input(p, row["completion"].get<std::string>(), o_.m.chat);
      std::string key = "S" + std::to_string(reinterpret_cast<std::uintptr_t>(&p)) + " " + text;  // sample_job's keys begin with a digit
      VerifyJob job = evalplus_job(sandbox, refs, p, key, std::move(text));
      return pool.submit(std::move(job), [this, &p, row = std::move(row), key, fresh](const std::vector<Verdict>& v) {
        on_verified(p, row, v, &key, fresh);
      });
    }
    if (fresh) files_.append_sample(row);  // one engine at a time (generate_data_parallel's lock)
    VerifyJob job = sample_job(sandbox, refs, p, row_code(p, row), std::max(o_.timeout, o_.plus_timeout), rules.rules);
    return pool.submit(std::move(job), [this, &p, row = std::move(row)](const std::vector<Verdict>& v) { on_verified(p, row, v); });
  };
  for (auto& [key, row] : st_.unverified) submit(*selected_[st_.index_of[key.first]], row, false);  // generated before, not verified
  const auto g0 = Clock::now();
  auto on_done = [&](Candidate&& c) {
    const Problem& p = *selected_[req_problem[c.prompt]];
    stats_.waited += submit(p, sample_row(p, c), true);
  };
  auto on_step = [&](const GenerationStats& s, std::size_t) {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_ = s.generated_tokens;
    progress(false);
  };
  try {
    if (!reqs.empty()) stats_.gs = generate_data_parallel(engines, tokenizer, reqs, go, on_done, on_step);
  } catch (...) {
    g_stop = true;  // the verifier threads stop too, leaving what is written valid
    throw;
  }
  const auto g1 = Clock::now();
  pool.finish();
  if (write_error_) std::rethrow_exception(write_error_);
  std::tie(stats_.busy, stats_.overlap) = pool.busy_and_overlap(g0, g1);
  stats_.wall = std::chrono::duration<double>(Clock::now() - t0_).count();
  stats_.generation_s = std::chrono::duration<double>(g1 - g0).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    progress(true);
  }
  if (tty_) std::fprintf(stderr, "\n");
  return stats_;
}

json Pipeline::sample_row(const Problem& p, const Candidate& c) const {
  // --prompt-style evalplus: the completion is the text as generated (its code is the "solution").
  json row = {{"task_id", p.task_id},
              {"completion", o_.m.chat && !evalplus_ ? extract_code(c.text, p.entry_point) : c.text},
              {"index", c.index},
              {"finish_reason", c.finish_reason},
              {"num_tokens", c.token_ids.size()},
              {"logprob", c.cumulative_logprob}};
  if (o_.m.chat && !evalplus_) row["reply"] = c.text;
  return row;
}

VerifyJob Pipeline::evalplus_job(const Sandbox& sandbox, ReferenceOutputs& refs, const Problem& p, const std::string& key, std::string text) {
  return {key, [this, &sandbox, &refs, &p, key, text = std::move(text)](int worker) {
            const Sanitized s = sanitize(sandbox, text, p.entry_point, worker);
            {
              std::lock_guard<std::mutex> lock(mu_);
              solutions_[key] = s.solution;
            }
            if (s.error.empty()) return sample_job(sandbox, refs, p, s.solution, std::max(o_.timeout, o_.plus_timeout), *rules_).run(worker);
            Verdict v;  // a text too long to sanitize in time fails, as its first line would; anything else is the sandbox's
            v.status = s.timed_out ? Verdict::Status::Failed : Verdict::Status::SandboxError;
            v.result = s.timed_out ? "failed: EvalPlus's sanitizer did not finish within " + std::to_string(static_cast<int>(kSanitizeSeconds)) + " s"
                                   : "sandbox error: " + s.error;
            return std::vector<Verdict>{v};
          }};
}

void Pipeline::on_verified(const Problem& problem, json sample, const std::vector<Verdict>& verdicts, const std::string* solution_key,
                           bool write_sample) {
  const Verdict& base = verdicts.front();
  std::lock_guard<std::mutex> lock(mu_);
  if (write_error_) return;
  if (solution_key) sample["solution"] = solutions_[*solution_key];
  const json row = result_row(sample, base, has_plus_, verdicts.size() > 1 ? &verdicts[1] : nullptr,
                              rules_ && rules_->evalplus ? kJudgedOutside : judged_base(problem));
  try {
    if (write_sample) files_.append_sample(sample);
    files_.append_result(row);
  } catch (...) {  // stop the run; the main thread reports it
    write_error_ = std::current_exception();
    g_stop = true;
    return;
  }
  st_.tally.add_row(row);
  ++stats_.verified, ++stats_.verified_now;
  if (base.passed()) ++passes_[st_.index_of[problem.task_id]];
  progress(false);
}

void Pipeline::progress(bool force) {
  const auto now = Clock::now();
  if (!tty_ || (!force && now - last_print_ < std::chrono::milliseconds(250))) return;
  last_print_ = now;
  const double secs = std::max(1e-9, std::chrono::duration<double>(now - t0_).count());
  const auto p1 = st_.tally.pass_at_k(problems_, {1}, false).front();
  std::fprintf(stderr, "\r%d/%zu problems, %zu/%zu samples verified, %.1f samples/s, %.0f tok/s, pass@1 %.3f   ",
               st_.tally.problems_done(), selected_.size(), stats_.verified, total_samples_,
               static_cast<double>(stats_.verified_now) / secs, static_cast<double>(tokens_) / secs, p1.problems_used ? p1.mean : 0.0);
}

}  // namespace bestofn
