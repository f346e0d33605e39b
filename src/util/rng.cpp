#include "bestofn/util/rng.h"

namespace bestofn {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

float uniform01(std::uint64_t seed, std::uint64_t prompt, std::uint64_t candidate, std::uint64_t step) {
  // counter = (step, candidate, prompt low, prompt high); key = the seed.
  const auto r = philox4x32_10({static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(candidate),
                                static_cast<std::uint32_t>(prompt), static_cast<std::uint32_t>(prompt >> 32)},
                               {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return static_cast<float>(r[0] >> 8) * 0x1p-24f;
}

}  // namespace bestofn
