// The zygote's loop and each candidate's setup, in C: a small shared object that bestofn embeds
// (generated/zygote_helper_so.h) and hands to the zygote interpreter on fd 5, which loads it with
// ctypes.PyDLL (the GIL stays held: the zygote has no other thread). The interpreter keeps what
// only it can do: run the program and write its exception's line (src/verifier/sandbox.cpp,
// kZygote). In Python, this loop and setup cost each candidate ~10% more CPU (the interpreter's
// own work, and the copy-on-write faults its object writes cause in the forked zygote).
//
// No C++ runtime: plain system calls and libc, no exceptions, no allocation in the zygote itself
// (the child mallocs the program, which the interpreter then copies).
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "private_proc.h"
#include "seccomp_filter.h"
#include "write_all.h"

extern "C" {

// Filled by bestofn_zygote_serve in the child; read by the interpreter (ctypes mirrors the layout).
struct bestofn_job {
  char* src;           // the program, malloc'd; freed by bestofn_zygote_enter
  unsigned long len;
  unsigned long as_extra;  // what the candidate may add to its address space
  unsigned uid;
  char token[72];  // this run's token and "\n", NUL-terminated
};

// The zygote's settings and the interpreter's fork hooks (PyOS_BeforeFork, PyOS_AfterFork_Parent,
// PyOS_AfterFork_Child: the same calls os.fork() makes, so at-fork handlers such as random's
// reseeding run).
struct bestofn_zygote {
  int sock;        // SOCK_SEQPACKET to bestofn
  int ipc_shared;  // the IPC namespace cannot hold objects; else each child unshares one
  int shm;         // /dev/shm is the zygote's own tmpfs
  const char* tmpfs_options;
  void (*before_fork)(void);
  void (*after_fork_parent)(void);
  void (*after_fork_child)(void);
};

int bestofn_zygote_serve(const bestofn_zygote* z, bestofn_job* job);
void bestofn_zygote_enter(bestofn_job* job);

}  // extern "C"

