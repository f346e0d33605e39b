// libFuzzer target: config.json and generation_config.json. Any JSON value must give a
// ModelConfig or a bestofn::Error; a config that parses must survive its own round trip through
// to_config_json.
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "bestofn/model/model_config.h"
#include "fuzz_util.h"

using namespace bestofn;
using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const json j = json::parse(fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: the file reader's error, not the config parser's
  try {
    ModelConfig c = parse_model_config(j, "config.json");
    const json again = to_config_json(c);
    const ModelConfig d = parse_model_config(again, "round-trip");
    fuzz::check(to_config_json(d) == again, "to_config_json is not a fixed point: " + again.dump());
    apply_generation_config(c, j, "generation_config.json");
  } catch (const Error&) {
  }
  return 0;
}
