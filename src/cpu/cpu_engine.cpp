// The CPU reference engine: the full Llama forward (with Qwen2's q/k/v biases, in cpu::linear, and
// Qwen3's per-head q/k norms) over a batch of slots. Its step comments are
// the ones the CUDA engine's forward repeats. The class is in cpu_engine.h; its attention in
// engine_attention.cpp, its KV rows in kv_rows.h.
#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>

#include <sys/mman.h>

#include <spdlog/spdlog.h>

#include "cpu/cpu_engine.h"

#include "bestofn/engine/engine.h"
#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "bestofn/util/parallel.h"
#include "bestofn/model/quantize.h"
#include "bestofn/model/weights.h"
#include "util/handle_table.h"
#include "util/exp_poly.h"
#include "cpu/ops.h"
#include "cpu/prefix_attention.h"
#include "cpu/thread_pool.h"

namespace bestofn {
namespace cpu {

CpuEngine::CpuEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt)
    : Engine("cpu", w->config), w_(std::move(w)), c_(w_->config), pool_(engine_threads(opt.threads)),
      inv_freq_(rope_inv_freq(c_)) {
  if (const int asked = opt.threads > 0 ? opt.threads : default_threads(); asked > pool_.size())
    spdlog::warn("{} CPU threads asked for, and this process may use {} CPUs: using {} (more workers than CPUs wait on each "
                 "other; the candidates are the same whatever the count)",
                 asked, available_cpus(), pool_.size());
  const bool f32 = w_->token_embedding.dtype == DType::F32;
  kv_cache_ = opt.kv != EngineOptions::Kv::Auto ? opt.kv : f32 ? EngineOptions::Kv::F32 : EngineOptions::Kv::BF16;
  if (kv_cache_ == EngineOptions::Kv::FP8 && c_.head_dim <= 0) throw Error("--kv-cache fp8: the model has no head_dim");
  capabilities_ = {true, "", false};  // runs of drafted tokens; sampling stays on the host
  statistics_ = this;                 // it times its own phases
  // Every layer re-laid once in the GEMM's strips (cpu/gemm_fp8.h, gemm_wide.h):
  // as many bytes as the checkpoint's, which the engine then no longer reads (a tied lm_head is
  // copied; the embedding lookups still read the checkpoint's table). One arena in 2 MB pages
  // where the kernel grants them (madvise: a decode step streams all of it, 4 KB pages cost a
  // TLB miss per 4 KB).
  std::vector<std::pair<const Linear*, std::size_t>> packed;  // layer, its offset in the arena
  std::size_t total = 0;
  auto place = [&](const Linear* l) {
    if (const std::size_t bytes = cpu::packed_bytes(*l)) packed.emplace_back(l, total), total += cpu::round_up(bytes, 64);
  };
  for (const LayerWeights& L : w_->layers)
    for (const Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) place(l);
  place(&w_->lm_head);
  constexpr std::size_t kHuge = 2u << 20;
  if (total > 0) {
    const std::size_t bytes = cpu::round_up(total, kHuge);
    arena_.reset(static_cast<std::uint8_t*>(std::aligned_alloc(kHuge, bytes)));
    if (!arena_) throw Error("out of memory for the packed weights (" + std::to_string(bytes >> 20) + " MB)");
    ::madvise(arena_.get(), bytes, MADV_HUGEPAGE);  // a hint: without it, 4 KB pages
    for (const auto& [l, at] : packed) {
      cpu::pack_linear(*l, pool_, arena_.get() + at);
      strips_.emplace(l, arena_.get() + at);
    }
  }
}

void CpuEngine::resize(std::size_t T) {
  const auto d = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.q_dim()),
             kd = static_cast<std::size_t>(c_.kv_dim()), h = static_cast<std::size_t>(c_.hidden_dim);
  x_.resize(T * d), xn_.resize(T * d), o_.resize(T * d);
  q_.resize(T * qd), att_.resize(T * qd);
  k_.resize(T * kd), v_.resize(T * kd);
  gate_.resize(T * h), up_.resize(T * h);
}

