// Chat templates and the Jinja interpreter against jinja2 in transformers' chat template
// environment: a corpus covering each construct (tests/data/jinja_golden.json) and the real
// templates of tests/data/chat_templates/ (tests/data/chat_golden.json, with HF `tokenizers` ids
// where the tokenizer is at hand), both made by tools/gen_chat_golden.py; and the errors: an
// unsupported construct or a malformed template is one line naming the template and the line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/tokenizer/jinja.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "test_util.h"

using namespace bestofn;
using ojson = nlohmann::ordered_json;

namespace {

std::tm golden_now() {  // the goldens' strftime_now time: 2024-07-26 09:05:03, a Friday
  std::tm t{};
  t.tm_year = 124;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 9;
  t.tm_min = 5;
  t.tm_sec = 3;
  t.tm_wday = 5;
  t.tm_yday = 207;
  return t;
}

ojson load(const char* file) { return ojson::parse(test::read_text(test::source_path(std::string("tests/data/") + file))); }

std::string template_file(const std::string& name) { return test::read_text(test::source_path("tests/data/chat_templates/" + name)); }

std::string error_of(const std::string& source, const ojson& vars = ojson::object()) {
  try {
    render_jinja(source, "t.jinja", vars, golden_now());
  } catch (const Error& e) {
    return e.what();
  }
  return "(rendered)";
}

const Tokenizer& tok(const std::string& name) {
  static const Tokenizer llama3 = Tokenizer::load(test::require_shared("tokenizers/llama3"));
  static const Tokenizer mistral = Tokenizer::load(test::require_shared("tokenizers/mistral"));
  return name == "llama3" ? llama3 : mistral;
}

// jinja2's error, as the golden has it, is ours too: TemplateError (raise_exception) with its text.
void expect_same_error(const ojson& c, const std::string& ours) {
  const std::string theirs = c["error"];
  EXPECT_NE(ours, "(rendered)") << theirs;
  EXPECT_EQ(ours.find('\n'), std::string::npos) << ours;
  const std::string raised = "TemplateError: ";
  if (theirs.rfind(raised, 0) == 0) {
    EXPECT_NE(ours.find(theirs.substr(raised.size())), std::string::npos) << ours;
  }
  if (theirs.rfind("UndefinedError: ", 0) == 0) {
    EXPECT_NE(ours.find("is undefined"), std::string::npos) << ours;
  }
}

}  // namespace

TEST(Jinja, CorpusMatchesJinja2) {
  const ojson g = load("jinja_golden.json");
  ASSERT_GE(g["cases"].size(), 80u);
  for (const auto& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string source = c["template"];
    if (c.contains("text")) {
      std::string ours;
      try {
        ours = render_jinja(source, c["name"], c["variables"], golden_now());
      } catch (const Error& e) {
        ours = std::string("(error) ") + e.what();
      }
      EXPECT_EQ(ojson(ours).dump(), ojson(c["text"]).dump()) << source;
    } else {
      expect_same_error(c, error_of(source, c["variables"]));
    }
  }
}

TEST(ChatTemplate, RealTemplatesMatchHf) {
  const ojson g = load("chat_golden.json");
  ASSERT_EQ(g["cases"].size(), 35u);
  const std::tm now = golden_now();
  for (const auto& c : g["cases"]) {
    const std::string file = c["template"], system = c["system"], user = c["user"];
    SCOPED_TRACE(file + " / " + user);
    const std::string source = template_file(file);
    if (c.contains("error")) {
      expect_same_error(c, error_of(source, c["variables"]));
      continue;
    }
    EXPECT_EQ(ojson(render_jinja(source, file, c["variables"], now)).dump(), ojson(c["text"]).dump());
    if (c["tokenizer"].is_null()) continue;
    // The whole path: tokenizer_config.json's bos/eos tokens, the messages, then the ids.
    const Tokenizer& t = tok(c["tokenizer"]);
    const ChatTemplate ct{source, file};
    EXPECT_EQ(ojson(render_chat(ct, t, system, user, &now)).dump(), ojson(c["text"]).dump());
    EXPECT_EQ(ojson(encode_chat(t, ct, system, user)).dump(), ojson(c["ids"]).dump());
  }
}

