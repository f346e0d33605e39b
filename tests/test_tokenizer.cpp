// Tokenizers against independent truths: llama.cpp's and third-party Llama 3 vectors (../shared),
// and HF `tokenizers` ids for every HumanEval prompt and solution and a multilingual corpus
// (tests/data/tokenizer_golden.json, made by tools/gen_tokenizer_golden.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/tokenizer/chat_template.h"
#include "bestofn/tokenizer/run_tokenize.h"
#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/utf8.h"
#include "test_util.h"
#include "tokenizer_test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

const json& golden() {
  static const json j = json::parse(test::read_text(test::source_path("tests/data/tokenizer_golden.json")));
  return j;
}

const Tokenizer& tok(const std::string& name) {
  static const Tokenizer llama3 = Tokenizer::load(test::require_shared("tokenizers/llama3"));
  static const Tokenizer mistral = Tokenizer::load(test::require_shared("tokenizers/mistral"));
  return name == "llama3" ? llama3 : mistral;
}

struct Problem {
  std::string task_id, prompt, solution;
};

const std::vector<Problem>& humaneval() {
  static const std::vector<Problem> problems = [] {
    std::vector<Problem> v;
    std::istringstream in(read_text_file(test::require_shared("data/humaneval/HumanEval.jsonl.gz")));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) {
        const json j = json::parse(line);
        v.push_back({j["task_id"], j["prompt"], j["canonical_solution"]});
      }
    return v;
  }();
  return problems;
}

std::string show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += std::to_string(id) + " ";
  return s;
}

class BothTokenizers : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST(TokenizerLlama3, LlamaCppVectors) {
  const std::string inp = test::read_text(test::require_shared("testvectors/llama3-bpe/ggml-vocab-llama-bpe.inp"));
  const std::string out = test::read_text(test::require_shared("testvectors/llama3-bpe/ggml-vocab-llama-bpe.out"));
  std::vector<std::string> cases;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (std::size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    cases.push_back(inp.substr(pos, next - pos));
  std::istringstream lines(out);
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    ASSERT_LT(n, cases.size());
    std::vector<int> want;
    std::istringstream ids(line);
    for (int id; ids >> id;) want.push_back(id);
    EXPECT_EQ(show(tok("llama3").encode(cases[n])), show(want)) << "case " << n << ": " << json(cases[n]).dump();
  }
  EXPECT_EQ(n, 46u);
  EXPECT_EQ(cases.size(), 46u);
}

TEST(TokenizerLlama3, ThirdPartyVectors) {
  const json v = json::parse(test::read_text(test::require_shared("testvectors/llama3-bpe/third_party_vectors.json")));
  ASSERT_FALSE(v["vectors"].empty());
  for (const auto& c : v["vectors"]) {
    std::vector<int> ids = tok("llama3").encode(c["text"].get<std::string>(), c.value("bos", false));
    if (c.value("eos", false)) ids.push_back(*tok("llama3").token_id("<|end_of_text|>"));
    EXPECT_EQ(show(ids), show(c["ids"].get<std::vector<int>>())) << c["text"] << " (" << c["source"] << ")";
  }
}

TEST_P(BothTokenizers, HumanEvalIdsEqualHfAndRoundTrip) {
  const auto& g = golden()[GetParam()]["humaneval"];
  const auto& problems = humaneval();
  ASSERT_EQ(problems.size(), 164u);
  ASSERT_EQ(g.size(), problems.size());
  int failures = 0;
  for (std::size_t i = 0; i < problems.size() && failures < 5; ++i) {
    ASSERT_EQ(g[i]["task_id"], problems[i].task_id);
    for (const auto& [text, key] : {std::pair{&problems[i].prompt, "prompt"}, std::pair{&problems[i].solution, "solution"}}) {
      const auto ids = tok(GetParam()).encode(*text);
      const auto want = g[i][key].get<std::vector<int>>();
      if (ids != want) {
        ++failures;
        ADD_FAILURE() << problems[i].task_id << " " << key << "\n got: " << show(ids) << "\nwant: " << show(want);
      }
      EXPECT_EQ(tok(GetParam()).decode(ids), *text) << problems[i].task_id << " " << key;
    }
  }
}

TEST_P(BothTokenizers, CorpusIdsEqualHf) {
  for (const auto& c : golden()[GetParam()]["corpus"]) {
    const std::string text = c["text"];
    EXPECT_EQ(show(tok(GetParam()).encode(text)), show(c["ids"].get<std::vector<int>>())) << json(text).dump();
  }
}

