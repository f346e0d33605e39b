#pragma once
// The walk both strip GEMMs (gemm_fp8.cpp, gemm_wide.cpp) make over a range of strips: kernel
// calls of `per_call` strips (several strips give few tokens more independent chains of
// additions), the strips left at the end one at a time; and how their AVX2 paths split tokens
// into kernel calls.
#include <algorithm>
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

// Tokens for the next AVX2 kernel call (at most `most` tokens each) of the ceil(left / most)
// calls that take the `left` tokens: an even share when it is at least 5, else `most` and the
// rest last. 16 tokens go as 6, 5, 5: the 4-token call of 6, 6, 4 has 8 chains of FMAs, as many as
// Zen 3 keeps in flight (4 cycles each, 2 a cycle), and waits on their latency (`bench_cpu_gemm
// --tokens 16`: ~6% faster). 8 tokens stay 6, 2: two calls of 4 were slower.
constexpr std::size_t avx2_call_tokens(std::size_t left, std::size_t most) {
  if (left == 0 || most == 0) return 0;
  const std::size_t calls = (left + most - 1) / most, even = (left + calls - 1) / calls;
  return even >= 5 && even <= most ? even : std::min(most, left);
}

// Every token count up to 256 is covered exactly, in ceil(T / 6) calls of 1 to 6 tokens.
constexpr bool avx2_call_tokens_cover() {
  for (std::size_t T = 1; T <= 256; ++T) {
    std::size_t left = T, calls = 0;
    while (left > 0) {
      const std::size_t n = avx2_call_tokens(left, 6);
      if (n < 1 || n > 6 || n > left) return false;
      left -= n, ++calls;
    }
    if (calls != (T + 5) / 6) return false;
  }
  return true;
}
static_assert(avx2_call_tokens_cover());

}  // namespace bestofn::cpu
