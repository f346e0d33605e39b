// The CPU reference engine: the full Llama forward over a batch of slots. Its step comments are
// the ones the CUDA engine's forward repeats.
#include <algorithm>
#include <array>
#include <chrono>
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
namespace {

// K or V of one layer, len rows of kv_dim values, in F32, BF16 or FP8 (EngineOptions::Kv: E4M3
// codes with one scale per row and KV head, quantize_fp8_rows over the row's heads; read as
// fp8_e4m3_to_float(code) * scale). Both are kept in tiles of cpu::kKeyTile positions (zeros past
// the last row). A K tile is (kv_dim, kKeyTile) element-major: one head's slice of it is then the
// transposed block that the score products read (cpu::prefix_scores), contiguous. A V tile is
// (head, position, head_dim): one head's rows of a tile are contiguous, so a head's values stream
// in order. Appending scatters a row into its tile once; nothing is transposed per query.
class KvRows {
 public:
  using Kv = EngineOptions::Kv;
  static constexpr std::size_t kTile = cpu::kKeyTile;
  KvRows(Kv kind, std::size_t width, std::size_t head_dim, bool keys)
      : kind_(kind), keys_(keys), width_(width), hd_(head_dim), heads_(width / head_dim) {}
  void append(const float* row) {
    const std::size_t j = len_++;
    if (j % kTile == 0) grow(width_ * kTile, heads_ * kTile);
    // Head by head: element i of head h at at(j, h * hd) + i * step (at()'s layouts, without a
    // division per element).
    const std::size_t step = keys_ ? kTile : 1;
    auto scatter = [&](auto* dst, auto value) {
      for (std::size_t h = 0; h < heads_; ++h) {
        auto* d = dst + at(j, h * hd_);
        const std::size_t e0 = h * hd_;
        for (std::size_t i = 0; i < hd_; ++i) d[i * step] = value(e0 + i);
      }
    };
    switch (kind_) {
      case Kv::BF16:
        scatter(h_.data(), [&](std::size_t e) { return bf16_from_float(row[e]); });
        break;
      case Kv::FP8: {
        thread_local std::vector<std::uint8_t> codes;
        codes.resize(width_);
        quantize_fp8_rows(row, heads_, hd_, codes.data(), s_.data() + j * heads_);
        scatter(c_.data(), [&](std::size_t e) { return codes[e]; });
        break;
      }
      default:
        scatter(f_.data(), [&](std::size_t e) { return row[e]; });
    }
  }
  // One head's slice of row j (off = head * head_dim, n = head_dim), as floats (V only).
  void read(std::size_t j, std::size_t off, std::size_t n, float* out) const {
    const std::size_t base = at(j, off);
    if (j % kTile == 0 && j + kTile < len_) prefetch(base + width_ * kTile, hd_ * kTile);  // the head's next tile
    widen_row(j, off, base, n, out);
  }
  // One head's slice (off = head * head_dim, n = head_dim) of V rows j0 .. j0 + kTile - 1 as
  // floats, row p at out + p * stride, zeros from n to stride and past the last row (V only;
  // j0 % kTile == 0): cpu::ValueTileReader.
  void read_value_tile(std::size_t j0, std::size_t off, std::size_t n, std::size_t stride, float* out) const {
    const std::size_t base = at(j0, off);  // the head's kTile rows of n, contiguous
    if (j0 + kTile < len_) prefetch(base + width_ * kTile, n * kTile);  // tiles are read in order: the next one now
    for (std::size_t p = 0; p < kTile; ++p) {
      float* o = out + p * stride;
      widen_row(j0 + p, off, base + p * n, n, o);  // past the last row: zero codes and scales
      std::fill(o + n, o + stride, 0.0f);
    }
  }
  // Elements [off, off + n) (one head's slice) of the rows j0 .. j0 + kTile - 1, transposed, as
  // floats: out[i * kTile + p] = row (j0 + p)[off + i], zero past the last row (K only;
  // j0 % kTile == 0).
  void read_tile(std::size_t j0, std::size_t off, std::size_t n, float* out) const {
    const std::size_t base = at(j0, off);
    if (j0 + kTile < len_) prefetch(base + width_ * kTile, n * kTile);  // tiles are read in order: the next one now
    switch (kind_) {
      case Kv::BF16:
        for (std::size_t i = 0; i < n * kTile; ++i) out[i] = bf16_to_float(h_[base + i]);
        break;
      case Kv::FP8: {
        float scale[kTile];  // zero past the last row, as the codes are
        for (std::size_t p = 0; p < kTile; ++p) scale[p] = s_[(j0 + p) * heads_ + off / hd_];
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t p = 0; p < kTile; ++p) out[i * kTile + p] = fp8_e4m3_to_float_finite(c_[base + i * kTile + p]) * scale[p];
        break;
      }
      default:
        std::memcpy(out, f_.data() + base, n * kTile * sizeof(float));
    }
  }
  std::size_t rows() const { return len_; }
  // A BF16 cache read in place (cpu::prefix_scores_bf16 / prefix_values_bf16): one head's slice
  // (off = head * head_dim) of the first tile, tiles tile_stride() elements apart; nullptr for
  // other kinds and an empty cache.
  const std::uint16_t* bf16_head(std::size_t off) const { return kind_ == Kv::BF16 && len_ > 0 ? h_.data() + at(0, off) : nullptr; }
  std::size_t tile_stride() const { return width_ * kTile; }

