#pragma once
// The sandbox's clone()d children: what each candidate's (or zygote's) first process does between
// clone() and exec (its cgroup, fds, session, namespaces' filesystem, rlimits, uid, filter), and
// the probes that find out at start what isolation this machine allows. The child only makes
// system calls: it must not allocate or take a lock, since clone() from a multithreaded process
// copies memory in which another thread may hold the malloc lock. Everything it needs is
// prepared by the parent in a ChildArgs.
#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>

#include "sandbox_root.h"

namespace bestofn::sandbox_child {

inline constexpr int kNamespaces = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC;

struct ChildArgs {
  const char* python = nullptr;
  const char* prog_path = nullptr;  // workdir + "/prog.py"
  const char* program = nullptr;
  std::size_t program_len = 0;
  const char* workdir = nullptr;  // "/tmp/work" inside the namespace, else a directory the parent made
  int out_w = -1, err_w = -1, token_w = -1, status_w = -1, token_r = -1;
  int cgroup_procs[3] = {-1, -1, -1};  // the worker cgroup's cgroup.procs files (WorkerCgroup::kProcsFds): the child moves itself in
  bool namespaces = false, drop_uid = false;
  bool readonly = false;  // without the minimal root: every mount read-only before the tmpfs mounts
  const sandbox_root::Plan* root = nullptr;  // the minimal root to build and pivot into (namespaces only)
  bool seccomp = false;   // install the filter (seccomp_filter.h)
  bool no_new_process = false;  // and the no-new-process one (forks and clones; not exec, which starts the interpreter)
  bool zygote = false;  // start the per-worker zygote (fd 3 = its socket, passed in token_w)
  uid_t uid = 0;
  rlim_t as = 0, cpu = 0, fsize = 0, nofile = 0, nproc = 0;
  const char* tmpfs_options = nullptr;
};

// What probe_child needs: the root to build, the interpreter to run in it, where to report.
struct RootProbe {
  const sandbox_root::Plan* plan;
  const char* python;
  int report_fd;
};

// clone() with a private stack; the child runs child_main (the candidate's or the zygote's
// setup) until it execs. The pid, or -1 with errno.
pid_t spawn(ChildArgs& args, int flags);

// Runs a probe child (clone() with `flags`) to its end: its exit status, or -1 if it could not
// start or did not exit normally (errno then says why, for a failed clone).
int run_probe(int (*child)(void*), int flags, void* arg);

// The namespace probe (arg: a RootProbe): 0 when the minimal root could be built and the
// interpreter runs in it, 10 when only a private mount tree with read-only mounts was possible,
// 11 when only a private mount tree, 2 when not even that, 12 or the interpreter's own status when
// it could not run in the root; what failed is on the probe's report pipe.
int probe_child(void* arg);

// The seccomp probe: exits 0 when the filter installs, else 10 + the errno.
int seccomp_probe_child(void*);

}  // namespace bestofn::sandbox_child
