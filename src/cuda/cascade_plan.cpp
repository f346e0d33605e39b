// Host-side planning of cascade attention (plain C++, in bestofn_core; see cascade_plan.h).
#include "cuda/cascade_plan.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "bestofn/util/error.h"

namespace bestofn::cuda {

PageRuns::PageRuns(int pages) { grow(pages); }

int PageRuns::free_pages() const {
  int n = 0;
  for (const auto& [first, len] : free_) n += len;
  return n;
}

int PageRuns::take(int n) {
  if (n < 1) throw Error("PageRuns::take", "expected a run of at least 1 page, got " + std::to_string(n));
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const int first = it->first, left = it->second - n;
    free_.erase(it);
    if (left > 0) free_.emplace(first + n, left);
    taken_.emplace(first, n);
    return first;
  }
  return -1;
}

void PageRuns::give(int first) {
  const int n = run_pages(first);
  taken_.erase(first);
  add_free(first, n);
}

int PageRuns::run_pages(int first) const {
  const auto it = taken_.find(first);
  if (it == taken_.end()) throw Error("PageRuns", "no taken run starts at page " + std::to_string(first));
  return it->second;
}

void PageRuns::grow(int pages) {
  if (pages < pages_) throw Error("PageRuns::grow", "the pool only grows: " + std::to_string(pages_) + " pages, asked for " + std::to_string(pages));
  if (pages > pages_) add_free(pages_, pages - pages_);
  pages_ = pages;
}

int PageRuns::grown_size(int n) const {
  // A free run at the end of the pool counts towards n.
  int tail = 0;
  if (!free_.empty()) {
    const auto last = std::prev(free_.end());
    if (last->first + last->second == pages_) tail = last->second;
  }
  const long long need = static_cast<long long>(pages_) + std::max(0, n - tail);
  const long long size = std::max(need, 2LL * pages_);
  if (size > 0x7fffffffLL) throw Error("PageRuns::grow", "a pool of " + std::to_string(size) + " pages is too large");
  return static_cast<int>(size);
}

void PageRuns::add_free(int first, int n) {
  auto next = free_.lower_bound(first);
  if (next != free_.end() && next->first == first + n) {  // coalesce with the run after
    n += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == first) {  // and with the run before
      prev->second += n;
      return;
    }
  }
  free_.emplace(first, n);
}

int pages_for(int len, int page_tokens) { return (len + page_tokens - 1) / page_tokens; }

