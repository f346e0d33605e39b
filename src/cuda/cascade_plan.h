#pragma once
// Host-side planning of --cascade-attention, in plain C++ (built into bestofn_core, so its unit
// tests run without CUDA; tests/test_cascade_plan.cpp): the page runs of the per-layer prefix page
// pool, and each decode step's grouping of batch rows by prefix (FlashInfer's qo_indptr and page
// tables, and the state rows cascade_merge_cuda reads).
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
CascadeStep cascade_step(std::span<const CascadeRow> rows, int n_heads, int n_kv, int page_tokens, int pool_pages);

}  // namespace bestofn::cuda
