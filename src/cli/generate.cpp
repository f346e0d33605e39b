// bestofn generate: N candidates per prompt, as JSONL, one row per candidate.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/backends.h"
#include "bestofn/chat_template.h"
#include "bestofn/error.h"
#include "bestofn/scheduler.h"
#include "bestofn/text_file.h"
#include "bestofn/tokenizer.h"
#include "bestofn/weights.h"
#include "cli/commands.h"
#include "cli/jsonl.h"
#include "cli/model_flags.h"
#include "cli/output_file.h"

#include <spdlog/spdlog.h>

namespace bestofn::cli {
namespace {
using nlohmann::json;

struct GenerateOptions {
  ModelFlags m;
  std::string prompt, prompts, out;
  int n = 1;
  bool ids = false;
};

struct PromptSpec {
  json id;
  std::string text;
  std::vector<std::string> stop;
  int n;
};

// A .jsonl / .jsonl.gz file: {"prompt": ..., "id"?, "stop"?: str | [str], "n"?}; anything else is
// one plain-text prompt.
std::vector<PromptSpec> read_prompts(const std::string& path, int default_n) {
  const bool jsonl = path.ends_with(".jsonl") || path.ends_with(".jsonl.gz");
  if (!jsonl) return {{json(0), read_text_file(path), {}, default_n}};
  std::vector<PromptSpec> out;
  for_each_jsonl(path, [&](json&& j, const std::string& where) {
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) throw Error(where, "expected an object with a string \"prompt\"");
    PromptSpec p{j.contains("id") ? j["id"] : json(out.size()), j["prompt"].get<std::string>(), {}, default_n};
    if (j.contains("stop")) {
      if (j["stop"].is_string()) p.stop.push_back(j["stop"]);
      else if (j["stop"].is_array() && std::all_of(j["stop"].begin(), j["stop"].end(), [](const json& s) { return s.is_string(); }))
        p.stop = j["stop"].get<std::vector<std::string>>();
      else throw Error(where, "\"stop\" must be a string or a list of strings");
    }
    if (j.contains("n")) {
      if (!j["n"].is_number_integer() || j["n"].get<long long>() < 1 || j["n"].get<long long>() > 1000000) throw Error(where, "\"n\" must be a positive integer");
      p.n = j["n"].get<int>();
    }
    out.push_back(std::move(p));
  });
  if (out.empty()) throw Error(path, "no prompts");
  return out;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "Generate N candidates per prompt, as JSONL");
  sub->footer(
      "Each prompt is prefilled once; up to --batch candidates decode together across prompts.\n"
      "A candidate's tokens depend only on (seed, prompt, candidate), never on --batch or --threads.\n"
      "Output rows: id, index, text, finish_reason (stop|eos|length), stop, num_tokens,\n"
      "cumulative_logprob, and token_ids with --ids; written in prompt order.\n"
      "Unset sampling flags take the model's generation_config.json (else temperature 1).\n"
      "Examples:\n"
      "  bestofn generate --model ~/models/Llama-3.1-8B --prompt 'def fib(n):' -n 8 --temperature 0.8 --stop '\\ndef '\n"
      "  bestofn generate --model DIR --prompts prompts.jsonl -n 100 --max-new-tokens 512 --out samples.jsonl");
  add_model_flags(sub, o->m);
  auto* prompt = sub->add_option("--prompt", o->prompt, "One prompt text");
  auto* prompts = sub->add_option("--prompts", o->prompts, "JSONL (.jsonl[.gz]: prompt, id, stop, n per line) or a plain-text file (one prompt)");
  prompt->excludes(prompts);
  sub->add_option("-n", o->n, "Candidates per prompt")->check(CLI::Range(1, 1000000))->default_str("1");
  add_sampling_flags(sub, o->m, "Stop string (repeatable); removed from the text");
  sub->add_flag("--ids", o->ids, "Add token_ids to each row");
  sub->add_option("--out", o->out, "Output file (default: stdout); written whole or not at all");
  sub->callback([sub] {
    if (sub->count("--prompt") + sub->count("--prompts") != 1) throw CLI::ValidationError("give one of --prompt TEXT or --prompts FILE");
  });
  return [o] {
    const LoadedModel model = load_model_flags(o->m);
    const std::vector<PromptSpec> specs = o->prompts.empty() ? std::vector<PromptSpec>{{json(0), o->prompt, {}, o->n}} : read_prompts(o->prompts, o->n);
    std::vector<GenerationRequest> reqs;
    for (const auto& p : specs)
      reqs.push_back({p.id.dump(), encode_prompt(o->m, model, p.text, (o->prompts.empty() ? "--prompt" : o->prompts) + " (prompt " + p.id.dump() + ")"), p.n, p.stop, {}, {}});
    const GenerationOptions go = generation_options(o->m, model);

    OutputFile out(o->out);
    // Rows go out in prompt order, each prompt's candidates by index, as soon as a prompt is done.
    std::vector<std::map<int, json>> rows(reqs.size());
    std::size_t next = 0;
    auto on_done = [&](Candidate&& c) {
      json row = {{"id", specs[c.prompt].id}, {"index", c.index}, {"text", c.text}, {"finish_reason", c.finish_reason},
                  {"stop", c.stop ? json(*c.stop) : json(nullptr)}, {"num_tokens", c.token_ids.size()},
                  {"cumulative_logprob", c.cumulative_logprob}};
      if (o->ids) row["token_ids"] = c.token_ids;
      rows[c.prompt][c.index] = std::move(row);
      while (next < reqs.size() && static_cast<int>(rows[next].size()) == reqs[next].n) {
        for (auto& [i, r] : rows[next]) out.line(r.dump());
        rows[next++].clear();
      }
    };
    std::size_t total = 0;
    for (const auto& r : reqs) total += static_cast<std::size_t>(r.n);
    const bool tty = isatty(STDERR_FILENO);
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    auto on_step = [&](const GenerationStats& s, std::size_t done) {
      const auto now = std::chrono::steady_clock::now();
      if (!tty || now - last < std::chrono::milliseconds(200)) return;
      last = now;
      const double secs = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "\r%zu/%zu candidates, %.1f tok/s   ", done, total, static_cast<double>(s.generated_tokens) / secs);
    };
    const GenerationStats st = generate(*model.engine, model.tokenizer, reqs, go, on_done, on_step);
    out.commit();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) std::fprintf(stderr, "\r%zu/%zu candidates, %.1f tok/s   \n", total, total, static_cast<double>(st.generated_tokens) / secs);
    spdlog::info("{} prompts, {} candidates, {} tokens in {:.2f} s ({:.1f} tok/s; prefill {:.2f} s, decode {:.2f} s, {} steps)", reqs.size(),
                 total, st.generated_tokens, secs, static_cast<double>(st.generated_tokens) / secs, st.prefill_seconds, st.decode_seconds, st.steps);
    return kExitOk;
  };
}

}  // namespace bestofn::cli