CascadeStep cascade_step(std::span<const CascadeRow> rows, int n_heads, int n_kv, int page_tokens, int pool_pages, int pad_groups,
                         int padding_page) {
  const char* what = "cascade_step";
  if (rows.empty()) throw Error(what, "no rows");
  if (n_kv <= 0 || n_heads <= 0 || n_heads % n_kv != 0)
    throw Error(what, "n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv " + std::to_string(n_kv));
  if (page_tokens < 1) throw Error(what, "expected page_tokens >= 1, got " + std::to_string(page_tokens));
  const int T = static_cast<int>(rows.size());
  // Group ids in order of first appearance, and each row's group.
  std::unordered_map<int, int> group_of;
  std::vector<int> row_group(rows.size()), first_row;
  for (int t = 0; t < T; ++t) {
    const CascadeRow& r = rows[static_cast<std::size_t>(t)];
    const auto [it, fresh] = group_of.emplace(r.prefix, static_cast<int>(first_row.size()));
    if (fresh) {
      if (r.len < 1) throw Error(what, "prefix " + std::to_string(r.prefix) + " has " + std::to_string(r.len) + " positions");
      const long long end = static_cast<long long>(r.first_page) + pages_for(r.len, page_tokens);
      if (r.first_page < 0 || end > pool_pages)
        throw Error(what, "prefix " + std::to_string(r.prefix) + "'s pages " + std::to_string(r.first_page) + ".." + std::to_string(end - 1) +
                              " are outside the pool of " + std::to_string(pool_pages));
      first_row.push_back(t);
    } else {
      const CascadeRow& f = rows[static_cast<std::size_t>(first_row[static_cast<std::size_t>(it->second)])];
      if (f.first_page != r.first_page || f.len != r.len)
        throw Error(what, "prefix " + std::to_string(r.prefix) + " is given two page runs in one step");
    }
    row_group[static_cast<std::size_t>(t)] = it->second;
  }
  const std::size_t G = first_row.size();
  CascadeStep s;
  // Counting sort of the rows by group (stable: batch order within a group).
  s.qo_indptr.assign(G + 1, 0);
  for (int g : row_group) s.qo_indptr[static_cast<std::size_t>(g) + 1]++;
  for (std::size_t g = 0; g < G; ++g) s.qo_indptr[g + 1] += s.qo_indptr[g];
  std::vector<int> next(s.qo_indptr.begin(), s.qo_indptr.end() - 1);
  s.order.resize(rows.size());
  const auto Ts = rows.size();
  s.map.resize(3 * Ts);
  const int group = n_heads / n_kv;
  for (int t = 0; t < T; ++t) {
    const int r = next[static_cast<std::size_t>(row_group[static_cast<std::size_t>(t)])]++;
    s.order[static_cast<std::size_t>(r)] = t;
    s.map[static_cast<std::size_t>(t)] = r * n_heads;
    s.map[Ts + static_cast<std::size_t>(t)] = group;
    s.map[2 * Ts + static_cast<std::size_t>(t)] = 0;
  }
  s.page_indptr.push_back(0);
  for (const int t : first_row) {
    const CascadeRow& r = rows[static_cast<std::size_t>(t)];
    const int n = pages_for(r.len, page_tokens);
    for (int p = 0; p < n; ++p) s.page_indices.push_back(r.first_page + p);
    s.page_indptr.push_back(static_cast<int>(s.page_indices.size()));
    s.last_page_len.push_back(r.len - (n - 1) * page_tokens);
  }
  if (pad_groups > 0) {
    if (pad_groups < static_cast<int>(G) || pad_groups > T)
      throw Error(what, "cannot pad " + std::to_string(G) + " groups of " + std::to_string(T) + " rows to " + std::to_string(pad_groups));
    if (padding_page < 0 || padding_page >= pool_pages)
      throw Error(what, "the padding page " + std::to_string(padding_page) + " is outside the pool of " + std::to_string(pool_pages));
    for (std::size_t g = G; g < static_cast<std::size_t>(pad_groups); ++g) {
      s.qo_indptr.push_back(T);
      s.page_indices.push_back(padding_page);
      s.page_indptr.push_back(static_cast<int>(s.page_indices.size()));
      s.last_page_len.push_back(1);
    }
  }
  return s;
}

SuffixPages suffix_pages(std::span<const SuffixRow> rows, int page_tokens, int pool_blocks) {
  const char* what = "suffix_pages";
  if (page_tokens < 1) throw Error(what, "expected page_tokens >= 1, got " + std::to_string(page_tokens));
  SuffixPages p;
  p.indptr.reserve(rows.size() + 1);
  p.last_page_len.reserve(rows.size());
  std::size_t total = 0;
  for (const SuffixRow& r : rows) total += static_cast<std::size_t>(pages_for(std::max(r.len, 0), page_tokens));
  p.indices.reserve(total);
  p.indptr.push_back(0);
  for (std::size_t t = 0; t < rows.size(); ++t) {
    const SuffixRow& r = rows[t];
    if (r.len < 0) throw Error(what, "row " + std::to_string(t) + " has " + std::to_string(r.len) + " positions");
    const int n = pages_for(r.len, page_tokens);
    if (static_cast<std::size_t>(n) > r.blocks.size())
      throw Error(what, "row " + std::to_string(t) + "'s " + std::to_string(r.len) + " positions need " + std::to_string(n) +
                            " blocks, its table has " + std::to_string(r.blocks.size()));
    for (int b : r.blocks.first(static_cast<std::size_t>(n))) {
      if (b < 0 || b >= pool_blocks)
        throw Error(what, "row " + std::to_string(t) + " has block " + std::to_string(b) + ", outside the pool of " + std::to_string(pool_blocks));
      p.indices.push_back(b);
    }
    p.indptr.push_back(static_cast<int>(p.indices.size()));
    p.last_page_len.push_back(n == 0 ? 0 : r.len - (n - 1) * page_tokens);
  }
  return p;
}

