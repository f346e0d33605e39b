// EvalPlus's sanitizer (sanitize.h) against EvalPlus 0.3.1's own, tree-sitter and all
// (tests/data/sanitize_golden.json, made by tools/gen_sanitize_golden.py): real outputs of
// SmolLM2-135M-Instruct (chat replies in bestofn's and EvalPlus's prompt styles, and EvalPlus-style
// base completions of HumanEval and MBPP with their prompts), hand-made edge cases and seeded
// synthetic texts. Every case must give EvalPlus's
// output, but the differences named below, each with its reason and bestofn's own answer.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "bestofn/eval/sanitize.h"
#include "bestofn/util/text_file.h"

using namespace bestofn;
using nlohmann::json;

namespace {

// Where bestofn does not give EvalPlus's answer, and what it gives instead.
struct Difference {
  const char* why;
  const char* bestofn;
};
const std::map<std::string, Difference> kDifferences = {
    {"edge long line",
     {"EvalPlus raises: ast.parse of a sum of 3000 terms hits Python's recursion limit (RecursionError), which its syntax check does "
      "not catch; bestofn takes such a range as one that does not parse",
      "def f():"}},
    {"edge NUL byte",
     {"EvalPlus raises: Python 3.11's ast.parse raises ValueError for a NUL byte, which its syntax check does not catch; bestofn takes "
      "such a range as one that does not parse",
      "def f(x):"}},
    {"edge tree-sitter: its error recovery keeps the whole text",
     {"tree-sitter-python fails on a comment inside brackets less indented than the block (Python parses it); EvalPlus then finds no "
      "definition and returns code_extract's text, the leading comment included; bestofn keeps the function, as Python reads it",
      "def f(s):\n    c = 0\n    for i in s:\n        if ((i == 1) or\n  # note\n            (i == 2)):\n            c += 1\n    return c"}},
};

}  // namespace

TEST(Sanitize, EqualsEvalPlusOnEveryCaseButTheNamedDifferences) {
  const json golden = json::parse(read_text_file("tests/data/sanitize_golden.json"));
  const json& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 1400u);
  SandboxLimits limits;
  const Sandbox sandbox(limits);
  std::vector<SanitizeCase> batch;
  std::vector<Sanitized> got;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    batch.push_back({cases[i].at("text").get<std::string>(), cases[i].at("entry_point").get<std::string>()});
    if (batch.size() == 150 || i + 1 == cases.size()) {
      for (Sanitized& s : sanitize_all(sandbox, batch, 0)) got.push_back(std::move(s));
      batch.clear();
    }
  }
  ASSERT_EQ(got.size(), cases.size());
  if (got.front().error.find("sanitizer's run") != std::string::npos) GTEST_SKIP() << "bestofn-test-skip: the sandbox cannot run here: " << got.front().error;
  std::map<std::string, int> by_source;
  int named = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string id = c.at("id").get<std::string>();
    ASSERT_TRUE(got[i].error.empty()) << id << ": " << got[i].error;
    if (const auto d = kDifferences.find(id); d != kDifferences.end()) {
      ++named;
      // Still a difference (else the entry is stale), and bestofn's answer is the one stated.
      EXPECT_TRUE(c.contains("raises") || c.at("expected") != got[i].solution) << id << " no longer differs: remove it from kDifferences";
      EXPECT_EQ(got[i].solution, d->second.bestofn) << id << " (" << d->second.why << ")";
      continue;
    }
    ASSERT_TRUE(c.contains("expected")) << id << ": EvalPlus raised " << c.value("raises", "") << ", and no difference is named for it";
    EXPECT_EQ(got[i].solution, c.at("expected").get<std::string>()) << id << "\n--- text:\n" << c.at("text").get<std::string>();
    ++by_source[c.at("source").get<std::string>()];
  }
  EXPECT_EQ(named, static_cast<int>(kDifferences.size()));
  // The corpus has each kind of text.
  EXPECT_GE(by_source["reply"], 500);
  EXPECT_GE(by_source["completion"], 150);
  EXPECT_GE(by_source["edge"], 40);
  EXPECT_GE(by_source["synthetic"], 500);
}

// A run's frame is read back exactly; a broken one is an error naming what is wrong.
TEST(Sanitize, FrameIsReadBackOrRefused) {
  std::vector<Sanitized> r;
  EXPECT_EQ(read_sanitized("noise\nBESTOFN-SANITIZED 16\n[\"a\", \"b\\u00e9\"]\nBESTOFN-END\n", 2, r), "");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].solution, "a");
  EXPECT_EQ(r[1].solution, "b\xc3\xa9");
  EXPECT_EQ(read_sanitized("\nBESTOFN-SANITIZED 24\n[{\"E\": \"KeyError: 'x'\"}]\nBESTOFN-END\n", 1, r), "");
  EXPECT_EQ(r[0].error, "the sanitizer raised KeyError: 'x'");
  EXPECT_EQ(read_sanitized("", 1, r), "no sanitized code was written");
  EXPECT_EQ(read_sanitized("\nBESTOFN-SANITIZED 99\n[\"a\"]\nBESTOFN-END\n", 1, r), "the sanitizer's frame is malformed or cut");
  EXPECT_EQ(read_sanitized("\nBESTOFN-SANITIZED 5\n[\"a\"]\nBESTOFN-END\n", 2, r), "expected 2 sanitized texts, got something else");
}