TEST(ChatTemplate, BuiltInTemplatesAreTheRealOnes) {
  EXPECT_EQ(builtin_chat_template("llama3"), template_file("llama3.jinja"));
  EXPECT_EQ(builtin_chat_template("llama3.1"), template_file("llama3.1.jinja"));
  EXPECT_EQ(builtin_chat_template("llama2"), template_file("llama2.jinja"));
  EXPECT_THROW(builtin_chat_template("chatml"), Error);
}

TEST(ChatTemplate, ChosenFromConfigFormatOrFile) {
  EXPECT_EQ(chat_template(tok("llama3")).source, template_file("llama3.jinja"));  // tokenizer_config.json's
  try {
    chat_template(tok("mistral"));  // this tokenizer_config.json has no chat_template
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: no chat_template"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
  }
  EXPECT_EQ(chat_template(tok("mistral"), "llama2").source, template_file("llama2.jinja"));
  EXPECT_EQ(chat_template(tok("llama3"), "llama3.1").source, template_file("llama3.1.jinja"));
  // A built-in template whose markers this tokenizer lacks would encode them as plain text.
  EXPECT_THROW(chat_template(tok("llama3"), "llama2"), Error);
  EXPECT_THROW(chat_template(tok("mistral"), "llama3"), Error);
  test::TempDir dir;
  test::write_text(dir / "chatml.jinja", template_file("smollm2.jinja"));
  const ChatTemplate file = chat_template(tok("llama3"), "auto", (dir / "chatml.jinja").string());
  EXPECT_EQ(file.name, (dir / "chatml.jinja").string());
  EXPECT_EQ(render_chat(file, tok("llama3"), "", "Hi"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_THROW(chat_template(tok("llama3"), "auto", (dir / "nope.jinja").string()), Error);
}

// A construct the interpreter does not implement is refused by name and line, never rendered
// otherwise; a malformed template is one line naming the template and the line.
TEST(Jinja, UnsupportedConstructsAndMalformedTemplatesAreOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\n\n{% include 'x.jinja' %}", "t.jinja: line 3: unsupported construct '{% include %}'"},
      {"{% extends 'base' %}", "t.jinja: line 1: unsupported construct '{% extends %}'"},
      {"{% raw %}{{ x }}{% endraw %}", "t.jinja: line 1: unsupported construct '{% raw %}'"},
      {"{% call m() %}x{% endcall %}", "t.jinja: line 1: unsupported construct '{% call %}'"},
      {"{% filter upper %}x{% endfilter %}", "t.jinja: line 1: unsupported construct '{% filter %}'"},
      {"x\n{{ 'a b'|wordcount }}", "t.jinja: line 2: unsupported construct: the filter 'wordcount'"},
      {"{{ 1 is escaped }}", "t.jinja: line 1: unsupported construct: the test 'escaped'"},
      {"{% for x in [1] recursive %}{% endfor %}", "t.jinja: line 1: unsupported construct 'recursive' loops"},
      {"{% set a, b = 1, 2 %}", "t.jinja: line 1: unsupported construct 'set' of several names"},
      {"{{ 'é'|upper }}", "t.jinja: line 1: unsupported: upper of non-ASCII text"},
      {"{{ f(*args) }}", "t.jinja: line 1: unsupported construct '*args' / '**kwargs' in a call"},
      {"{% if true %}\nx", "t.jinja: line 1: the block opened here is never closed (expected {% endif %})"},
      {"{% endfor %}", "t.jinja: line 1: unsupported construct '{% endfor %}'"},
      {"{{ 1 + }}", "t.jinja: line 1: unexpected '}}' in an expression"},
      {"\n{{ 'abc }}", "t.jinja: line 2: the string opened here is never closed"},
      {"{{ x", "t.jinja: line 1: the tag is never closed with }}"},
      {"{# x", "t.jinja: line 1: the comment opened here is never closed with #}"},
      {"{{ a ; b }}", "t.jinja: line 1: unexpected character ';' in a tag"},
      {"{{ nope.x }}", "t.jinja: line 1: 'nope' is undefined"},
      {"{{ raise_exception('no system role') }}", "t.jinja: line 1: the template raised an exception: no system role"},
  };
  for (const auto& [source, message] : cases) EXPECT_EQ(error_of(source), message) << source;
}