void CpuEngine::embed(std::span<const int> tokens) {
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= c_.vocab_size)
      throw Error("token id " + std::to_string(tokens[t]) + " is outside the vocabulary (" + std::to_string(c_.vocab_size) + ")");
    cpu::embedding(w_->token_embedding, tokens[t], x_.data() + t * static_cast<std::size_t>(c_.dim));
  }
}

void CpuEngine::rope_angles(const std::vector<int>& pos) {
  const std::size_t ncs = 2 * inv_freq_.size();
  rope_cs_.resize(pos.size() * ncs);
  float* cs = rope_cs_.data();
  pool_.run(pos.size(), [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) cpu::rope_angles(pos[t], inv_freq_, cs + t * ncs);
  });
}

// One transformer layer over T = pos.size() tokens; token t sits at position pos[t], its K and V
// go to cache_of(t) (the rows of one run, runs[i] .. runs[i + 1] - 1, to one cache in order), and
// `attend` fills att_ from q_ and the caches.
void CpuEngine::layer(int l, const std::vector<int>& pos, const std::function<Cache&(std::size_t)>& cache_of,
                      std::span<const std::size_t> runs, const std::function<void()>& attend) {
  const LayerWeights& L = w_->layers[static_cast<std::size_t>(l)];
  const std::size_t T = pos.size();
  const auto d = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.q_dim()), kd = static_cast<std::size_t>(c_.kv_dim());
  // attention: q, k, v = W xn (+ b: Qwen2); q, k = rmsnorm per head (Qwen3); rope(q, k);
  // kv cache <- k, v; x += W_o attend(q, kv)
  norm_rows(L.attn_norm, T);
  linear_many({&L.wq, &L.wk, &L.wv}, xn_.data(), T, {q_.data(), k_.data(), v_.data()});
  const std::size_t ncs = 2 * inv_freq_.size();  // rope_cs_ per token (rope_angles)
  const auto hd = static_cast<std::size_t>(c_.head_dim);
  const auto eps = static_cast<float>(c_.rms_norm_eps);
  auto rotate_append = [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      if (L.q_norm.data) {  // each head of q and k a row of head_dim, in place
        cpu::rmsnorm(q_.data() + t * qd, q_.data() + t * qd, L.q_norm, static_cast<std::size_t>(c_.n_heads), hd, eps);
        cpu::rmsnorm(k_.data() + t * kd, k_.data() + t * kd, L.k_norm, static_cast<std::size_t>(c_.n_kv_heads), hd, eps);
      }
      cpu::rope_rotate(q_.data() + t * qd, c_.n_heads, c_.head_dim, rope_cs_.data() + t * ncs);
      cpu::rope_rotate(k_.data() + t * kd, c_.n_kv_heads, c_.head_dim, rope_cs_.data() + t * ncs);
      Cache& cache = cache_of(t);
      cache.k[static_cast<std::size_t>(l)].append(k_.data() + t * kd);
      cache.v[static_cast<std::size_t>(l)].append(v_.data() + t * kd);
    }
  };
  // Runs (a decode step's slots) go over the pool; a run's rows append to its cache in order.
  pool_.run(runs.size() - 1, [&](std::size_t r0, std::size_t r1) { rotate_append(runs[r0], runs[r1]); });
  const auto t_att = Clock::now();
  attend();
  add_since(t_att, &PhaseTimes::attention_ms);
  linear(L.wo, att_.data(), T, o_.data());
  for (std::size_t i = 0; i < T * d; ++i) x_[i] += o_[i];
  ffn(l, T);
}

