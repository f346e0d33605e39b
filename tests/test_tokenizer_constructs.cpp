// tokenizer.json constructs beyond the Llama families, against HF `tokenizers`
// (tests/data/tokenizer_constructs_golden.json, made by tools/gen_tokenizer_constructs_golden.py):
// SmolLM2-135M-Instruct's tokenizer as released (Digits + GPT-2 ByteLevel, 21 byte tokens missing,
// empty continuing_subword_prefix / end_of_word_suffix, a ByteLevel post-processor that adds
// nothing), and variants of it and of Mistral's, each changing one construct: Digits runs,
// ByteLevel alone or with add_prefix_space, an unk token (fused or not), Metaspace's three prepend
// schemes with and without split, its decoder, its older field names.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sstream>

#include "bestofn/eval/dataset_manifest.h"
#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "bestofn/util/utf8.h"
#include "test_util.h"
#include "tokenizer_test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

const std::string kSmolLM2 = "tests/data/tokenizers/smollm2/tokenizer.json.gz";

const json& golden() {
  static const json j = json::parse(test::read_text(test::source_path("tests/data/tokenizer_constructs_golden.json")));
  return j;
}

const json& base(const std::string& name) {
  static const json smollm2 = json::parse(read_text_file(test::source_path(kSmolLM2)));
  static const json mistral = json::parse(test::read_text(test::require_shared("tokenizers/mistral/tokenizer.json")));
  if (name == "smollm2") return smollm2;
  if (name == "mistral") return mistral;
  throw std::runtime_error("no base tokenizer " + name);
}

// `base` with the case's edits: top-level keys, or "model.KEY", replaced (as the tool does).
Tokenizer load_case(const json& c) {
  json j = base(c["base"]);
  for (const auto& [key, value] : c["set"].items()) {
    if (key.starts_with("model.")) j["model"][key.substr(6)] = value;
    else j[key] = value;
  }
  test::TempDir dir;
  test::write_text(dir / "tokenizer.json", j.dump());
  return Tokenizer::load(dir / "tokenizer.json");
}

std::vector<std::string> humaneval_texts() {
  std::vector<std::string> v;
  std::istringstream in(read_text_file(test::require_shared("data/humaneval/HumanEval.jsonl.gz")));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      const json j = json::parse(line);
      v.push_back(j["prompt"]);
      v.push_back(j["canonical_solution"]);
    }
  return v;
}

std::string show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += std::to_string(id) + " ";
  return s;
}

// SmolLM2's tokenizer.json cut to a few tokens (and so lacking most byte tokens), for the tests of
// fields: they load in microseconds where the real vocabulary takes a tenth of a second.
json tiny_smollm2() {
  json j = base("smollm2");
  j["added_tokens"] = json::array();
  for (int id = 0; id < 3; ++id) j["added_tokens"].push_back(base("smollm2")["added_tokens"][id]);
  j["model"]["vocab"] = {{"<|endoftext|>", 0}, {"<|im_start|>", 1}, {"<|im_end|>", 2}, {"h", 3}, {"e", 4}, {"l", 5}, {"o", 6}, {"he", 7}, {"ll", 8}};
  j["model"]["merges"] = json::array({json::array({"h", "e"}), json::array({"l", "l"})});
  return j;
}

// What the default logger writes while this lives.
class LogLines {
 public:
  LogLines() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) { spdlog::default_logger()->sinks().push_back(sink_); }
  ~LogLines() { std::erase(spdlog::default_logger()->sinks(), sink_); }
  LogLines(const LogLines&) = delete;
  LogLines& operator=(const LogLines&) = delete;
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace

TEST(TokenizerConstructs, IdsAndDecodesEqualHf) {
  const json& g = golden();
  ASSERT_EQ(g["cases"].size(), 15u);
  ASSERT_EQ(g["humaneval_sha256"], sha256_file(test::require_shared("data/humaneval/HumanEval.jsonl.gz")));
  ASSERT_EQ(g["smollm2_sha256"], sha256_file(test::source_path(kSmolLM2)));
  const std::vector<std::string> he = humaneval_texts();
  for (const json& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Tokenizer t = load_case(c);
    // Byte-level encodings decode to the text, unless a prefix space was added.
    const bool round_trips = c["base"] == "smollm2" && c["name"].get<std::string>().find("prefix_space") == std::string::npos;
    int failures = 0;
    for (std::size_t i = 0; i < c["humaneval"].size() && failures < 3; ++i)
      for (const auto& [text, key] : {std::pair{&he[2 * i], "prompt"}, std::pair{&he[2 * i + 1], "solution"}}) {
        const auto want = c["humaneval"][i][key].get<std::vector<int>>();
        const auto ids = t.encode(*text);
        if (ids != want && ++failures) {
          ADD_FAILURE() << c["humaneval"][i]["task_id"] << " " << key << "\n got: " << show(ids) << "\nwant: " << show(want);
        }
        if (round_trips) {
          EXPECT_EQ(t.decode(ids), *text) << c["humaneval"][i]["task_id"];
        }
      }
    for (const json& x : c["corpus"])
      EXPECT_EQ(show(t.encode(x["text"].get<std::string>())), show(x["ids"].get<std::vector<int>>())) << x["text"].dump();
    for (const json& x : c["with_bos"])
      EXPECT_EQ(show(t.encode(x["text"].get<std::string>(), true)), show(x["ids"].get<std::vector<int>>())) << x["text"].dump();
    for (const json& x : c["decode"]) {
      const auto ids = x["ids"].get<std::vector<int>>();
      EXPECT_EQ(json(t.decode(ids)).dump(), json(x["text"]).dump()) << show(ids);
    }
    // The incremental decoder streams what decode gives, for sequences from the start.
    for (const json& x : c["corpus"]) {
      const auto ids = x["ids"].get<std::vector<int>>();
      IncrementalDecoder dec(t);
      std::string streamed;
      for (int id : ids) streamed += dec.push(id);
      streamed += dec.finish();
      EXPECT_EQ(json(streamed).dump(), json(utf8::lossy(t.decode(ids))).dump()) << x["text"].dump();
    }
  }
}