 private:
  // Elements [base, base + n) of V row j (the head of element off) as floats.
  void widen_row(std::size_t j, std::size_t off, std::size_t base, std::size_t n, float* out) const {
    switch (kind_) {
      case Kv::BF16:
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(h_[base + i]);
        break;
      case Kv::FP8: {
        const float scale = s_[j * heads_ + off / hd_];
        for (std::size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_float_finite(c_[base + i]) * scale;
        break;
      }
      default:
        std::memcpy(out, f_.data() + base, n * sizeof(float));
    }
  }
  // Where element e of row j is.
  std::size_t at(std::size_t j, std::size_t e) const {
    const std::size_t tile = j / kTile * width_ * kTile, lane = j % kTile;
    return keys_ ? tile + e * kTile + lane : tile + e / hd_ * hd_ * kTile + lane * hd_ + e % hd_;
  }
  // Asks for the cache lines of elements [e, e + n).
  void prefetch(std::size_t e, std::size_t n) const {
    const std::size_t bytes = kind_ == Kv::BF16 ? 2 : kind_ == Kv::FP8 ? 1 : 4;
    const char* p = kind_ == Kv::BF16   ? reinterpret_cast<const char*>(h_.data())
                    : kind_ == Kv::FP8 ? reinterpret_cast<const char*>(c_.data())
                                       : reinterpret_cast<const char*>(f_.data());
    for (std::size_t b = e * bytes; b < (e + n) * bytes; b += 64) __builtin_prefetch(p + b);
  }
  // Room for `values` more elements (zeros) and, for FP8, `scales` more scales.
  void grow(std::size_t values, std::size_t scales) {
    switch (kind_) {
      case Kv::BF16: h_.resize(h_.size() + values); break;
      case Kv::FP8: c_.resize(c_.size() + values), s_.resize(s_.size() + scales); break;
      default: f_.resize(f_.size() + values);
    }
  }
  Kv kind_;
  bool keys_;  // K's tiles (else V's)
  std::size_t width_, hd_, heads_, len_ = 0;
  std::vector<float> f_;
  std::vector<std::uint16_t> h_;
  std::vector<std::uint8_t> c_;
  std::vector<float> s_;  // FP8: (rows, heads), grown a whole tile at a time (zeros past len_)
};

struct Cache {  // per layer K and V
  std::vector<KvRows> k, v;
  Cache(int layers, EngineOptions::Kv kind, std::size_t width, std::size_t head_dim) {
    for (int l = 0; l < layers; ++l) k.emplace_back(kind, width, head_dim, true), v.emplace_back(kind, width, head_dim, false);
  }
};

struct Prefix {
  int len = 0;
  int slots = 0;
  Cache kv;
};

struct Slot {
  int prefix = -1;
  Cache kv;  // the suffix
};

// Online softmax state of one query row over a run of positions.
struct Softmax {
  float m = -INFINITY, l = 0.0f;
};

// Row softmax statistics and weights, in place, for R rows of L scores (stride L): row r covers
// its first n_r scores, n_r = L (first >= L: decode) or min(L, first + r) (a causal prefill
// chunk, first = 1 + the chunk's first position); m = their max, they become exp_poly(s - m), l =
// their sum in order; entries past n_r become 0.
// The max in 16 lanes (a max does not depend on its order; NaNs are skipped as std::max(m, s) in
// order skips them); the weights 16 at a time (exp_poly's vector form, the same bits); the sums
// in order, eight rows at a time so that eight chains of adds overlap (over the shortest row's
// length, then each row's own tail, still in order).
void softmax_rows(float* scores, std::size_t R, std::size_t L, Softmax* st, std::size_t first = SIZE_MAX) {
  typedef float V16 __attribute__((vector_size(64)));
  auto len = [&](std::size_t r) { return first >= L ? L : std::min(L, first + r); };
  for (std::size_t r = 0; r < R; ++r) {
    float* e = scores + r * L;
    const std::size_t n = len(r);
    V16 mv = {};
    mv -= INFINITY;
    std::size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      V16 v;
      std::memcpy(&v, e + j, sizeof v);
      mv = mv < v ? v : mv;
    }
    float m = -INFINITY;
    for (int k = 0; k < 16; ++k) m = std::max(m, mv[k]);
    for (; j < n; ++j) m = std::max(m, e[j]);
    st[r] = Softmax{m, 0.0f};
    for (j = 0; j + 16 <= n; j += 16) {
      V16 v;
      std::memcpy(&v, e + j, sizeof v);
      v = exp_poly(v - m);
      std::memcpy(e + j, &v, sizeof v);
    }
    for (; j < n; ++j) e[j] = exp_poly(e[j] - m);
    std::fill(e + n, e + L, 0.0f);
  }
  std::size_t r = 0;
  for (; r + 8 <= R; r += 8) {
    const float* e0 = scores + r * L;
    const std::size_t common = len(r);  // the group's shortest row
    float l[8] = {};
    for (std::size_t j = 0; j < common; ++j)
      for (std::size_t k = 0; k < 8; ++k) l[k] += e0[k * L + j];
    for (std::size_t k = 0; k < 8; ++k) {
      for (std::size_t j = common; j < len(r + k); ++j) l[k] += e0[k * L + j];
      st[r + k].l = l[k];
    }
  }
  for (; r < R; ++r)
    for (std::size_t j = 0; j < len(r); ++j) st[r].l += scores[r * L + j];
}

