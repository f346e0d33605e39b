// libFuzzer target: model.safetensors.index.json (the weight map of a sharded checkpoint). The
// shards are a real sharded synthetic model ($BESTOFN_FUZZ_MODEL, made by scripts/fuzz_corpus.sh),
// linked into a scratch directory; each input becomes that directory's index.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "bestofn/model/safetensors.h"
#include "fuzz_util.h"

namespace fs = std::filesystem;
using namespace bestofn;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* model = std::getenv("BESTOFN_FUZZ_MODEL");
  if (!model || !*model) fuzz::fail("set BESTOFN_FUZZ_MODEL to a sharded model directory (scripts/fuzz_corpus.sh makes one)");
  int shards = 0;
  for (const auto& e : fs::directory_iterator(model))
    if (e.path().extension() == ".safetensors") {
      fs::create_symlink(fs::absolute(e.path()), fuzz::scratch_dir() / e.path().filename());
      ++shards;
    }
  fuzz::check(shards >= 2, std::string(model) + " holds fewer than two shards");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::write_scratch("model.safetensors.index.json", fuzz::as_text(data, size));
  try {
    const ModelFiles files(fuzz::scratch_dir());
    // Every tensor the index names was found in the shard it names.
    const auto j = nlohmann::json::parse(fuzz::as_text(data, size));
    for (const auto& [name, shard] : j["weight_map"].items()) {
      const TensorView v = files.find(name);
      fuzz::check(v.info && fs::path(*v.file).filename() == shard.get<std::string>(), "tensor '" + name + "' not where the index says");
    }
  } catch (const Error&) {
  }
  return 0;
}
