#pragma once
// A sandbox uid that no one else has: leased from a range that no host account or process uses,
// one per verifier worker, held by a lock file for as long as the worker lives. Two bestofn runs
// at once, or two Sandbox objects in one process, never get the same uid; and no host daemon runs
// as it (nobody, 65534, the old choice, is the uid of many), so /proc/<pid>, signals, ptrace and
// RLIMIT_NPROC of a candidate never reach anything but its own worker's processes.
#include <string>

namespace bestofn {

class UidLease {
 public:
  UidLease() = default;
  UidLease(UidLease&& o) noexcept : uid_(o.uid_), fd_(o.fd_) { o.fd_ = -1; }
  UidLease& operator=(UidLease&& o) noexcept;
  UidLease(const UidLease&) = delete;
  UidLease& operator=(const UidLease&) = delete;
  ~UidLease();
  // A uid of [base, base + count), tried from a random place in it, that is mapped in this user
  // namespace (as uid and gid), whose lock is free, with no account (user or group) and no
  // process running under it (real, effective, saved or filesystem uid, among the processes this
  // PID namespace shows). Locks live in /run/bestofn/uids (root's), else /tmp/bestofn-uids: two
  // containers with their own /run can still meet on one uid (the random start makes it rare).
  // Throws Error naming why none is free.
  static UidLease acquire(unsigned base, unsigned count);
  bool held() const { return fd_ >= 0; }
  unsigned uid() const { return uid_; }

 private:
  unsigned uid_ = 0;
  int fd_ = -1;
};

// Whether any process on this host (as /proc shows it) has `uid` as a real, effective, saved or
// filesystem uid.
bool uid_has_processes(unsigned uid);

}  // namespace bestofn
