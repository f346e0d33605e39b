#include "bestofn/generate/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"
#include "bestofn/util/parallel.h"
#include "bestofn/generate/drafts.h"
#include "bestofn/generate/stop_strings.h"
#include "bestofn/tokenizer/tokenizer.h"

namespace bestofn {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct PromptState {
  int prefix = -1;
  std::vector<float> logits;  // of the prompt's last position: every candidate's first draw
  int unfinished = 0;
  std::unique_ptr<DraftIndex> drafts;  // --speculate: the prompt and its candidates' tokens
};

struct Active {
  int slot = -1;
  Candidate c;
  std::unique_ptr<IncrementalDecoder> decoder;
  int next_token = -1;  // sampled, not yet fed to the engine
  int doc = -1;         // its document in its prompt's DraftIndex (--speculate)
  // The last sampled token while its text is not decoded yet (check_text), and the end it makes
  // without looking at the text ("eos", "length"; empty: none).
  std::optional<int> unchecked;
  std::string sync_end;
  // Fed at the next step: not finished, and not ending with its last token.
  bool feedable() const { return c.finish_reason.empty() && sync_end.empty(); }
};

class Run {
 public:
  Run(Engine& e, const Tokenizer& t, const std::vector<GenerationRequest>& r, const GenerationOptions& o,
      const std::function<void(Candidate&&)>& done)
      : engine_(e), tok_(t), reqs_(r), opt_(o), done_(done), prompts_(r.size()),
        vocab_(static_cast<std::size_t>(e.config().vocab_size)),
        sample_vocab_(std::min(vocab_, static_cast<std::size_t>(std::max(0, t.vocab_size())))),
        context_(e.config().max_position_embeddings) {
    for (std::size_t p = 0; p < r.size(); ++p) {
      if (r[p].prompt_ids.empty()) throw Error("prompt " + r[p].id + " is empty");
      if (static_cast<int>(r[p].prompt_ids.size()) >= context_)
        throw Error("prompt " + r[p].id + " has " + std::to_string(r[p].prompt_ids.size()) + " tokens; the context is " +
                    std::to_string(context_) + " and leaves no room to generate");
      for (int id : r[p].prompt_ids)
        if (id < 0 || static_cast<std::size_t>(id) >= vocab_)
          throw Error("prompt " + r[p].id + ": token id " + std::to_string(id) + " is outside the model's vocabulary");
      if (r[p].indices.empty()) {
        for (int i = 0; i < r[p].n; ++i) pending_.emplace_back(p, i);
        prompts_[p].unfinished = r[p].n;
      } else {
        for (int i : r[p].indices) {
          if (i < 0 || i >= r[p].n) throw Error("prompt " + r[p].id + ": candidate index " + std::to_string(i) + " is outside [0, n)");
          pending_.emplace_back(p, i);
        }
        prompts_[p].unfinished = static_cast<int>(r[p].indices.size());
      }
    }
  }

