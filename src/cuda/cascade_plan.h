#pragma once
// Host-side planning of cascade attention, in plain C++ (built into bestofn_core, so its unit
// tests run without CUDA; tests/test_cascade_plan.cpp, tests/test_cascade_layout.cpp): the page
// runs of the per-layer prefix page pool, each decode step's grouping of batch rows by prefix
// (FlashInfer's qo_indptr and page tables, and the state rows the merge reads), the suffixes' page
// table for FlashInfer's paged decode over the paged KV pool, and where all of a step's ints sit
// in its one upload.
#include <cstddef>
#include <map>
#include <span>
#include <vector>

namespace bestofn::cuda {

// A pool of pages handed out as runs of consecutive pages (a prompt's K/V rows, page-aligned, so
// that one copy per layer fills them). First fit over the free runs, which coalesce when given
// back; the pool only grows (grow), at prefill time.
class PageRuns {
 public:
  explicit PageRuns(int pages = 0);
  int pages() const { return pages_; }
  int free_pages() const;
  // The first page of a free run of n >= 1 pages, now taken; -1 when no free run is that long
  // (the caller grows the pool and asks again). Throws bestofn::Error for n < 1.
  int take(int n);
  // Gives back the run that starts at `first`; throws bestofn::Error when no taken run starts there.
  void give(int first);
  // Pages in the taken run starting at `first` (throws as give does).
  int run_pages(int first) const;
  // Grows the pool to `pages` (at least the current size); the new pages are free.
  void grow(int pages);
  // The size to grow to for a run of n pages: at least double, and enough for n at the end.
  int grown_size(int n) const;

