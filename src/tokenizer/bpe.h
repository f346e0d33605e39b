#pragma once
// The BPE merge step shared by both tokenizer families: symbols merge pairwise by rank, lowest
// rank first and leftmost among equals, as HF tokenizers' Word::merge_all does with its heap.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bestofn::bpe {

// (left id, right id) -> (rank, merged id), in an open-addressing table: one probe sequence of
// 64-bit keys, no allocation per lookup.
class MergeTable {
 public:
  struct Entry {
    std::uint64_t key = kEmpty;
    int rank = 0;
    int merged = 0;
  };
  void reserve(std::size_t n);
  // False when the pair is already there (a duplicate merge: the first one wins, as in HF).
  bool add(int left, int right, int rank, int merged);
  // Inline: the merge loop calls it for every adjacent pair.
  const Entry* find(int left, int right) const {
    if (slots_.empty()) return nullptr;
    const Entry& e = slots_[slot(key(left, right))];
    return e.key == kEmpty ? nullptr : &e;
  }
  std::size_t size() const { return size_; }
  void prefetch(int left, int right) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[home(key(left, right))]);
  }

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  static std::uint64_t key(int l, int r) { return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) | static_cast<std::uint32_t>(r); }
  std::size_t home(std::uint64_t k) const { return static_cast<std::size_t>((k * 0x9e3779b97f4a7c15ull) >> 20) & (slots_.size() - 1); }
  std::size_t slot(std::uint64_t k) const {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(k);
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask;
    return i;
  }
  std::vector<Entry> slots_;
  std::size_t size_ = 0;
};

// Token string -> id, for the ~128k-token vocabularies: open addressing over one byte arena. A
// lookup touches one 16-byte slot and the key's bytes (std::unordered_map: a bucket, a node and a
// heap string), there is no allocation per token, and callers that look up many keys in a row
// (the merges at load) can prefetch the slots of the next ones.
class StringIds {
 public:
  static std::uint64_t hash(std::string_view key);
  void reserve(std::size_t n);
  // False, and no change, when the key is there already.
  bool insert(std::string_view key, int id) { return put(key, hash(key), id, false); }
  // Inserts, or gives a key that is there the new id.
  void assign(std::string_view key, int id) { put(key, hash(key), id, true); }
  std::optional<int> find(std::string_view key) const { return find(key, hash(key)); }
  std::optional<int> find(std::string_view key, std::uint64_t h) const {
    if (slots_.empty()) return std::nullopt;
    const Slot& s = slots_[probe(key, h)];
    return s.id < 0 ? std::nullopt : std::optional<int>(s.id);
  }
  void prefetch(std::uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & (slots_.size() - 1)]);
  }
  std::size_t size() const { return size_; }
  // Calls f(key, id) for every entry, in slot order. The keys stay valid while the table is not
  // modified.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.id >= 0) f(std::string_view(arena_).substr(s.off, s.len), s.id);
  }

 private:
  struct Slot {
    std::uint32_t tag = 0;  // the hash's high half
    std::int32_t id = -1;   // -1: empty
    std::uint32_t off = 0, len = 0;  // the key in arena_
  };
  std::size_t probe(std::string_view key, std::uint64_t h) const;  // the key's slot, or the empty one where it would go
  bool put(std::string_view key, std::uint64_t h, int id, bool overwrite);
  void grow(std::size_t capacity);
  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t size_ = 0;
};

// Merges `ids` in place until no pair has a merge.
void merge(std::vector<int>& ids, const MergeTable& merges);

}  // namespace bestofn::bpe