  GenerationStats go(const std::function<void(const GenerationStats&, std::size_t)>& on_step) {
    engine_.reserve(run_shape(reqs_, opt_));
    std::vector<float> logits;
    for (;;) {
      admit();
      if (active_.empty()) break;
      // The candidates fed this step; with overlap_stop_checks, the text of the previous step's
      // tokens is decoded and searched for stop strings on another thread during the step, and a
      // candidate that turns out to have stopped has its extra sample dropped.
      std::vector<Active*> feed, check;
      for (const auto& a : active_) {
        if (a->unchecked) check.push_back(a.get());
        if (a->feedable()) feed.push_back(a.get());
      }
      if (feed.empty()) {  // only ends left to check
        for (Active* a : check) check_text(*a);
        sweep();
        if (on_step) on_step(stats_, finished_);
        continue;
      }
      const std::size_t B = feed.size();
      std::vector<int> slots(B), tokens(B), fed(B);
      for (std::size_t b = 0; b < B; ++b) slots[b] = feed[b]->slot, tokens[b] = feed[b]->next_token, fed[b] = engine_.slot_length(slots[b]);
      std::vector<std::vector<int>> drafts = draft(feed);
      stats_.steps++, stats_.candidate_steps += B;
      if (std::any_of(drafts.begin(), drafts.end(), [](const auto& d) { return !d.empty(); })) {
        verify(feed, check, drafts, fed, logits);
        sweep();
        if (on_step) on_step(stats_, finished_);
        continue;
      }
      // The engine samples itself when it can (--device-sampling: only the samples come back);
      // else the logits come back and the draws, independent per candidate, run here in parallel.
      std::vector<Sample> drawn(B);
      std::vector<std::uint64_t> prompt(B), candidate(B), step(B);
      for (std::size_t b = 0; b < B; ++b) std::tie(prompt[b], candidate[b], step[b]) = draw_ids(*feed[b]);
      bool sampled = false;
      step_checking(check, [&] {
        // (The device sampler draws from the whole logits row: with padded rows the host draws.)
        sampled = sample_vocab_ == vocab_ && engine_.decode_sample(slots, tokens, opt_.sampling, prompt, candidate, step, drawn);
        if (!sampled) {
          logits.resize(B * vocab_);
          engine_.decode(slots, tokens, logits);
        }
      });
      const auto t1 = Clock::now();
      if (!sampled)
        parallel_for(B, [&](std::size_t b0, std::size_t b1) {
          SamplerScratch local;
          for (std::size_t b = b0; b < b1; ++b) drawn[b] = draw(*feed[b], std::span<const float>(logits).subspan(b * vocab_, vocab_), local);
        });
      stats_.sample_seconds += since(t1);
      for (std::size_t b = 0; b < B; ++b) {
        if (!feed[b]->c.finish_reason.empty()) continue;  // stopped by its previous token: this sample is dropped
        accept_sync(*feed[b], drawn[b], fed[b] + 1);
        if (!opt_.overlap_stop_checks) check_text(*feed[b]);
      }
      sweep();
      if (on_step) on_step(stats_, finished_);
    }
    return stats_;
  }

 private:
  // Runs an engine step (timed as decode), the text of `check`'s unchecked tokens checked on
  // another thread meanwhile (check_text touches only the candidates' text, decoders and ends).
  void step_checking(const std::vector<Active*>& check, const std::function<void()>& step) {
    std::future<void> checking;
    if (!check.empty())
      checking = std::async(std::launch::async, [this, check] {
        for (Active* a : check) check_text(*a);
      });
    const auto t0 = Clock::now();
    try {
      step();
    } catch (...) {
      if (checking.valid()) checking.wait();  // the checks touch the candidates: let them finish first
      throw;
    }
    stats_.decode_seconds += since(t0);
    if (checking.valid()) checking.get();
  }

  // The RNG indexes of a candidate's next draw: (prompt, candidate, step).
  std::tuple<std::uint64_t, std::uint64_t, std::uint64_t> draw_ids(const Active& a) const {
    const auto& rng = reqs_[a.c.prompt].rng_prompt;
    return {rng ? *rng : opt_.prompt_index_base + a.c.prompt, static_cast<std::uint64_t>(a.c.index), a.c.token_ids.size()};
  }
  // The draw `ahead` tokens past the candidate's next one (a drafted position).
  Sample draw(const Active& a, std::span<const float> logits, SamplerScratch& s, std::uint64_t ahead = 0) const {
    const auto [prompt, candidate, step] = draw_ids(a);
    return sample_token(logits.first(sample_vocab_), opt_.sampling, prompt, candidate, step + ahead, s);
  }

  // --speculate: each fed candidate's drafts, at most as many as it may still take (one token
  // short of max_new_tokens and of the context, as the token sampled after them is taken too).
  std::vector<std::vector<int>> draft(const std::vector<Active*>& feed) {
    std::vector<std::vector<int>> out(feed.size());
    if (opt_.speculate <= 0) return out;
    const auto t0 = Clock::now();
    int spare = opt_.speculate_rows - static_cast<int>(feed.size());  // rows left for drafts
    for (std::size_t b = 0; b < feed.size() && spare > 0; ++b) {
      const Active& a = *feed[b];
      const int room = std::min({opt_.speculate, spare, opt_.max_new_tokens - static_cast<int>(a.c.token_ids.size()) - 1,
                                 context_ - engine_.slot_length(a.slot) - 1});
      if (room <= 0) continue;
      // The context's last tokens: the prompt's tail, then the candidate's (the index reads kMaxNgram).
      const auto& prompt = reqs_[a.c.prompt].prompt_ids;
      const auto& mine = a.c.token_ids;
      std::vector<int> tail;
      const std::size_t want = DraftIndex::kMaxNgram, from_prompt = want > mine.size() ? std::min(want - mine.size(), prompt.size()) : 0;
      tail.insert(tail.end(), prompt.end() - static_cast<std::ptrdiff_t>(from_prompt), prompt.end());
      tail.insert(tail.end(), mine.end() - static_cast<std::ptrdiff_t>(std::min(want, mine.size())), mine.end());
      out[b] = prompts_[a.c.prompt].drafts->propose(tail, room);
      spare -= static_cast<int>(out[b].size());
    }
    stats_.draft_seconds += since(t0);
    return out;
  }

