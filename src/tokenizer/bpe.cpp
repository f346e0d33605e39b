#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>

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

bool MergeTable::add(int left, int right, int rank, int merged) {
  if (2 * (size_ + 1) > slots_.size()) reserve(2 * (size_ + 1));
  const std::uint64_t k = key(left, right);
  Entry& e = slots_[slot(k)];
  if (e.key == k) return false;
  e = {k, rank, merged};
  ++size_;
  return true;
}

std::uint64_t StringIds::hash(std::string_view key) {
  // FNV-1a, then a multiply-xorshift finish so that the low bits (the slot) depend on every byte.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}

std::size_t StringIds::probe(std::string_view key, std::uint64_t h) const {
  const std::size_t mask = slots_.size() - 1;
  const auto tag = static_cast<std::uint32_t>(h >> 32);
  for (std::size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0 || (s.tag == tag && s.len == key.size() && std::string_view(arena_).substr(s.off, s.len) == key)) return i;
  }
}

void StringIds::grow(std::size_t capacity) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  const std::size_t mask = capacity - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    const std::uint64_t h = hash(std::string_view(arena_).substr(s.off, s.len));
    std::size_t i = h & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void StringIds::reserve(std::size_t n) {
  std::size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  if (cap > slots_.size()) grow(cap);
}

bool StringIds::put(std::string_view key, std::uint64_t h, int id, bool overwrite) {
  if (id < 0) throw std::invalid_argument("StringIds: ids are non-negative");
  if (2 * (size_ + 1) > slots_.size()) grow(std::max<std::size_t>(16, 2 * slots_.size()));
  Slot& s = slots_[probe(key, h)];
  if (s.id >= 0) {
    if (overwrite) s.id = id;
    return overwrite;
  }
  if (arena_.size() + key.size() > std::numeric_limits<std::uint32_t>::max())
    throw std::length_error("StringIds: keys over 4 GB in all");
  s = {static_cast<std::uint32_t>(h >> 32), id, static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(key.size())};
  arena_.append(key);
  ++size_;
  return true;
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
  // Scratch reused across calls on this thread: no allocation per word once warmed up.
  thread_local std::vector<int> prev, next;
  thread_local std::vector<char> alive;
  prev.resize(ids.size());
  next.resize(ids.size());
  alive.assign(ids.size(), 1);
  thread_local std::vector<Candidate> heap;  // a min-heap through std::push_heap / pop_heap
  heap.clear();
  const auto push = [](const Candidate& c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n)
      if (const auto* e = merges.find(ids[i], ids[i + 1])) heap.push_back({e->rank, i, e->merged});
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    // Stale when the left symbol was merged away, has no right neighbour any more, or the pair
    // at this position changed since the candidate was pushed.
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int right = next[c.pos];
    const auto* e = merges.find(ids[c.pos], ids[right]);
    if (!e || e->merged != c.merged) continue;
    ids[c.pos] = c.merged;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0)
      if (const auto* l = merges.find(ids[prev[c.pos]], ids[c.pos])) push({l->rank, prev[c.pos], l->merged});
    if (next[c.pos] >= 0)
      if (const auto* r = merges.find(ids[c.pos], ids[next[c.pos]])) push({r->rank, c.pos, r->merged});
  }
  int w = 0;
  for (int i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
  ids.resize(static_cast<std::size_t>(w));
}

}  // namespace bestofn::bpe