namespace {

using bestofn::sandbox_io::write_all;

// The child's setup-status pipe: the received fd until it is moved to 4.
int status_fd = 4;
// Whether this candidate may start processes (the request's 7th number): set in the child.
bool may_fork = false;

// A failed setup step in the child: "what: errno N" on the status pipe, exit 127.
[[noreturn]] void fail(const char* what) {
  char msg[160];
  const int n = std::snprintf(msg, sizeof msg, "zygote child setup: %s: errno %d", what, errno);
  if (n > 0 && write(status_fd, msg, static_cast<std::size_t>(n) < sizeof msg ? static_cast<std::size_t>(n) : sizeof msg - 1) < 0) {
  }
  _exit(127);
}

void set_limit(int resource, unsigned long value, const char* what) {
  const rlimit r{value, value};
  if (setrlimit(resource, &r) != 0) fail(what);
}

// The worker's tmpfs mounts that each candidate gets fresh: /tmp, and /dev/shm where it is the
// zygote's own (without the minimal root; in it /dev/shm is a link to /tmp). A fresh tmpfs, not
// the old one emptied: a tmpfs numbers its inodes on, so the next candidate's first file's inode
// would tell it how many files the last one made (a channel between candidates).
// Making a tmpfs (its superblock) and unmounting one (an RCU grace period) each cost a candidate
// ~100 us or more with every CPU busy, so neither is on the path between two candidates: the
// spare is mounted, and the old one unmounted, while the next candidate runs (prepare), and in
// between the two are only moved (renew: mount moves are cheap). The spare and old mount points
// are root's only (private_proc.h): no candidate reaches the spare before it is its /tmp.
struct Renewed {
  const char* path;
  const char* spare;
  const char* old;
  bool spare_ready, old_mounted;
};
Renewed renewed[2] = {{"/tmp", BESTOFN_SPARE_TMP, BESTOFN_OLD_TMP, false, false},
                      {"/dev/shm", BESTOFN_SPARE_SHM, BESTOFN_OLD_SHM, false, false}};

// While a candidate runs: the last one's mounts unmounted, the next one's made. False if a mount failed.
bool prepare(const bestofn_zygote* z) {
  bool ok = true;
  for (int i = 0; i < (z->shm ? 2 : 1); ++i) {
    Renewed& r = renewed[i];
    if (r.old_mounted) umount2(r.old, MNT_DETACH);
    r.old_mounted = false;
    if (!r.spare_ready) r.spare_ready = mount("tmpfs", r.spare, "tmpfs", MS_NOSUID | MS_NODEV, z->tmpfs_options) == 0;
    ok = ok && r.spare_ready;
  }
  return ok;
}

// After every process of the candidate is dead: the fresh mounts moved into place, the old ones
// aside. False if that failed (the zygote then exits, and bestofn starts a new one).
bool renew(const bestofn_zygote* z) {
  if (!prepare(z)) return false;  // a stray request aside, done while the candidate ran
  for (int i = 0; i < (z->shm ? 2 : 1); ++i) {
    Renewed& r = renewed[i];
    if (mount(r.path, r.old, nullptr, MS_MOVE, nullptr) != 0) return false;
    r.old_mounted = true;
    if (mount(r.spare, r.path, nullptr, MS_MOVE, nullptr) != 0) return false;
    r.spare_ready = false;
  }
  return true;
}

// Before each fork: the PID namespace's last pid back to 1 (the zygote), so that every candidate's
// main process is pid 2 and its threads 3, 4, ...: a candidate cannot tell the next one anything
// through the pids it used (every process of the last one is dead and reaped by then). Best
// effort: where the file cannot be written, pids count on.
int ns_last_pid = -2;  // its fd, opened on the first fork; -1 if it cannot be
void reset_pids() {
  if (ns_last_pid == -2) ns_last_pid = open(BESTOFN_PRIVATE_PROC "/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (ns_last_pid >= 0 && pwrite(ns_last_pid, "1", 1, 0) != 1) {
  }
}

// A unix socket left in this worker's network namespace once every process is gone: one that
// only sockets in flight hold (a candidate can send a socket's own fd through itself), with
// whatever fds it carries. Only the namespace's end frees it for certain, so the zygote exits.
bool unix_sockets_left() {
  const int fd = open(BESTOFN_PRIVATE_PROC "/self/net/unix", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n;
  int lines = 0;
  while (lines < 2 && (n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) lines += buf[i] == '\n';
  close(fd);
  return lines >= 2;  // the header, then a socket
}

// SIGKILL to every other process of the PID namespace (the zygote is its init), reaping each:
// returns once none is left.
void kill_all() {
  for (;;) {
    kill(-1, SIGKILL);
    if (waitpid(-1, nullptr, 0) < 0 && errno == ECHILD) return;
  }
}

// The candidate's child, as root: the program read in, fds 1-4 in place (stdout, stderr, token,
// setup status) and nothing above, the program in a new /tmp/work/prog.py, the rlimits but the
// address space's (bestofn_zygote_enter sets that one, once the interpreter holds the program).
void child_setup(const bestofn_zygote* z, bestofn_job* job, const int fds[5], const unsigned long nums[7]) {
  const int out_w = fds[0], err_w = fds[1], tok_w = fds[2], st_w = fds[3], prog = fds[4];
  status_fd = st_w;
  struct stat sb{};
  if (fstat(prog, &sb) != 0) fail("program size");
  std::size_t cap = static_cast<std::size_t>(sb.st_size) + 1, len = 0;
  char* src = static_cast<char*>(std::malloc(cap));
  if (!src) fail("program memory");
  for (;;) {
    if (len == cap) {
      char* bigger = static_cast<char*>(std::realloc(src, cap *= 2));
      if (!bigger) fail("program memory");
      src = bigger;
    }
    const ssize_t r = read(prog, src + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("read program");
    if (r == 0) break;
    len += static_cast<std::size_t>(r);
  }
  job->src = src;
  job->len = len;
  // Every received fd is above 3 (0-3 are the zygote's), and only the first can be 4: each
  // moves before its number is reused.
  if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0 || dup2(tok_w, 3) < 0 || dup2(st_w, 4) < 0) fail("stdio");
  status_fd = 4;
  if (syscall(SYS_close_range, 5U, ~0U, 0) != 0)
    for (int fd = 5; fd < 65536; ++fd) close(fd);
  // From this process, the program's main one (see kSetupHello).
  if (write(3, bestofn::sandbox_io::kSetupHello, bestofn::sandbox_io::kSetupHelloBytes) !=
      static_cast<ssize_t>(bestofn::sandbox_io::kSetupHelloBytes))
    fail("the verifier's channel");
  // A session of its own, and with it an autogroup of its own: the scheduler's share that one
  // candidate could otherwise lower (nice) or split (threads) for every later one of the worker.
  if (setsid() < 0) fail("setsid");
  // The first the kernel kills when the worker's cgroup runs out of memory (the zygote is -1000).
  const int oom = open(BESTOFN_PRIVATE_PROC "/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom < 0 || write(oom, "1000", 4) != 4 || close(oom) != 0) fail("oom_score_adj");
  if (!z->ipc_shared && unshare(CLONE_NEWIPC) != 0) fail("unshare ipc");
  if (mkdir("/tmp/work", 0700) != 0) fail("mkdir /tmp/work");
  const int p = open("/tmp/work/prog.py", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (p < 0 || !write_all(p, src, len) || close(p) != 0) fail("write program");
  const uid_t uid = static_cast<uid_t>(nums[0]);
  if (chown("/tmp/work", uid, uid) != 0) fail("chown /tmp/work");
  if (chdir("/tmp/work") != 0) fail("chdir");
  job->uid = static_cast<unsigned>(uid);
  job->as_extra = nums[1];
  set_limit(RLIMIT_CORE, 0, "rlimit core");
  set_limit(RLIMIT_CPU, nums[2], "rlimit cpu");
  set_limit(RLIMIT_FSIZE, nums[3], "rlimit fsize");
  set_limit(RLIMIT_NOFILE, nums[4], "rlimit nofile");
  set_limit(RLIMIT_NPROC, nums[5], "rlimit nproc");
  may_fork = nums[6] != 0;
}

// "R uid as_extra cpu fsize nofile nproc processes token" (see kZygote's protocol): false if malformed.
bool parse_request(const char* msg, unsigned long nums[7], char* token, std::size_t cap) {
  if (msg[0] != 'R' || msg[1] != ' ') return false;
  const char* p = msg + 2;
  for (int i = 0; i < 7; ++i) {
    char* end = nullptr;
    errno = 0;
    nums[i] = std::strtoul(p, &end, 10);
    if (end == p || *end != ' ' || errno != 0) return false;
    p = end + 1;
  }
  const std::size_t n = std::strlen(p);
  if (n == 0 || n + 2 > cap || std::strchr(p, ' ')) return false;
  std::memcpy(token, p, n);
  token[n] = '\n';
  token[n + 1] = '\0';
  return true;
}

}  // namespace

// Serves candidates, one at a time, until bestofn goes away. Returns 0 in each candidate's child
// (the job filled in); in the zygote, -1 when bestofn closed the socket (every candidate process
// killed first) and -2 when /tmp could not be renewed (bestofn then starts a new zygote).
int bestofn_zygote_serve(const bestofn_zygote* z, bestofn_job* job) {
  for (;;) {
    char msg[256];
    iovec iov{msg, sizeof msg - 1};
    alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(z->sock, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    msg[n] = '\0';
    int fds[8], nfds = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfds < 8; ++i)
          std::memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    unsigned long nums[7];
    if (nfds != 5 || !parse_request(msg, nums, job->token, sizeof job->token)) {
      for (int i = 0; i < nfds; ++i) close(fds[i]);
      continue;  // not a request (a stray "K" between candidates, say)
    }
    reset_pids();
    z->before_fork();
    const pid_t pid = fork();
    if (pid == 0) {
      z->after_fork_child();
      child_setup(z, job, fds, nums);
      return 0;
    }
    z->after_fork_parent();
    const bool prepared = prepare(z);  // while the candidate runs
    if (pid < 0) {
      char why[64];
      const int m = std::snprintf(why, sizeof why, "zygote fork: errno %d", errno);
      if (m > 0 && write(fds[3], why, static_cast<std::size_t>(m)) < 0) {
      }
    }
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    int status = 0;
    if (pid > 0) {
      const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
      for (bool done = false; !done;) {
        pollfd pf[2] = {{z->sock, POLLIN, 0}, {pidfd, POLLIN, 0}};
        if (poll(pf, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 2) < 0 && errno != EINTR) pf[0].revents = POLLHUP;
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
          char m[64];
          const ssize_t r = recv(z->sock, m, sizeof m, MSG_DONTWAIT);
          if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
            kill_all();
            return -1;
          }
          if (r > 0 && m[0] == 'K') kill(pid, SIGKILL);
        }
        done = waitpid(pid, &status, WNOHANG) == pid;
      }
      if (pidfd >= 0) close(pidfd);
    }
    kill_all();
    // Clean before the reply, so that the next candidate's clock (bestofn starts it at the
    // request) never pays for this one's leftovers; "restart" when this zygote must not serve
    // another (bestofn then starts a new one).
    const bool restart = !prepared || unix_sockets_left() || !renew(z);
    char reply[32];
    const int m = std::snprintf(reply, sizeof reply, restart ? "X %d restart" : "X %d", status);
    if (send(z->sock, reply, static_cast<std::size_t>(m), MSG_NOSIGNAL) != m) return -1;
    if (restart) return -2;
  }
}

// In the child, once the interpreter holds its own copy of the program: the address space limit
// (the child's size now plus the candidate's allowance), the worker's uid, no_new_privs, and the
// setup-status pipe closed (setup succeeded), and no new process from then on. (The first filter
// is the zygote's own, inherited.)
void bestofn_zygote_enter(bestofn_job* job) {
  std::free(job->src);
  job->src = nullptr;
  char buf[256];
  const int fd = open(BESTOFN_PRIVATE_PROC "/self/statm", O_RDONLY | O_CLOEXEC);
  const ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  if (n <= 0) fail("read statm");
  buf[n] = '\0';
  const unsigned long size = std::strtoul(buf, nullptr, 10) * static_cast<unsigned long>(sysconf(_SC_PAGESIZE));
  set_limit(RLIMIT_AS, size + job->as_extra, "rlimit as");
  const uid_t uid = job->uid;
  if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) fail("drop to the worker's uid");
  // A uid change without an exec leaves the process not dumpable: its own /proc/<pid> files
  // root's, its children out of its reach (hidepid). The fresh path's exec resets that; so here.
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) fail("dumpable");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("no_new_privs");
  // Last: no new process from here (seccomp_filter.h), unless the run allows them.
  if (!may_fork && (errno = bestofn::sandbox_filter::install_no_new_process(true)) != 0) fail("the no-new-process filter");
  close(4);
}
