// bestofn inspect: a real checkpoint and synthetic ones, as JSON and text.
#include "test_cli_util.h"

TEST(CliInspect, Llama260kJson) {
  const auto dir = bestofn::test::require_shared("models/llama-260k");
  const auto r = run_cli({"inspect", dir.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  // The shared README's description of the model.
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["num_layers"], 5);
  EXPECT_EQ(j["num_heads"], 8);
  EXPECT_EQ(j["num_kv_heads"], 4);
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["vocab_size"], 512);
  EXPECT_EQ(j["context_length"], 512);
  EXPECT_EQ(j["quantization"], "none");
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["rope"]["theta"], 10000.0);
  EXPECT_EQ(j["tensor_count"], 48);
  // weight_bytes = the data section: file size - 8 - header length (read here from the raw file).
  const auto bytes = bestofn::test::read_bytes(dir / "model.safetensors");
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | bytes[static_cast<std::size_t>(i)];
  EXPECT_EQ(j["weight_bytes"].get<std::uint64_t>(), bytes.size() - 8 - header);
  EXPECT_EQ(j["bytes_by_dtype"]["F32"], j["weight_bytes"]);
  // One decode step reads all but the token embedding, which is read as the tied lm_head: all
  // 260,032 parameters except the duplicate lm_head tensor, in F32.
  EXPECT_EQ(j["decode_bytes_per_step"], 260032 * 4);
  EXPECT_EQ(j["kv_bytes_per_token"], 2 * 5 * 4 * 8 * 2);
}

TEST(CliInspect, TextOutput) {
  const auto r = run_cli({"inspect", bestofn::test::require_shared("models/llama-260k").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("hidden size              64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("heads / kv heads         8 / 4"), std::string::npos) << r.out;
}

TEST(CliInspect, SyntheticFp8AndOnlineQuantization) {
  bestofn::test::TempDir dir;
  const json fp8 = json::parse(run_cli({"inspect", synth(dir, "fp8", "fp8"), "--json"}).out);
  EXPECT_EQ(fp8["quantization"], "fp8-compressed-tensors");
  EXPECT_EQ(fp8["weight_scales"], "per-channel");
  EXPECT_TRUE(fp8["bytes_by_dtype"].contains("F8_E4M3"));
  const std::string bf16 = synth(dir, "bf16", "bf16");
  const json plain = json::parse(run_cli({"inspect", bf16, "--json"}).out);
  const json online = json::parse(run_cli({"inspect", bf16, "--json", "--quantize", "fp8"}).out);
  EXPECT_EQ(online["quantization"], "fp8-online");
  EXPECT_LT(online["decode_bytes_per_step"], plain["decode_bytes_per_step"]);
  EXPECT_EQ(online["weight_bytes"], plain["weight_bytes"]);  // the checkpoint is unchanged
}

// The architectures' extras and where a tied matrix is stored, with parameter counts from the
// safetensors files (numpy: 26912, 41184 and 26784 elements; each tied matrix is stored once).
TEST(CliInspect, QwenExtrasAndTiedTensorName) {
  auto inspect = [](const std::string& name) {
    const auto r = run_cli({"inspect", bestofn::test::source_path("tests/data/engine/" + name).string(), "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  };
  const json q2 = inspect("tiny-qwen2"), q3 = inspect("tiny-qwen3"), tied = inspect("tiny-tied-as-lm-head");
  EXPECT_EQ(q2["architecture"], "Qwen2ForCausalLM");
  EXPECT_EQ(q2["qkv_bias"], true);
  EXPECT_EQ(q2["qk_norm"], false);
  EXPECT_EQ(q2["tied_tensor"], "model.embed_tokens.weight");
  EXPECT_EQ(q2["parameters"], 26912);
  EXPECT_EQ(q3["architecture"], "Qwen3ForCausalLM");
  EXPECT_EQ(q3["qkv_bias"], false);
  EXPECT_EQ(q3["qk_norm"], true);
  EXPECT_EQ(q3["head_dim"], 16);
  EXPECT_EQ(q3["tied_tensor"], nullptr);
  EXPECT_EQ(q3["parameters"], 41184);
  EXPECT_EQ(tied["tied_tensor"], "lm_head.weight");
  EXPECT_EQ(tied["parameters"], 26784);
  EXPECT_TRUE(tied["unused_tensors"].empty());
  const auto text = run_cli({"inspect", bestofn::test::source_path("tests/data/engine/tiny-qwen3").string()});
  EXPECT_NE(text.out.find("attention extras         per-head q/k RMSNorm"), std::string::npos) << text.out;
}
