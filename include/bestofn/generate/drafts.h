#pragma once
// Drafts for speculative decoding from sibling candidates (--speculate K): per prompt, an index
// over the prompt's tokens and every candidate's generated tokens (running and finished) that
// proposes a candidate's next tokens by looking its last few tokens up in that text. No draft
// model: best-of-N siblings of one prompt share long runs of text, and code repeats its prompt.
//
// The index maps every n-gram (n = 1..kMaxNgram) of every document that has a token after it to
// the latest such occurrence (hash maps keyed by the n tokens themselves: no collisions), so a
// lookup and an append cost O(kMaxNgram) whatever the amount of text.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace bestofn {

class DraftIndex {
 public:
  static constexpr int kMaxNgram = 4;
  // Document 0 is the prompt; candidates are documents 1, 2, ... as add_document returns them.
  explicit DraftIndex(std::span<const int> prompt);
  int add_document();
  // Appends one token to a document (its n-grams ending just before it now have a continuation).
  void append(int doc, int token);
  const std::vector<int>& document(int doc) const { return docs_.at(static_cast<std::size_t>(doc)); }
  // Up to k tokens to follow `context` (the prompt and a candidate's tokens, in order, as the
  // caller's view of it): for the largest n <= kMaxNgram such that the context's last n tokens
  // occur in a document with at least one token after them, the tokens after the most recently
  // appended such occurrence (at most k, fewer at its document's end). Empty when no n matches.
  // Only the last kMaxNgram tokens of the context are read.
  std::vector<int> propose(std::span<const int> context, int k) const;

 private:
  struct Key {
    std::array<int, kMaxNgram> t{};
    int n = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };
  struct Where {
    int doc = 0, next = 0;  // the token after the n-gram: docs_[doc][next]
  };
  // Registers the n-grams ending just before position `next` of document doc.
  void index_before(int doc, std::size_t next);
  std::vector<std::vector<int>> docs_;
  std::unordered_map<Key, Where, KeyHash> where_;
};

}  // namespace bestofn
