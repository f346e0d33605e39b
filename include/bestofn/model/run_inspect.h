#pragma once
// bestofn inspect: what a model directory holds and what it costs to run (src/model/run_inspect.cpp).
#include <string>

namespace bestofn {

struct InspectOptions {
  std::string model_dir;
  bool json = false;  // one JSON object (keys in docs/commands.md) instead of text
  std::string quantize = "none";  // "fp8": as loaded with online quantization
};

// Loads and validates the model and prints the report. Returns kExitOk; a model that does not
// load is a bestofn::Error.
int run_inspect(const InspectOptions& o);

}  // namespace bestofn
