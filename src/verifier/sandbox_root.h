#pragma once
// The candidate's filesystem: a minimal root of its own, in the shape of bubblewrap's
// (--tmpfs / with read-only binds of what is needed, --proc /proc, --dev /dev). Built once per
// zygote (and once per candidate on the fresh path) inside the sandbox's new mount and PID
// namespaces, then made read-only but for /tmp, which the caller mounts after:
//   /usr (and /bin, /sbin, /lib, /lib64, ... as the host has them: links where the host's are
//        links, read-only binds where they are directories): the interpreter, its standard
//        library and the shared libraries; the interpreter's own prefix too if it lies elsewhere
//   /etc  only ld.so.cache and localtime
//   /dev  a tmpfs with null, zero, random, urandom (binds of the host's nodes), the fd links and
//         shm, a link to /tmp (POSIX shared memory: one tmpfs per candidate, not two)
//   /proc root's only (mode 0700): a candidate sees no procfs at all. A procfs of the sandbox's
//         own PID namespace is mounted inside, at kPrivateProc, for the setup that runs as root
//         (the zygote and its children before they drop to the worker's uid). Not even the
//         candidate's own /proc/self: its net/ files show host-wide counters that no namespace
//         scopes (sockstat's TCP memory and allocations, softnet_stat's every packet the host
//         handles), and a network namespace's own (snmp's OutNoRoutes, ...) would carry bits from
//         one candidate to the next. Beside it the zygote's spare and old /tmp mount points
//         (kZygoteDirs)
//   /tmp  an empty directory (the caller's tmpfs goes there)
// and nothing else: no /run, /var, /home, /root, /sys, no host socket file, no host /proc.
//
// The plan (paths, links, what to bind) is made by the parent, once; build() only makes system
// calls, without allocating: it runs in a clone()d child of a multithreaded process.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "private_proc.h"

namespace bestofn::sandbox_root {

struct Entry {
  enum class Kind { Dir, Bind, BindFile, Symlink, DevTmpfs, Proc };
  Kind kind;
  std::string path;    // in the new root, under the staging directory ("/tmp/usr")
  std::string source;  // the host path to bind, or a link's target
  mode_t mode = 0755;  // Dir
};

struct Plan {
  // Where the new root is put together before pivot_root: a tmpfs mounted over the host's /tmp
  // in the sandbox's own mount namespace (the host's /tmp does not change, and the candidate's
  // /tmp is another tmpfs, mounted later).
  std::string staging = "/tmp";
  std::vector<Entry> entries;  // in order: a directory before what goes in it
};

// The plan for this host, with `python` (the interpreter the sandbox runs) reachable in it.
Plan make_plan(const std::string& python);

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442  // the same number on every architecture (Linux 5.12)
#endif

// Every mount under `path` read-only, recursively: the sandbox namespace's copies only. 0 or an errno.
inline int readonly_tree(const char* path) {
  struct {
    std::uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr{0x1 /* MOUNT_ATTR_RDONLY */, 0, 0, 0};
  return syscall(SYS_mount_setattr, AT_FDCWD, path, 0x8000 /* AT_RECURSIVE */, &attr, sizeof attr) == 0 ? 0 : errno;
}

// Where the sandbox's own procfs is, under the root-only /proc (see above).
inline constexpr const char* kPrivateProc = BESTOFN_PRIVATE_PROC;
// The zygote's directories for renewing /tmp and /dev/shm (private_proc.h), made with the root.
inline constexpr const char* kZygoteDirs[] = {BESTOFN_SPARE_TMP, BESTOFN_OLD_TMP, BESTOFN_SPARE_SHM, BESTOFN_OLD_SHM};

// A procfs of the calling process's PID namespace at `path` (kPrivateProc, under a directory only
// root may enter): the zygote's setup reads and writes its /proc/sys/kernel/ns_last_pid and
// its children's /proc/self files through it. 0 or an errno.
inline int mount_proc(const char* path) {
  return mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0 ? 0 : errno;
}

// Builds the root in the calling process's (new, unshared) mount namespace and pivots into it;
// the old root is detached. 0, or an errno with *step naming what failed. The caller then mounts
// its tmpfs on /tmp.
inline int build(const Plan& plan, const char** step) {
  auto failed = [&](const char* what) {
    *step = what;
    return errno ? errno : EIO;
  };
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return failed("mount private");
  if (mount("tmpfs", plan.staging.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=0755") != 0)
    return failed("mount the root's tmpfs");
  for (const Entry& e : plan.entries) {
    const char* p = e.path.c_str();
    switch (e.kind) {
      case Entry::Kind::Dir:
        if (mkdir(p, e.mode) != 0 || chmod(p, e.mode) != 0) return failed("mkdir in the root");
        break;
      case Entry::Kind::Bind:
        if (mkdir(p, 0755) != 0) return failed("mkdir in the root");
        if (mount(e.source.c_str(), p, nullptr, MS_BIND | MS_REC, nullptr) != 0) return failed("bind a directory into the root");
        break;
      case Entry::Kind::BindFile: {
        const int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || close(fd) != 0) return failed("create a file in the root");
        if (mount(e.source.c_str(), p, nullptr, MS_BIND, nullptr) != 0) return failed("bind a file into the root");
        break;
      }
      case Entry::Kind::Symlink:
        if (symlink(e.source.c_str(), p) != 0) return failed("symlink in the root");
        break;
      case Entry::Kind::DevTmpfs:
        if (mkdir(p, 0755) != 0) return failed("mkdir /dev");
        if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755") != 0) return failed("mount /dev");
        break;
      case Entry::Kind::Proc:  // mounted last, see below
        if (mkdir(p, 0555) != 0) return failed("mkdir /proc");
        break;
    }
  }
  // pivot_root(".", "."): the old root ends up stacked on the new one, and is then detached.
  if (chdir(plan.staging.c_str()) != 0) return failed("chdir to the new root");
  if (syscall(SYS_pivot_root, ".", ".") != 0) return failed("pivot_root");
  if (umount2(".", MNT_DETACH) != 0) return failed("detach the old root");
  if (chdir("/") != 0) return failed("chdir /");
  if ((errno = readonly_tree("/")) != 0) {
    // Before Linux 5.12 (no mount_setattr): each mount made above, one by one. A bind's submounts
    // (a separate /usr/local, say) then keep their mode; their files' permissions still apply.
    if (mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
      return failed("make the root read-only");
    const std::size_t skip = plan.staging.size();
    for (const Entry& e : plan.entries) {
      if (e.kind == Entry::Kind::Dir || e.kind == Entry::Kind::Symlink || e.kind == Entry::Kind::Proc) continue;
      const unsigned long flags = e.kind == Entry::Kind::BindFile ? 0
                                  : e.kind == Entry::Kind::Bind ? MS_NOSUID | MS_NODEV
                                                                : MS_NOSUID | MS_NODEV | MS_NOEXEC;
      if (mount(nullptr, e.path.c_str() + skip, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, nullptr) != 0)
        return failed("make a mount of the root read-only");
    }
  }
  // The procfs of the calling process's PID namespace (the sandbox's init's), after the rest is
  // read-only: a process writes its own /proc/self files (the candidate's setup, its
  // oom_score_adj).
  for (const Entry& e : plan.entries)
    if (e.kind == Entry::Kind::Proc && (errno = mount_proc(e.path.c_str() + plan.staging.size())) != 0) return failed("mount /proc");
  errno = 0;
  return 0;
}

}  // namespace bestofn::sandbox_root