TEST_P(BothTokenizers, BosFollowsThePostProcessor) {
  for (const auto& c : golden()[GetParam()]["with_bos"])
    EXPECT_EQ(show(tok(GetParam()).encode(c["text"].get<std::string>(), true)), show(c["ids"].get<std::vector<int>>())) << c["text"];
}

TEST_P(BothTokenizers, DecodeEqualsHf) {
  for (const auto& c : golden()[GetParam()]["decode"]) {
    const auto ids = c["ids"].get<std::vector<int>>();
    EXPECT_EQ(json(tok(GetParam()).decode(ids)).dump(), json(c["text"].get<std::string>()).dump()) << show(ids);
  }
}

TEST_P(BothTokenizers, IncrementalDecodingEmitsCompleteUtf8AndTheWholeText) {
  std::vector<std::string> texts;
  for (const auto& c : golden()[GetParam()]["corpus"]) texts.push_back(c["text"]);
  for (std::size_t i = 0; i < 20; ++i) texts.push_back(humaneval()[i].prompt);
  for (const auto& text : texts) {
    const auto ids = tok(GetParam()).encode(text);
    IncrementalDecoder dec(tok(GetParam()));
    std::string streamed;
    for (int id : ids) {
      const std::string piece = dec.push(id);
      EXPECT_FALSE(utf8::first_invalid(piece)) << json(text).dump();
      streamed += piece;
    }
    streamed += dec.finish();
    EXPECT_EQ(json(streamed).dump(), json(tok(GetParam()).decode(ids)).dump());
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, BothTokenizers, ::testing::Values("llama3", "mistral"));

TEST(Tokenizer, NeverCleansUpTokenizationSpaces) {
  for (const char* name : {"llama3", "mistral"}) {
    const std::string code = "assert f(x) == 'a' and g(y) != \"b\" , [1 , 2] ; it 's";
    EXPECT_EQ(tok(name).decode(tok(name).encode(code)), code) << name;
  }
}

TEST(Tokenizer, SpecialIdsAndInvalidInput) {
  EXPECT_EQ(tok("llama3").bos_id(), 128000);
  EXPECT_EQ(tok("llama3").eos_id(), 128009);  // tokenizer_config eos_token <|eot_id|>
  EXPECT_EQ(tok("llama3").vocab_size(), 128256);
  EXPECT_TRUE(tok("llama3").is_special(128009));
  EXPECT_EQ(tok("mistral").bos_id(), 1);
  EXPECT_EQ(tok("mistral").token_id("▁Hello"), 22557);
  EXPECT_THROW(tok("llama3").encode("bad \xff byte"), Error);
  EXPECT_THROW(tok("llama3").decode(std::vector<int>{128256}), Error);
}

namespace {
// Writes a variant of the mistral tokenizer.json with `edit` applied and expects load to fail
// with a message containing `part` and the file name.
template <typename Edit>
void expect_bad_tokenizer(Edit edit, const std::string& part) {
  static const json base = json::parse(test::read_text(test::require_shared("tokenizers/mistral/tokenizer.json")));
  test::expect_tokenizer_error(base, edit, part);
}
}  // namespace

TEST(TokenizerMalformed, ClearErrors) {
  expect_bad_tokenizer([](json& j) { j.erase("model"); }, "no \"model\" object");
  expect_bad_tokenizer([](json& j) { j["model"]["type"] = "Unigram"; }, "unsupported model type 'Unigram'; supported: BPE");
  expect_bad_tokenizer([](json& j) { j["model"]["merges"][5] = "nospace"; }, "model.merges[5]");
  expect_bad_tokenizer([](json& j) { j["model"]["merges"][7] = "qqqzzz xyzzyx"; }, "missing from the vocab");
  expect_bad_tokenizer([](json& j) { j["model"]["vocab"]["▁Hello"] = 99999999; }, "outside 0..31999");
  expect_bad_tokenizer([](json& j) { j["model"]["vocab"]["▁Hello"] = -1; }, "outside");
  expect_bad_tokenizer([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "unsupported pre_tokenizer 'Whitespace'");
  expect_bad_tokenizer([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "unsupported normalizer 'NFKC'");
  expect_bad_tokenizer([](json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
  }, "regex does not compile");
  test::TempDir dir;
  test::write_text(dir / "tokenizer.json", "{\"model\": ");
  EXPECT_THROW(Tokenizer::load(dir / "tokenizer.json"), Error);
  EXPECT_THROW(Tokenizer::load(dir / "nope.json"), Error);
}

TEST(Tokenizer, MergesGivenAsPairsEncodeTheSame) {
  // Newer tokenizers libraries write merges as [left, right] pairs; the ranks are the same.
  json j = json::parse(test::read_text(test::require_shared("tokenizers/mistral/tokenizer.json")));
  for (auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  test::TempDir dir;
  test::write_text(dir / "tokenizer.json", j.dump());
  const Tokenizer pairs = Tokenizer::load(dir / "tokenizer.json");
  for (std::size_t i = 0; i < 30; ++i)
    EXPECT_EQ(pairs.encode(humaneval()[i].prompt), tok("mistral").encode(humaneval()[i].prompt)) << humaneval()[i].task_id;
}

TEST(Tokenizer, UnusualButValidShapesLoadTheSame) {
  // The loader reads model.vocab and model.merges in one pass outside the DOM, and hands anything
  // unusual to a DOM parse: both must give the same tokenizer. A repeated vocab key (the last one
  // wins) and a repeated "model" object (the last one wins) take the DOM path; keys in another
  // order (the dump sorts them: merges before vocab) take the one-pass path.
  const std::string original = test::read_text(test::require_shared("tokenizers/mistral/tokenizer.json"));
  const std::string sorted = json::parse(original).dump();
  const std::string key = "\"vocab\":{";
  ASSERT_NE(sorted.find(key), std::string::npos);
  ASSERT_LT(sorted.find("\"merges\":"), sorted.find(key));
  std::string repeated_key = sorted;
  repeated_key.insert(sorted.find(key) + key.size(), "\"▁Hello\":7,");  // later: "▁Hello":22557
  std::string repeated_model = sorted;
  repeated_model.insert(1, R"("model":{"type":"BPE","vocab":{"a":0},"merges":[]},)");
  for (const auto& [name, text] : {std::pair{"sorted keys", sorted}, std::pair{"a repeated vocab key", repeated_key},
                                   std::pair{"a repeated model", repeated_model}}) {
    test::TempDir dir;
    test::write_text(dir / "tokenizer.json", text);
    const Tokenizer t = Tokenizer::load(dir / "tokenizer.json");
    EXPECT_EQ(t.token_id("▁Hello"), 22557) << name;
    EXPECT_EQ(t.vocab_size(), tok("mistral").vocab_size()) << name;
    for (std::size_t i = 0; i < 30; ++i)
      EXPECT_EQ(t.encode(humaneval()[i].prompt), tok("mistral").encode(humaneval()[i].prompt)) << name << " " << humaneval()[i].task_id;
  }
}

TEST(TokenizerMalformed, VocabAndMergeErrorsNameTheEntry) {
  // Each is found by the one-pass read or by the DOM parse it falls back to; the message is the same.
  expect_bad_tokenizer([](json& j) { j["model"]["vocab"]["▁Hello"] = 2.5; }, "model.vocab: id 2.5 of token \"▁Hello\" is outside 0..31999");
  expect_bad_tokenizer([](json& j) { j["model"]["vocab"]["▁Hello"] = 5; }, "model.vocab: id 5 is given to two tokens");
  expect_bad_tokenizer([](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab must be an object");
  expect_bad_tokenizer([](json& j) { j["model"]["merges"] = "x"; }, "model.merges must be a list");
  expect_bad_tokenizer([](json& j) { j["model"]["merges"][3] = json::array({"a", "b", "c"}); }, "model.merges[3]: expected \"left right\" or [left, right]");
  expect_bad_tokenizer([](json& j) { j["model"]["merges"][4] = "a  b"; }, "model.merges[4]: \"a  b\" is not \"left right\"");
  expect_bad_tokenizer([](json& j) { j["model"]["merges"][9] = json::array({"▁qqqzzz", "x"}); }, "model.merges[9]: \"▁qqqzzz x\" uses a token missing from the vocab");
}

TEST(TokenizerMalformed, ARepeatedVocabOrMergesKeyKeepsTheLastValue) {
  // As in any JSON DOM, the last of repeated keys wins: a real vocab or merges list followed by a
  // second "vocab"/"merges" key that is not one is refused, as the DOM loader refused it.
  json j = json::parse(test::read_text(test::require_shared("tokenizers/mistral/tokenizer.json")));
  const std::string vocab = j["model"]["vocab"].dump(), merges = j["model"]["merges"].dump();
  j["model"].erase("vocab");
  j["model"].erase("merges");
  std::string model = j["model"].dump();
  model.pop_back();  // the closing brace
  j.erase("model");
  const std::string rest = j.dump().substr(1);
  const auto file_with = [&](const std::string& tail) {
    return "{\"model\":" + model + ",\"vocab\":" + vocab + ",\"merges\":" + merges + tail + "}," + rest;
  };
  {
    test::TempDir dir;
    test::write_text(dir / "tokenizer.json", file_with(""));
    EXPECT_EQ(Tokenizer::load(dir / "tokenizer.json").encode(humaneval()[0].prompt), tok("mistral").encode(humaneval()[0].prompt));
  }
  for (const auto& [tail, part] : {std::pair{",\"vocab\":5", "model.vocab must be an object"}, std::pair{",\"merges\":\"x\"", "model.merges must be a list"},
                                   std::pair{",\"vocab\":null", "model.vocab must be an object"}, std::pair{",\"merges\":{}", "model.merges must be a list"}}) {
    test::TempDir dir;
    test::write_text(dir / "tokenizer.json", file_with(tail));
    try {
      Tokenizer::load(dir / "tokenizer.json");
      ADD_FAILURE() << "accepted a file ending its model with " << tail;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << tail << ": " << e.what();
    }
  }
}

// The post-processor's TemplateProcessing as HF `tokenizers` applies it (checked with tokenizers
// 0.22: Tokenizer.from_str(edited mistral json).encode("Hello").ids): the special token's ids
// come from the template's special_tokens map, not from the vocab entry of the same name, and
// tokens after the sequence are appended; a name missing from the map is refused (HF panics).
TEST(TokenizerMalformed, PostProcessorTemplateAsHfAppliesIt) {
  const json base = json::parse(test::read_text(test::require_shared("tokenizers/mistral/tokenizer.json")));
  auto load = [](const json& j) {
    test::TempDir dir;
    test::write_text(dir / "tokenizer.json", j.dump());
    return Tokenizer::load(dir / "tokenizer.json");
  };
  const std::vector<int> hello{22557};
  ASSERT_EQ(tok("mistral").encode("Hello"), hello);
  json j = base;
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {5};
  EXPECT_EQ(load(j).encode("Hello", true), (std::vector<int>{5, 22557}));  // HF: [5, 22557]
  EXPECT_EQ(load(j).bos_id(), 5);
  j["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}});
  j["post_processor"]["special_tokens"]["</s>"] = {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}};
  EXPECT_EQ(load(j).encode("Hello", true), (std::vector<int>{5, 22557, 2}));  // HF: [5, 22557, 2]
  EXPECT_EQ(load(j).encode("Hello"), hello);

  j = base;
  j["post_processor"]["single"] = json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  EXPECT_EQ(load(j).bos_id(), std::nullopt);
  EXPECT_EQ(load(j).encode("Hello", true), hello);  // a template with no special tokens adds none (HF: [22557])

  expect_bad_tokenizer([](json& k) { k["post_processor"]["special_tokens"].erase("<s>"); },
                       "post_processor TemplateProcessing: special token \"<s>\" is missing from its special_tokens");
  expect_bad_tokenizer([](json& k) { k["post_processor"]["special_tokens"]["<s>"]["ids"] = {32000}; },
                       "special_tokens[\"<s>\"].ids: 32000 is not an id in 0..31999");
  expect_bad_tokenizer([](json& k) { k["post_processor"]["special_tokens"]["<s>"]["ids"] = json::array(); }, "needs a non-empty list \"ids\"");
  expect_bad_tokenizer([](json& k) { k["post_processor"]["single"] = "<s> $A"; }, "\"single\" must be a list");
  expect_bad_tokenizer([](json& k) { k["post_processor"]["single"][0] = {{"Special", "<s>"}}; }, "a piece of \"single\" is neither");
  expect_bad_tokenizer([](json& k) {
    k["post_processor"].erase("special_tokens");
    k["post_processor"]["single"][0]["SpecialToken"]["id"] = "<bos>";
  }, "special token \"<bos>\" is not in the vocab");
}

// A pre-tokenizer regex that backtracks without end hits PCRE2's match limit: an error naming the
// tokenizer, not the rest of the text taken as one piece (which encoded it otherwise than HF).
TEST(TokenizerMalformed, ARegexMatchLimitIsAnErrorNotAnotherSplit) {
  json j = json::parse(test::read_text(test::require_shared("tokenizers/llama3/tokenizer.json")));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:(?:a+)+)+c|.";
  test::TempDir dir;
  test::write_text(dir / "tokenizer.json", j.dump());
  const Tokenizer t = Tokenizer::load(dir / "tokenizer.json");
  const std::vector<int> short_ids = t.encode("aaab x");  // each character its own piece: a a a b ' ' x
  EXPECT_EQ(short_ids.size(), 6u);
  try {
    t.encode(std::string(40, 'a') + "b x");
    ADD_FAILURE() << "a match limit was passed over";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "tokenizer.json").string() + ": pre_tokenizer regex failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
}

// tokenizer_config.json as HF reads it: an object; bos/eos_token a token's text, {"content"}, or
// null, naming a token tokenizer.json has (else an error: no EOS to stop on, silently); a
// chat_template text or HF's list of named templates, of which "default" is used.
TEST(TokenizerMalformed, TokenizerConfigShapes) {
  const json real = json::parse(test::read_text(test::require_shared("tokenizers/llama3/tokenizer_config.json")));
  test::TempDir dir;
  std::filesystem::copy_file(test::require_shared("tokenizers/llama3/tokenizer.json"), dir / "tokenizer.json");
  auto with_config = [&](const std::string& text) {
    test::write_text(dir / "tokenizer_config.json", text);
    return Tokenizer::load(dir.path());
  };
  auto error_of = [&](const std::string& text) -> std::string {
    try {
      with_config(text);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  };
  const std::string cfg = (dir / "tokenizer_config.json").string();
  EXPECT_EQ(error_of("[]"), cfg + ": must be a JSON object (HF's tokenizer_config.json)");
  EXPECT_NE(error_of(R"({"chat_template": 5})").find(cfg + ": \"chat_template\" must be a text or a list"), std::string::npos);
  EXPECT_NE(error_of(R"({"eos_token": "<nope>"})").find(cfg + ": \"eos_token\" is \"<nope>\", which is not a token of"), std::string::npos);
  EXPECT_NE(error_of(R"({"eos_token": 7})").find("\"eos_token\" must be a token's text"), std::string::npos);
  EXPECT_EQ(with_config(R"({"eos_token": null, "bos_token": null})").eos_id(), std::nullopt);
  EXPECT_EQ(with_config(R"({"eos_token": {"content": "<|eot_id|>", "lstrip": false}})").eos_id(), 128009);

  json named = real;
  named["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "{{ tools }}"}}, {{"name", "default"}, {"template", real["chat_template"]}}});
  EXPECT_EQ(chat_template(with_config(named.dump())).source, real["chat_template"]);
  named["chat_template"].erase(1);
  EXPECT_THROW(chat_template(with_config(named.dump())), Error);  // no "default": no template to use
  named["chat_template"] = json::array({"just text"});
  EXPECT_NE(error_of(named.dump()).find("as a list must hold {\"name\": text, \"template\": text} objects"), std::string::npos);
}

// The tokenize and detokenize commands without the binary: a file's ids, and their text back,
// byte for byte (the trailing newline included); an id outside the vocabulary is an Error.
TEST(TokenizeCommand, IdsOfAFileDecodeToItsText) {
  test::TempDir tmp;
  const std::string text = "def add(a, b):\n    return a + b\n";
  test::write_text(tmp / "in.txt", text);
  TokenizeOptions o;
  o.tokenizer = test::require_shared("tokenizers/llama3").string();
  o.input = (tmp / "in.txt").string();
  testing::internal::CaptureStdout();
  ASSERT_EQ(run_tokenize(o), 0);
  const std::string ids = testing::internal::GetCapturedStdout();
  EXPECT_EQ(json::parse(ids), json(tok("llama3").encode(text, false)));
  test::write_text(tmp / "ids.json", ids);
  o.input = (tmp / "ids.json").string();
  testing::internal::CaptureStdout();
  ASSERT_EQ(run_detokenize(o), 0);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), text);
  test::write_text(tmp / "bad.json", "[1, 99999999]");
  o.input = (tmp / "bad.json").string();
  EXPECT_THROW(run_detokenize(o), Error);
}