class CpuEngine final : public Engine {
 public:
  CpuEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt)
      : w_(std::move(w)), c_(w_->config), pool_(engine_threads(opt.threads)),
        inv_freq_(rope_inv_freq(c_)) {
    if (const int asked = opt.threads > 0 ? opt.threads : default_threads(); asked > pool_.size())
      spdlog::warn("{} CPU threads asked for, and this process may use {} CPUs: using {} (more workers than CPUs wait on each "
                   "other; the candidates are the same whatever the count)",
                   asked, available_cpus(), pool_.size());
    const bool f32 = w_->token_embedding.dtype == DType::F32;
    kv_ = opt.kv != EngineOptions::Kv::Auto ? opt.kv : f32 ? EngineOptions::Kv::F32 : EngineOptions::Kv::BF16;
    if (kv_ == EngineOptions::Kv::FP8 && c_.head_dim <= 0) throw Error("--kv-cache fp8: the model has no head_dim");
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

  const ModelConfig& config() const override { return c_; }
  std::string name() const override { return "cpu"; }
  EngineDescription describe() const override {
    return {"cpu", "cpu", EngineDescription::CpuKernels{cpu::fp8_kernel_name(), cpu::wide_kernel_name()}, std::nullopt};
  }
  EngineOptions::Kv kv_cache() const override { return kv_; }

  int prefill(std::span<const int> tokens, std::span<float> last_logits) override;
  void release_prefix(int p) override {
    if (prefixes_.at(p).slots > 0) throw Error("release_prefix: prefix " + std::to_string(p) + " still has slots");
    prefixes_.erase(p);
  }
  int add_slot(int p) override {
    prefix_at(p).slots++;
    auto s = std::make_unique<Slot>(Slot{p, Cache(c_.n_layers, kv_, static_cast<std::size_t>(c_.kv_dim()), static_cast<std::size_t>(c_.head_dim))});
    return slots_.put(std::move(s));
  }
  void release_slot(int s) override {
    auto& slot = slot_at(s);
    prefix_at(slot.prefix).slots--;
    slots_.erase(s);
  }
  int slot_length(int s) const override {
    const Slot& slot = slots_.at(s);
    return prefixes_.at(slot.prefix).len + static_cast<int>(slot.kv.k[0].rows());
  }
  void decode(std::span<const int> slots, std::span<const int> tokens, std::span<float> logits) override;
  PhaseTimes take_phase_times() override { return std::exchange(times_, PhaseTimes{}); }

 private:
  using Clock = std::chrono::steady_clock;
  // Adds the time since t0 to *into when a decode step is being timed (timing_ set).
  void add_since(Clock::time_point t0, double PhaseTimes::* into) {
    if (timing_) times_.*into += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  void linear(const Linear& w, const float* x, std::size_t T, float* y) {
    const auto t0 = Clock::now();
    cpu::linear(w, x, T, y, pool_, strips_of(w));
    add_since(t0, &PhaseTimes::gemm_ms);
  }
  // xn_ = rmsnorm(x_) for T rows, the rows split over the pool (each computed as alone).
  void norm_rows(const Tensor& w, std::size_t T) {
    const auto d = static_cast<std::size_t>(c_.dim);
    const auto eps = static_cast<float>(c_.rms_norm_eps);
    float* out = xn_.data();
    const float* x = x_.data();
    pool_.run(T, [&](std::size_t t0, std::size_t t1) { cpu::rmsnorm(out + t0 * d, x + t0 * d, w, t1 - t0, d, eps); });
  }
  void linear_many(std::initializer_list<const Linear*> ws, const float* x, std::size_t T, std::initializer_list<float*> ys) {
    const auto t0 = Clock::now();
    std::array<const void*, 3> strips{};  // q/k/v or gate/up
    if (ws.size() > strips.size()) throw Error("linear_many: more layers than the engine shares an input among");
    std::size_t i = 0;
    for (const Linear* w : ws) strips[i++] = strips_of(*w);
    cpu::linear_many(std::span<const Linear* const>(ws.begin(), ws.size()), x, T, std::span<float* const>(ys.begin(), ys.size()), pool_,
                     std::span<const void* const>(strips.data(), ws.size()));
    add_since(t0, &PhaseTimes::gemm_ms);
  }
  // The packed weights of a layer of this model (nullptr for a layer without weights: packed_bytes 0).
  const void* strips_of(const Linear& l) const {
    const auto it = strips_.find(&l);
    return it == strips_.end() ? nullptr : it->second;
  }
  Prefix& prefix_at(int p) const { return prefixes_.at(p); }
  Slot& slot_at(int s) const { return slots_.at(s); }

  void resize(std::size_t T);
  void embed(std::span<const int> tokens);
  // rope_cs_ = every token's rotation angles (cpu::rope_angles), once per forward pass.
  void rope_angles(const std::vector<int>& pos);
  void attend_prefill(int layer, const Prefix& p, std::size_t T);
  // The batch rows of each prefix in a decode step: attention shares the prefix's K/V among them.
  struct PrefixGroup {
    const Prefix* prefix;
    std::vector<std::size_t> rows;
  };
  std::vector<PrefixGroup> group_by_prefix(std::span<Slot* const> batch) const;
  void attend_decode(int layer, std::span<Slot* const> batch, const std::vector<PrefixGroup>& groups);
  void layer(int l, const std::vector<int>& pos, const std::function<Cache&(std::size_t)>& cache_of, bool own_caches,
             const std::function<void()>& attend);
  void ffn(int layer, std::size_t T);
  void logits_rows(std::size_t first, std::size_t T, float* out);

  std::shared_ptr<const Weights> w_;
  const ModelConfig& c_;
  cpu::ThreadPool pool_;
  std::vector<float> inv_freq_;
  std::vector<float> rope_cs_;  // (T, head_dim): each token's rope_angles in this forward pass
  struct FreeBytes {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint8_t, FreeBytes> arena_;      // every packed layer's strips
  std::map<const Linear*, const std::uint8_t*> strips_;  // layer -> its strips in arena_
  EngineOptions::Kv kv_ = EngineOptions::Kv::BF16;  // never Auto once constructed
  HandleTable<Prefix> prefixes_{"prefix"};
  HandleTable<Slot> slots_{"slot"};
  bool timing_ = false;  // inside decode: linear and attention time go to times_
  PhaseTimes times_;

  // Activations for T tokens.
  std::vector<float> x_;     // (T, dim) the residual stream
  std::vector<float> xn_;    // (T, dim) normed
  std::vector<float> q_;     // (T, n_heads * head_dim)
  std::vector<float> k_;     // (T, n_kv_heads * head_dim)
  std::vector<float> v_;     // (T, n_kv_heads * head_dim)
  std::vector<float> att_;   // (T, n_heads * head_dim)
  std::vector<float> o_;     // (T, dim)
  std::vector<float> gate_;  // (T, hidden_dim)
  std::vector<float> up_;    // (T, hidden_dim)
};

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
// go to cache_of(t) (a cache per token when own_caches, else one shared), and `attend` fills att_
// from q_ and the caches.
void CpuEngine::layer(int l, const std::vector<int>& pos, const std::function<Cache&(std::size_t)>& cache_of, bool own_caches,
                      const std::function<void()>& attend) {
  const LayerWeights& L = w_->layers[static_cast<std::size_t>(l)];
  const std::size_t T = pos.size();
  const auto d = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.q_dim()), kd = static_cast<std::size_t>(c_.kv_dim());
  // attention: q, k, v = W xn; rope(q, k); kv cache <- k, v; x += W_o attend(q, kv)
  norm_rows(L.attn_norm, T);
  linear_many({&L.wq, &L.wk, &L.wv}, xn_.data(), T, {q_.data(), k_.data(), v_.data()});
  const std::size_t ncs = 2 * inv_freq_.size();  // rope_cs_ per token (rope_angles)
  auto rotate_append = [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      cpu::rope_rotate(q_.data() + t * qd, c_.n_heads, c_.head_dim, rope_cs_.data() + t * ncs);
      cpu::rope_rotate(k_.data() + t * kd, c_.n_kv_heads, c_.head_dim, rope_cs_.data() + t * ncs);
      Cache& cache = cache_of(t);
      cache.k[static_cast<std::size_t>(l)].append(k_.data() + t * kd);
      cache.v[static_cast<std::size_t>(l)].append(v_.data() + t * kd);
    }
  };
  // Tokens with caches of their own (a decode step's slots) go over the pool; a prefill's all
  // append to one cache, in order.
  if (own_caches) pool_.run(T, rotate_append);
  else rotate_append(0, T);
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
  const std::size_t T = tokens.size();
  if (T == 0) throw Error("prefill: empty prompt");
  if (T > static_cast<std::size_t>(c_.max_position_embeddings))
    throw Error("prompt of " + std::to_string(T) + " tokens is longer than the context (" + std::to_string(c_.max_position_embeddings) + ")");
  if (last_logits.size() != static_cast<std::size_t>(c_.vocab_size)) throw Error("prefill: logits buffer has the wrong size");
  auto p = std::make_unique<Prefix>(Prefix{static_cast<int>(T), 0, Cache(c_.n_layers, kv_, static_cast<std::size_t>(c_.kv_dim()), static_cast<std::size_t>(c_.head_dim))});
  resize(T);
  embed(tokens);
  std::vector<int> pos(T);
  for (std::size_t t = 0; t < T; ++t) pos[t] = static_cast<int>(t);
  rope_angles(pos);
  for (int l = 0; l < c_.n_layers; ++l)
    layer(l, pos, [&](std::size_t) -> Cache& { return p->kv; }, false, [&] { attend_prefill(l, *p, T); });
  logits_rows(T - 1, 1, last_logits.data());
  return prefixes_.put(std::move(p));
}

