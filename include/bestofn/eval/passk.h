#pragma once
// The unbiased pass@k estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
// Code", arXiv 2107.03374, section 2.1): with n samples of which c pass,
//   pass@k = 1 - C(n-c, k) / C(n, k),
// computed in the numerically stable product form 1 - prod_{i=n-c+1}^{n} (1 - k/i).
#include <optional>
#include <utility>
#include <vector>

#include "bestofn/eval/intervals.h"

namespace bestofn {

// nullopt when k > n: n samples cannot estimate pass@k, and the caller must say so rather than
// drop the problem silently. 1.0 when n - c < k (every k-subset holds a pass). Throws
// bestofn::Error when n < 0, c is outside [0, n] or k < 1.
std::optional<double> pass_at_k(int n, int c, int k);

struct PassAtK {
  int k = 0;
  // The mean of per_problem over the problems where it is computable (n >= k); NaN when
  // problems_used is 0, so a caller must check problems_used before reporting it.
  double mean = 0;
  int problems_used = 0;     // problems with n >= k
  int problems_skipped = 0;  // problems with n < k: not in the mean
  std::vector<std::optional<double>> per_problem;  // in input order
  // The mean's interval over the problems used (intervals.h), once add_intervals has run; nullopt
  // before, and for fewer than 2 problems.
  std::optional<Interval> interval;
};

// One PassAtK per k, in the order of ks; n_c_per_problem holds (n, c) for each problem.
std::vector<PassAtK> pass_at_k(const std::vector<std::pair<int, int>>& n_c_per_problem, const std::vector<int>& ks);

// Sets each one's interval: the bootstrap over its per_problem values that are computable.
void add_intervals(std::vector<PassAtK>& r, const IntervalSettings& s = {});

}  // namespace bestofn
