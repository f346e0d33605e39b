#include "bpe.h"

#include <queue>

namespace bestofn::bpe {

void MergeTable::reserve(std::size_t n) {
  std::size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  std::vector<Entry> old = std::move(slots_);
  slots_.assign(cap, Entry{});
  size_ = 0;
  for (const auto& e : old)
    if (e.key != kEmpty) slots_[slot(e.key)] = e, ++size_;
}

std::size_t MergeTable::slot(std::uint64_t k) const {
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = static_cast<std::size_t>((k * 0x9e3779b97f4a7c15ull) >> 20) & mask;
  while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask;
  return i;
}

bool MergeTable::add(int left, int right, int rank, int merged) {
  if (2 * (size_ + 1) > slots_.size()) reserve(2 * (size_ + 1));
  const std::uint64_t k = key(left, right);
  Entry& e = slots_[slot(k)];
  if (e.key == k) return false;
  e = {k, rank, merged};
  ++size_;
  return true;
}

const MergeTable::Entry* MergeTable::find(int left, int right) const {
  if (slots_.empty()) return nullptr;
  const Entry& e = slots_[slot(key(left, right))];
  return e.key == kEmpty ? nullptr : &e;
}

namespace {

struct Candidate {
  int rank;
  int pos;     // index of the left symbol
  int merged;  // the id the pair merges to, to detect stale entries
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void merge(std::vector<int>& ids, const MergeTable& merges) {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  std::vector<int> prev(ids.size()), next(ids.size());
  std::vector<bool> alive(ids.size(), true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n)
      if (const auto* e = merges.find(ids[i], ids[i + 1])) heap.push({e->rank, i, e->merged});
  }
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale when the left symbol was merged away, has no right neighbour any more, or the pair
    // at this position changed since the candidate was pushed.
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int right = next[c.pos];
    const auto* e = merges.find(ids[c.pos], ids[right]);
    if (!e || e->merged != c.merged) continue;
    ids[c.pos] = c.merged;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0)
      if (const auto* l = merges.find(ids[prev[c.pos]], ids[c.pos])) heap.push({l->rank, prev[c.pos], l->merged});
    if (next[c.pos] >= 0)
      if (const auto* r = merges.find(ids[c.pos], ids[next[c.pos]])) heap.push({r->rank, c.pos, r->merged});
  }
  int w = 0;
  for (int i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
  ids.resize(static_cast<std::size_t>(w));
}

}  // namespace bestofn::bpe