// Causal attention over the prompt: row t sees positions 0..t of the prefix (from the cache, so
// that prefill and decode read K and V at the same precision). Queries go in chunks of 48 (eight
// register blocks of 6 rows) through the two blocked products of src/cpu/prefix_attention.h, over
// positions 0 .. the chunk's last: S = Q K^T * scale; per row t, m = max_{j<=t} s_j, e_j =
// exp_poly(s_j - m), l = sum_{j<=t} e_j in order, p_j = e_j / l and 0 past t; out = sum_j p_j v_j
// in order (the zeros past t add nothing). cpu::prefill_attention is the scalar twin.
void CpuEngine::attend_prefill(int layer, const Prefix& p, std::size_t T) {
  const auto hd = static_cast<std::size_t>(c_.head_dim), qd = static_cast<std::size_t>(c_.q_dim());
  const std::size_t hdp = cpu::round_up(hd, 16);  // the row stride of prefix_values' output
  const auto group = static_cast<std::size_t>(c_.n_heads / c_.n_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const KvRows& K = p.kv.k[static_cast<std::size_t>(layer)];
  const KvRows& V = p.kv.v[static_cast<std::size_t>(layer)];
  constexpr std::size_t kChunk = 48;
  pool_.run(static_cast<std::size_t>(c_.n_heads), [&](std::size_t h0, std::size_t h1) {
    std::vector<float> scores, qt, acc;
    std::vector<Softmax> sm(kChunk);
    for (std::size_t h = h0; h < h1; ++h) {
      const std::size_t off = (h / group) * hd;
      for (std::size_t t0 = 0; t0 < T; t0 += kChunk) {
        const std::size_t t1 = std::min(T, t0 + kChunk), R = t1 - t0;
        qt.resize(hd * R);
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t i = 0; i < hd; ++i) qt[i * R + r] = q_[(t0 + r) * qd + h * hd + i];
        cpu::prefix_scores([&](std::size_t j0, float* out) { K.read_tile(j0, off, hd, out); }, t1, hd, qt.data(), R, scale, scores);
        softmax_rows(scores.data(), R, t1, sm.data(), t0 + 1);
        for (std::size_t r = 0; r < R; ++r) {
          float* e = scores.data() + r * t1;
          const float l = sm[r].l;
          for (std::size_t j = 0; j <= t0 + r; ++j) e[j] = e[j] / l;
        }
        cpu::prefix_values([&](std::size_t j0, float* out) { V.read_value_tile(j0, off, hd, hdp, out); }, t1, hd, scores.data(), R,
                           acc);
        for (std::size_t r = 0; r < R; ++r) std::copy_n(acc.data() + r * hdp, hd, att_.data() + (t0 + r) * qd + h * hd);
      }
    }
  });
}