void CpuEngine::ffn(int layer, std::size_t T) {
  const LayerWeights& L = w_->layers[static_cast<std::size_t>(layer)];
  const auto d = static_cast<std::size_t>(c_.dim);
  // ffn: x += W_down (silu(W_gate xn) * W_up xn), xn = rmsnorm(x)
  norm_rows(L.ffn_norm, T);
  linear_many({&L.w_gate, &L.w_up}, xn_.data(), T, {gate_.data(), up_.data()});
  {  // elementwise, rows split over the pool (each element computed as alone)
    const auto h = static_cast<std::size_t>(c_.hidden_dim);
    float* g = gate_.data();
    const float* u = up_.data();
    pool_.run(T, [&](std::size_t t0, std::size_t t1) { cpu::swiglu(g + t0 * h, u + t0 * h, (t1 - t0) * h); });
  }
  linear(L.w_down, gate_.data(), T, o_.data());
  for (std::size_t i = 0; i < T * d; ++i) x_[i] += o_[i];
}

void CpuEngine::logits_rows(std::size_t first, std::size_t T, float* out) {
  const auto d = static_cast<std::size_t>(c_.dim);
  // logits = lm_head(rmsnorm(x))
  cpu::rmsnorm(xn_.data(), x_.data() + first * d, w_->final_norm, T, d, static_cast<float>(c_.rms_norm_eps));
  linear(w_->lm_head, xn_.data(), T, out);
}

int CpuEngine::prefill(std::span<const int> tokens, std::span<float> last_logits) {
  // One pass over the whole prompt.
  const std::span<const int> one[] = {tokens};
  return prefill_many(one, last_logits, static_cast<int>(std::clamp<std::size_t>(tokens.size(), 1, INT_MAX)))[0];
}

std::vector<int> CpuEngine::prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                         int max_pass_tokens) {
  check_prefill_many(c_, prompts, last_logits.size(), max_pass_tokens);
  std::vector<int> lengths;
  std::vector<std::unique_ptr<Prefix>> made;  // registered once every pass has run: nothing is left behind by a throw
  for (const auto& tokens : prompts) {
    lengths.push_back(static_cast<int>(tokens.size()));
    made.push_back(std::make_unique<Prefix>(
        Prefix{lengths.back(), 0, Cache(c_.n_layers, kv_cache_, static_cast<std::size_t>(c_.kv_dim()), static_cast<std::size_t>(c_.head_dim))}));
  }
  for (const auto& pass : plan_prefill_passes(lengths, max_pass_tokens)) prefill_pass(pass, prompts, made, last_logits);
  std::vector<int> ids;
  for (auto& p : made) ids.push_back(prefixes_.put(std::move(p)));
  return ids;
}

void CpuEngine::prefill_pass(std::span<const PrefillSegment> pass, std::span<const std::span<const int>> prompts,
                             const std::vector<std::unique_ptr<Prefix>>& made, std::span<float> last_logits) {
  std::vector<int> tokens, pos;
  std::vector<PassSegment> segments;
  std::vector<Cache*> cache;  // per row
  for (const PrefillSegment& s : pass) {
    segments.push_back({made[s.prompt].get(), tokens.size(), s.begin, s.end});
    for (int j = s.begin; j < s.end; ++j) {
      tokens.push_back(prompts[s.prompt][static_cast<std::size_t>(j)]);
      pos.push_back(j);
      cache.push_back(&made[s.prompt]->kv);
    }
  }
  const std::size_t T = tokens.size();
  resize(T);
  embed(tokens);
  rope_angles(pos);
  // Each prompt's rows append to its own cache in order (the rows of a segment are consecutive).
  for (int l = 0; l < c_.n_layers; ++l)
    layer(l, pos, [&](std::size_t t) -> Cache& { return *cache[t]; }, std::array<std::size_t, 2>{0, T}, [&] { attend_prefill(l, segments); });
  // The last rows of the prompts that end in this pass (consecutive prompts: every segment but
  // perhaps the last) gathered to the first rows of x_ (row k moves to row m <= k), then their logits.
  const auto d = static_cast<std::size_t>(c_.dim), V = static_cast<std::size_t>(c_.vocab_size);
  std::size_t m = 0, first = 0;
  for (std::size_t k = 0; k < pass.size(); ++k) {
    if (pass[k].end != made[pass[k].prompt]->len) continue;
    if (m == 0) first = pass[k].prompt;
    if (pass[k].prompt != first + m) throw Error("prefill: the prompts ending in a pass are not consecutive");
    const std::size_t row = segments[k].row + static_cast<std::size_t>(pass[k].end - pass[k].begin) - 1;
    if (row != m) std::copy_n(x_.data() + row * d, d, x_.data() + m * d);
    ++m;
  }
  if (m > 0) logits_rows(0, m, last_logits.data() + first * V);
}

