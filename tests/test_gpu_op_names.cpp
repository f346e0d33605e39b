// The GPU op table (tests/gpu_ops_table.h) against the sources, without a device: every launcher
// src/cuda/kernels.h declares has a row, every row a launcher, and every row's test exists in the
// file it names. A plain unit test, so that CI sees a launcher added without a CPU comparison.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gpu_ops_table.h"
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

// The launchers: every `void <name>_cuda(` declaration (the helpers beside them return sizes or
// flags, and are not ops).
std::set<std::string> declared_launchers() {
  const std::string header = read_source("src/cuda/kernels.h");
  const std::regex launcher(R"(\bvoid\s+(\w+_cuda)\s*\()");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), launcher); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1].str());
  return names;
}

TEST(GpuOpNames, EveryLauncherHasARowAndEveryRowALauncher) {
  const std::set<std::string> declared = declared_launchers();
  ASSERT_FALSE(declared.empty()) << "no launcher found in src/cuda/kernels.h";
  std::set<std::string> rows;
  for (const test::GpuOpRow& row : test::kGpuOps) EXPECT_TRUE(rows.insert(row.launcher).second) << row.launcher << ": two rows";
  for (const std::string& name : declared)
    EXPECT_TRUE(rows.count(name)) << name << " (src/cuda/kernels.h) has no row in tests/gpu_ops_table.h: add one with its CPU twin";
  for (const std::string& name : rows) EXPECT_TRUE(declared.count(name)) << name << ": a row for a launcher kernels.h does not declare";
}

TEST(GpuOpNames, EveryRowNamesATestThatExists) {
  for (const test::GpuOpRow& row : test::kGpuOps) {
    const std::string test = row.test;
    const std::size_t dot = test.find('.');
    ASSERT_NE(dot, std::string::npos) << row.launcher << ": test '" << test << "' is not Suite.Name";
    const std::string declaration = "TEST(" + test.substr(0, dot) + ", " + test.substr(dot + 1) + ")";
    EXPECT_NE(read_source(std::string("tests/") + row.file).find(declaration), std::string::npos)
        << row.launcher << ": tests/" << row.file << " has no " << declaration;
    EXPECT_NE(std::string(row.twin), "") << row.launcher;
    EXPECT_NE(std::string(row.tolerance), "") << row.launcher;
  }
}

}  // namespace
}  // namespace bestofn