 private:
  void add_free(int first, int n);
  int pages_ = 0;
  std::map<int, int> free_;   // first page -> pages, disjoint and never adjacent
  std::map<int, int> taken_;  // first page -> pages
};

// Pages of `page_tokens` positions that hold `len` positions.
int pages_for(int len, int page_tokens);

// One batch row's prefix: its id and where its K/V sit in the page pool.
struct CascadeRow {
  int prefix = 0;      // rows with the same id share one group
  int first_page = 0;  // the prefix's run: pages first_page .. first_page + pages_for(len) - 1
  int len = 0;         // positions, >= 1
};

// A decode step's rows grouped by prefix, groups in order of first appearance, rows within a group
// in batch order.
struct CascadeStep {
  std::vector<int> order;          // (T) order[r]: the batch row at group-order position r
  std::vector<int> qo_indptr;      // (G + 1) group g's positions [qo_indptr[g], qo_indptr[g + 1])
  std::vector<int> page_indptr;    // (G + 1) group g's pages at page_indices[page_indptr[g] ..]
  std::vector<int> page_indices;   // its run's pages, in position order
  std::vector<int> last_page_len;  // (G) positions in the group's last page, 1 .. page_tokens
  // (3 T) the state-row map of cascade_merge_cuda (the layout of kernels.h's state rows): batch row
  // t, query head h reads the prefix state of row position(t) * n_heads + h, i.e. map[t] =
  // position(t) * n_heads, map[T + t] = n_heads / n_kv (one "R" of a group), map[2 T + t] = 0.
  std::vector<int> map;
  int groups() const { return static_cast<int>(qo_indptr.size()) - 1; }
};

// Throws bestofn::Error (one line) for no rows, a length < 1, a page out of [0, pool_pages), a
// prefix id given two different runs, or heads that do not divide.
//
// pad_groups > 0 (CUDA graphs): empty groups appended up to pad_groups (at least the groups and
// at most the rows, since every group has a row), each over the one page `padding_page` holding 1
// position. An empty group has no query rows, so FlashInfer's plan gives it no work and reads none
// of its page; what it fixes is the group count FlashInfer's plan sees, and with it the plan's
// grid, tile and array offsets: a function of the rows (the bucket) alone, whatever prompts are in
// flight (cascade_shape).
CascadeStep cascade_step(std::span<const CascadeRow> rows, int n_heads, int n_kv, int page_tokens, int pool_pages,
                         int pad_groups = 0, int padding_page = 0);

// --- The suffix side: FlashInfer's paged decode over the paged KV pool -----------------------
// The pool's blocks are FlashInfer's pages (kBlockTokens positions, each an (n_kv, hd) cache row of
// one layer: NHD), so a row's page list is the first pages_for(len) entries of its slot's block
// table. Row t's positions 0 .. len - 1 sit in pages indices[indptr[t] ..], the last holding
// last_page_len[t] of them (1 .. page_tokens); an empty row (len 0: a padding row, whose attention
// is never read) has no pages and last_page_len 0, which FlashInfer reads as length 0 (its state:
// lse -inf, output 0).
struct SuffixRow {
  std::span<const int> blocks;  // the slot's block table, at least pages_for(len) entries
  int len = 0;                  // positions to attend, >= 0 (this step's token included)
};
struct SuffixPages {
  std::vector<int> indptr;         // (T + 1)
  std::vector<int> indices;        // (indptr[T]) block ids, row by row in position order
  std::vector<int> last_page_len;  // (T)
};
// O(rows + pages). Throws bestofn::Error (one line) for a negative length, a block table shorter
// than its length needs, or a block outside [0, pool_blocks).
SuffixPages suffix_pages(std::span<const SuffixRow> rows, int page_tokens, int pool_blocks);

// --- A step's ints: one upload, at offsets fixed by the step's rows -----------------------------
// What FlashInfer's plans are given for a step of `rows` rows (padded: the bucket) over `groups`
// prompts: fixed_grid (CUDA graphs) pads the groups to the rows and bounds the query rows by
// rows + groups - 1 (FlashInfer's graph-mode tile is sized for the longest group the bound allows,
// row_bound - groups + 1 rows: with the bound at the rows that is one row, tile 16 for any step;
// this bound lets one group hold every row, the best-of-N shape, tile 128 as without graphs), so
// that neither depends on the prompts in flight. Eager: the groups and rows as they are.
struct CascadeShape {
  int rows = 0, groups = 0, row_bound = 0;
  bool operator==(const CascadeShape&) const = default;
};
CascadeShape cascade_shape(int rows, int groups, bool fixed_grid);

// Offsets (in ints, each array 16-byte aligned) of a step's arrays in its upload, from its rows
// alone: the group arrays are sized for rows groups (groups <= rows), the suffix page table for
// rows rows and suffix_capacity pages (the paged KV pool's blocks; 0: no suffix table, today's
// per-row kernel reads the suffixes), and the prefix pages come last, prefix_capacity of them (the
// prefix pool's pages plus one per padding group), so that only `size` moves when the prefix pool
// grows.
struct CascadeLayout {
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  int rows = 0;
  std::size_t order = 0;                  // (rows) the batch row at each place of the group order
  std::size_t map = 0;                    // (3 rows) the merge's state-row map
  std::size_t qo_indptr = 0;              // (groups + 1)
  std::size_t page_indptr = 0;            // (groups + 1)
  std::size_t last_page_len = 0;          // (groups)
  std::size_t suffix_indptr = kAbsent;    // (rows + 1)
  std::size_t suffix_last = kAbsent;      // (rows)
  std::size_t suffix_indices = kAbsent;   // (suffix_capacity)
  std::size_t page_indices = 0;           // (prefix_capacity)
  std::size_t size = 0;                   // ints in all
  bool operator==(const CascadeLayout&) const = default;
};
CascadeLayout cascade_layout(int rows, std::size_t prefix_capacity, std::size_t suffix_capacity);
// Writes the step's arrays (and, with the layout's suffix table, `suffix`'s) at their offsets in
// out (layout.size ints). Throws bestofn::Error when they do not fit the layout.
void write_cascade_ints(const CascadeStep& step, const SuffixPages* suffix, const CascadeLayout& layout, int* out);

}  // namespace bestofn::cuda
