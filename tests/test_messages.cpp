// Every user-facing error is one line that names the input and the problem: a table of bad
// invocations of every command, each with the exit code it must get (2: usage, 1: bad input) and
// what its one stderr line must name (the flag or the file).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace fs = std::filesystem;
using bestofn::test::run_cli;

namespace {

struct BadCall {
  std::vector<std::string> args;
  int code;
  std::vector<std::string> names;  // each must appear in the message
};

std::string joined(const std::vector<std::string>& args) {
  std::string s = "bestofn";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

}  // namespace

TEST(Messages, EveryBadInvocationGetsOneLineNamingTheFlagOrFile) {
  bestofn::test::TempDir dir;
  const std::string d = dir.path().string();
  const std::string tok = bestofn::test::require_shared("tokenizers/llama3").string();
  const std::string model = bestofn::test::require_shared("models/llama-260k").string();
  const std::string data = bestofn::test::shared_path("data").string();
  auto file = [&](const std::string& name, const std::string& text) {
    bestofn::test::write_text(dir / name, text);
    return (dir / name).string();
  };
  const std::string missing = d + "/missing.jsonl";
  const std::string not_json = file("broken.jsonl", "{\"task_id\": \"HumanEval/0\", \"completion\": \"x\"}\n{broken\n");
  const std::string wrong_type = file("wrong_type.jsonl", "{\"task_id\": \"HumanEval/0\", \"completion\": 7}\n");
  const std::string not_object = file("array.jsonl", "[1, 2]\n");
  const std::string ids_not_array = file("ids.json", "{\"ids\": [1]}");
  const std::string ids_wrong = file("ids2.json", "[1, \"two\"]");
  const std::string ids_outside = file("ids3.json", "[99999999]");
  const std::string prompt_number = file("prompts.jsonl", "{\"prompt\": 5}\n");
  const std::string prompt_n = file("prompts_n.jsonl", "{\"prompt\": \"x\", \"n\": \"many\"}\n");
  const std::string bad_dataset = file("dataset.jsonl", "{\"task_id\": \"X/0\", \"prompt\": 1}\n");
  const std::string txt_dataset = file("dataset.txt", "hello");
  const std::string bad_utf8 = file("bad.txt", "ok \xff\xfe no");
  const std::string bad_cfg = file("cfg.json", "{\"hidden_size\": \"big\"}");
  const std::string synth = d + "/synth";  // a model that has the Llama 3 tokenizer
  const auto made = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", "f32", "--out", synth, "--tokenizer", tok});
  ASSERT_EQ(made.exit_code, 0) << made.err;

  const std::vector<BadCall> table = {
      // Unknown commands and flags.
      {{"frobnicate"}, 2, {"frobnicate"}},
      {{"inspect", model, "--frob"}, 2, {"--frob"}},
      {{"make-synthetic", "--shape", "tiny", "--out", d + "/x", "--frob"}, 2, {"--frob"}},
      {{"tokenize", "--tokenizer", tok, "--frob"}, 2, {"--frob"}},
      {{"detokenize", "--tokenizer", tok, "--frob"}, 2, {"--frob"}},
      {{"generate", "--model", model, "--prompt", "x", "--frob"}, 2, {"--frob"}},
      {{"score", not_json, "--frob"}, 2, {"--frob"}},
      {{"bench", "--synthetic", "tiny", "--frob"}, 2, {"--frob"}},
      // Missing required arguments and bad values.
      {{"inspect"}, 2, {"MODEL_DIR"}},
      {{"tokenize"}, 2, {"--tokenizer"}},
      {{"score"}, 2, {"SAMPLES"}},
      {{"inspect", model, "--quantize", "int4"}, 2, {"--quantize", "int4"}},
      {{"make-synthetic", "--shape", "tiny", "--out", d + "/x", "--dtype", "f64"}, 2, {"--dtype", "f64"}},
      {{"make-synthetic", "--shape", "tiny", "--out", d + "/x", "--seed", "minus"}, 2, {"--seed"}},
      {{"make-synthetic", "--shape", "tiny", "--out", d + "/y", "--max-shard-size", "5XB"}, 2, {"--max-shard-size"}},
      {{"tokenize", "--tokenizer", tok, "--chat", "--chat-format", "chatml"}, 2, {"--chat-format"}},
      {{"generate", "--model", model, "--prompt", "x", "--temperature", "hot"}, 2, {"--temperature"}},
      {{"generate", "--model", model, "--prompt", "x", "--top-p", "1.5"}, 2, {"--top-p"}},
      {{"generate", "--model", model, "--prompt", "x", "-n", "-3"}, 2, {"-n"}},
      {{"generate", "--model", model, "--prompt", "x", "--batch", "0"}, 2, {"--batch"}},
      {{"generate", "--model", model, "--prompt", "x", "--device", "tpu"}, 2, {"--device"}},
      {{"score", not_json, "--timeout", "0"}, 2, {"--timeout"}},
      {{"score", not_json, "--workers", "many"}, 2, {"--workers"}},
      {{"score", not_json, "--k", "1,x"}, 2, {"--k", "'x'"}},
      {{"bench", "--synthetic", "tiny", "--steps", "0"}, 2, {"--steps"}},
      {{"bench", "--synthetic", "tiny", "--dtype", "int4"}, 2, {"--dtype"}},
      // Missing files.
      {{"inspect", d + "/nomodel"}, 1, {d + "/nomodel"}},
      {{"tokenize", "--tokenizer", d + "/notok"}, 1, {d + "/notok"}},
      {{"tokenize", "--tokenizer", tok, d + "/notext.txt"}, 1, {d + "/notext.txt"}},
      {{"detokenize", "--tokenizer", tok, d + "/noids.json"}, 1, {d + "/noids.json"}},
      {{"generate", "--model", d + "/nomodel", "--prompt", "x"}, 1, {d + "/nomodel"}},
      {{"generate", "--model", synth, "--prompts", missing}, 1, {missing}},
      {{"score", missing, "--data-dir", data}, 1, {missing}},
      {{"score", not_json, "--dataset", d + "/nodataset.jsonl"}, 1, {d + "/nodataset.jsonl"}},
      {{"score", not_json, "--data-dir", d + "/nodata"}, 1, {"HumanEval.jsonl", "BESTOFN_DATA"}},
      {{"make-synthetic", "--shape", d + "/nocfg.json", "--out", d + "/z"}, 1, {"nocfg.json"}},
      // Wrong types and malformed files.
      {{"score", not_json, "--data-dir", data}, 1, {not_json + ":2", "not valid JSON"}},
      {{"score", wrong_type, "--data-dir", data}, 1, {wrong_type + ":1", "completion"}},
      {{"score", not_object, "--data-dir", data}, 1, {not_object + ":1", "object"}},
      {{"score", not_json, "--dataset", bad_dataset}, 1, {bad_dataset + ":1", "prompt"}},
      {{"score", not_json, "--dataset", txt_dataset}, 1, {txt_dataset, "format"}},
      {{"detokenize", "--tokenizer", tok, ids_not_array}, 1, {ids_not_array, "array"}},
      {{"detokenize", "--tokenizer", tok, ids_wrong}, 1, {ids_wrong}},
      {{"detokenize", "--tokenizer", tok, ids_outside}, 1, {"99999999"}},
      {{"tokenize", "--tokenizer", tok, bad_utf8}, 1, {bad_utf8, "UTF-8"}},
      {{"tokenize", "--tokenizer", bad_cfg}, 1, {bad_cfg}},
      {{"make-synthetic", "--shape", bad_cfg, "--out", d + "/w"}, 1, {bad_cfg, "architecture"}},
      {{"generate", "--model", model, "--prompts", prompt_number}, 1, {"tokenizer.json"}},
      {{"generate", "--model", synth, "--prompts", prompt_number}, 1, {prompt_number + ":1", "prompt"}},
      {{"generate", "--model", synth, "--prompts", prompt_n}, 1, {prompt_n + ":1", "\"n\""}},
      {{"generate", "--model", synth, "--prompt", "x", "--best-only"}, 2, {"--best-only"}},
      {{"generate", "--model", synth, "--prompt", "x", "--verify"}, 2, {"--verify"}},
      // eval: flags, values, files.
      {{"eval", "--model", synth, "--frob"}, 2, {"--frob"}},
      {{"eval", "--model", synth, "--data-dir", data, "-n", "0"}, 2, {"-n"}},
      {{"eval", "--model", synth, "--data-dir", data, "--k", "1", "--fail-under", "pass@3=0.5"}, 2, {"--fail-under", "pass@3"}},
      {{"eval", "--model", synth, "--data-dir", data, "--fail-under", "pass@1"}, 2, {"--fail-under"}},
      {{"eval", "--model", synth, "--data-dir", data, "--reference", "GPT-4o=high"}, 2, {"--reference"}},
      {{"eval", "--model", synth, "--data-dir", data, "--limit", "1", "--tasks", "HumanEval/0"}, 2, {"--limit", "--tasks"}},
      {{"eval", "--model", synth, "--data-dir", d + "/nodata"}, 1, {"HumanEval.jsonl", "BESTOFN_DATA"}},
      {{"eval", "--model", synth, "--dataset", bad_dataset}, 1, {bad_dataset + ":1"}},
      {{"eval", "--model", synth, "--data-dir", data, "--tasks", "HumanEval/9999"}, 1, {"--tasks", "HumanEval/9999"}},
      {{"eval", "--model", d + "/nomodel", "--data-dir", data, "--limit", "1"}, 1, {d + "/nomodel"}},
  };
  for (const auto& c : table) {
    const auto r = run_cli(c.args);
    const std::string cmd = joined(c.args);
    EXPECT_EQ(r.exit_code, c.code) << cmd << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << cmd << "\nstdout: " << r.out;
    ASSERT_FALSE(r.err.empty()) << cmd;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << cmd << ": not one line: " << r.err;
    EXPECT_TRUE(r.err.starts_with(c.code == 2 ? "bestofn: usage error: " : "bestofn: error: ")) << cmd << ": " << r.err;
    for (const auto& n : c.names) EXPECT_NE(r.err.find(n), std::string::npos) << cmd << ": '" << n << "' not in: " << r.err;
  }
  // Nothing was made by the failed make-synthetic runs.
  for (const char* out : {"x", "y", "z", "w"}) EXPECT_FALSE(fs::exists(dir / out)) << out;
}
