// bestofn tokenize: exact round trips through stdin and files, and bad inputs.
#include "test_cli_util.h"

TEST(CliTokenize, RoundTripsExactlyThroughStdinAndFiles) {
  bestofn::test::TempDir dir;
  const std::string tok = bestofn::test::require_shared("tokenizers/llama3").string();
  const std::string text = "def add(a, b):\n    return a + b  # ünïcode ✓\n";
  bestofn::test::write_text(dir / "in.txt", text);
  const auto r = run_cli({"tokenize", "--tokenizer", tok, (dir / "in.txt").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json ids = json::parse(r.out);
  EXPECT_EQ(ids[0], 755);  // "def" (HF tokenizers)
  bestofn::test::write_text(dir / "ids.json", r.out);
  const auto back = run_cli({"detokenize", "--tokenizer", tok, (dir / "ids.json").string()});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, text);
  const auto bos = run_cli({"tokenize", "--tokenizer", tok, "--bos", (dir / "in.txt").string()});
  EXPECT_EQ(json::parse(bos.out)[0], 128000);
  EXPECT_EQ(json::parse(bos.out).size(), ids.size() + 1);
  const auto chat = run_cli({"tokenize", "--tokenizer", tok, "--chat", "--system", "Be terse.", (dir / "in.txt").string()});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(json::parse(chat.out)[0], 128000);
  EXPECT_EQ(json::parse(chat.out).back(), 271);  // "\n\n" after the assistant header
}

TEST(CliTokenize, BadInputs) {
  bestofn::test::TempDir dir;
  const std::string tok = bestofn::test::require_shared("tokenizers/llama3").string();
  bestofn::test::write_text(dir / "bad.txt", "ok \xff\xfe bytes");
  expect_failure({"tokenize", "--tokenizer", tok, (dir / "bad.txt").string()}, 1, {"bad.txt", "not valid UTF-8 at byte 3"});
  bestofn::test::write_text(dir / "ids.json", "[1, 2, 999999]");
  expect_failure({"detokenize", "--tokenizer", tok, (dir / "ids.json").string()}, 1, {"ids.json", "id 999999"});
  bestofn::test::write_text(dir / "ids2.json", "[1, 2");
  expect_failure({"detokenize", "--tokenizer", tok, (dir / "ids2.json").string()}, 1, {"ids2.json", "not a JSON array"});
  expect_failure({"tokenize", "--tokenizer", (dir / "none").string(), "-"}, 1, {"none"});
  bestofn::test::write_text(dir / "tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_failure({"tokenize", "--tokenizer", (dir / "tokenizer.json").string()}, 1, {"tokenizer.json", "unsupported model type 'WordPiece'"});
  expect_failure({"tokenize", "--tokenizer", tok, "--chat-format", "chatml"}, 2, {"--chat-format"});
  expect_failure({"tokenize"}, 2, {"--tokenizer"});
  expect_failure({"tokenize", "--tokenizer", bestofn::test::require_shared("tokenizers/mistral").string(), "--chat", (dir / "ids.json").string()},
                 1, {"tokenizer_config.json", "no chat_template", "--chat-format"});
  // A chat format whose markers this tokenizer lacks would encode them as plain text: refused.
  const std::string mistral = bestofn::test::require_shared("tokenizers/mistral").string();
  expect_failure({"tokenize", "--tokenizer", tok, "--chat", "--chat-format", "llama2", (dir / "ids.json").string()}, 1,
                 {"llama2 chat template", "<s>", "plain text"});
  expect_failure({"tokenize", "--tokenizer", mistral, "--chat", "--chat-format", "llama3", (dir / "ids.json").string()}, 1,
                 {"llama3 chat template", "<|begin_of_text|>", "plain text"});
  // --chat-template needs --chat, and is one or the other with --chat-format.
  expect_failure({"tokenize", "--tokenizer", tok, "--chat-template", (dir / "ids.json").string()}, 2, {"--chat-template", "--chat"});
  expect_failure({"tokenize", "--tokenizer", tok, "--chat", "--chat-format", "llama3", "--chat-template", (dir / "ids.json").string()}, 2,
                 {"--chat-template", "--chat-format"});
  bestofn::test::write_text(dir / "bad.jinja", "{% for m in messages %}\n{{ m.content|wordcount }}{% endfor %}");
  expect_failure({"tokenize", "--tokenizer", tok, "--chat", "--chat-template", (dir / "bad.jinja").string(), (dir / "ids.json").string()}, 1,
                 {"bad.jinja: line 2: unsupported construct: the filter 'wordcount'"});
  for (const auto& [t, format] : {std::pair{tok, "llama3"}, std::pair{tok, "llama3.1"}, std::pair{mistral, "llama2"}}) {
    const auto ok = run_cli({"tokenize", "--tokenizer", t, "--chat", "--chat-format", format, (dir / "ids.json").string()});
    EXPECT_EQ(ok.exit_code, 0) << format << ": " << ok.err;
  }
}

// SmolLM2's tokenizer (a ByteLevel post-processor): --bos adds nothing, as HF's
// add_special_tokens=True; the warning about its missing byte tokens goes to stderr, the ids to stdout.
TEST(CliTokenize, BosAddsNothingWhereThePostProcessorAddsNothing) {
  bestofn::test::TempDir dir;
  const std::string tok = bestofn::test::source_path("tests/data/tokenizers/smollm2/tokenizer.json.gz").string();
  bestofn::test::write_text(dir / "in.txt", "x = 12\n");
  const auto plain = run_cli({"tokenize", "--tokenizer", tok, (dir / "in.txt").string()});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(json::parse(plain.out), json::parse("[104, 446, 216, 33, 34, 198]"));  // HF tokenizers 0.21.4
  const auto bos = run_cli({"tokenize", "--tokenizer", tok, "--bos", (dir / "in.txt").string()});
  ASSERT_EQ(bos.exit_code, 0) << bos.err;
  EXPECT_EQ(bos.out, plain.out);
}
