// eval --devices on the GPU: several CUDA engines, each made current on its own thread, give the
// candidates of one engine; an engine's device index is checked. With one GPU the engines share
// device 0 (the threads and the per-call cudaSetDevice are what is tested); with more, each gets
// its own. Batch 1 keeps every decode step the same shape on every engine, so the numbers are
// bit-identical whatever the split (cuBLAS may pick other kernels for other batch sizes).
#include <gtest/gtest.h>

#include <map>

#include "bestofn/backends/backends.h"
#include "bestofn/util/error.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/model/weights.h"
#include "bestofn/generate/devices.h"
#include "gpu_test_util.h"
#include "test_util.h"

using namespace bestofn;
using namespace bestofn::test;

TEST(GpuDevices, DataParallelCudaEnginesGiveTheCandidatesOfOneEngine) {
  SKIP_WITHOUT_GPU();
  const auto model = tiny_synthetic_model(2);
  auto weights = std::make_shared<const Weights>(load_model(model, {}));
  const Tokenizer tok = Tokenizer::load(model.string());
  std::vector<GenerationRequest> reqs(3);
  const std::vector<std::string> prompts = {"def f(x):", "print(", "import sys\nfor"};
  for (std::size_t p = 0; p < 3; ++p) reqs[p].id = std::to_string(p), reqs[p].prompt_ids = tok.encode(prompts[p], true), reqs[p].n = 5;
  reqs[0].indices = {1, 4};
  GenerationOptions go;
  go.sampling.temperature = 1.0f;
  go.sampling.seed = 9;
  go.max_new_tokens = 12;
  go.batch = 1;
  const int visible = static_cast<int>(backend_info().cuda_devices.size());
  auto run = [&](int engines) {
    std::vector<std::unique_ptr<Engine>> own;
    std::vector<Engine*> ptrs;
    for (int e = 0; e < engines; ++e) {
      EngineOptions eo;
      eo.cuda.device_index = e % visible;
      own.push_back(make_engine(weights, "cuda", eo));
      ptrs.push_back(own.back().get());
    }
    std::map<std::pair<std::size_t, int>, std::vector<int>> out;
    generate_data_parallel(ptrs, tok, reqs, go, [&](Candidate&& c) { out[{c.prompt, c.index}] = c.token_ids; });
    return out;
  };
  const auto one = run(1);
  ASSERT_EQ(one.size(), 12u);
  for (int engines : {2, 3}) {
    const auto many = run(engines);
    ASSERT_EQ(many.size(), one.size());
    for (const auto& [k, ids] : one) EXPECT_EQ(ids, many.at(k)) << engines << " engines, prompt " << k.first << " candidate " << k.second;
  }
  EngineOptions bad;
  bad.cuda.device_index = visible;
  EXPECT_THROW(make_engine(weights, "cuda", bad), Error);
}
