// --prompt-style (prompt_style.h): EvalPlus 0.3.1's prompts, stop strings and prompt ids against
// EvalPlus's own make_raw_chat_prompt on real chat templates (tests/data/evalplus_prompt_golden.json,
// made by tools/gen_evalplus_prompt_golden.py); bestofn's style as it was; and eval end to end:
// the manifest records the style, a resume with another is refused, rows carry the solution.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bestofn/eval/datasets.h"
#include "bestofn/eval/extract.h"
#include "bestofn/eval/prompt_style.h"
#include "bestofn/eval/sanitize.h"
#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "test_util.h"

using namespace bestofn;
using namespace bestofn::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const Problem& problem(const std::string& dataset, const std::string& task_id) {
  static const std::vector<Problem> he = load_dataset("humaneval", require_shared("data"));
  static const std::vector<Problem> mbpp = load_dataset("mbpp", require_shared("data"));
  for (const Problem& p : dataset == "mbpp" ? mbpp : he)
    if (p.task_id == task_id) return p;
  throw std::runtime_error("no " + task_id);
}

const Tokenizer& llama3() {
  static const Tokenizer tok = Tokenizer::load(require_shared("tokenizers/llama3"));
  return tok;
}

}  // namespace

TEST(PromptStyle, EvalplusPromptsStopsAndIdsAreEvalPlusOwn) {
  const json g = json::parse(read_text_file(source_path("tests/data/evalplus_prompt_golden.json")));
  EXPECT_EQ(g["instruction_prefix"], kEvalplusInstructionPrefix);
  EXPECT_EQ(g["response_prefix"], kEvalplusResponsePrefix);
  int chats = 0, ids = 0;
  for (const json& c : g["cases"]) {
    const Problem& p = problem(c["dataset"], c["task_id"]);
    const bool chat = c["chat"];
    SCOPED_TRACE(p.task_id + (chat ? " chat " + c["template"].get<std::string>() : " base"));
    std::string text;
    if (chat) {
      const std::string name = c["template"];
      const ChatTemplate t{read_text_file(source_path("tests/data/chat_templates/" + name)), name};
      text = render_prefilled(t, llama3(), evalplus_chat(p, ""), kEvalplusSplitter);
      ++chats;
    } else {
      text = prompt_text(p, PromptStyle::Evalplus, false);
    }
    EXPECT_EQ(text, c["prompt"].get<std::string>());
    EXPECT_EQ(style_stop_strings(p.dataset, PromptStyle::Evalplus, chat), c["stop"].get<std::vector<std::string>>());
    // EvalPlus encodes the rendered text as any prompt: the Llama 3 template's BOS, then the tokenizer's.
    if (c.contains("ids")) {
      EXPECT_EQ(llama3().encode(text, true), c["ids"].get<std::vector<int>>());
      ++ids;
    }
  }
  EXPECT_EQ(chats, 6);
  EXPECT_EQ(ids, 4);
}

// bestofn's own style is what eval sent before --prompt-style (the texts of its run_eval.cpp).
TEST(PromptStyle, BestofnStyleIsUnchanged) {
  const Problem& he = problem("humaneval", "HumanEval/2");
  const Problem& mb = problem("mbpp", "Mbpp/2");
  EXPECT_EQ(prompt_text(he, PromptStyle::Bestofn, false), he.prompt);
  EXPECT_EQ(prompt_text(he, PromptStyle::Bestofn, true),
            "Complete the following Python function. Reply with the whole function, imports included, in one ```python code block.\n\n"
            "```python\n" + he.prompt + "```");
  const std::string first = "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))";
  EXPECT_EQ(prompt_text(mb, PromptStyle::Bestofn, false), "\"\"\"\n" + mb.prompt + "\n" + first + "\n\"\"\"\n");
  EXPECT_EQ(prompt_text(mb, PromptStyle::Bestofn, true),
            mb.prompt + "\nYour code should pass this test:\n" + first + "\nReply with the complete Python code in one ```python code block.");
  for (const char* d : {"humaneval", "humaneval+", "mbpp"})
    for (bool chat : {false, true}) EXPECT_EQ(style_stop_strings(d, PromptStyle::Bestofn, chat), default_stop_strings(d, chat));
  EXPECT_EQ(style_stop_strings("mbpp+", PromptStyle::Bestofn, false), default_stop_strings("mbpp", false));
  // The two styles differ where EvalPlus's does: HumanEval stops at imports too, MBPP at a docstring.
  EXPECT_NE(style_stop_strings("humaneval", PromptStyle::Evalplus, false), style_stop_strings("humaneval", PromptStyle::Bestofn, false));
}

