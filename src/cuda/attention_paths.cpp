// The three decode attention paths (src/cuda/attention_paths.h): the decode kernel (plain, or split
// and tiled), prefix-GEMM attention and cascade attention, each with its plan, its launches and its
// part of the graph key.
#include "cuda/attention_paths.h"

#include <optional>
#include <utility>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/best_fit_parts.h"
#include "cuda/cascade_attention.h"
#include "cuda/cuda_check.h"
#include "cuda/plan.h"
#include "cuda/prefix_attention.h"

namespace bestofn::cuda {
namespace {

// Layer l's cache pointers of a step's rows: k_prefix, v_prefix, k_suffix, v_suffix, T each.
const std::uint16_t* const* layer_pointers(const StepProgram& s, int l) {
  return s.ptrs + 4 * static_cast<std::size_t>(l) * static_cast<std::size_t>(s.T);
}

// One launch per layer over every row's prefix and suffix rows: one block per row and query head,
// or (split attention) the tiled kernel, blocks per KV head, where the shape allows it; with split
// attention each row's positions in chunks when few rows leave the device idle, the chunk states
// merged by a second launch or (merge_inline) by the last block of each row.
class DecodeKernelAttention final : public AttentionPath {
 public:
  explicit DecodeKernelAttention(const AttentionSetup& setup) : s_(setup) {}
  const char* name() const override { return "the decode kernel"; }

  // With B blocks per row (query heads, or KV heads for the tiled kernel), T' x B x splits(T') <=
  // 2 sm_count + T' B (decode_attention_splits), so the chunk states, T' x n_heads x splits(T'),
  // number at most 2 sm_count x group + T' x n_heads, for every T' <= T.
  void size_rows(int T) override {
    if (!s_.split) return;
    const auto t = static_cast<std::size_t>(T);
    const std::size_t group = static_cast<std::size_t>(s_.n_heads / s_.n_kv);
    work_.resize((2 * static_cast<std::size_t>(s_.sm_count) * group + t * static_cast<std::size_t>(s_.n_heads)) *
                 (static_cast<std::size_t>(s_.hd) + 2) * 4);
    // The in-kernel merge's counters (one per row and query head at most), 0 between launches.
    if (s_.merge_inline) {
      counters_.resize(t * static_cast<std::size_t>(s_.n_heads) * 4);
      CUDA_CHECK(cudaMemsetAsync(counters_.get(), 0, counters_.size(), s_.stream));
    }
  }
  void plan(const StepProgram& s, bool /*speculated*/) override {
    tiled_ = s_.split && decode_attention_tiled_supported(s_.n_heads, s_.n_kv, s_.hd);
    splits_ = s_.split ? decode_attention_splits(s.T, tiled_ ? s_.n_kv : s_.n_heads, s_.sm_count) : 1;
  }
  void attend(int l, const StepProgram& s, const float* q, float* out) override {
    const auto n = static_cast<std::size_t>(s.T);
    const std::uint16_t* const* d = layer_pointers(s, l);
    int* counters = s_.merge_inline ? counters_.get<int>() : nullptr;
    if (tiled_) {
      TiledAttentionArgs a;
      a.q = q, a.k_prefix = d, a.v_prefix = d + n, a.prefix_len = s.lens;
      a.k_suffix = d + 2 * n, a.v_suffix = d + 3 * n, a.suffix_len = s.lens + s.T;
      a.T = s.T, a.n_heads = s_.n_heads, a.n_kv = s_.n_kv, a.hd = s_.hd, a.out = out;
      a.suffix_table = s.tables, a.suffix_table_start = s.starts, a.block_tokens = s.block;
      a.splits = splits_, a.partial = partial(), a.kv = s_.kv;
      a.merge_counters = counters;
      decode_attention_tiled_cuda(a, s_.stream);
      return;
    }
    decode_attention_cuda(q, d, d + n, s.lens, d + 2 * n, d + 3 * n, s.lens + s.T, s.T, s_.n_heads, s_.n_kv, s_.hd, out, s_.stream,
                          s.tables, s.starts, s.block, splits_, partial(), s_.kv, counters);
  }
  void add_to_key(GraphKey& key) const override {
    key.insert(key.end(), {static_cast<std::uint64_t>(splits_), tiled_ ? 1u : 0u, key_address(work_.get()), key_address(counters_.get())});
  }
  // The planned step's shape, for prefix-GEMM attention's suffixes: the tiled kernel's chunks (0:
  // not tiled) and their states.
  int tiled_splits() const { return tiled_ ? splits_ : 0; }
  float* partial() const { return splits_ > 1 ? work_.get<float>() : nullptr; }

