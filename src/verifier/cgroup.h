#pragma once
// A cgroup per verifier worker that holds every process of its sandbox (the zygote and each
// candidate with all it forks, or the fresh path's candidate): memory.max (RAM and tmpfs pages,
// no swap) and pids.max bound what a candidate's processes hold together, where the per-process
// RLIMIT_AS alone let 64 processes hold 64 GiB. cgroup v2 (the memory controller, and pids where
// it is there, delegated to the cgroup bestofn runs in: the new ones made beside it) or v1 (the
// memory and pids hierarchies: the new ones made below bestofn's own). The sandbox's first process moves itself in, through
// cgroup.procs files opened here, before it runs anything else.
#include <cstdint>
#include <string>

namespace bestofn {

struct CgroupSupport {
  enum class Version { None, V1, V2 };
  Version version = Version::None;
  std::string v2_parent;                          // v2: where worker cgroups are made
  std::string v1_memory_parent, v1_pids_parent;   // v1: the same per hierarchy (pids may be empty)
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
  // Makes "bestofn-<pid>-<serial>-w<worker>" with the limits. Throws Error naming the file.
  static WorkerCgroup create(const CgroupSupport& support, int worker, std::uint64_t memory_max, int pids_max);
  // cgroup.procs files (opened write-only, close-on-exec) into which a process writes "0" to
  // move itself in; -1 where unused.
  int procs_fd(int i) const { return fds_[i]; }
  const std::string& memory_dir() const { return memory_dir_; }
  // The most memory the cgroup has held (v2 memory.peak, v1 memory.max_usage_in_bytes); 0 if unknown.
  std::uint64_t peak_bytes() const;
  bool active() const { return !memory_dir_.empty(); }

 private:
  std::string memory_dir_, pids_dir_;  // v2: one directory, in memory_dir_
  int fds_[2] = {-1, -1};
  int locks_[2] = {-1, -1};  // the directories, flocked while the worker lives (stale ones are not)
  bool v2_ = false;
  void release();
};

}  // namespace bestofn
