#pragma once
// Best-of-N batching: every prompt is prefilled once; up to `batch` candidates decode together
// in one engine step, across prompts; a finished slot is refilled at once with the next pending
// candidate. Stops on EOS ids, max_new_tokens, the context limit, or stop strings matched on the
// incrementally decoded text.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/engine/sampler.h"

namespace bestofn {

class Engine;
class Tokenizer;

struct GenerationRequest {
  std::string id;
  std::vector<int> prompt_ids;
  int n = 1;
  std::vector<std::string> stop;  // stop strings, in addition to the options'
  // The candidate indices to generate, each in [0, n): empty means all of 0..n-1 (a resumed or
  // sharded run generates only the missing ones, with the same draws as a full run).
  std::vector<int> indices = {};
  // The prompt index of this prompt's RNG stream: unset means options.prompt_index_base plus the
  // request's position (set it to keep a prompt's draws when the request list is a subset).
  std::optional<std::uint64_t> rng_prompt = std::nullopt;
};

struct GenerationOptions {
  SamplingParams sampling;
  int max_new_tokens = 256;
  int batch = 64;
  std::vector<int> eos_ids;
  std::vector<std::string> stop;
  std::uint64_t prompt_index_base = 0;  // prompt i draws with RNG prompt index base + i
  // When a candidate's prompt needs prefilling, the next prompts with pending candidates are
  // prefilled with it (Engine::prefill_many), in admission order, up to this many prompt tokens
  // in all (at least the one prompt); the engine runs them in passes of at most this many rows.
  // Larger: fewer, fuller forward passes; more activation memory, and more prompts' KV held
  // before their candidates run. With the CPU engine the candidates do not depend on it (its
  // prefill numbers do not); on CUDA a GEMM over more rows may move the logits' low bits.
  int prefill_tokens = kDefaultPrefillTokens;
  // Optional, called between steps: true drops the prompt's unstarted candidates and cancels its
  // running ones (they are not handed to on_done). For --stop-on-pass.
  std::function<bool(std::size_t prompt)> cancelled;
  // The text of a step's tokens (detokenization, stop strings) is checked on another thread while
  // the next step runs, all candidates fed speculatively; one found to have stopped drops its extra
  // sample. Each candidate's draws are the same (they do not depend on the batch), so an engine
  // whose logits do not depend on the batch either (the CPU engine) gives the same candidates;
  // on CUDA a stopped candidate stays in the batch one step longer, and a different batch size
  // can move the low bits of the logits (GEMM algorithms, attention splits), as any change of
  // --batch can. On with --device-sampling, where the host would otherwise idle.
  bool overlap_stop_checks = false;
  // --speculate K (0: off): each candidate drafts up to K next tokens from its prompt and its
  // siblings' text (DraftIndex, bestofn/generate/drafts.h) and the engine verifies them in the
  // same step (Engine::decode_runs). A drafted token is taken when it equals the token the sampler
  // draws at its position (the draws are counter-based, so that token depends only on the logits
  // there), up to the first that does not, where the sampler's token is taken: the candidates
  // are, token for token, those of plain decoding (engines whose logits do not depend on the
  // batch: the CPU engine), at any temperature, with the same stops. Needs Engine::capabilities().runs.
  int speculate = 0;
  // Drafts are given, candidate by candidate, only while the step holds at most this many rows
  // (fed tokens and drafts): up to a few rows a CPU step costs about one (it is bound by reading
  // the weights), past that each row costs GEMM time, so that a full batch is decoded plainly.
  int speculate_rows = 8;
};

struct Candidate {
  std::size_t prompt = 0;  // index into the requests
  int index = 0;           // candidate number within its prompt
  std::string text;        // without the stop string and EOS
  std::string finish_reason;           // "stop" | "eos" | "length"
  std::optional<std::string> stop;     // the stop string that fired
  std::vector<int> token_ids;          // generated ids (an EOS included)
  double cumulative_logprob = 0.0;
};

struct GenerationStats {
  std::uint64_t generated_tokens = 0, prompt_tokens = 0, steps = 0;
  std::uint64_t cancelled = 0;  // candidates dropped or stopped by options.cancelled
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  // --speculate: tokens drafted, drafted tokens taken, and candidates fed summed over the steps
  // (speculation_tokens_per_step).
  std::uint64_t drafted_tokens = 0, accepted_tokens = 0, candidate_steps = 0;
  // Host time of the decode loop beside the engine's steps: the draft lookups and the sampling.
  double draft_seconds = 0.0, sample_seconds = 0.0;
};

// Tokens a candidate took per engine step it was fed in: 1 without drafts (0 with no steps).
inline double speculation_tokens_per_step(const GenerationStats& s) {
  return s.candidate_steps > 0 ? static_cast<double>(s.candidate_steps + s.accepted_tokens) / static_cast<double>(s.candidate_steps) : 0.0;
}

// The most a generate() run of these requests asks of the engine (Engine::reserve, called at its
// start): the batch (options.batch, or fewer candidates), the longest prompt, max_new_tokens, and
// what one prefill_many can hold as generate batches prompts (a first prompt of any length, then
// more while their tokens fit in options.prefill_tokens): at most the count of the shortest prompts
// whose tokens fit, and max(longest prompt, min(prefill_tokens, every prompt's tokens)) rows.
RunShape run_shape(const std::vector<GenerationRequest>& requests, const GenerationOptions& options);

// Runs every request to completion. on_done receives each candidate as it finishes;
// on_step (optional) is called after every decode step with the running totals.
GenerationStats generate(Engine& engine, const Tokenizer& tokenizer, const std::vector<GenerationRequest>& requests,
                         const GenerationOptions& options, const std::function<void(Candidate&&)>& on_done,
                         const std::function<void(const GenerationStats&, std::size_t done)>& on_step = {});

}  // namespace bestofn