 private:
  AttentionSetup s_;
  DeviceBuffer work_;      // split attention: the chunk states
  DeviceBuffer counters_;  // merge_inline: the rows' chunk counters
  bool tiled_ = false;
  int splits_ = 1;
};

// Prefix-GEMM attention (src/cuda/prefix_attention.h): each prompt's K/V widened to F32 once after
// its forward, from a pool made for the run's prompts; a step's rows grouped by prompt, the state
// rows of each group mapped (prefix_state_map) and written with the step's arrays. Its plan hangs
// on the groups: no step planned ahead, and no runs (a group is rows of distinct slots).
class PrefixGemmAttention final : public AttentionPath {
 public:
  explicit PrefixGemmAttention(const AttentionSetup& setup) : s_(setup), kernel_(setup), gemms_(setup.stream) {
    can_.runs = false, can_.ahead = false, can_.grouped = true;
  }
  const char* name() const override { return "prefix-GEMM attention"; }

  void add_prefix(Prefix& p) override {
    // The cache rows widened to F32 (BF16: exact; FP8: the values the kernels read, code times
    // scale), into a part from the pool.
    const auto rows = static_cast<std::size_t>(p.kv.len);
    if (auto part = pool_.take(p.kv.len))
      p.wide = std::move(*part);
    else
      p.wide = make_part(p.kv.len);
    for (int l = 0; l < s_.n_layers; ++l) {
      if (s_.kv == KvFormat::FP8) {
        fp8_rows_to_f32_cuda(p.kv.k(l), rows, s_.n_kv, s_.hd, p.wide.k(l), s_.stream);
        fp8_rows_to_f32_cuda(p.kv.v(l), rows, s_.n_kv, s_.hd, p.wide.v(l), s_.stream);
      } else {
        bf16_to_f32_cuda(p.kv.k(l), rows * p.wide.kv_dim, p.wide.k(l), s_.stream);
        bf16_to_f32_cuda(p.kv.v(l), rows * p.wide.kv_dim, p.wide.v(l), s_.stream);
      }
    }
  }
  void release_prefix(Prefix& p, bool to_pool) override {
    if (to_pool && p.wide.capacity > 0) pool_.put(p.wide.capacity, std::move(p.wide));
  }
  std::size_t prefix_bytes_per_position() const override { return 2 * static_cast<std::size_t>(s_.n_layers) * kv_dim() * 4; }
  void reserve_prefixes(std::span<const int> lengths) override {
    pool_.clear();
    for (const int len : lengths) pool_.put(len, make_part(len));
  }
  // The prefix GEMMs' scratch for the bucket's rows over the longest prompt, where that fits in an
  // eighth of the free memory (else its steps grow it, counted).
  void reserve(int rows, int longest) override {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::size_t state_rows = static_cast<std::size_t>(rows) * static_cast<std::size_t>(s_.n_heads);
    const auto positions = static_cast<std::size_t>(std::max(longest, 1));
    if (PrefixAttention::reserve_bytes(state_rows, positions, s_.hd) <= free_bytes / 8) gemms_.reserve_for(state_rows, positions, s_.hd);
  }
  void size_rows(int T) override { kernel_.size_rows(T); }

