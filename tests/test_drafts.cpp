// The n-gram draft index (--speculate) against a brute-force search over every document, on
// random token streams (small vocabularies: many matches, many ties) and on real code tokenized
// with the Llama 3 tokenizer.
#include <gtest/gtest.h>

#include <random>

#include "bestofn/generate/drafts.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "test_util.h"

using namespace bestofn;

namespace {

// Every document with, per token, the order in which it was appended (the prompt's first).
struct Brute {
  std::vector<std::vector<int>> docs;
  std::vector<std::vector<long long>> stamps;
  long long clock = 0;
  explicit Brute(const std::vector<int>& prompt) {
    docs.emplace_back(), stamps.emplace_back();
    for (int t : prompt) append(0, t);
  }
  void append(int d, int t) {
    docs[static_cast<std::size_t>(d)].push_back(t);
    stamps[static_cast<std::size_t>(d)].push_back(clock++);
  }
  // drafts.h's rule by exhaustive search: the largest n whose suffix occurs with a token after
  // it; of those occurrences, the one whose next token was appended last.
  std::vector<int> propose(const std::vector<int>& ctx, int k) const {
    if (k <= 0) return {};
    for (int n = std::min<int>(DraftIndex::kMaxNgram, static_cast<int>(ctx.size())); n >= 1; --n) {
      long long best = -1;
      std::size_t bd = 0, bp = 0;
      for (std::size_t d = 0; d < docs.size(); ++d)
        for (std::size_t p = static_cast<std::size_t>(n); p < docs[d].size(); ++p) {
          if (!std::equal(ctx.end() - n, ctx.end(), docs[d].begin() + static_cast<std::ptrdiff_t>(p) - n)) continue;
          if (stamps[d][p] > best) best = stamps[d][p], bd = d, bp = p;
        }
      if (best >= 0) {
        const std::size_t to = std::min(docs[bd].size(), bp + static_cast<std::size_t>(k));
        return {docs[bd].begin() + static_cast<std::ptrdiff_t>(bp), docs[bd].begin() + static_cast<std::ptrdiff_t>(to)};
      }
    }
    return {};
  }
};

// Candidates grow one token at a time in random turns (as a batch does); after each append the
// growing candidate's context (prompt + its tokens) and a random other context are looked up.
void check_streams(const std::vector<int>& prompt, const std::vector<std::vector<int>>& streams, std::uint64_t seed) {
  DraftIndex index(prompt);
  Brute brute(prompt);
  std::vector<int> doc;
  for (std::size_t c = 0; c < streams.size(); ++c) doc.push_back(index.add_document()), brute.docs.emplace_back(), brute.stamps.emplace_back();
  std::vector<std::size_t> at(streams.size(), 0);
  std::mt19937_64 rng(seed);
  int lookups = 0, found = 0;
  for (;;) {
    std::vector<std::size_t> open;
    for (std::size_t c = 0; c < streams.size(); ++c)
      if (at[c] < streams[c].size()) open.push_back(c);
    if (open.empty()) break;
    const std::size_t c = open[rng() % open.size()];
    const int t = streams[c][at[c]++];
    index.append(doc[c], t);
    brute.append(doc[c], t);
    ASSERT_EQ(index.document(doc[c]), brute.docs[static_cast<std::size_t>(doc[c])]);
    std::vector<int> ctx = prompt;
    ctx.insert(ctx.end(), streams[c].begin(), streams[c].begin() + static_cast<std::ptrdiff_t>(at[c]));
    for (int k : {1, 3, 8}) {
      const auto got = index.propose(ctx, k);
      ASSERT_EQ(got, brute.propose(ctx, k)) << "candidate " << c << " after " << at[c] << " tokens, k " << k;
      ++lookups, found += !got.empty();
    }
    // A context that is not any document's (a random tail of a random stream plus a random token).
    const auto& s = streams[rng() % streams.size()];
    std::vector<int> other(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(rng() % (s.size() + 1)));
    other.push_back(s.empty() ? 0 : s[rng() % s.size()]);
    ASSERT_EQ(index.propose(other, 4), brute.propose(other, 4));
  }
  EXPECT_GT(found, lookups / 4) << "the streams should repeat enough to test matches";
}

}  // namespace

TEST(Drafts, RandomStreamsMatchTheBruteForceSearch) {
  for (std::uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    const int vocab = seed == 1 ? 3 : seed == 2 ? 6 : 20;
    auto stream = [&](std::size_t n) {
      std::vector<int> s(n);
      for (int& t : s) t = static_cast<int>(rng() % static_cast<std::uint64_t>(vocab));
      return s;
    };
    std::vector<std::vector<int>> streams;
    for (int c = 0; c < 6; ++c) streams.push_back(stream(rng() % 60));
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    check_streams(stream(1 + rng() % 30), streams, seed);
  }
}

TEST(Drafts, RealCodeMatchesTheBruteForceSearch) {
  const Tokenizer tok = Tokenizer::load(test::require_shared("tokenizers/llama3"));
  const auto prompt = tok.encode("def sum_even(xs):\n    \"\"\"Sum the even numbers of xs.\"\"\"\n", true);
  const std::vector<std::string> texts = {
      "    total = 0\n    for x in xs:\n        if x % 2 == 0:\n            total += x\n    return total\n",
      "    return sum(x for x in xs if x % 2 == 0)\n",
      "    total = 0\n    for x in xs:\n        if x % 2 == 0:\n            total = total + x\n    return total\n",
      "    s = 0\n    for i in range(len(xs)):\n        if xs[i] % 2 == 0:\n            s += xs[i]\n    return s\n",
  };
  std::vector<std::vector<int>> streams;
  for (const auto& t : texts) streams.push_back(tok.encode(t, false));
  check_streams(prompt, streams, 7);
}

TEST(Drafts, ProposesTheContinuationOfTheLongestMatch) {
  DraftIndex index(std::vector<int>{1, 2, 3, 4, 5, 9, 3, 7});
  // "3" alone last continued with 7; "2 3" continues with 4 5 9.
  EXPECT_EQ(index.propose(std::vector<int>{8, 3}, 3), (std::vector<int>{7}));
  EXPECT_EQ(index.propose(std::vector<int>{2, 3}, 3), (std::vector<int>{4, 5, 9}));
  EXPECT_EQ(index.propose(std::vector<int>{2, 3}, 0), std::vector<int>{});
  EXPECT_EQ(index.propose(std::vector<int>{6}, 3), std::vector<int>{});  // never seen
  EXPECT_EQ(index.propose(std::vector<int>{}, 3), std::vector<int>{});
  // A sibling's newer "3" now wins for the 1-gram.
  const int d = index.add_document();
  for (int t : {3, 6, 6}) index.append(d, t);
  EXPECT_EQ(index.propose(std::vector<int>{8, 3}, 4), (std::vector<int>{6, 6}));
  EXPECT_THROW(index.append(5, 1), Error);
}