TEST(TokenizerConstructs, MissingByteTokensAreNamedOnceAtLoad) {
  LogLines log;
  const Tokenizer t = Tokenizer::load(test::source_path(kSmolLM2));
  const std::string text = log.str();
  EXPECT_NE(text.find("tokenizer.json.gz: the byte-level vocab has no token for 21 of the 256 bytes (4, 6, 19, 20, 22, 29, 192, 193, ...)"),
            std::string::npos) << text;
  EXPECT_NE(text.find("encoded as nothing (dropped: there is no unk token)"), std::string::npos) << text;
  EXPECT_EQ(t.encode("\x04"), std::vector<int>{});
}

// --bos adds what HF's add_special_tokens adds: SmolLM2's ByteLevel post-processor adds nothing,
// whatever tokenizer_config's bos_token; without a template, transformers' add_bos_token /
// add_eos_token flags of tokenizer_config (its Llama tokenizers build the template from them).
TEST(TokenizerConstructs, BosAddsWhatThePostProcessorAdds) {
  test::TempDir dir;
  test::write_text(dir / "tokenizer.json", tiny_smollm2().dump());
  const auto with_config = [&](const std::string& config) {
    test::write_text(dir / "tokenizer_config.json", config);
    return Tokenizer::load(dir.path());
  };
  const Tokenizer plain = with_config(test::read_text(test::source_path("tests/data/tokenizers/smollm2/tokenizer_config.json")));
  EXPECT_EQ(plain.bos_id(), 1);  // <|im_start|>: the chat template's, not added to plain text
  EXPECT_EQ(plain.eos_id(), 2);
  const std::vector<int> hello{7, 8, 6};  // he ll o
  EXPECT_EQ(plain.encode("hello", false), hello);
  EXPECT_EQ(plain.encode("hello", true), hello);
  EXPECT_EQ(plain.encode("", true), std::vector<int>{});
  const Tokenizer flags = with_config(R"({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "add_bos_token": true, "add_eos_token": true})");
  EXPECT_EQ(flags.encode("hello", true), (std::vector<int>{1, 7, 8, 6, 2}));
  EXPECT_EQ(flags.encode("hello", false), hello);
  EXPECT_EQ(with_config(R"({"bos_token": "<|im_start|>", "add_bos_token": false})").encode("hello", true), hello);
}

namespace {
// `edit` applied to tiny_smollm2() must fail to load with a message naming the file and `part`.
template <typename Edit>
void expect_refused(Edit edit, const std::string& part) {
  static const json tiny = tiny_smollm2();
  test::expect_tokenizer_error(tiny, edit, part);
}

json metaspace_with(const char* key, const json& value) {
  json m = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  m[key] = value;
  return m;
}
}  // namespace

TEST(TokenizerConstructs, MalformedFieldsAreOneLineErrors) {
  expect_refused([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix \"##\" is not supported (only none or \"\")");
  expect_refused([](json& j) { j["model"]["end_of_word_suffix"] = 5; }, "model.end_of_word_suffix");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = "yes"; },
                 "Digits pre_tokenizer: \"individual_digits\" must be true or false");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = 1; },
                 "ByteLevel pre_tokenizer: \"add_prefix_space\" must be true or false");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}}); },
                 "pre_tokenizer Digits after ByteLevel is not supported");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; },
                 "unsupported pre_tokenizer 'Whitespace'; supported: Sequence, Split, Digits, ByteLevel, Metaspace");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"] = "Digits"; }, "\"pretokenizers\" must be a list");
  expect_refused([](json& j) { j["pre_tokenizer"] = metaspace_with("replacement", "ab"); },
                 "Metaspace pre_tokenizer: \"replacement\" must be one character, got \"ab\"");
  expect_refused([](json& j) { j["pre_tokenizer"] = metaspace_with("prepend_scheme", "First"); },
                 "Metaspace pre_tokenizer: \"prepend_scheme\" must be \"first\", \"always\" or \"never\", got \"First\"");
  expect_refused([](json& j) { j["pre_tokenizer"] = metaspace_with("add_prefix_space", false); },
                 "Metaspace pre_tokenizer: add_prefix_space false contradicts prepend_scheme \"first\"");
  expect_refused([](json& j) { j["pre_tokenizer"] = metaspace_with("split", "no"); }, "Metaspace pre_tokenizer: \"split\" must be true or false");
  expect_refused([](json& j) { j["pre_tokenizer"] = metaspace_with("replacement", nullptr); }, "Metaspace pre_tokenizer: missing string \"replacement\"");
  expect_refused([](json& j) { j["decoder"] = metaspace_with("prepend_scheme", 3); }, "Metaspace decoder: missing string \"prepend_scheme\"");
  expect_refused([](json& j) {
    j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, metaspace_with("split", true)}}};
  }, "Metaspace decoder after Fuse is not supported");
}