  // A step with drafts: candidate b is fed its next token and drafts[b] as one run (fed[b]: its
  // length before the step). Row j's draw is taken; while it equals drafts[b][j] the next row's
  // is taken too, each token through accept_sync and check_text as plain decoding would take it
  // (the last one's text as the mode says); the rows past the last taken token are dropped.
  void verify(const std::vector<Active*>& feed, const std::vector<Active*>& check, const std::vector<std::vector<int>>& drafts,
              const std::vector<int>& fed, std::vector<float>& logits) {
    const std::size_t B = feed.size();
    std::vector<int> slots(B), counts(B), tokens;
    std::vector<std::size_t> row(B + 1, 0);
    for (std::size_t b = 0; b < B; ++b) {
      slots[b] = feed[b]->slot, counts[b] = 1 + static_cast<int>(drafts[b].size());
      tokens.push_back(feed[b]->next_token);
      tokens.insert(tokens.end(), drafts[b].begin(), drafts[b].end());
      row[b + 1] = row[b] + static_cast<std::size_t>(counts[b]);
      stats_.drafted_tokens += drafts[b].size();
    }
    step_checking(check, [&] {
      logits.resize(row[B] * vocab_);
      engine_.decode_runs(slots, counts, tokens, logits);
    });
    const auto t1 = Clock::now();
    std::vector<std::vector<Sample>> drawn(B);
    parallel_for(B, [&](std::size_t b0, std::size_t b1) {
      SamplerScratch local;
      for (std::size_t b = b0; b < b1; ++b)
        for (std::size_t j = 0; j < static_cast<std::size_t>(counts[b]); ++j) {
          drawn[b].push_back(draw(*feed[b], std::span<const float>(logits).subspan((row[b] + j) * vocab_, vocab_), local, j));
          if (j == drafts[b].size() || drawn[b].back().token != drafts[b][j]) break;
        }
    });
    stats_.sample_seconds += since(t1);
    for (std::size_t b = 0; b < B; ++b) {
      Active& a = *feed[b];
      if (!a.c.finish_reason.empty()) continue;  // stopped by its previous token: these samples are dropped
      std::size_t taken = 0;
      while (taken < drawn[b].size()) {
        accept_sync(a, drawn[b][taken], fed[b] + static_cast<int>(taken) + 1);
        if (++taken == drawn[b].size() || !a.sync_end.empty()) break;
        check_text(a);  // a drafted token's text, before the next is taken
        if (!a.c.finish_reason.empty()) break;
      }
      stats_.accepted_tokens += std::min(taken, drawn[b].size() - 1);
      if (a.unchecked && !opt_.overlap_stop_checks) check_text(a);
      if (a.feedable()) engine_.truncate_slot(a.slot, fed[b] + static_cast<int>(taken));
    }
  }

  // Fill free slots with pending candidates; prefill prompts on first use.
  void admit() {
    SamplerScratch s;
    while (static_cast<int>(active_.size()) < opt_.batch && !pending_.empty()) {
      const auto [p, i] = pending_.front();
      pending_.pop_front();
      PromptState& ps = prompts_[p];
      if (opt_.cancelled && opt_.cancelled(p)) {
        stats_.cancelled++;
        retire(ps);
        continue;
      }
      if (ps.prefix < 0) prefill_from(p);
      // Admission by the engine's room (paged KV blocks): wait for a finish when there is none.
      const std::optional<int> slot = engine_.try_add_slot(ps.prefix, opt_.max_new_tokens);
      if (!slot) {
        if (active_.empty())
          throw Error("the engine has no room for one candidate of prompt " + reqs_[p].id + " with --max-new-tokens " +
                      std::to_string(opt_.max_new_tokens) + " (KV cache too small)");
        pending_.emplace_front(p, i);
        break;
      }
      auto a = std::make_unique<Active>();
      a->slot = *slot;
      a->c.prompt = p;
      a->c.index = i;
      a->decoder = std::make_unique<IncrementalDecoder>(tok_, false);
      if (opt_.speculate > 0) {
        if (!ps.drafts) ps.drafts = std::make_unique<DraftIndex>(reqs_[p].prompt_ids);
        a->doc = ps.drafts->add_document();
      }
      accept_sync(*a, draw(*a, ps.logits, s), engine_.slot_length(*slot));
      check_text(*a);
      active_.push_back(std::move(a));
      sweep();
    }
  }

