// Fault tests: the disk filling up while results are written, a candidate that fills its temporary
// space, and a long verification run that must not leak fds, processes or memory.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/eval/datasets.h"
#include "bestofn/verifier/sandbox.h"
#include "bestofn/util/text_file.h"
#include "bestofn/eval/verify_jobs.h"
#include "test_util.h"
#include "verifier/sanitizer.h"

namespace fs = std::filesystem;
using bestofn::test::run_cli;
using bestofn::test::TempDir;
using nlohmann::json;

namespace {

// A failed write: exit 1, one line naming the output file and the reason, and neither the output
// nor its .partial left behind.
void expect_write_failure(const bestofn::test::CliResult& r, const fs::path& out, const std::string& reason) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find(out.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "a partial output was presented as complete";
  EXPECT_TRUE(bestofn::test::partial_files(out).empty()) << "the partial output was left behind";
}

// 40 HumanEval samples (canonical solutions, each with 1 KB of padding that score keeps in its
// results): about 60 KB of results, far more than the space the tests leave.
fs::path write_samples(const TempDir& dir) {
  const auto problems = bestofn::load_dataset("humaneval", bestofn::test::shared_path("data"));
  std::ofstream out(dir / "samples.jsonl");
  for (std::size_t i = 0; i < 40; ++i)
    out << json{{"task_id", problems[i].task_id}, {"completion", problems[i].canonical_solution}, {"pad", std::string(1024, 'x')}}.dump()
        << "\n";
  return dir / "samples.jsonl";
}

std::string synth_model(const TempDir& dir) {
  const std::string m = (dir / "m").string();
  const auto r = run_cli({"make-synthetic", "--shape", "tiny", "--dtype", "f32", "--seed", "1", "--out", m, "--tokenizer",
                          bestofn::test::require_shared("tokenizers/llama3").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return m;
}

std::vector<std::string> score_args(const fs::path& samples, const fs::path& out) {
  return {"score", samples.string(), "--data-dir", bestofn::test::shared_path("data").string(), "--out", out.string(), "--workers", "2"};
}

std::vector<std::string> generate_args(const std::string& model, const fs::path& out) {
  return {"generate", "--model", model, "--prompt", "def fib(n):", "-n", "48", "--max-new-tokens", "48", "--temperature", "1",
          "--seed", "2", "--out", out.string()};
}

// A small tmpfs mounted for the test (root only), unmounted when it ends.
class SmallDisk {
 public:
  explicit SmallDisk(const fs::path& at) : at_(at) {
    fs::create_directories(at);
    if (geteuid() != 0) {
      why_ = "not root: cannot mount a small tmpfs";
      return;
    }
    if (mount("tmpfs", at.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=8k") != 0) {
      why_ = std::string("mount tmpfs failed: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~SmallDisk() {
    if (mounted_) umount2(at_.c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }

 private:
  fs::path at_;
  bool mounted_ = false;
  std::string why_;
};

// Files written by this process and its children are limited to `bytes` (soft limit; SIGXFSZ is
// ignored, so a write past it fails with EFBIG, as on a full disk). Restored on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = saved_;
    lim.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace

TEST(DiskFull, ScoreOnAFullTmpfsFailsCleanly) {
  TempDir dir;
  const fs::path samples = write_samples(dir);
  SmallDisk disk(dir / "disk");
  if (!disk.ok()) GTEST_SKIP() << disk.why() << " (DiskFull.*InjectedWriteFailure covers this without root)";
  const fs::path out = dir / "disk" / "results.jsonl";
  expect_write_failure(run_cli(score_args(samples, out)), out, "No space left on device");
}

TEST(DiskFull, GenerateOnAFullTmpfsFailsCleanly) {
  TempDir dir;
  const std::string model = synth_model(dir);
  SmallDisk disk(dir / "disk");
  if (!disk.ok()) GTEST_SKIP() << disk.why() << " (DiskFull.*InjectedWriteFailure covers this without root)";
  const fs::path out = dir / "disk" / "samples.jsonl";
  expect_write_failure(run_cli(generate_args(model, out)), out, "No space left on device");
}

namespace {

// The command fails cleanly while files are limited to `limit` bytes, then succeeds with room.
void expect_injected_failure_then_success(const std::vector<std::string>& args, const fs::path& out, rlim_t limit) {
  bestofn::test::CliResult r;
  {
    FileSizeLimit small(limit);
    r = run_cli(args);
  }
  expect_write_failure(r, out, "File too large");
  const auto ok = run_cli(args);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_GT(fs::file_size(out), limit);
}

}  // namespace

TEST(DiskFull, ScoreInjectedWriteFailure) {
  TempDir dir;
  const fs::path samples = write_samples(dir), out = dir / "results.jsonl";
  expect_injected_failure_then_success(score_args(samples, out), out, 8192);
  std::istringstream lines(bestofn::read_text_file(out));
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) EXPECT_TRUE(json::parse(line)["passed"].get<bool>()) << line;
  EXPECT_EQ(n, 40);
}

TEST(DiskFull, GenerateInjectedWriteFailure) {
  TempDir dir;
  const std::string model = synth_model(dir);
  const fs::path out = dir / "samples.jsonl";
  expect_injected_failure_then_success(generate_args(model, out), out, 4096);
}

// bestofn's handler for fatal signals removes its partial output files. The sandbox's children
// start from a copy of bestofn before they exec, so one that meets such a signal there must not
// run that handler: here each child writes its 100 KB program under bestofn's own file size limit
// (ulimit -f 64), with SIGXFSZ at its default in bestofn. The candidate is a sandbox error (the
// child's failed write, not a death by the signal that would pass for the candidate's), and the
// results file (a few hundred bytes) is still written whole. In the full sandbox the child writes after
// its own mounts, where bestofn's files are out of its reach, so as root the run drops to nobody
// (setpriv), which is the degraded sandbox of an unprivileged CI runner: there the handler, before
// clone_trampoline, unlinked the partial file ("cannot rename into place").
TEST(SignalFaults, ASandboxChildsSignalLeavesBestofnsPartialOutputAlone) {
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all);  // nobody writes the results here
  const fs::path data = dir / "big_test.jsonl", samples = dir / "s.jsonl", out = dir / "results.jsonl";
  std::ofstream(data) << json{{"task_id", "Big/0"}, {"prompt", "def f():\n"}, {"canonical_solution", "    return 1\n"},
                              {"entry_point", "f"}, {"test", "def check(c):\n    assert c() == 1\n" + std::string(100000, '#') + "\n"}}
                             .dump()
                      << "\n";
  std::ofstream(samples) << json{{"task_id", "Big/0"}, {"completion", "    return 1\n"}}.dump() << "\n";
  const std::string as_nobody = geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  const std::string bin = bestofn::test::bestofn_binary();
  if (!as_nobody.empty() && std::system((as_nobody + "'" + bin + "' --version > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "cannot run " << bin << " as nobody (setpriv missing, or the build directory is private)";
  const std::string cmd = "ulimit -c 0 && ulimit -f 64 && exec " + as_nobody + "'" + bin + "' score '" + samples.string() + "' --dataset '" +
                          data.string() + "' --no-zygote --k 1 --out '" + out.string() + "' > /dev/null 2> '" + (dir / "err").string() + "'";
  auto* const saved = std::signal(SIGXFSZ, SIG_DFL);  // as a shell leaves it (a Python parent ignores it)
  const int status = std::system(cmd.c_str());
  std::signal(SIGXFSZ, saved);
  const std::string err = bestofn::test::read_text(dir / "err");
  ASSERT_TRUE(WIFEXITED(status)) << status << ": " << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;  // the sandbox error
  ASSERT_TRUE(fs::exists(out)) << "the results file is gone: " << err;
  const auto rows = bestofn::test::read_jsonl(out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0]["result"].get<std::string>().starts_with("sandbox error")) << rows[0].dump();
  EXPECT_TRUE(bestofn::test::partial_files(out).empty());
}

// A candidate that writes until its temporary space is full gets a verdict (a failure naming the
// error) in bounded time, and the next candidate starts with an empty working directory.
TEST(SandboxFaults, CandidateFillingItsTemporarySpaceIsContained) {
  bestofn::SandboxLimits limits;
  limits.timeout_s = 20.0;
  const bestofn::Sandbox sandbox(limits);
  const std::string fill =
      "import os\n"
      "chunk = b'x' * (1 << 20)\n"
      "for i in range(1000):\n"  // files of 8 MB (under the file size limit) until the space runs out
      "    with open('fill_%d' % i, 'wb') as f:\n"
      "        for _ in range(8):\n"
      "            f.write(chunk)\n"
      "            f.flush()\n";
  const auto v = sandbox.run(fill);
  EXPECT_EQ(v.status, bestofn::Verdict::Status::Failed) << v.result;
  EXPECT_TRUE(v.result.find("No space left on device") != std::string::npos || v.result.find("File too large") != std::string::npos)
      << v.result;
  EXPECT_LT(v.seconds, limits.timeout_s);
  // Nothing of it is left for the next candidate, which can use the space again.
  const auto next = sandbox.run(
      "import os\n"
      "assert not any(n.startswith('fill_') for n in os.listdir('.')), os.listdir('.')\n"
      "open('again', 'wb').write(b'y' * (4 << 20))\n");
  EXPECT_TRUE(next.passed()) << next.result << next.err;
}

namespace {

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Processes whose parent is this process.
int child_processes() {
  const std::string me = std::to_string(getpid());
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state, ppid;
    rest >> state >> ppid;
    n += ppid == me;
  }
  return n;
}

long rss_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

// 10,000 trivially short candidates through the verifier pool: open fds, child processes and RSS
// after the run are what they were after a warm-up of 100 (which starts any per-worker helpers).
TEST(VerifierFaults, TenThousandCandidatesLeakNothing) {
  bestofn::Problem p;
  p.task_id = "Fault/0";
  p.prompt = "def f():\n";
  p.test = "def check(candidate):\n    assert candidate() == 1\n";
  p.entry_point = "f";
  p.dataset = "humaneval";
  const bestofn::Sandbox sandbox;
  int next = 0;
  auto run = [&](int n) {
    std::vector<bestofn::VerifyRequest> reqs;
    // Distinct completions (identical ones would run once); every 10th fails.
    for (int i = 0; i < n; ++i, ++next) reqs.push_back({&p, p.prompt + "    return " + std::string(next % 10 ? "1" : "2") + "  # " + std::to_string(next) + "\n"});
    const auto verdicts = bestofn::verify_requests(sandbox, reqs, 2);
    int passed = 0;
    for (const auto& v : verdicts) {
      ASSERT_NE(v.status, bestofn::Verdict::Status::SandboxError) << v.result;
      passed += v.passed();
    }
    EXPECT_EQ(passed, n - (n + 9) / 10);
  };
  run(100);
  const int fds = open_fds(), children = child_processes();
  const long rss = rss_kb();
  for (int batch = 0; batch < 10; ++batch) run(1000);
  EXPECT_EQ(next, 10100);
  EXPECT_LE(open_fds(), fds) << "open file descriptors grew";
  EXPECT_LE(child_processes(), children) << "child processes grew";
  // Freed memory may stay with the allocator; a leak of even 1 KB per candidate would show.
  // (Under AddressSanitizer freed memory sits in its quarantine, so RSS says nothing there;
  // LeakSanitizer checks for leaks at exit instead.)
#if !BESTOFN_ASAN
  EXPECT_LE(rss_kb(), rss + 8 * 1024) << "RSS grew from " << rss << " kB";
#else
  (void)rss;
#endif
}
