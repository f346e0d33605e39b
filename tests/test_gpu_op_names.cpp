// The GPU op table against the sources, without a device: the launcher list (tests/gpu_op_names.h)
// against the launchers src/cuda/kernels.h declares, and against the rows of the op table in
// tests/test_gpu_ops.cpp (read as text: that file needs CUDA to build). A plain unit test, so that
// CI sees a launcher added without a CPU comparison, or a row dropped.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gpu_op_names.h"
#include "test_util.h"

namespace bestofn {
namespace {

std::string read_source(const std::string& rel) {
  std::ifstream in(test::source_path(rel));
  EXPECT_TRUE(in) << rel << ": cannot read";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every first capture of `pattern` in `text`.
std::set<std::string> captures(const std::string& text, const std::regex& pattern) {
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1].str());
  return names;
}

std::set<std::string> listed_launchers() {
  std::set<std::string> names;
  for (std::string_view name : test::kGpuOpLaunchers) EXPECT_TRUE(names.emplace(name).second) << name << ": listed twice";
  return names;
}

// Each name of `want` in `have` and each of `have` in `want`, with the message for either miss.
void expect_same(const std::set<std::string>& want, const std::set<std::string>& have, const std::string& missing,
                 const std::string& extra) {
  for (const std::string& name : want) EXPECT_TRUE(have.count(name)) << name << missing;
  for (const std::string& name : have) EXPECT_TRUE(want.count(name)) << name << extra;
}

// The launchers: every `void <name>_cuda(` declaration (the helpers beside them return sizes or
// flags, and are not ops).
TEST(GpuOpNames, EveryLauncherIsListedAndEveryListedNameALauncher) {
  const std::set<std::string> declared = captures(read_source("src/cuda/kernels.h"), std::regex(R"(\bvoid\s+(\w+_cuda)\s*\()"));
  ASSERT_FALSE(declared.empty()) << "no launcher found in src/cuda/kernels.h";
  expect_same(declared, listed_launchers(),
              " (src/cuda/kernels.h) is not in tests/gpu_op_names.h: list it and add its row to tests/test_gpu_ops.cpp",
              " (tests/gpu_op_names.h) is not a launcher src/cuda/kernels.h declares");
}

// The rows: each `{"<name>_cuda",` that opens an entry of kRows.
TEST(GpuOpNames, EveryListedLauncherHasARowInTheTable) {
  const std::string source = read_source("tests/test_gpu_ops.cpp");
  const std::size_t begin = source.find("const OpRow kRows[] = {");
  ASSERT_NE(begin, std::string::npos) << "tests/test_gpu_ops.cpp: no kRows table";
  const std::size_t end = source.find("\n};", begin);
  ASSERT_NE(end, std::string::npos) << "tests/test_gpu_ops.cpp: kRows does not end";
  const std::set<std::string> rows = captures(source.substr(begin, end - begin), std::regex(R"(\{\"(\w+_cuda)\",)"));
  expect_same(listed_launchers(), rows, " (tests/gpu_op_names.h) has no row in kRows of tests/test_gpu_ops.cpp",
              ": a row of tests/test_gpu_ops.cpp for a launcher tests/gpu_op_names.h lacks");
}

}  // namespace
}  // namespace bestofn
