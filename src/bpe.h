#pragma once
// The BPE merge step shared by both tokenizer families: symbols merge pairwise by rank, lowest
// rank first and leftmost among equals, as HF tokenizers' Word::merge_all does with its heap.
#include <cstdint>
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

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  static std::uint64_t key(int l, int r) { return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) | static_cast<std::uint32_t>(r); }
  std::size_t slot(std::uint64_t k) const {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>((k * 0x9e3779b97f4a7c15ull) >> 20) & mask;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask;
    return i;
  }
  std::vector<Entry> slots_;
  std::size_t size_ = 0;
};

// Merges `ids` in place until no pair has a merge.
void merge(std::vector<int>& ids, const MergeTable& merges);

}  // namespace bestofn::bpe