  // Prefills prompt p and, with it, the next prompts in pending order that have no prefix yet and
  // are not cancelled, while their tokens fit in opt_.prefill_tokens: one prefill_many.
  void prefill_from(std::size_t p) {
    std::vector<std::size_t> batch = {p};
    std::size_t tokens = reqs_[p].prompt_ids.size();
    const auto budget = static_cast<std::size_t>(opt_.prefill_tokens);
    for (const auto& [q, i] : pending_) {
      if (q == batch.back() || prompts_[q].prefix >= 0 || std::find(batch.begin(), batch.end(), q) != batch.end()) continue;
      if (opt_.cancelled && opt_.cancelled(q)) continue;
      if (tokens + reqs_[q].prompt_ids.size() > budget) break;
      batch.push_back(q);
      tokens += reqs_[q].prompt_ids.size();
    }
    std::vector<std::span<const int>> prompts;
    for (std::size_t q : batch) prompts.emplace_back(reqs_[q].prompt_ids);
    std::vector<float> logits(batch.size() * vocab_);
    const auto t0 = Clock::now();
    const std::vector<int> ids = engine_.prefill_many(prompts, logits, opt_.prefill_tokens);
    stats_.prefill_seconds += since(t0);
    stats_.prompt_tokens += tokens;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      PromptState& ps = prompts_[batch[k]];
      ps.prefix = ids[k];
      ps.logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(k * vocab_), logits.begin() + static_cast<std::ptrdiff_t>((k + 1) * vocab_));
    }
  }

  // Takes a sampled token, what needs no text: the id, its logprob, and the ends it makes by
  // itself (EOS; the length limit or the context). check_text does the rest. fed: the positions
  // the candidate's slot holds before this token.
  void accept_sync(Active& a, const Sample& smp, int fed) {
    Candidate& c = a.c;
    // The CPU sampler says -1; the device sampler's logprob goes NaN or Inf with its logits.
    if (smp.token < 0 || static_cast<std::size_t>(smp.token) >= vocab_ || !std::isfinite(smp.logprob))
      throw Error("the model's logits are not finite (NaN or Inf) at token " + std::to_string(c.token_ids.size() + 1) +
                  " of candidate " + std::to_string(c.index) + " of prompt " + reqs_[c.prompt].id +
                  ": a NaN or Inf in its weights or their scales, or activations that overflow");
    c.token_ids.push_back(smp.token);
    if (a.doc >= 0) prompts_[c.prompt].drafts->append(a.doc, smp.token);
    c.cumulative_logprob += smp.logprob;
    stats_.generated_tokens++;
    a.unchecked = smp.token;
    if (std::find(opt_.eos_ids.begin(), opt_.eos_ids.end(), smp.token) != opt_.eos_ids.end()) {
      a.sync_end = "eos";
      return;
    }
    // Prompt and generated tokens fill the context at most (HF's max_length, vLLM's
    // max_model_len): this token, not yet fed, is the last one that fits when the fed ones and it
    // make context_.
    const bool at_context = fed + 1 >= context_;
    if (static_cast<int>(c.token_ids.size()) >= opt_.max_new_tokens || at_context) {
      a.sync_end = "length";
      return;
    }
    a.next_token = smp.token;
  }

  // The text of the unchecked token: decoded, stop strings searched (the text is cut at the
  // first), and the candidate's end settled. Touches only the candidate: it may run on another
  // thread during a decode step.
  void check_text(Active& a) {
    Candidate& c = a.c;
    const int token = *a.unchecked;
    a.unchecked.reset();
    if (a.sync_end == "eos") {
      c.text += a.decoder->finish();
      c.finish_reason = "eos";
      return;
    }
    const std::size_t before = c.text.size();
    c.text += a.decoder->push(token);
    if (match_stop(c, before)) return;
    if (a.sync_end == "length") {
      c.text += a.decoder->finish();
      if (match_stop(c, before)) return;
      c.finish_reason = "length";
    }
  }

  // The earliest stop string that ends in the text added since `before`; the text is cut there.
  bool match_stop(Candidate& c, std::size_t before) const {
    const StopMatch m = find_stop(c.text, before, opt_.stop, reqs_[c.prompt].stop);
    if (!m.stop) return false;
    c.text.resize(m.at);
    c.finish_reason = "stop";
    c.stop = *m.stop;
    return true;
  }

  // One candidate of the prompt is over: the prefix is freed with the last one.
  void retire(PromptState& ps) {
    if (--ps.unfinished == 0 && ps.prefix >= 0) {
      engine_.release_prefix(ps.prefix);
      ps.prefix = -1;
      ps.logits = {};
      ps.drafts.reset();
    }
  }

  // Finished candidates leave: slot released, result handed over. Cancelled ones leave silently.
  // A candidate whose last token's text is still unchecked stays until it is checked.
  void sweep() {
    for (std::size_t b = 0; b < active_.size();) {
      Active& a = *active_[b];
      const bool cancel = a.c.finish_reason.empty() && opt_.cancelled && opt_.cancelled(a.c.prompt);
      if ((a.c.finish_reason.empty() || a.unchecked) && !cancel) {
        ++b;
        continue;
      }
      engine_.release_slot(a.slot);
      retire(prompts_[a.c.prompt]);
      if (cancel) {
        stats_.cancelled++;
      } else {
        ++finished_;
        done_(std::move(a.c));
      }
      active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(b));
    }
  }

  Engine& engine_;
  const Tokenizer& tok_;
  const std::vector<GenerationRequest>& reqs_;
  const GenerationOptions& opt_;
  const std::function<void(Candidate&&)>& done_;
  std::vector<PromptState> prompts_;
  std::deque<std::pair<std::size_t, int>> pending_;
  std::vector<std::unique_ptr<Active>> active_;
  std::size_t vocab_;
  // The ids drawn from: the tokenizer's. A model may pad its vocabulary past them (rows no text
  // maps to); those ids are never sampled, since they could not be detokenized.
  std::size_t sample_vocab_;
  int context_;
  std::size_t finished_ = 0;
  GenerationStats stats_;
};

}  // namespace

