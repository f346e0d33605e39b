#pragma once
// The host's part of a CUDA decode step, in plain C++ (built into bestofn_core: unit-tested and
// benchmarked without a GPU). Given each batch row's descriptors (its slot and prefix handles, the
// lengths, where its KV parts' layers are), StepPlanner checks the batch, groups the rows by
// prefix and writes the step's O(batch) index arrays into one staging buffer, laid out at offsets
// that depend only on the batch-size bucket, so that one pinned copy uploads them and a CUDA graph
// replays against them. The per-layer cache row pointers (6 x layers x batch of them, 3 MB at
// B = 2048 and 32 layers) are not built here: each row carries the base addresses and per-layer
// stride of its KV parts (StepRowDesc, 56 bytes), and expand_step_pointers_cuda
// (kernels/step_pointers.cu) expands them on the device; expand_step_pointers below is its host twin.
//
// Everything is O(rows): duplicate slots by a per-slot stamp, prefix groups by a per-prefix stamp
// and a flat (CSR) row list, no map and no search over the batch.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace bestofn::cuda {

// CUDA graphs pad a step's batch up to its bucket so that a graph captured for the bucket
// replays while candidates finish: 1, 2, 4, 8, 16, 32, 64, then multiples of 64. Powers of two up
// to 64 keep the number of small buckets (and graphs) at 7 where the step is bound by reading the
// weights, so extra rows cost next to nothing; above 64 a multiple of 64 wastes at most 63 rows
// (under 5% from B = 1312 up) and matches the GEMMs' 64-wide tiles; B <= 2048 needs 7 + 31 graphs,
// under GraphCache::kMaxGraphs. T <= 0 is an error.
constexpr int kBucketStep = 64;
int bucket_of(int T);

// The bytes CudaEngine::prefill_many's index arrays take in the step arena for one call of `rows`
// prompt rows over `prompts` prompts in passes of at most `pass_rows` rows, at most: per pass its
// ids, positions and segments (T ints each), the cache rows (2 layers T pointers) and the
// segments' cache bases (2 layers S pointers), each 16-byte aligned; the passes number
// ceil(rows / pass_rows) and their segments prompts + passes - 1 (a prompt split over two passes
// is a segment in each). Covers prefill too (one prompt, one pass). Engine::reserve sizes the
// prefill staging with it.
std::size_t prefill_arena_bytes(int rows, int prompts, int pass_rows, int n_layers);

// Where a KV part's layers are (device byte addresses as integers): layer l's K rows start at
// k + l * layer_stride and its V rows at v + l * layer_stride; row r of either at r * row_bytes.
struct KvLayout {
  std::uint64_t k = 0, v = 0, layer_stride = 0;
};

// One batch row as the device reads it: its prefix part and its suffix part (the slot's own rows,
// or with paged KV the block pools), and the byte offset from the suffix part's layer base to the
// cache row this step writes (the same in every layer). 56 bytes.
struct StepRowDesc {
  std::uint64_t k_prefix = 0, v_prefix = 0, prefix_stride = 0;
  std::uint64_t k_suffix = 0, v_suffix = 0, suffix_stride = 0;
  std::uint64_t write = 0;
};
static_assert(sizeof(StepRowDesc) == 56, "the device kernel reads 7 words per row");

// The host twin of expand_step_pointers_cuda: for T rows and n_layers layers, the cache rows a step
// writes, rows (n_layers, 2, T): layer l's K row of row t at rows[2 l T + t], its V row at
// rows[(2 l + 1) T + t]; and the attention's pointers, ptrs (n_layers, 4, T): k_prefix, v_prefix,
// k_suffix, v_suffix of layer l at ptrs[4 l T + j T + t], j = 0..3. Exactly the arrays the decode
// step built on the host before (rope_kv_write_cuda and the attention kernels read them as is).
void expand_step_pointers(std::span<const StepRowDesc> desc, int n_layers, std::uint64_t* rows, std::uint64_t* ptrs);

// What the planner is told about one batch row.
struct StepRow {
  int slot = 0;         // the slot handle (twice in one step only as a run, below)
  int run = 0;          // Speculation: the row's place in its slot's run of consecutive positions
                        // (Engine::decode_runs): run r > 0 follows run r - 1 of the same slot,
                        // one position further; each row attends to its slot up to its own position
  int prefix = 0;       // the prefix handle (rows of one prefix form a group)
  int prefix_len = 0;   // positions of the prefix
  int suffix_len = 0;   // the slot's suffix rows before this step
  int token = 0;
  KvLayout prefix_kv;   // the prefix's layers
  KvLayout suffix_kv;   // the slot's own part, or (paged KV) the block pools
  std::span<const int> blocks;  // Paged KV: the slot's block table, covering this step's row
};

// The batch's rows grouped by prefix, in order of first appearance; the padding rows, when there
// are any, form the last group, with prefix kPaddingPrefix. Group g's rows are rows[first[g] ..
// first[g + 1]).
struct StepGroups {
  std::vector<int> prefix, first, rows;
  std::size_t size() const { return prefix.size(); }
  std::span<const int> rows_of(std::size_t g) const {
    return std::span<const int>(rows).subspan(static_cast<std::size_t>(first[g]),
                                              static_cast<std::size_t>(first[g + 1] - first[g]));
  }
};
constexpr int kPaddingPrefix = -1;