  // The batch rows of each prompt (the padding rows a group of their own, over the padding prefix's
  // one position). A step in which no prompt has kMinPrefixGemmRows rows (one candidate left per
  // prompt) gains nothing from matrix products and takes the decode kernel.
  std::span<const int> group(const StepGroups& g, int T) override {
    grouped_ = false;
    std::vector<std::vector<int>> group_rows(g.size());
    std::vector<const Prefix*> prefixes;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::span<const int> r = g.rows_of(i);
      grouped_ = grouped_ || (g.prefix[i] != kPaddingPrefix && static_cast<int>(r.size()) >= kMinPrefixGemmRows);
      group_rows[i].assign(r.begin(), r.end());
      prefixes.push_back(&s_.prefix_of(g.prefix[i]));
    }
    groups_.assign(grouped_ ? static_cast<std::size_t>(s_.n_layers) : 0, {});
    if (!grouped_) return {};
    map_ = prefix_state_map(group_rows, T, s_.n_heads, s_.n_kv);
    for (std::size_t l = 0; l < groups_.size(); ++l)
      for (const Prefix* p : prefixes) groups_[l].push_back({p->wide.k(static_cast<int>(l)), p->wide.v(static_cast<int>(l)), p->kv.len});
    return map_.map;
  }
  void plan(const StepProgram& s, bool speculated) override {
    if (grouped_ != s.grouped) throw Error("prefix-GEMM attention: a step planned without its groups");
    if (grouped_) gemms_.reserve(map_, groups_[0], s_.n_kv, s_.hd);
    kernel_.plan(s, speculated);
  }
  void attend(int l, const StepProgram& s, const float* q, float* out) override {
    if (!grouped_) return kernel_.attend(l, s, q, out);
    const auto n = static_cast<std::size_t>(s.T);
    const std::uint16_t* const* d = layer_pointers(s, l);
    gemms_.run(q, map_, s.map, groups_[static_cast<std::size_t>(l)], d + 2 * n, d + 3 * n, s.lens + s.T, s.T, s_.n_heads, s_.n_kv, s_.hd,
               out, s.tables, s.starts, s.block, kernel_.tiled_splits(), kernel_.partial(), s_.kv);
  }
  // The cuBLAS calls bake in each group's shape, so the key keeps the groups: a graph replays only
  // while no group changes.
  void add_to_key(GraphKey& key) const override {
    kernel_.add_to_key(key);
    key.push_back(grouped_ ? 1u : 0u);
    if (!grouped_) return;
    gemms_.add_to_key(key);
    key.push_back(static_cast<std::uint64_t>(map_.rows));
    for (std::size_t g = 0; g < map_.R.size(); ++g)
      key.insert(key.end(), {static_cast<std::uint64_t>(map_.R[g]), static_cast<std::uint64_t>(map_.base[g])});
    for (const auto& layer_groups : groups_)
      for (const PrefixAttention::Group& g : layer_groups) key.insert(key.end(), {key_address(g.k), key_address(g.v), static_cast<std::uint64_t>(g.len)});
  }

 private:
  std::size_t kv_dim() const { return static_cast<std::size_t>(s_.n_kv) * static_cast<std::size_t>(s_.hd); }
  F32KvPart make_part(int rows) const {
    F32KvPart part;
    part.kv_dim = kv_dim(), part.capacity = rows;
    part.buf.resize(2 * static_cast<std::size_t>(s_.n_layers) * static_cast<std::size_t>(rows) * part.kv_dim * 4);
    return part;
  }
  AttentionSetup s_;
  DecodeKernelAttention kernel_;  // steps with no group of kMinPrefixGemmRows rows; the suffixes' tiled chunks
  PrefixAttention gemms_;
  BestFitParts<F32KvPart> pool_;  // the run's prompts' F32 copies, made by reserve_prefixes
  // The planned step: grouped, its state-row map, and per layer each group's F32 K/V.
  bool grouped_ = false;
  PrefixStateMap map_;
  std::vector<std::vector<PrefixAttention::Group>> groups_;
};

// Cascade attention (src/cuda/cascade_attention.h): each prompt's rows copied into a page pool
// after its forward; a step's plan (its groups and FlashInfer's schedules) made while the step
// before runs, for the batch speculated then, and used when the batch is that one and nothing has
// touched the pool since. No runs: its plan groups one row per slot.
class CascadeAttentionPath final : public AttentionPath {
 public:
  explicit CascadeAttentionPath(const AttentionSetup& setup)
      : s_(setup), cascade_(setup.stream, setup.n_layers, setup.n_heads, setup.n_kv, setup.hd, setup.kv) {
    can_.runs = false;
    // Paged KV: the suffixes by FlashInfer's paged decode over the block pools where it applies
    // (BF16 KV, 4 query heads per KV head), else by cascade_merge_cuda (cascade_attention.h).
    static_assert(PagedKv::kBlockTokens == kCascadePageTokens, "FlashInfer's decode reads paged KV's blocks as its pages");
    if (s_.paged) cascade_.use_paged_suffix(s_.paged->layout(), s_.paged->blocks() + (s_.paged->scratch_block() >= 0 ? 1 : 0));
  }
  const char* name() const override { return "cascade attention"; }