// A decode step of runs: slot i's counts[i] rows (one each when counts is empty) are consecutive
// rows of the batch, at consecutive positions; every row's arithmetic is the one it gets in a step
// of its own (the GEMMs and the prefix attention are row by row; its suffix attention covers its
// slot's positions up to its own), so k rows of a run give the logits of k single steps bit for bit.
void CpuEngine::run_step(const DecodeStep& request) {
  const std::span<const int> slots = request.slots, tokens = request.tokens;
  const std::span<float> logits = request.logits;
  const std::vector<int> ones(request.counts.empty() ? slots.size() : 0, 1);
  const std::span<const int> counts = request.counts.empty() ? std::span<const int>(ones) : request.counts;
  if (counts.size() != slots.size()) throw Error("decode: slots and counts sizes disagree");
  std::vector<std::size_t> runs = {0};
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (counts[i] < 1) throw Error("decode: slot " + std::to_string(slots[i]) + " has a run of " + std::to_string(counts[i]) + " tokens");
    runs.push_back(runs.back() + static_cast<std::size_t>(counts[i]));
  }
  const std::size_t T = runs.back();
  if (tokens.size() != T || logits.size() != T * static_cast<std::size_t>(c_.vocab_size))
    throw Error("decode: slots, tokens and logits sizes disagree");
  if (T == 0) return;
  std::vector<Slot*> batch(T);
  std::vector<int> pos(T);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    for (std::size_t u = 0; u < i; ++u)
      if (slots[u] == slots[i]) throw Error("decode: slot " + std::to_string(slots[i]) + " appears twice in one step");
    Slot* slot = &slot_at(slots[i]);
    const int len = slot_length(slots[i]);
    if (len + counts[i] > c_.max_position_embeddings)
      throw Error("slot " + std::to_string(slots[i]) + " is at the context limit (" + std::to_string(c_.max_position_embeddings) + ")");
    for (std::size_t t = runs[i]; t < runs[i + 1]; ++t) batch[t] = slot, pos[t] = len + static_cast<int>(t - runs[i]);
  }
  const auto t0 = Clock::now();
  timing_ = true;
  struct TimingOff {
    bool& on;
    ~TimingOff() { on = false; }
  } timing_off{timing_};
  resize(T);
  embed(tokens);
  const std::vector<PrefixGroup> groups = group_by_prefix(batch);  // once per step, not per layer
  rope_angles(pos);
  for (int l = 0; l < c_.n_layers; ++l)
    layer(l, pos, [&](std::size_t t) -> Cache& { return batch[t]->kv; }, runs, [&] { attend_decode(l, batch, pos, groups); });
  logits_rows(0, T, logits.data());
  add_since(t0, &PhaseTimes::total_ms);
  times_.steps++;
}

void CpuEngine::truncate_slot(int s, int length) {
  Slot& slot = slot_at(s);
  const int prefix = prefix_at(slot.prefix).len;
  if (length < prefix || length > slot_length(s))
    throw Error("truncate_slot: slot " + std::to_string(s) + " holds " + std::to_string(slot_length(s)) + " positions, its prefix " +
                std::to_string(prefix) + "; asked to keep " + std::to_string(length));
  for (std::size_t l = 0; l < slot.kv.k.size(); ++l) {
    slot.kv.k[l].truncate(static_cast<std::size_t>(length - prefix));
    slot.kv.v[l].truncate(static_cast<std::size_t>(length - prefix));
  }
}

}  // namespace cpu

std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
  return std::make_unique<cpu::CpuEngine>(std::move(weights), options);
}

}  // namespace bestofn
