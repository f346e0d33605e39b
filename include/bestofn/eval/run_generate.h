#pragma once
// bestofn generate: N candidates per prompt, as JSONL, one row per candidate; with --verify or
// --select, the candidates checked or ranked and the best of each prompt marked. In the eval
// layer, not in generate: --verify runs candidates through eval's verifier jobs
// (src/eval/run_generate.cpp).
#include <string>

#include "bestofn/generate/model_options.h"

namespace bestofn {

struct GenerateOptions {
  ModelOptions m;
  std::string prompt;  // one prompt text, or:
  std::string prompts;  // a prompt file (JSONL, a .json array, plain text; "-": stdin)
  std::string out;  // empty or "-": stdout
  std::string select;  // "logprob": rank candidates by mean logprob
  std::string shard;  // I/N: only this shard's (prompt, candidate) pairs
  int n = 1, workers = 0;
  int until_pass = 0;  // --verify --until-pass K: a prompt stops being sampled once K of its candidates pass its tests
  double timeout = 3.0;
  bool ids = false, verify = false, best_only = false, no_zygote = false, allow_processes = false;
};

// Generates, verifies or ranks as `o` says and writes the rows (whole or not at all). Returns
// kExitOk, or kExitError when a candidate could not be run (sandbox errors); bad input is a
// bestofn::Error.
int run_generate(const GenerateOptions& o);

}  // namespace bestofn
