#pragma once
// A cgroup per verifier worker that holds every process of its sandbox (the zygote and each
// candidate with all it forks, or the fresh path's candidate): memory.max (RAM and tmpfs pages,
// no swap) and pids.max bound what a candidate's processes hold together, where the per-process
// RLIMIT_AS alone let 64 processes hold 64 GiB; and, where the cpu controller is there, cpu.max
// (one CPU by default), so that no candidate, by threads, sessions or forks, takes another
// worker's share of the CPUs. cgroup v2 (the memory controller, and pids and cpu where they are
// there, delegated to the cgroup bestofn runs in: the new ones made beside it) or v1 (the memory,
// pids and cpu hierarchies: the new ones made below bestofn's own). The sandbox's first process
// moves itself in, through cgroup.procs files opened here, before it runs anything else.
#include <cstdint>
#include <string>

namespace bestofn {

struct CgroupSupport {
  enum class Version { None, V1, V2 };
  Version version = Version::None;
  std::string v2_parent;                          // v2: where worker cgroups are made
  std::string v1_memory_parent, v1_pids_parent, v1_cpu_parent;  // v1: the same per hierarchy (pids, cpu may be empty)
  bool cpu = false;                               // a worker's CPU time can be bounded (v2: cpu in subtree_control)
  std::string why_not;                            // None: what is missing
  // Reads /proc/self/mountinfo and /proc/self/cgroup; removes the empty worker cgroups that
  // killed bestofn runs left (no run holds their lock).
  static CgroupSupport detect();
};

class WorkerCgroup {
 public:
  WorkerCgroup() = default;
  WorkerCgroup(WorkerCgroup&&) noexcept;
  WorkerCgroup& operator=(WorkerCgroup&&) noexcept;
  WorkerCgroup(const WorkerCgroup&) = delete;
  WorkerCgroup& operator=(const WorkerCgroup&) = delete;
  ~WorkerCgroup();  // removes its directories (every process in them must be gone)
  // Makes "bestofn-<pid>-<serial>-w<worker>" with the limits (cpus: CPU seconds per second, where
  // the cpu controller is there). Throws Error naming the file.
  static WorkerCgroup create(const CgroupSupport& support, int worker, std::uint64_t memory_max, int pids_max, double cpus);
  // cgroup.procs files (opened write-only, close-on-exec; i < kProcsFds) into which a process
  // writes "0" to move itself in; -1 where unused.
  static constexpr int kProcsFds = 3;
  int procs_fd(int i) const { return fds_[i]; }
  const std::string& memory_dir() const { return memory_dir_; }
  // The directory whose cpu.max (v2) or cpu.cfs_quota_us (v1) bounds the worker; "" if none.
  const std::string& cpu_dir() const { return cpu_dir_; }
  // The most memory the cgroup has held (v2 memory.peak, v1 memory.max_usage_in_bytes); 0 if unknown.
  std::uint64_t peak_bytes() const;
  bool active() const { return !memory_dir_.empty(); }

 private:
  std::string memory_dir_, pids_dir_, cpu_dir_;  // v2: one directory, in memory_dir_ (and cpu_dir_)
  int fds_[kProcsFds] = {-1, -1, -1};  // memory, pids, cpu (v1's separate hierarchies)
  int locks_[kProcsFds] = {-1, -1, -1};  // the directories, flocked while the worker lives (stale ones are not)
  bool v2_ = false;
  void release();
};

}  // namespace bestofn