CascadeShape cascade_shape(int rows, int groups, bool fixed_grid) {
  if (rows < 1 || groups < 1 || groups > rows)
    throw Error("cascade_shape", std::to_string(groups) + " groups of " + std::to_string(rows) + " rows");
  if (!fixed_grid) return {rows, groups, rows};
  return {rows, rows, 2 * rows - 1};
}

CascadeLayout cascade_layout(int rows, std::size_t prefix_capacity, std::size_t suffix_capacity) {
  if (rows < 1) throw Error("cascade_layout", "a step of " + std::to_string(rows) + " rows");
  const auto T = static_cast<std::size_t>(rows);
  CascadeLayout l;
  l.rows = rows;
  std::size_t at = 0;
  auto take = [&](std::size_t n) {  // 4 ints: 16 bytes
    const std::size_t off = at;
    at = (at + n + 3) / 4 * 4;
    return off;
  };
  l.order = take(T), l.map = take(3 * T);
  l.qo_indptr = take(T + 1), l.page_indptr = take(T + 1), l.last_page_len = take(T);
  if (suffix_capacity > 0) l.suffix_indptr = take(T + 1), l.suffix_last = take(T), l.suffix_indices = take(suffix_capacity);
  l.page_indices = take(prefix_capacity);
  l.size = at;
  return l;
}

void write_cascade_ints(const CascadeStep& step, const SuffixPages* suffix, const CascadeLayout& layout, int* out) {
  const char* what = "write_cascade_ints";
  const auto T = static_cast<std::size_t>(layout.rows);
  const std::size_t G = step.qo_indptr.size() - 1;
  const std::size_t prefix_room = layout.size - layout.page_indices;
  const bool has_suffix = layout.suffix_indptr != CascadeLayout::kAbsent;
  if (step.order.size() != T || step.map.size() != 3 * T || step.qo_indptr.empty() || G > T)
    throw Error(what, "a plan of " + std::to_string(step.order.size()) + " rows and " + std::to_string(G) + " groups for a layout of " +
                          std::to_string(T) + " rows");
  if (step.page_indices.size() > prefix_room)
    throw Error(what, std::to_string(step.page_indices.size()) + " prefix pages for room for " + std::to_string(prefix_room));
  if (has_suffix != (suffix != nullptr)) throw Error(what, "the layout and the suffix page table disagree");
  auto put = [&](const std::vector<int>& v, std::size_t off) { std::copy(v.begin(), v.end(), out + off); };
  put(step.order, layout.order), put(step.map, layout.map);
  put(step.qo_indptr, layout.qo_indptr), put(step.page_indptr, layout.page_indptr), put(step.last_page_len, layout.last_page_len);
  put(step.page_indices, layout.page_indices);
  if (suffix) {
    if (suffix->indptr.size() != T + 1 || suffix->last_page_len.size() != T)
      throw Error(what, "a suffix page table of " + std::to_string(suffix->last_page_len.size()) + " rows for " + std::to_string(T));
    if (suffix->indices.size() > layout.page_indices - layout.suffix_indices)
      throw Error(what, std::to_string(suffix->indices.size()) + " suffix pages for room for " +
                            std::to_string(layout.page_indices - layout.suffix_indices));
    put(suffix->indptr, layout.suffix_indptr), put(suffix->last_page_len, layout.suffix_last), put(suffix->indices, layout.suffix_indices);
  }
}

}  // namespace bestofn::cuda
