#pragma once
// bestofn make-synthetic: a complete, loadable model directory with seeded random weights
// (src/model/run_make_synthetic.cpp; the model itself: bestofn/model/synthetic.h).
#include <cstdint>
#include <string>

#include "bestofn/model/synthetic.h"

namespace bestofn {

// --max-shard-size: "5000000000", "5GB", "500MB", "64kB" (powers of 1000, as huggingface_hub's
// max_shard_size), in bytes; anything else is an Error naming the flag.
std::uint64_t parse_size(const std::string& s);

// Writes the model that `opt` describes, its shards at most max_shard_size (parse_size), and
// prints what was written (one JSON object with `json`). Returns kExitOk; bad input is an Error.
int run_make_synthetic(SyntheticOptions opt, const std::string& max_shard_size, bool json);

}  // namespace bestofn
