#include "bestofn/generate/shard.h"

#include "bestofn/util/error.h"

namespace bestofn {

std::vector<int> Shard::candidates(std::uint64_t first_pair, int n) const {
  std::vector<int> out;
  for (int c = 0; c < n; ++c)
    if (owns(first_pair + static_cast<std::uint64_t>(c))) out.push_back(c);
  return out;
}

namespace {

// The shard, or why text is not one.
std::pair<Shard, std::string> read_shard(const std::string& text) {
  const std::size_t slash = text.find('/');
  auto number = [&](const std::string& s, long long& v) {
    if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::stoll(s);
    return true;
  };
  long long i = -1, n = -1;
  if (slash == std::string::npos || !number(text.substr(0, slash), i) || !number(text.substr(slash + 1), n) || n < 1 || n > 1000000 || i >= n)
    return {{}, "'" + text + "' must be I/N with 0 <= I < N <= 1000000 (e.g. 0/4 ... 3/4; with SLURM: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)"};
  return {{static_cast<int>(i), static_cast<int>(n)}, ""};
}

}  // namespace

Shard parse_shard(const std::string& text, const std::string& flag) {
  auto [shard, why] = read_shard(text);
  if (!why.empty()) throw Error(flag + ": " + why);
  return shard;
}

std::string shard_error(const std::string& text) { return read_shard(text).second; }

}  // namespace bestofn