TEST(PromptStyle, NamesAndWhatIsSanitized) {
  EXPECT_EQ(parse_prompt_style("bestofn"), PromptStyle::Bestofn);
  EXPECT_EQ(parse_prompt_style("evalplus"), PromptStyle::Evalplus);
  EXPECT_STREQ(prompt_style_name(PromptStyle::Evalplus), "evalplus");
  try {
    parse_prompt_style("EvalPlus");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--prompt-style: 'EvalPlus': expected one of bestofn, evalplus");
  }
  EXPECT_EQ(python_strip("\n\t x y \x0b\x0c\r\x1f"), "x y");
  const Problem& he = problem("humaneval", "HumanEval/2");
  // EvalPlus's providers make tabs four spaces; a base model's code is the prompt and the completion.
  EXPECT_EQ(evalplus_sanitizer_input(he, "\treturn x\n", true), "    return x\n");
  EXPECT_EQ(evalplus_sanitizer_input(he, "\treturn x\n", false), python_strip(he.prompt) + "\n    return x\n");
  EXPECT_THROW(style_stop_strings("apps", PromptStyle::Evalplus, false), Error);
}

// A template that never writes the assistant's text cannot begin its reply: an error naming it.
TEST(PromptStyle, TemplateWithoutTheAssistantTextIsRefused) {
  const ChatTemplate t{"{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}", "user-only.jinja"};
  try {
    render_prefilled(t, llama3(), evalplus_chat(problem("humaneval", "HumanEval/2"), ""), kEvalplusSplitter);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("user-only.jinja"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("assistant's text"), std::string::npos) << e.what();
  }
}

// eval end to end on a tiny synthetic model: the manifest holds the style (and bestofn's none, as
// before the flag), each sample and result row its solution, sanitized from the text EvalPlus
// would sanitize; a resume with the other style is refused, naming it; a bad style is a usage error.
TEST(PromptStyle, EvalRecordsTheStyleAndWritesSolutions) {
  TempDir tmp;
  const fs::path model = tiny_synthetic_model(5);
  auto args = [&](const fs::path& out, std::vector<std::string> extra) {
    std::vector<std::string> a = {"eval", "--model", model.string(), "--dataset", "humaneval", "--data-dir", shared_path("data").string(),
                                  "--out-dir", out.string(), "--device", "cpu", "--temperature", "0.9", "--seed", "11", "-n", "2",
                                  "--limit", "2", "--k", "1", "--max-new-tokens", "24", "--select", "none"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const auto bad = run_cli(args(tmp / "bad", {"--prompt-style", "nonsense"}));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--prompt-style: 'nonsense'"), std::string::npos) << bad.err;

  const Sandbox sandbox{SandboxLimits{}};
  for (const bool chat : {false, true}) {
    const fs::path out = tmp / (chat ? "chat" : "base");
    std::vector<std::string> extra = {"--prompt-style", "evalplus"};
    if (chat) extra.push_back("--chat");
    const auto r = run_cli(args(out, extra));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json run = json::parse(read_text_file(out / "run.json"));
    EXPECT_EQ(run["prompt_style"], "evalplus");
    EXPECT_EQ(run["stop"].get<std::vector<std::string>>(), style_stop_strings("humaneval", PromptStyle::Evalplus, chat));
    std::size_t rows = 0;
    for (const auto& file : {"samples.jsonl", "results.jsonl"}) {
      std::istringstream lines(read_text_file(out / file));
      for (std::string line; std::getline(lines, line); ++rows) {
        const json row = json::parse(line);
        ASSERT_TRUE(row["solution"].is_string()) << line;
        EXPECT_FALSE(row.contains("reply")) << line;
        const Problem& p = problem("humaneval", row["task_id"]);
        const Sanitized s = sanitize(sandbox, evalplus_sanitizer_input(p, row["completion"], chat), p.entry_point, 0);
        ASSERT_EQ(s.error, "") << line;
        EXPECT_EQ(row["solution"], s.solution) << line;
      }
    }
    EXPECT_EQ(rows, 8u);
    std::vector<std::string> resume = extra, other_style = extra;
    resume.push_back("--resume");
    other_style[1] = "bestofn";
    other_style.push_back("--resume");
    const auto other = run_cli(args(out, other_style));
    EXPECT_EQ(other.exit_code, 1) << other.err;
    EXPECT_NE(other.err.find("prompt_style"), std::string::npos) << other.err;
    const auto same = run_cli(args(out, resume));
    EXPECT_EQ(same.exit_code, 0) << same.err;
  }
  const auto plain = run_cli(args(tmp / "plain", {}));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(json::parse(read_text_file(tmp / "plain" / "run.json")).contains("prompt_style"));
}
