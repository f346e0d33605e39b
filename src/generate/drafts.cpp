// The n-gram draft index (include/bestofn/generate/drafts.h).
#include "bestofn/generate/drafts.h"

#include <algorithm>

#include "bestofn/util/error.h"

namespace bestofn {

std::size_t DraftIndex::KeyHash::operator()(const Key& k) const noexcept {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(k.n);
  for (int i = 0; i < k.n; ++i) {  // a multiply-xorshift mix per token
    h ^= static_cast<std::uint32_t>(k.t[static_cast<std::size_t>(i)]);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return static_cast<std::size_t>(h);
}

DraftIndex::DraftIndex(std::span<const int> prompt) {
  docs_.emplace_back();
  for (int t : prompt) append(0, t);
}

int DraftIndex::add_document() {
  docs_.emplace_back();
  return static_cast<int>(docs_.size()) - 1;
}

void DraftIndex::append(int doc, int token) {
  if (doc < 0 || static_cast<std::size_t>(doc) >= docs_.size()) throw Error("DraftIndex: no document " + std::to_string(doc));
  auto& d = docs_[static_cast<std::size_t>(doc)];
  d.push_back(token);
  index_before(doc, d.size() - 1);
}

void DraftIndex::index_before(int doc, std::size_t next) {
  const auto& d = docs_[static_cast<std::size_t>(doc)];
  Key key;
  // n-gram d[next-n .. next): built newest token first, stored oldest first.
  for (int n = 1; n <= kMaxNgram && static_cast<std::size_t>(n) <= next; ++n) {
    key.n = n;
    for (int i = 0; i < n; ++i) key.t[static_cast<std::size_t>(i)] = d[next - static_cast<std::size_t>(n) + static_cast<std::size_t>(i)];
    where_[key] = Where{doc, static_cast<int>(next)};
  }
}

std::vector<int> DraftIndex::propose(std::span<const int> context, int k) const {
  if (k <= 0) return {};
  const int longest = static_cast<int>(std::min<std::size_t>(kMaxNgram, context.size()));
  for (int n = longest; n >= 1; --n) {
    Key key;
    key.n = n;
    for (int i = 0; i < n; ++i) key.t[static_cast<std::size_t>(i)] = context[context.size() - static_cast<std::size_t>(n) + static_cast<std::size_t>(i)];
    const auto it = where_.find(key);
    if (it == where_.end()) continue;
    const auto& d = docs_[static_cast<std::size_t>(it->second.doc)];
    const auto from = static_cast<std::size_t>(it->second.next);
    const std::size_t to = std::min(d.size(), from + static_cast<std::size_t>(k));
    return {d.begin() + static_cast<std::ptrdiff_t>(from), d.begin() + static_cast<std::ptrdiff_t>(to)};
  }
  return {};
}

}  // namespace bestofn
