// The Sandbox: the host probes at start, the workers' uid leases and cgroups, and running one
// program on the zygote path or the fresh-interpreter path. (What a clone()d child does is in
// sandbox_child.cpp, the verdict's channel and streams in run_streams.cpp.)
// Just over 500 lines on purpose: the two start paths share the probes' results and the limits.
#include "bestofn/verifier/sandbox.h"

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

#include "bestofn/util/error.h"
#include "bestofn/util/utf8.h"
#include "cgroup.h"
#include "run_streams.h"
#include "sandbox_child.h"
#include "sandbox_root.h"
#include "uid_lease.h"
#include "write_all.h"

namespace bestofn {
namespace {

using sandbox_child::ChildArgs;
using sandbox_child::kNamespaces;
using sandbox_child::RootProbe;
using sandbox_child::run_probe;
using sandbox_child::spawn;
using sandbox_run::Channel;
using sandbox_run::drain;
using sandbox_run::Fds;
using sandbox_run::make_verdict;
using sandbox_io::write_all;

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
  const int ns = run_probe(sandbox_child::probe_child, kNamespaces, &probe);
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
  const int sc = run_probe(sandbox_child::seccomp_probe_child, 0, nullptr);
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
  if (cgroups_->version != CgroupSupport::Version::None && !cgroups_->cpu)
    missing_.push_back("a CPU bound per worker (no writable cpu controller): with --allow-processes, a candidate's processes in "
                       "sessions of their own can take other workers' CPU share");
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
      made->cgroup = WorkerCgroup::create(*cgroups_, static_cast<int>(w), limits_.sandbox_memory_bytes, limits_.processes + 1,
                                          limits_.cpus_per_worker);
    workers_[w] = std::move(made);
  }
  return *workers_[w];
}

unsigned Sandbox::uid_of(int worker) const { return drop_uid_ ? worker_for(worker).uid.uid() : 0; }

std::string Sandbox::memory_cgroup_of(int worker) const { return worker_for(worker).cgroup.memory_dir(); }

std::string Sandbox::cpu_cgroup_of(int worker) const { return worker_for(worker).cgroup.cpu_dir(); }

std::uint64_t Sandbox::memory_peak_of(int worker) const { return worker_for(worker).cgroup.peak_bytes(); }

Verdict Sandbox::run(const std::string& program, int worker, double timeout_s, std::size_t stdout_bytes) const {
  if (!(timeout_s > 0)) timeout_s = limits_.timeout_s;
  const std::size_t out_cap = stdout_bytes > 0 ? stdout_bytes : limits_.output_bytes;
  try {
    worker_for(worker);  // its uid and cgroup, made on its first run
  } catch (const std::exception& e) {  // no uid free, a cgroup refused: data, as every verdict
    return {Verdict::Status::SandboxError, std::string("sandbox error: ") + e.what(), "", "", 0};
  }
  return zygote_ ? run_zygote(program, worker, timeout_s, out_cap) : run_fresh(program, worker, timeout_s, out_cap);
}

Verdict Sandbox::run_fresh(const std::string& program, int worker, double timeout_s, std::size_t out_cap) const {
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
  for (int i = 0; i < WorkerCgroup::kProcsFds; ++i) a.cgroup_procs[i] = w.cgroup.procs_fd(i);
  a.namespaces = namespaces_;
  a.readonly = readonly_;
  a.root = minimal_root_ ? root_plan_.get() : nullptr;
  a.seccomp = seccomp_;
  a.no_new_process = seccomp_ && !limits_.new_processes;
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
    drain(fds, sinks, channel, guard, open_fds, out_cap, limits_.output_bytes);
  }
  kill(pid, SIGKILL);  // the init of the sandbox: every descendant dies with it
  if (!namespaces_) kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!fallback_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(fallback_dir, ec);
  }
  return make_verdict(out_s, err_s, channel, status_s, token, timed_out, st, t0, out_cap, limits_.output_bytes);
}

Verdict Sandbox::run_zygote(const std::string& program, int worker, double timeout_s, std::size_t out_cap) const {
  Worker& w = worker_for(worker);
  Zygote& z = w.zygote;
  std::lock_guard<std::mutex> lock(z.mu);
  if (z.unavailable) return run_fresh(program, worker, timeout_s, out_cap);
  const std::string tmpfs = tmpfs_options();
  ChildArgs start_args;
  start_args.python = python_.c_str();
  start_args.readonly = readonly_;
  start_args.root = minimal_root_ ? root_plan_.get() : nullptr;
  start_args.seccomp = seccomp_;
  start_args.tmpfs_options = tmpfs.c_str();
  for (int i = 0; i < WorkerCgroup::kProcsFds; ++i) start_args.cgroup_procs[i] = w.cgroup.procs_fd(i);
  if (z.pid < 0) {
    std::string why;
    if (!z.start(start_args, why)) {
      z.unavailable = true;
      spdlog::warn("verifier: worker {} could not start its zygote interpreter ({}); it starts one interpreter per candidate instead", worker,
                   why);
      return run_fresh(program, worker, timeout_s, out_cap);
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
                          std::to_string(nproc) + " " + (limits_.new_processes ? "1" : "0") + " " + hex;
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
    drain(fds, sinks, channel, guard, open_fds, out_cap, limits_.output_bytes);
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
  return make_verdict(out_s, err_s, channel, status_s, token, timed_out, st, t0, out_cap, limits_.output_bytes);
}

}  // namespace bestofn