RunShape run_shape(const std::vector<GenerationRequest>& requests, const GenerationOptions& options) {
  RunShape r;
  std::vector<int> lengths;
  long long candidates = 0, tokens = 0;
  for (const GenerationRequest& q : requests) {
    lengths.push_back(static_cast<int>(q.prompt_ids.size()));
    candidates += q.indices.empty() ? q.n : static_cast<long long>(q.indices.size());
    tokens += static_cast<long long>(q.prompt_ids.size());
  }
  std::sort(lengths.begin(), lengths.end());
  r.max_batch = static_cast<int>(std::clamp<long long>(candidates, 1, std::max(options.batch, 1)));
  r.longest_prompt = lengths.empty() ? 1 : std::max(lengths.back(), 1);
  r.max_new_tokens = std::max(options.max_new_tokens, 1);
  r.prefill_tokens = std::max(options.prefill_tokens, 1);
  long long sum = 0;
  int fit = 0;
  for (int len : lengths) {
    if (sum + len > r.prefill_tokens) break;
    sum += len, ++fit;
  }
  r.prefill_prompts = std::max(fit, 1);
  r.prefill_rows = static_cast<int>(std::max<long long>(r.longest_prompt, std::min<long long>(r.prefill_tokens, tokens)));
  r.prompt_lengths = lengths;
  r.sampling = options.sampling;
  return r;
}

GenerationStats generate(Engine& engine, const Tokenizer& tokenizer, const std::vector<GenerationRequest>& requests,
                         const GenerationOptions& options, const std::function<void(Candidate&&)>& on_done,
                         const std::function<void(const GenerationStats&, std::size_t)>& on_step) {
  if (options.batch < 1) throw Error("--batch must be at least 1");
  if (options.max_new_tokens < 1) throw Error("--max-new-tokens must be at least 1");
  if (options.prefill_tokens < 1) throw Error("--prefill-tokens must be at least 1");
  if (options.speculate < 0) throw Error("--speculate must be at least 0");
  if (const EngineCapabilities can = engine.capabilities(); options.speculate > 0 && !can.runs)
    throw Error("--speculate: " + can.why_no_runs + "; use --speculate 0");
  return Run(engine, tokenizer, requests, options, on_done).go(on_step);
}

}  // namespace bestofn