void CpuEngine::decode(std::span<const int> slots, std::span<const int> tokens, std::span<float> logits) {
  const std::size_t T = slots.size();
  if (tokens.size() != T || logits.size() != T * static_cast<std::size_t>(c_.vocab_size))
    throw Error("decode: slots, tokens and logits sizes disagree");
  if (T == 0) return;
  std::vector<Slot*> batch(T);
  std::vector<int> pos(T);
  for (std::size_t t = 0; t < T; ++t) {
    batch[t] = &slot_at(slots[t]);
    pos[t] = slot_length(slots[t]);
    if (pos[t] >= c_.max_position_embeddings)
      throw Error("slot " + std::to_string(slots[t]) + " is at the context limit (" + std::to_string(c_.max_position_embeddings) + ")");
    for (std::size_t u = 0; u < t; ++u)
      if (slots[u] == slots[t]) throw Error("decode: slot " + std::to_string(slots[t]) + " appears twice in one step");
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
    layer(l, pos, [&](std::size_t t) -> Cache& { return batch[t]->kv; }, true, [&] { attend_decode(l, batch, groups); });
  logits_rows(0, T, logits.data());
  add_since(t0, &PhaseTimes::total_ms);
  times_.steps++;
}

// Decode attention (Hydragen, arXiv 2402.05099): for each prefix, the queries of all its slots
// meet the prefix keys together as two blocked matrix products (src/cpu/prefix_attention.h: each
// K/V tile widened once per prefix and KV head into a copy the queries share, or, for up to 12
// queries, read in place); each slot then attends over its own suffix; the two softmaxes merge by
// log-sum-exp.
// Row arithmetic depends only on that row: a slot gets the same numbers in any batch.
std::vector<CpuEngine::PrefixGroup> CpuEngine::group_by_prefix(std::span<Slot* const> batch) const {
  std::map<int, std::vector<std::size_t>> by_prefix;  // prefix -> batch rows
  for (std::size_t t = 0; t < batch.size(); ++t) by_prefix[batch[t]->prefix].push_back(t);
  std::vector<PrefixGroup> groups;
  for (auto& [p, rows] : by_prefix) groups.push_back({&prefixes_.at(p), std::move(rows)});
  return groups;
}

// Up to this many queries of one KV head read a BF16 cache in place (two register blocks of 6).
constexpr std::size_t kInPlaceRows = 12;

void CpuEngine::attend_decode(int layer, std::span<Slot* const> batch, const std::vector<PrefixGroup>& groups) {
  const std::size_t hd = static_cast<std::size_t>(c_.head_dim), qd = static_cast<std::size_t>(c_.q_dim());
  const std::size_t hdp = cpu::round_up(hd, 16);  // the row stride of prefix_values' output
  const std::size_t group = static_cast<std::size_t>(c_.n_heads / c_.n_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::size_t items = groups.size() * static_cast<std::size_t>(c_.n_kv_heads);

  // The two products for R queries over L positions of one KV head (off) of a cache: a BF16
  // cache in place when the queries are few (a widened copy of each tile serves many queries
  // better), else through widened tiles. Either gives the same bits.
  const bool in_place = kv_ == EngineOptions::Kv::BF16 && hd % 16 == 0;
  auto scores_of = [&](const KvRows& K, std::size_t off, std::size_t L, const float* qt, std::size_t R, std::vector<float>& out) {
    if (in_place && R <= kInPlaceRows && L > 0)
      cpu::prefix_scores_bf16(K.bf16_head(off), K.tile_stride(), L, hd, qt, R, scale, out);
    else
      cpu::prefix_scores([&](std::size_t j0, float* o) { K.read_tile(j0, off, hd, o); }, L, hd, qt, R, scale, out);
  };
  auto values_of = [&](const KvRows& V, std::size_t off, std::size_t L, const float* p, std::size_t R, std::vector<float>& out) {
    if (in_place && R <= kInPlaceRows && L > 0)
      cpu::prefix_values_bf16(V.bf16_head(off), V.tile_stride(), L, hd, p, R, out);
    else
      cpu::prefix_values([&](std::size_t j0, float* o) { V.read_value_tile(j0, off, hd, hdp, o); }, L, hd, p, R, out);
  };
  pool_.run(items, [&](std::size_t i0, std::size_t i1) {
    std::vector<float> scores, acc, qt, s_scores, acc_s;
    std::vector<Softmax> ss(group);
    for (std::size_t item = i0; item < i1; ++item) {
      const Prefix& P = *groups[item / static_cast<std::size_t>(c_.n_kv_heads)].prefix;
      const auto& rows = groups[item / static_cast<std::size_t>(c_.n_kv_heads)].rows;
      const std::size_t h = item % static_cast<std::size_t>(c_.n_kv_heads), off = h * hd;
      const std::size_t R = rows.size() * group, Lp = static_cast<std::size_t>(P.len);
      const std::size_t Rp = cpu::round_up(R, cpu::kPrefixRowBlock);
      auto q_of = [&](std::size_t r) { return q_.data() + rows[r / group] * qd + (h * group + r % group) * hd; };
      const KvRows& PK = P.kv.k[static_cast<std::size_t>(layer)];
      const KvRows& PV = P.kv.v[static_cast<std::size_t>(layer)];
      // Prefix: S = Q K^T (R x Lp), row softmax statistics, O_p = exp(S - m) V: two blocked
      // matrix products over all R queries of the prefix (src/cpu/prefix_attention.h).
      qt.assign(hd * Rp, 0.0f);
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t i = 0; i < hd; ++i) qt[i * Rp + r] = q_of(r)[i];
      scores_of(PK, off, Lp, qt.data(), Rp, scores);
      std::vector<Softmax> sp(R);
      softmax_rows(scores.data(), R, Lp, sp.data());
      values_of(PV, off, Lp, scores.data(), Rp, acc);
      // Suffix, per slot: its `group` query heads against the slot's own K and V, the same two
      // blocked products (every query's sums in the same order as alone); then the log-sum-exp
      // merge into att.
      const std::size_t Gp = cpu::round_up(group, cpu::kPrefixRowBlock);
      for (std::size_t b = 0; b < rows.size(); ++b) {
        const Slot& S = *batch[rows[b]];
        const KvRows& SK = S.kv.k[static_cast<std::size_t>(layer)];
        const KvRows& SV = S.kv.v[static_cast<std::size_t>(layer)];
        const std::size_t Ls = SK.rows();
        qt.assign(hd * Gp, 0.0f);
        for (std::size_t g = 0; g < group; ++g)
          for (std::size_t i = 0; i < hd; ++i) qt[i * Gp + g] = q_of(b * group + g)[i];
        scores_of(SK, off, Ls, qt.data(), Gp, s_scores);
        softmax_rows(s_scores.data(), group, Ls, ss.data());
        std::fill(s_scores.begin() + static_cast<std::ptrdiff_t>(group * Ls), s_scores.end(), 0.0f);  // padding rows
        values_of(SV, off, Ls, s_scores.data(), Gp, acc_s);
        for (std::size_t g = 0; g < group; ++g) {
          const std::size_t r = b * group + g;
          const float m = std::max(sp[r].m, ss[g].m);
          const float a = std::exp(sp[r].m - m), bw = std::exp(ss[g].m - m);
          const float denom = sp[r].l * a + ss[g].l * bw;
          float* out = att_.data() + rows[b] * qd + (h * group + g) * hd;
          for (std::size_t i = 0; i < hd; ++i) out[i] = (acc[r * hdp + i] * a + acc_s[g * hdp + i] * bw) / denom;
        }
      }
    }
  });
}

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
  return std::make_unique<CpuEngine>(std::move(weights), options);
}

}  // namespace bestofn
