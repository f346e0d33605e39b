#pragma once
// bestofn bench: decode-step time against the number of candidates N sharing one prompt, one JSON
// line (or table row) per N (src/generate/bench.cpp).
#include <string>
#include <vector>

#include "bestofn/generate/model_options.h"

namespace bestofn {

struct BenchOptions {
  std::string model;  // a model directory, or empty for a synthetic one:
  std::string synthetic, dtype = "fp8", keep_model;  // made for the run (kept in keep_model when set)
  std::string device = "cpu", n_list = "1,2,4,8,16,32";
  int prompt_len = 256, steps = 16;
  bool json = false;
  // The engine's settings, as generate's and eval's (engine_options): threads, the CUDA paths,
  // kv_cache, quantize_lm_head. Its model, device and sampling fields are not used.
  ModelOptions engine;
};

// --n: counts from 1 to 4096, comma-separated; anything else is an Error naming --n.
std::vector<int> parse_n(const std::string& s);

// Measures each N of o.n_list and prints its line. command: recorded in each JSON line. Returns
// kExitOk; bad input (a model that does not load, a prompt longer than the context) is an Error.
int run_bench(const BenchOptions& o, const std::string& command);

}  // namespace bestofn
