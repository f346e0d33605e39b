// The CUDA flags of generate, eval and bench: one declaration (bestofn/backends/cuda_paths.h's
// switches, src/cli/model_flags.cpp's add_cuda_flags), so the same flags with the same help on all
// three; --cuda-path's names; the usage errors (a bad name, any CUDA flag with --device cpu, a
// knob without the path it changes); --version naming the device run the defaults come from.
#include "bestofn/backends/cuda_paths.h"
#include "test_cli_util.h"

namespace {

// The CUDA flags every one of the three commands has (the names scripts use).
const std::vector<std::string> kCudaFlags = {"--cuda-path",       "--cuda-prefix-gemm", "--fused-qkv",       "--gemm-autotune",
                                             "--paged-kv",        "--kv-blocks",        "--device-sampling", "--split-attention",
                                             "--cuda-graphs",     "--cascade-attention", "--small-m-linear", "--small-m-split",
                                             "--small-m-blocks-per-sm", "--small-m-pdl"};

// A command's --help, option by option: the flag's first name -> its entry (the flag line and the
// lines of help under it), each flag once.
std::map<std::string, std::string> help_entries(const std::string& command) {
  const auto r = run_cli({command, "--help"});
  EXPECT_EQ(r.exit_code, 0) << command;
  std::map<std::string, std::string> out;
  std::istringstream in(r.out);
  std::string flag;
  for (std::string line; std::getline(in, line);) {
    const std::size_t at = line.find_first_not_of(' ');
    if (at != std::string::npos && at > 4 && !flag.empty()) {  // the help column: the entry goes on
      out[flag] += "\n" + line;
      continue;
    }
    if (at != 2 || line[at] != '-') {  // anything else (a blank line, the footer) ends it
      flag.clear();
      continue;
    }
    flag = line.substr(at, line.find_first_of(" ,", at) - at);
    EXPECT_EQ(out.count(flag), 0u) << command << ": " << flag << " twice";
    out[flag] = line;
  }
  return out;
}

}  // namespace

TEST(CliCudaFlags, DeclaredOnceWithTheSameHelpOnGenerateEvalAndBench) {
  const auto generate = help_entries("generate"), eval = help_entries("eval"), bench = help_entries("bench");
  for (const std::string& flag : kCudaFlags) {
    ASSERT_TRUE(generate.count(flag)) << flag;
    EXPECT_EQ(eval.count(flag) ? eval.at(flag) : "(none)", generate.at(flag)) << flag;
    EXPECT_EQ(bench.count(flag) ? bench.at(flag) : "(none)", generate.at(flag)) << flag;
  }
  // No CUDA flag besides them, on any of the three (a flag declared for one command alone).
  for (const auto* entries : {&generate, &eval, &bench})
    for (const auto& [flag, entry] : *entries) {
      const bool cuda = entry.find(" CUDA:") != std::string::npos || entry.find(" CUDA, ") != std::string::npos ||
                        entry.find(" CUDA --") != std::string::npos || entry.find("CUDA engine path") != std::string::npos;
      if (cuda) {
        EXPECT_NE(std::find(kCudaFlags.begin(), kCudaFlags.end(), flag), kCudaFlags.end()) << flag << ": " << entry;
      }
    }
  // --cuda-path teaches its names, each with what it is.
  const std::string& path = generate.at("--cuda-path");
  for (const char* name : {"auto (", "reference: ", "graphs: ", "prefix-gemm: ", "cascade: ", "small-m: "})
    EXPECT_NE(path.find(name), std::string::npos) << name << " not in " << path;
}

TEST(CliCudaFlags, BadPathsAndCudaFlagsOnTheCpuAreUsageErrors) {
  const std::vector<std::vector<std::string>> commands = {{"generate", "--model", "/nonexistent", "--prompt", "x"},
                                                          {"eval", "--model", "/nonexistent"},
                                                          {"bench", "--synthetic", "tiny"}};
  for (const auto& command : commands) {
    auto with = [&](std::initializer_list<std::string> more) {
      auto args = command;
      args.insert(args.end(), more);
      return args;
    };
    expect_failure(with({"--cuda-path", "turbo"}), 2, {"--cuda-path", "turbo", "prefix-gemm"});
    expect_failure(with({"--device", "cpu", "--cuda-path", "graphs"}), 2, {"--cuda-path", "--device is cpu"});
    // Even auto: on the CPU engine it changes nothing.
    expect_failure(with({"--device", "cpu", "--cuda-path", "auto"}), 2, {"--cuda-path", "--device is cpu"});
    expect_failure(with({"--device", "cpu", "--fused-qkv"}), 2, {"--fused-qkv", "--device is cpu"});
    // No paged KV to size; no --small-m-linear to change.
    expect_failure(with({"--device", "cuda", "--kv-blocks", "8"}), 2, {"--kv-blocks", "--paged-kv", "prefix-gemm or cascade"});
    expect_failure(with({"--device", "cuda", "--small-m-pdl"}), 2, {"--small-m-pdl", "add --small-m-linear", "--cuda-path small-m"});
  }
  // bench's --device is cpu by default.
  expect_failure({"bench", "--synthetic", "tiny", "--cuda-path", "graphs"}, 2, {"--cuda-path", "--device is cpu"});
  // A path that pages the KV takes --kv-blocks, and small-m takes its knobs: past the usage checks
  // (without a device, --device cuda then fails to start: exit 1).
  for (const std::vector<std::string>& ok : {std::vector<std::string>{"--cuda-path", "prefix-gemm", "--kv-blocks", "8"},
                                             {"--cuda-path", "small-m", "--small-m-split", "--small-m-blocks-per-sm", "3"}}) {
    std::vector<std::string> args = {"bench", "--synthetic", "tiny", "--device", "cuda", "--n", "1", "--steps", "1", "--prompt-len", "4"};
    args.insert(args.end(), ok.begin(), ok.end());
    const auto r = run_cli(args);
    EXPECT_NE(r.exit_code, 2) << ok[1] << ": " << r.err;
  }
}

TEST(CliCudaFlags, VersionNamesTheDefaultsRunAndAutoOnTheCpuNamesThePath) {
  const auto v = run_cli({"--version"});
  ASSERT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("CUDA defaults: " + bestofn::cuda_defaults_source()), std::string::npos) << v.out;
  if (v.out.find("devices:") != std::string::npos) GTEST_SKIP() << "a CUDA device is visible: auto runs the CUDA engine";
  bestofn::test::TempDir dir;
  const std::string m = synth_with_tokenizer(dir);
  const auto r = run_cli({"generate", "--model", m, "--prompt", "x", "-n", "1", "--max-new-tokens", "1", "--cuda-path", "prefix-gemm",
                          "--kv-blocks", "8", "--gemm-autotune"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ignores --cuda-path prefix-gemm, --gemm-autotune, --kv-blocks 8"), std::string::npos) << r.err;
}
