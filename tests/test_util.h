#pragma once
// Helpers shared by the tests: paths into ../shared, temporary directories, running the CLI.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace bestofn::test {

// <repo>/../shared/<rel> (or $BESTOFN_SHARED/<rel>). A missing file is a test failure that names
// it, never a silent pass: check the result with `ASSERT_TRUE(exists(...))` or use require_shared.
// On a checkout without ../shared that failure is reported as a skip (one line naming the file
// and how to get it; ctest's SKIP_REGULAR_EXPRESSION), except under BESTOFN_REQUIRE_TEST_DATA=1
// (.ci/run), where it stays a failure.
std::filesystem::path shared_path(const std::string& rel);
// Like shared_path, but throws std::runtime_error naming the file when it is missing.
std::filesystem::path require_shared(const std::string& rel);
// The real small model, SmolLM2-135M-Instruct as scripts/fetch_smollm2.sh converts it:
// $BESTOFN_SMOLLM2 or <repo>/.models/smollm2-135m-instruct; missing, as a missing shared file.
std::filesystem::path smollm2_path();
// <repo>/<rel>
std::filesystem::path source_path(const std::string& rel);

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// The built bestofn binary's path (for a test that needs a shell pipeline).
std::string bestofn_binary();
// Runs the built bestofn binary with `args` (no shell), stdin from `in` (/dev/null by default).
CliResult run_cli(const std::vector<std::string>& args, const std::filesystem::path& in = "/dev/null");
// Starts the binary in the background (stdout and stderr to the given files); the caller waits
// for (or kills) the returned pid.
int start_cli(const std::vector<std::string>& args, const std::filesystem::path& out, const std::filesystem::path& err,
              const std::filesystem::path& in = "/dev/null");

// A tiny synthetic model (make-synthetic --shape tiny --dtype bf16 with ../shared's Llama 3
// tokenizer), made once per seed per process in a directory that lives as long as the process.
std::filesystem::path tiny_synthetic_model(int seed);
// The rows of a JSONL file (throws on a line that is not JSON: a torn row fails the test).
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p);
// Rows keyed by (id field, "index"); a non-string id is keyed by its JSON text. A second row with
// the same key is a test failure.
std::map<std::pair<std::string, int>, nlohmann::json> rows_by_key(const std::vector<nlohmann::json>& rows, const char* id = "task_id");

// What an output written through a partial file left beside it: the names in out's directory
// that start with out's name + ".partial" (empty when nothing was left behind).
std::vector<std::string> partial_files(const std::filesystem::path& out);

std::string read_text(const std::filesystem::path& p);
void write_text(const std::filesystem::path& p, const std::string& text);
std::vector<std::uint8_t> read_bytes(const std::filesystem::path& p);
void write_bytes(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes);

// Seeded random floats, normal(0, stddev): fresh draws per (seed) so tests never run on zeros.
std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float stddev = 1.0f);

}  // namespace bestofn::test
