#pragma once
// The walk both strip GEMMs (gemm_fp8.cpp, gemm_wide.cpp) make over a range of strips: kernel
// calls of `per_call` strips (several strips give few tokens more independent chains of
// additions), the strips left at the end one at a time.
#include <cstddef>

namespace bestofn::cpu {

// f(s, n) for strips s .. s + n - 1, n = per_call or 1, covering [s0, s1) in order.
template <class F>
void for_strip_calls(std::size_t s0, std::size_t s1, std::size_t per_call, F&& f) {
  for (std::size_t s = s0; s < s1;) {
    const std::size_t n = s + per_call <= s1 ? per_call : 1;
    f(s, n);
    s += n;
  }
}

}  // namespace bestofn::cpu
