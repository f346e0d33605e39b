// bestofn make-synthetic: a complete, loadable model directory with seeded random weights.
#include "bestofn/model/run_make_synthetic.h"

#include <chrono>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bestofn/model/synthetic.h"
#include "bestofn/util/error.h"
#include "bestofn/util/exit_codes.h"

namespace bestofn {

std::uint64_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  unsigned long long n = 0;
  try {
    if (s.empty() || s[0] < '0' || s[0] > '9') throw std::invalid_argument(s);  // stoull takes "-5" and " 5"
    n = std::stoull(s, &pos);
  } catch (const std::exception&) {
    throw Error("--max-shard-size: '" + s + "' is not a size (e.g. 5GB, 500MB, 1000000)");
  }
  const std::string unit = s.substr(pos);
  std::uint64_t mult = 1;
  if (unit == "kB" || unit == "KB") mult = 1000;
  else if (unit == "MB") mult = 1000000;
  else if (unit == "GB") mult = 1000000000;
  else if (!unit.empty() && unit != "B") throw Error("--max-shard-size: '" + s + "' has an unknown unit '" + unit + "' (use B, kB, MB, GB)");
  if (n == 0) throw Error("--max-shard-size: must be positive");
  if (n > UINT64_MAX / mult) throw Error("--max-shard-size: '" + s + "' is too large");
  return n * mult;
}

int run_make_synthetic(SyntheticOptions opt, const std::string& max_shard_size, bool json) {
  opt.max_shard_bytes = parse_size(max_shard_size);
  const auto t0 = std::chrono::steady_clock::now();
  const SyntheticResult r = make_synthetic(opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json) {
    std::cout << nlohmann::json{{"out", opt.out.string()}, {"shape", opt.shape}, {"dtype", opt.dtype},
                                {"seed", opt.seed}, {"parameters", r.parameters}, {"bytes", r.bytes},
                                {"shards", r.shards}, {"seconds", secs}}
                     .dump()
              << "\n";
  } else {
    std::cout << "wrote " << opt.out.string() << ": " << r.parameters << " parameters, " << r.bytes << " bytes in "
              << r.shards << " shard(s), " << secs << " s\n";
  }
  return kExitOk;
}

}  // namespace bestofn
