#pragma once
// --shard I/N: deterministic work splitting over (problem, candidate) pairs, for `eval` and
// `generate` on clusters (SLURM job arrays, Kubernetes indexed jobs).
//
// The pairs of a run are numbered in order: problem (or prompt) p's candidate c is pair
// first(p) + c, where first(p) is the sum of the candidate counts of the problems before p
// (p * n when every problem has n). Pair g belongs to shard g mod N. Each shard thus gets about
// 1/N of every problem's candidates (load balanced across long and short problems), and a
// candidate's draws are keyed by (seed, problem position, candidate index), never by the shard:
// the N shards together make exactly the candidates of an unsharded run.
#include <cstdint>
#include <string>
#include <vector>

#include "bestofn/generate/scheduler.h"

namespace bestofn {

struct Shard {
  int index = 0, count = 1;  // 0 <= index < count; count 1: the whole run
  bool sharded() const { return count > 1; }
  std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }
  bool owns(std::uint64_t pair) const { return pair % static_cast<std::uint64_t>(count) == static_cast<std::uint64_t>(index); }
  // The candidate indices in [0, n) of a problem whose first pair is `first_pair` that this shard owns.
  std::vector<int> candidates(std::uint64_t first_pair, int n) const;
};

// The candidates a request generates: its indices, else all n.
inline std::size_t candidate_count(const GenerationRequest& r) { return r.indices.empty() ? static_cast<std::size_t>(r.n) : r.indices.size(); }

// "I/N" with 0 <= I < N <= 1000000; throws bestofn::Error naming `flag` otherwise.
Shard parse_shard(const std::string& text, const std::string& flag);

// Why text is not "I/N" as parse_shard takes it, without the flag's name; empty when it is.
std::string shard_error(const std::string& text);

}  // namespace bestofn