  void add_prefix(Prefix& p) override {
    std::vector<const std::uint16_t*> k(static_cast<std::size_t>(s_.n_layers)), v(k.size());
    for (int l = 0; l < s_.n_layers; ++l) k[static_cast<std::size_t>(l)] = p.kv.k(l), v[static_cast<std::size_t>(l)] = p.kv.v(l);
    p.cascade_page = cascade_.add_prefix(k, v, p.kv.len);
  }
  void release_prefix(Prefix& p, bool /*to_pool*/) override {
    if (p.cascade_page >= 0) cascade_.release_prefix(p.cascade_page);
    p.cascade_page = -1;
  }
  void reserve_prefixes(std::span<const int> lengths) override {
    int pages = 0;
    for (const int len : lengths) pages += pages_for(len, kCascadePageTokens);
    cascade_.reserve_pages(pages);
  }
  void reserve(int rows, int longest) override { cascade_.reserve(rows, longest); }

  void plan(const StepProgram& s, bool speculated) override {
    const bool reuse = speculated && next_ && cascade_.current(*next_);
    if (reuse)
      plan_ = std::move(next_);
    else
      plan_ = plan_rows(s.batch, s.T, false);
    (reuse ? counts_.ahead : counts_.planned)++;
    next_.reset();
  }
  void attend(int l, const StepProgram& s, const float* q, float* out) override {
    const auto n = static_cast<std::size_t>(s.T);
    const std::uint16_t* const* d = layer_pointers(s, l);
    cascade_.run(l, *plan_, q, d + 2 * n, d + 3 * n, s.lens + s.T, out, s.tables, s.starts, s.block);
  }
  void add_to_key(GraphKey& key) const override { cascade_.add_to_key(key, *plan_); }
  // Its uploads are ordered after this step's launches on the stream, so they overwrite nothing
  // this step still reads; a plan that would grow a buffer is not made here.
  void speculate(std::span<Slot* const> batch, int T) override {
    try {
      next_ = plan_rows(batch, T, true);
    } catch (const Error&) {
      next_.reset();  // planned in full at the next step
    }
  }
  Counts counts() const override { return counts_; }

 private:
  // The rows of `batch` (then padding rows up to T, grouped by the padding prefix) by prompt, each
  // row's suffix (its block table and length with this step's row; the padding rows attend to no
  // suffix) for FlashInfer's decode, and FlashInfer's schedules. A batch row's slot length is read
  // as it stands before the step (plan), or after the step that speculated it (speculate): both
  // are the length the step it is planned for starts from.
  CascadeStepPlan plan_rows(std::span<Slot* const> batch, int T, bool ahead) {
    const auto n = static_cast<std::size_t>(T);
    std::vector<CascadeRow> by_row(n);
    std::vector<SuffixRow> suffix(cascade_.suffix_decode() ? n : 0);
    for (std::size_t i = 0; i < n; ++i) {
      const bool pad = i >= batch.size();
      const int prefix = pad ? kPaddingPrefix : batch[i]->prefix;
      const Prefix& pre = s_.prefix_of(prefix);
      by_row[i] = {prefix, pre.cascade_page, pre.kv.len};
      if (!suffix.empty() && !pad) suffix[i] = {batch[i]->paged.blocks, batch[i]->kv.len + 1};
    }
    return cascade_.plan(by_row, suffix, s_.graphs, ahead);
  }
  AttentionSetup s_;
  CascadeAttention cascade_;
  std::optional<CascadeStepPlan> plan_, next_;  // the planned step's, and the speculated next one's
  Counts counts_;
};

}  // namespace

std::unique_ptr<AttentionPath> make_attention_path(const CudaOptions& o, const AttentionSetup& setup) {
  // Both at once: refused before the engine is made (cuda_refusal, bestofn/engine/cuda_run.h).
  if (o.cascade_attention) return std::make_unique<CascadeAttentionPath>(setup);
  if (o.prefix_gemm) return std::make_unique<PrefixGemmAttention>(setup);
  return std::make_unique<DecodeKernelAttention>(setup);
}

}  // namespace bestofn::cuda
