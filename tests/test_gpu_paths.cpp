// --cuda-path auto on a device: the path the defaults choose for a run's shape is the one
// choose_cuda_path names for this device's compute capability (on sm_90, the 2026-11-30 table:
// graphs for one candidate a prompt, prefix-gemm for 64), and the engine it starts is that named
// path's, nothing more: the same candidates (tokens and logprobs) and the same logits, bit for bit,
// as --cuda-path NAME. On an FP8 synthetic model (FP8 weights are among those the table's run
// verified, so the default is a part-2 path, not the reference).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "bestofn/backends/backends.h"
#include "bestofn/backends/cuda_paths.h"
#include "bestofn/generate/model_options.h"
#include "bestofn/generate/scheduler.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "gpu_test_util.h"
#include "test_util.h"

using namespace bestofn;

namespace {

struct Outcome {
  std::string path;                                            // the engine's path, as it describes itself
  CudaOptions options;                                         // its options
  std::map<std::pair<std::size_t, int>, Candidate> candidates;  // by (prompt, index)
  std::vector<float> logits;                                   // a teacher-forced decode trace, every step's rows
};

// A run of `reqs` on an engine started for `flags`, then a raw trace: both prompts prefilled, n
// candidates each, 6 decode steps fed the same ids.
Outcome run(const std::shared_ptr<const Weights>& w, const Tokenizer& tok, const std::vector<GenerationRequest>& reqs,
            GenerationOptions go, const CudaFlags& flags, const CudaShape& shape) {
  Outcome o;
  auto engine = make_engine(w, "cuda", EngineOptions{}, flags, shape);
  const std::optional<CudaOptions> cuda = engine->describe().cuda;
  if (!cuda) throw std::runtime_error("not a CUDA engine");
  o.path = cuda->path, o.options = *cuda;
  go.overlap_stop_checks = cuda->device_sampling;
  generate(*engine, tok, reqs, go, [&](Candidate&& c) { o.candidates.emplace(std::make_pair(c.prompt, c.index), std::move(c)); });
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  std::vector<int> slots, tokens;
  std::vector<float> last(V);
  for (const GenerationRequest& r : reqs) {
    const int prefix = engine->prefill(r.prompt_ids, last);
    for (int i = 0; i < r.n; ++i) slots.push_back(engine->add_slot(prefix)), tokens.push_back((r.prompt_ids.back() + i) % 1000);
  }
  std::vector<float> logits(slots.size() * V);
  for (int step = 0; step < 6; ++step) {
    engine->decode(slots, tokens, logits);
    o.logits.insert(o.logits.end(), logits.begin(), logits.end());
    for (int& t : tokens) t = (t + 13) % 1000;
  }
  return o;
}

}  // namespace

TEST(GpuPaths, TheDefaultForAShapeIsTheNamedPathBitForBit) {
  SKIP_WITHOUT_GPU();
  test::TempDir dir;
  SyntheticOptions so;
  so.shape = "tiny", so.dtype = "fp8", so.seed = 31, so.out = dir / "m";
  so.tokenizer = test::require_shared("tokenizers/llama3");
  make_synthetic(so);
  auto w = std::make_shared<const Weights>(load_model(so.out));
  const Tokenizer tok = Tokenizer::load(so.out.string());
  const int capability = cuda::device_capability(0);
  for (const int n : {1, 64}) {
    std::vector<GenerationRequest> reqs(2);
    reqs[0].id = "0", reqs[0].prompt_ids = tok.encode("def fib(n):", true), reqs[0].n = n;
    reqs[1].id = "1", reqs[1].prompt_ids = tok.encode("import sys\nfor line in", true), reqs[1].n = n;
    GenerationOptions go;
    go.sampling.temperature = 0.8f, go.sampling.top_p = 0.95f, go.sampling.seed = 3;
    go.max_new_tokens = 20, go.batch = 2 * n;
    ModelOptions f;
    f.batch = go.batch;
    const CudaShape shape = cuda_shape({n, n}, static_cast<int>(reqs[1].prompt_ids.size()), f);
    const CudaFlags autof;
    const std::string expected = choose_cuda_path(autof, cuda_run(*w, EngineOptions::Kv::Auto, shape, capability, cuda::cascade_built())).path;
    if (capability == 90) {
      EXPECT_EQ(expected, n == 1 ? "graphs" : "prefix-gemm") << "the 2026-11-30 table on compute capability 9.0";
    }
    const Outcome chosen = run(w, tok, reqs, go, autof, shape);
    EXPECT_EQ(chosen.path, expected) << n;
    CudaFlags named;
    named.path = expected;
    const Outcome by_name = run(w, tok, reqs, go, named, shape);
    EXPECT_EQ(by_name.path, expected);
    for (const CudaSwitch& s : cuda_switches()) EXPECT_EQ(chosen.options.*s.feature, by_name.options.*s.feature) << s.flag;
    ASSERT_EQ(chosen.candidates.size(), static_cast<std::size_t>(2 * n));
    ASSERT_EQ(by_name.candidates.size(), chosen.candidates.size());
    for (const auto& [key, c] : chosen.candidates) {
      const Candidate& d = by_name.candidates.at(key);
      EXPECT_EQ(c.token_ids, d.token_ids) << n << ": prompt " << key.first << " candidate " << key.second;
      EXPECT_EQ(c.cumulative_logprob, d.cumulative_logprob) << n << ": prompt " << key.first << " candidate " << key.second;
    }
    ASSERT_EQ(chosen.logits.size(), by_name.logits.size());
    EXPECT_EQ(std::memcmp(chosen.logits.data(), by_name.logits.data(), chosen.logits.size() * sizeof(float)), 0) << n;
  }
}
