#pragma once
// Parts of device memory made before a run and handed out by size inside it (the CUDA engine's
// prompt KV parts: no cudaMalloc inside a run). Best fit: take(rows) gives the
// smallest part of at least `rows` rows. When the pool was filled with one part per prompt of
// the run, each part exactly that prompt's length, every prompt finds a part whatever the order
// of prefills and releases: take() keeps a perfect matching of the prompts still to come onto the
// parts left (if prompt p of length L takes the smallest r >= L while some matching had p on
// r* >= r and r on q <= r, then q on r* is as good), and a released part only adds to the pool.
// Host-only (no CUDA types): tested in tests/test_cuda_plan.cpp.
#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace bestofn::cuda {

template <class Part>
class BestFitParts {
 public:
  void put(int rows, Part part) { parts_.emplace(rows, std::move(part)); }
  // The smallest part of at least `rows` rows, removed from the pool; none when no part is that large.
  std::optional<Part> take(int rows) {
    const auto it = parts_.lower_bound(rows);
    if (it == parts_.end()) return std::nullopt;
    Part p = std::move(it->second);
    parts_.erase(it);
    return p;
  }
  std::size_t size() const { return parts_.size(); }
  void clear() { parts_.clear(); }

 private:
  std::multimap<int, Part> parts_;  // rows -> part
};

// The prompt lengths to make parts for before a run: every prompt's, shortest first, while their
// rows stay within budget_rows (a run whose prompts do not all fit allocates the rest at their
// prefill, counted by EngineStatistics::device_counts).
inline std::vector<int> reserved_part_lengths(std::vector<int> lengths, long long budget_rows) {
  std::sort(lengths.begin(), lengths.end());
  std::vector<int> out;
  long long sum = 0;
  for (const int len : lengths) {
    if (len < 1 || sum + len > budget_rows) break;
    sum += len;
    out.push_back(len);
  }
  return out;
}

}  // namespace bestofn::cuda