// The staged arrays' byte offsets (16-byte aligned, in this order; kAbsent when not staged). They
// depend only on the padded row count and which arrays are staged, never on the rows: a step of 33
// rows and one of 64 put every array at the same offset. The block tables come last and vary in
// size; `capacity` is the bytes the device arena needs for the largest table total.
struct StepLayout {
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  int T = 0;        // real rows
  int padded = 0;   // rows with the padding (the bucket; T without padding)
  std::size_t tokens = 0;   // (padded) int
  std::size_t pos = 0;      // (padded) int: each row's position
  std::size_t lens = 0;     // (2 padded) int: prefix lengths, then suffix lengths with this token
  std::size_t draws = kAbsent;  // (3 padded) uint64: device sampling's prompt, candidate, step indexes
  std::size_t map = kAbsent;    // (3 padded) int: prefix-GEMM attention's state-row map
  std::size_t desc = 0;         // (padded) StepRowDesc
  std::size_t starts = kAbsent; // (padded) int: paged KV, row t's table at tables + starts[t]
  std::size_t tables = kAbsent; // Paged KV: the block tables, flat (ints)
  std::size_t bytes = 0;        // the bytes this step stages (the tables as they are now)
  std::size_t capacity = 0;     // the bytes for this bucket with the tables at their most (layout())
  // Every array's offset, in the order above (what a CUDA graph of the step bakes in).
  std::array<std::size_t, 8> offsets() const { return {tokens, pos, lens, draws, map, desc, starts, tables}; }
};

struct StepPlanConfig {
  int n_layers = 1;
  int vocab = 1;
  int max_positions = 1;
  std::size_t row_bytes = 0;  // one cache row of one layer (K or V)
  int block_tokens = 0;       // Paged KV: positions per block; 0: unpaged
  std::size_t table_capacity = 0;  // Paged KV: the most table entries a step can hold (the pool's blocks + 1)
  bool pad = false;           // CUDA graphs: pad to bucket_of(T)
  // Where the padding rows read and write, nowhere else: a 1-position prefix (`padding_prefix`,
  // row 0 of its layers) and a scratch suffix row (`padding_suffix`: unpaged, row 0 of its layers;
  // paged, the block pools with the one-block table {scratch_block}). Each padding row writes its
  // K/V into that scratch row and attends over the dummy prefix position and that row; its token
  // is 0 and its logits and samples are never read.
  KvLayout padding_prefix, padding_suffix;
  int scratch_block = -1;
};

// Draw indexes per real row (device sampling).
struct StepDraws {
  std::span<const std::uint64_t> prompt, candidate, step;
};

class StepPlanner {
 public:
  explicit StepPlanner(const StepPlanConfig& c);
  const StepPlanConfig& config() const { return c_; }
  int padded(int T) const { return c_.pad ? bucket_of(T) : T; }

  // Throws a one-line bestofn::Error, with nothing changed, for an empty batch, a slot twice
  // other than as a run (consecutive rows, run 0, 1, 2, ..., suffix lengths one apart), a slot at
  // the context limit, or a token outside the vocabulary. O(rows).
  void check(std::span<const StepRow> rows);
  // The rows of each prefix, the padding rows (when padded > T) last. O(rows).
  const StepGroups& group(std::span<const StepRow> rows);
  // The layout of a step of T real rows (with_draws: the draw indexes staged; with_map: a state-row
  // map staged; table_entries: the tables' entries this step, paged only).
  StepLayout layout(int T, bool with_draws, bool with_map, std::size_t table_entries) const;
  // The block-table entries a step of these rows stages (the padding rows share one table of one).
  std::size_t table_entries(std::span<const StepRow> rows) const;
  // Writes the staged arrays of `rows` padded to lay.padded at `out` (lay.bytes of them; out
  // 16-byte aligned). draws: with lay.draws; map: with lay.map, lay.padded * 3 ints.
  void write(std::span<const StepRow> rows, const StepLayout& lay, const StepDraws* draws, std::span<const int> map,
             char* out) const;
  // write's parts, for StepAhead's patches: row t of `r` (its token, position, lengths, descriptor
  // and, paged, its table at tables + table_at; returns the table's entries); the padding rows
  // [lay.T, lay.padded) with their one shared table at table_at; the draw indexes.
  int write_row(const StepRow& r, const StepLayout& lay, std::size_t t, int table_at, char* out) const;
  void write_padding(const StepLayout& lay, int table_at, char* out) const;
  static void write_draws(const StepLayout& lay, const StepDraws& draws, char* out);

 private:
  StepPlanConfig c_;
  std::uint32_t epoch_ = 0;
  std::vector<std::uint32_t> slot_seen_;    // per slot handle: the epoch of the check that saw it
  std::vector<std::uint32_t> prefix_seen_;  // per prefix handle: the epoch of the grouping that saw it
  std::vector<int> prefix_group_;           // per prefix handle: its group in that grouping
  StepGroups groups_;
  std::vector<int> counts_;
};

}  // namespace bestofn::cuda
