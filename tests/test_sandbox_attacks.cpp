// Red-team cases against the verifier's sandbox, one per way a model-written program once reached
// the host (issue 30), each checked from the host's side: canary processes whose memory, open
// file and name must not change; a unix socket listener that must get nothing; marker files that
// must not appear; two runs that must not share a uid; a forking wrong program that must fail; a
// many-process memory hog that must stay under the stated bound. Both ways of starting a
// candidate (the worker's zygote and one interpreter per candidate) face each case.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <thread>

#include "bestofn/verifier/sandbox.h"

using namespace bestofn;

namespace {

// new_processes: candidates may start processes (--allow-processes).
SandboxLimits limits(bool zygote, bool new_processes = false) {
  SandboxLimits l;
  l.timeout_s = 5.0;
  l.zygote = zygote;
  l.new_processes = new_processes;
  return l;
}

#define REQUIRE_ISOLATION(s)                                                                                   \
  do {                                                                                                         \
    if (!(s).isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << (s).missing()[0];          \
  } while (0)

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A process on the host running as `uid`, as a daemon of that uid would: python3 holding a marker
// in its memory, a file open for writing (in the host's /var/tmp), a secret in its environment,
// and the name "bestofn-canary". report() asks it what became of them.
class Canary {
 public:
  Canary(unsigned uid, const std::string& tag) {
    file_ = "/var/tmp/bestofn-canary-" + std::to_string(getpid()) + "-" + tag;
    {
      std::ofstream(file_) << "original";
    }
    chown(file_.c_str(), uid, uid);
    chmod(file_.c_str(), 0600);
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
      const char* argv[] = {"python3", "-I", "-c",
                            "import sys\n"
                            "open('/proc/self/comm', 'w').write('bestofn-canary')\n"
                            "marker = bytearray(b'CANARY-MEMORY-' + b'A' * 50)\n"
                            "f = open(sys.argv[1], 'r+b')\n"
                            "print('ready', flush=True)\n"
                            "sys.stdin.readline()\n"
                            "f.seek(0)\n"
                            "print(bytes(marker).decode(), f.read().decode('utf-8', 'replace'),\n"
                            "      open('/proc/self/comm').read().strip(), flush=True)\n",
                            file_.c_str(), nullptr};
      const char* envp[] = {"BESTOFN_CANARY_SECRET=canary-env-7f3a9c", "PATH=/usr/bin:/bin", nullptr};
      execve("/usr/bin/python3", const_cast<char* const*>(argv), const_cast<char* const*>(envp));
      _exit(4);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
    char line[64] = {};
    ready_ = from_ && std::fgets(line, sizeof line, from_) && std::strcmp(line, "ready\n") == 0;
  }
  ~Canary() {
    if (to_ >= 0) close(to_);
    if (from_) std::fclose(from_);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    std::remove(file_.c_str());
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  // "<memory marker> <file content> <name>" as the canary sees them now.
  std::string report() {
    if (write(to_, "\n", 1) != 1) return "no canary";
    char line[256] = {};
    return std::fgets(line, sizeof line, from_) ? std::string(line) : "no answer";
  }
  static std::string untouched() { return "CANARY-MEMORY-" + std::string(50, 'A') + " original bestofn-canary\n"; }

 private:
  std::string file_;
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
  bool ready_ = false;
};

// Every host process the candidate can see in /proc: its name, command line and environment read,
// its name, memory (the canary's marker, found through maps), open files and root directory
// written to. Prints what it saw ("SEEN [...]") and read.
const std::string kProcAttack = R"PY(
import os
seen = []
try:
    names = os.listdir('/proc')
except PermissionError:
    names = []
for name in sorted(names):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    seen.append(name)
    for what in ('cmdline', 'environ', 'comm'):
        try:
            print(what, name, open('/proc/%s/%s' % (name, what), 'rb').read()[:300])
        except OSError:
            pass
    try:
        open('/proc/%s/comm' % name, 'w').write('pwned')
    except OSError:
        pass
    try:
        mem = open('/proc/%s/mem' % name, 'r+b', buffering=0)
        for line in open('/proc/%s/maps' % name).read().splitlines():
            span, perms = line.split()[:2]
            if 'w' not in perms:
                continue
            lo, hi = (int(x, 16) for x in span.split('-'))
            try:
                mem.seek(lo)
                i = mem.read(hi - lo).find(b'CANARY-MEMORY-')
                if i >= 0:
                    mem.seek(lo + i)
                    mem.write(b'PWNED!')
            except (OSError, ValueError, OverflowError):
                pass
    except OSError:
        pass
    try:
        for fd in os.listdir('/proc/%s/fd' % name):
            try:
                open('/proc/%s/fd/%s' % (name, fd), 'w').write('pwned')
            except OSError:
                pass
    except OSError:
        pass
    for d in ('var/tmp', 'tmp', 'dev/shm'):
        try:
            open('/proc/%s/root/%s/MARK' % (name, d), 'w').write('x')
        except OSError:
            pass
for d in ('/var/tmp', '/run', '/home', '/root', '/sys', '/etc/passwd'):
    print('exists', d, os.path.exists(d))
print('SEEN', seen)
try:
    print('PROC', os.listdir('/proc'))
except PermissionError:
    print('PROC refused')  # root's only: no procfs in view, not even its own namespace's
# Host-wide counters that a procfs of its own would show (sockstat's TCP memory, softnet_stat's
# packets), and its network namespace's own (snmp): none can be opened.
for f in ('/proc/self/net/sockstat', '/proc/net/softnet_stat', '/proc/self/net/snmp', '/proc/loadavg'):
    try:
        open(f).read()
        print('READ', f)
    except OSError:
        pass
)PY";

// A program that must pass on both start paths (its own asserts are the attack's checks), with
// candidates allowed to start processes or not.
void expect_passes_in_both_modes(const std::string& program, bool new_processes = false) {
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    const Sandbox s(limits(zygote, new_processes));
    REQUIRE_ISOLATION(s);
    const Verdict v = s.run(program);
    EXPECT_TRUE(v.passed()) << v.result << "\n" << v.err;
  }
}

}  // namespace

// Finding 1: the host's /proc. The candidate sees no procfs (since the second round: its own
// /proc/self/net showed host-wide counters): no host process, so nothing of a canary of its own
// uid or of nobody's.
TEST(SandboxAttacks, TheHostsProcIsOutOfReach) {
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    const Sandbox s(limits(zygote));
    REQUIRE_ISOLATION(s);
    const std::string mark = "bestofn-attack-" + std::to_string(getpid()) + (zygote ? "-z" : "-f");
    Canary same_uid(s.uid_of(0), "same"), nobody(65534, "nobody");
    ASSERT_TRUE(same_uid.ready() && nobody.ready());
    std::string attack = kProcAttack;
    for (std::size_t at; (at = attack.find("MARK")) != std::string::npos;) attack.replace(at, 4, mark);
    const Verdict v = s.run(attack);
    ASSERT_TRUE(v.passed()) << v.result << "\n" << v.err;
    EXPECT_NE(v.out.find("SEEN []"), std::string::npos) << v.out;  // not even the zygote
    EXPECT_NE(v.out.find("PROC refused"), std::string::npos) << v.out;
    EXPECT_EQ(v.out.find("READ"), std::string::npos) << v.out;
    for (const char* gone : {"/var/tmp", "/run", "/home", "/root", "/sys", "/etc/passwd"})
      EXPECT_NE(v.out.find(std::string("exists ") + gone + " False"), std::string::npos) << gone << "\n" << v.out;
    EXPECT_EQ(v.out.find("canary-env-7f3a9c"), std::string::npos);
    // The host's pid 1 (root): its command line is nowhere in what the candidate read.
    const std::string init_cmdline = read_file("/proc/1/cmdline");
    const std::string init_argv0 = init_cmdline.substr(0, init_cmdline.find('\0'));
    if (!init_argv0.empty()) {
      EXPECT_EQ(v.out.find(init_argv0), std::string::npos) << init_argv0;
    }
    EXPECT_EQ(same_uid.report(), Canary::untouched());
    EXPECT_EQ(nobody.report(), Canary::untouched());
    for (const char* dir : {"/var/tmp/", "/tmp/", "/dev/shm/"}) EXPECT_FALSE(std::filesystem::exists(dir + mark)) << dir;
  }
}

// Finding 2: unix sockets on the host. No host socket file is in the sandbox's root, and creating
// a unix socket other than a socket pair is refused (seccomp), so a listener in the host's
// /var/tmp and /tmp (mode 0777: any uid could connect) gets nothing, by path or through /proc.
TEST(SandboxAttacks, AHostUnixSocketGetsNothing) {
  const std::string stream_path = "/var/tmp/bestofn-attack-" + std::to_string(getpid()) + ".sock";
  const std::string dgram_path = "/tmp/bestofn-attack-" + std::to_string(getpid()) + ".dgram";
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int dgram = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  ASSERT_GE(dgram, 0);
  for (auto [fd, path] : {std::pair{listener, stream_path}, std::pair{dgram, dgram_path}}) {
    std::remove(path.c_str());
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
    chmod(path.c_str(), 0777);
  }
  ASSERT_EQ(listen(listener, 8), 0);
  const std::string program =
      "import os, socket\n"
      "paths = ['" + stream_path + "', '" + dgram_path + "', '/proc/1/root" + stream_path + "', '/run/docker.sock']\n"
      "for p in paths:\n"
      "    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):\n"
      "        try:\n"
      "            s = socket.socket(socket.AF_UNIX, kind)\n"
      "            raise AssertionError('socket(AF_UNIX) was allowed')\n"
      "        except PermissionError:\n"
      "            pass\n"
      // A socket pair's datagram end could name a path in sendto(): every pair but stream is
      // refused (SOCK_RAW on a unix socket is a datagram socket; seqpacket has no use here).
      "    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC):\n"
      "        try:\n"
      "            a, b = socket.socketpair(socket.AF_UNIX, kind)\n"
      "            raise AssertionError('a socket pair of type %d was allowed' % kind)\n"
      "        except PermissionError:\n"
      "            pass\n"
      // Ordinary programs keep socket pairs (multiprocessing's duplex pipes, asyncio's wake-up).
      "a, b = socket.socketpair()\n"
      "a.sendall(b'ok')\n"
      "assert b.recv(2) == b'ok'\n";
  expect_passes_in_both_modes(program);
  EXPECT_LT(accept(listener, nullptr, nullptr), 0);
  EXPECT_EQ(errno, EAGAIN);
  char buf[16];
  EXPECT_LT(recv(dgram, buf, sizeof buf, 0), 0);
  close(listener);
  close(dgram);
  std::remove(stream_path.c_str());
  std::remove(dgram_path.c_str());
}

// Beyond the five findings (the review of the change): no new user namespace (the cheapest way to
// the kernel's riskier parts), no socket family but IPv4 and IPv6 (vsock reaches a VM's host,
// which network namespaces do not isolate), and io_uring's back door to both is shut; threads
// work, and so do fork and subprocess where candidates may start processes.
TEST(SandboxAttacks, TheKernelsRiskierDoorsAreShut) {
  const std::string program =
      "import ctypes, errno, os, socket, threading, platform\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000\n"
      "assert libc.unshare(CLONE_NEWUSER) == -1 and ctypes.get_errno() == errno.EPERM\n"
      "assert libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == -1 and ctypes.get_errno() == errno.EPERM\n"
      "clone, io_uring_setup = {'x86_64': (56, 425), 'aarch64': (220, 425)}[platform.machine()]\n"
      // (clone with CLONE_NEWUSER: below, where processes are allowed; else any clone but a
      // thread's kills the program, AProgramCannotLearnTheAnswersFromItsChildren.)
      "assert libc.syscall(io_uring_setup, 8, None) == -1 and ctypes.get_errno() == errno.ENOSYS\n"
      "for family in (socket.AF_UNIX, 40, socket.AF_PACKET, socket.AF_NETLINK, 38):\n"  // 40 vsock, 38 alg
      "    try:\n"
      "        socket.socket(family, socket.SOCK_DGRAM if family == socket.AF_NETLINK else socket.SOCK_STREAM)\n"
      "        raise AssertionError('socket family %d allowed' % family)\n"
      "    except PermissionError:\n"
      "        pass\n"
      "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()\n"
      "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()\n"
      "out = []\n"
      "t = threading.Thread(target=lambda: out.append(1))\n"
      "t.start()\n"
      "t.join()\n"
      "assert out == [1]\n";
  expect_passes_in_both_modes(program);
  expect_passes_in_both_modes(program +
                                  "assert libc.syscall(clone, CLONE_NEWUSER | 17, 0, 0, 0, 0) == -1 and ctypes.get_errno() == errno.EPERM\n"
                                  // No tracer: a child that could ptrace the main process could hold its verdict.
                                  "child = os.fork()\n"
                                  "if child == 0:\n"
                                  "    ptrace = {'x86_64': 101, 'aarch64': 117}[platform.machine()]\n"
                                  "    r = libc.syscall(ptrace, 16, os.getppid(), 0, 0)\n"  // PTRACE_ATTACH
                                  "    os._exit(0 if r == -1 and ctypes.get_errno() == errno.EPERM else 1)\n"
                                  "assert os.waitpid(child, 0)[1] == 0, 'ptrace was allowed'\n"
                                  "import subprocess\n"
                                  "assert subprocess.run(['/usr/bin/python3', '-c', 'print(6 * 7)'], capture_output=True).stdout == b'42\\n'\n"
                                  "pid = os.fork()\n"
                                  "if pid == 0:\n"
                                  "    os._exit(3)\n"
                                  "assert os.waitpid(pid, 0)[1] == 3 << 8\n",
                              true);
}

// The second round's "host activity in view" (issue 45): a candidate cannot watch which files of
// the read-only /usr host processes open (inotify, fanotify), nor ask or steer the host's page
// cache through them (preadv2 with RWF_NOWAIT, mincore, cachestat, fadvise, readahead, madvise's
// COLD / PAGEOUT on a shared mapping); ordinary reads, mappings and malloc's advice still work.
TEST(SandboxAttacks, NoWatchingOrProbingWhatTheHostReads) {
  const std::string program =
      "import ctypes, errno, mmap, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "def refused(r, what):\n"
      "    assert r == -1 and ctypes.get_errno() == errno.EPERM, '%s: %r, errno %d' % (what, r, ctypes.get_errno())\n"
      "refused(libc.inotify_init1(0), 'inotify_init1')\n"
      "refused(libc.fanotify_init(0, 0), 'fanotify_init')\n"
      "path = os.path.realpath('/usr/bin/python3')\n"
      "fd = os.open(path, os.O_RDONLY)\n"
      "buf = bytearray(4096)\n"
      "try:\n"
      "    os.preadv(fd, [buf], 0, os.RWF_NOWAIT)\n"
      "    raise AssertionError('preadv2 with RWF_NOWAIT was allowed')\n"
      "except PermissionError:\n"
      "    pass\n"
      "assert os.preadv(fd, [buf], 0) == 4096 and buf[:4] == b'\\x7fELF'\n"
      "try:\n"
      "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
      "    raise AssertionError('fadvise was allowed')\n"
      "except PermissionError:\n"
      "    pass\n"
      "refused(libc.readahead(fd, ctypes.c_long(0), ctypes.c_size_t(1 << 20)), 'readahead')\n"
      "cachestat = 451\n"
      "refused(libc.syscall(cachestat, fd, None, None, 0), 'cachestat')\n"
      "m = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)\n"
      "vec = ctypes.create_string_buffer(1)\n"
      "libc.mmap.restype = ctypes.c_void_p\n"
      "base = libc.mmap(None, ctypes.c_size_t(4096), 1, 1, fd, ctypes.c_long(0))\n"  // PROT_READ, MAP_SHARED
      "refused(libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(4096), vec), 'mincore')\n"
      "for advice in (20, 21):\n"  // MADV_COLD, MADV_PAGEOUT
      "    try:\n"
      "        m.madvise(advice)\n"
      "        raise AssertionError('madvise %d was allowed' % advice)\n"
      "    except PermissionError:\n"
      "        pass\n"
      "m.madvise(mmap.MADV_DONTNEED)\n"
      "big = bytearray(64 << 20)\n"  // malloc's own mappings and their release still work
      "del big\n";
  expect_passes_in_both_modes(program);
}

// Finding 3: uids shared with the host and between runs. Each worker of each run leases a uid of
// its own, with no account and no process, held by a lock: a second run (here a second Sandbox,
// and another process) gets another, and when the range is used up a run says so rather than share.
// A candidate of one run cannot reach a candidate of the other running at the same time.
TEST(SandboxAttacks, ConcurrentRunsNeverShareAUid) {
  const Sandbox a(limits(false)), b(limits(false));
  REQUIRE_ISOLATION(a);
  const unsigned ua = a.uid_of(0), ub = b.uid_of(0), ua1 = a.uid_of(1);
  EXPECT_NE(ua, ub);
  EXPECT_NE(ua, ua1);
  EXPECT_NE(ub, ua1);
  for (unsigned u : {ua, ub, ua1}) {
    EXPECT_NE(u, 65534u);
    EXPECT_GE(u, SandboxLimits{}.uid_base);
    EXPECT_EQ(getpwuid(u), nullptr) << u;
  }
  // A range of one uid, already held by `a`: another run, in this process or another, gets none.
  SandboxLimits one = limits(false);
  one.uid_base = ua;
  one.uid_count = 1;
  const Sandbox c(one);
  const Verdict refused = c.run("pass\n");
  EXPECT_EQ(refused.status, Verdict::Status::SandboxError);
  EXPECT_NE(refused.result.find("no free sandbox uid"), std::string::npos) << refused.result;
  const pid_t other = fork();
  if (other == 0) {
    try {
      const Sandbox d(one);
      d.uid_of(0);
      _exit(0);  // got the uid `a` holds
    } catch (const std::exception&) {
      _exit(7);
    }
  }
  int st = 0;
  waitpid(other, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7) << st;
  // Run a's candidate holds a secret in its /tmp/work; b's looks for it everywhere it can.
  std::thread holder([&] {
    const Verdict v = a.run("import time\nopen('/tmp/work/secret', 'w').write('run-a-secret-51c2')\ntime.sleep(1.5)\n");
    EXPECT_TRUE(v.passed()) << v.result;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Verdict v = b.run(
      "import os\n"
      "found = []\n"
      "for root, dirs, files in os.walk('/'):\n"
      "    if root == '/':\n"
      "        dirs[:] = [d for d in dirs if d not in ('proc', 'usr')]\n"
      "    found += [os.path.join(root, f) for f in files if f == 'secret']\n"
      "try:\n"
      "    pids = os.listdir('/proc')\n"
      "except PermissionError:\n"  // no procfs in view (TheHostsProcIsOutOfReach)
      "    pids = []\n"
      "for pid in pids:\n"
      "    for where in ('root/tmp/work/secret', 'cwd/secret'):\n"
      "        if pid.isdigit() and os.path.exists('/proc/%s/%s' % (pid, where)):\n"
      "            found.append('/proc/%s/%s' % (pid, where))\n"
      "print('FOUND', found)\n");
  holder.join();
  EXPECT_TRUE(v.passed()) << v.result;
  EXPECT_NE(v.out.find("FOUND []"), std::string::npos) << v.out;
}

// Finding 4: a wrong program that forks at every call of the function under test, the child
// answering right and the parent wrong: only the all-children path gets through the tests. It
// fails, since only the program's main process may prove a pass. A program that forks and whose
// main process passes still passes; one whose children write to the channel fails. (Where
// candidates may start processes: by default none of these gets past its first fork, below.)
TEST(SandboxAttacks, AForkingWrongProgramFails) {
  const std::string check = "def check(f):\n    assert f(2) == 4\n    assert f(3) == 9\n    assert f(4) == 16\n\n";
  const std::string forking_wrong =
      "import os\n"
      "def sq(x):\n"
      "    if os.fork() == 0:\n"
      "        return x * x\n"
      "    os.wait()\n"
      "    return x + 1\n" + check + "check(sq)\n";
  const std::string forking_right =
      "import os\n"
      "def sq(x):\n"
      "    pid = os.fork()\n"
      "    if pid == 0:\n"
      "        os._exit(0)\n"
      "    os.waitpid(pid, 0)\n"
      "    return x * x\n" + check + "check(sq)\n";
  const std::string child_writes =
      "import os\n"
      "def sq(x):\n"
      "    return x * x\n" + check + "check(sq)\n"
      "if os.fork() == 0:\n"
      "    os.write(3, b'0123456789abcdef0123456789abcdef\\n')\n"
      "    os._exit(0)\n"
      "os.wait()\n";
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    const Sandbox s(limits(zygote, true));  // with processes refused, each of these fails at its first fork
    REQUIRE_ISOLATION(s);
    const Verdict wrong = s.run(forking_wrong);
    EXPECT_EQ(wrong.status, Verdict::Status::Failed) << wrong.result;
    const Verdict right = s.run(forking_right);
    EXPECT_TRUE(right.passed()) << right.result << right.err;
    const Verdict other = s.run(child_writes);
    EXPECT_EQ(other.status, Verdict::Status::Failed);
    EXPECT_EQ(other.result, "failed: the verifier's channel (fd 3) got writes other than the token from the program's main process");
  }
}

// The second round (issue 45): a wrong program that learns the answers from its children. At each
// call it forks; the child returns a spy whose __eq__ sends the value it is compared with (the
// expected one) back through a pipe and exits; the parent returns what it learned. Where
// candidates may start processes this passes (the limit --allow-processes documents, shown here so
// that the test tests something); by default the first fork kills the program, and the verdict
// says why. So do the other ways to a new process: subprocess, posix_spawn (clone with CLONE_VM),
// a raw clone, and exec (on the fresh path an exec is allowed, and fails without the token).
TEST(SandboxAttacks, AProgramCannotLearnTheAnswersFromItsChildren) {
  const std::string check = "def check(f):\n    assert f(2) == 4\n    assert f(3) == 9\n    assert f(4) == 16\n\n";
  const std::string learner =
      "import os, pickle\n"
      "class Spy:\n"
      "    def __init__(self, w):\n"
      "        self.w = w\n"
      "    def __eq__(self, other):\n"
      "        os.write(self.w, pickle.dumps(other))\n"
      "        os._exit(0)\n"
      "def sq(x):\n"
      "    r, w = os.pipe()\n"
      "    if os.fork() == 0:\n"
      "        return Spy(w)\n"
      "    os.close(w)\n"
      "    os.wait()\n"
      "    return pickle.loads(os.read(r, 1 << 16))\n" + check + "check(sq)\n";
  const std::string right = "def sq(x):\n    return x * x\n" + check + "check(sq)\n";
  const std::string others[] = {
      "import subprocess\nsubprocess.run(['/usr/bin/python3', '-c', 'pass'])\n" + right,
      "import os\nos.posix_spawn('/usr/bin/python3', ['python3', '-c', 'pass'], {})\n" + right,
      "import ctypes, platform\nclone = {'x86_64': 56, 'aarch64': 220}[platform.machine()]\n"
      "ctypes.CDLL(None).syscall(clone, 17, 0, 0, 0, 0)\n" + right,  // SIGCHLD: a plain fork
      "import os\nos.execv('/usr/bin/python3', ['python3', '-c', 'pass'])\n" + right,
  };
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    const Sandbox allowed(limits(zygote, true));
    REQUIRE_ISOLATION(allowed);
    const Verdict learned = allowed.run(learner);
    EXPECT_TRUE(learned.passed()) << "the attack no longer works where processes are allowed: " << learned.result << learned.err;
    const Sandbox s(limits(zygote));
    const Verdict refused = s.run(learner);
    EXPECT_EQ(refused.status, Verdict::Status::Failed) << refused.result;
    EXPECT_NE(refused.result.find("tried to start a new process"), std::string::npos) << refused.result;
    for (const std::string& other : others) {
      const Verdict v = s.run(other);
      EXPECT_EQ(v.status, Verdict::Status::Failed) << other << v.result;
      const bool fresh_exec = !zygote && other.find("execv") != std::string::npos;
      if (!fresh_exec) {
        EXPECT_NE(v.result.find("tried to start a new process"), std::string::npos) << other << v.result;
      }
    }
    EXPECT_TRUE(s.run(right).passed());
  }
}

// Finding 5: no bound on a candidate's total memory. Six children of 200 MB each, every one
// within the per-process address-space limit: together they must stay under the worker cgroup's
// memory.max (here 512 MiB), read from the host side as the cgroup's peak.
TEST(SandboxAttacks, AManyProcessMemoryHogStopsAtTheBound) {
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    SandboxLimits l = limits(zygote, true);  // its six children
    l.timeout_s = 4.0;
    l.sandbox_memory_bytes = 512u << 20;
    const Sandbox s(l);
    REQUIRE_ISOLATION(s);
    if (s.memory_cgroup_of(0).empty()) GTEST_SKIP() << "no memory cgroup here: " << s.missing().back();
    EXPECT_NE(s.memory_bound().find("512 MiB"), std::string::npos) << s.memory_bound();
    const Verdict v = s.run(
        "import os, time\n"
        "kids = []\n"
        "for i in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'x' * (200 << 20)\n"  // written, so resident
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "for pid in kids:\n"
        "    os.waitpid(pid, 0)\n"
        "time.sleep(30)\n");
    EXPECT_FALSE(v.passed()) << v.result;
    const std::uint64_t peak = s.memory_peak_of(0);
    EXPECT_LE(peak, l.sandbox_memory_bytes) << s.memory_cgroup_of(0);
    EXPECT_GE(peak, 300u << 20) << "the hog never reached the bound: the test tested nothing";
    // The next candidate of the worker runs as usual.
    EXPECT_TRUE(s.run("x = b'y' * (100 << 20)\n").passed());
  }
}

// The second round's "one candidate flips honest verdicts" (issue 45): a candidate that runs busy
// processes, each in a session of its own (with --allow-processes; by default it has only
// threads, and one session), takes at most the worker's CPU bound (one CPU by default; half a CPU
// here, so that a machine busy with other tests still has more to give it): the CPU time it
// reports for its four processes is at most ~0.5 s per second of wall time, and the kernel
// throttled the worker's cgroup (cpu.stat's nr_throttled, read on the host) unless the machine
// was too busy to give it even that. The default and a bound past the machine's CPUs are written
// as such (the files read are the ones that bound).
TEST(SandboxAttacks, ACandidateTakesNoMoreThanItsWorkersCpu) {
  const std::string hog =
      "import os, time\n"
      "t0 = time.time()\n"
      "for i in range(3):\n"
      "    if os.fork() == 0:\n"
      "        os.setsid()\n"
      "        while time.time() < t0 + 1.5:\n"
      "            pass\n"
      "        os._exit(0)\n"
      "while time.time() < t0 + 1.5:\n"
      "    pass\n"
      "for i in range(3):\n"
      "    os.wait()\n"
      "t = os.times()\n"
      "print('cpu_per_wall %.3f' % ((t.user + t.system + t.children_user + t.children_system) / (time.time() - t0)))\n";
  auto stat = [](const std::string& dir, const std::string& name) {
    std::ifstream f(dir + "/cpu.stat");
    std::string key;
    long long value = -1;
    while (f >> key >> value)
      if (key == name) return value;
    return -1LL;
  };
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    for (const double cpus : {1.0, 1024.0, 0.5}) {
      SandboxLimits l = limits(zygote, true);
      l.cpus_per_worker = cpus;
      const Sandbox s(l);
      REQUIRE_ISOLATION(s);
      const std::string dir = s.cpu_cgroup_of(0);
      if (dir.empty()) GTEST_SKIP() << "no cpu controller here";
      const std::string quota = read_file(dir + (std::filesystem::exists(dir + "/cpu.max") ? "/cpu.max" : "/cpu.cfs_quota_us"));
      EXPECT_EQ(quota.substr(0, quota.find_first_of(" \n")), cpus == 1.0 ? "100000" : cpus == 0.5 ? "50000" : "102400000") << dir;
      if (cpus != 0.5) continue;
      const Verdict v = s.run(hog);
      ASSERT_TRUE(v.passed()) << v.result << v.err;
      const double per_wall = std::stod(v.out.substr(v.out.find("cpu_per_wall ") + 13));
      EXPECT_LE(per_wall, 0.65) << v.out;
      if (per_wall > 0.4) {
        EXPECT_GT(stat(dir, "nr_throttled"), 0) << dir << "\n" << read_file(dir + "/cpu.stat");
      }
    }
  }
}

// Where no cgroup can be made (here: turned off), the bound is the fallback's: 8 processes of the
// per-process address space each, named in a warning and in memory_bound().
TEST(SandboxAttacks, WithoutACgroupTheProcessCountBoundsTheMemory) {
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    SandboxLimits l = limits(zygote, true);  // it forks up to the process limit
    l.cgroups = false;
    const Sandbox s(l);
    if (!s.minimal_root()) GTEST_SKIP() << "sandbox isolation unavailable here";
    EXPECT_TRUE(s.memory_cgroup_of(0).empty());
    ASSERT_FALSE(s.missing().empty());
    EXPECT_NE(s.missing().back().find("a memory cgroup (turned off)"), std::string::npos) << s.missing().back();
    EXPECT_NE(s.memory_bound().find("at most 8 processes"), std::string::npos) << s.memory_bound();
    const Verdict v = s.run(
        "import os, resource\n"
        "assert resource.getrlimit(resource.RLIMIT_NPROC) == (8, 8), resource.getrlimit(resource.RLIMIT_NPROC)\n"
        "kids, refused = [], 0\n"
        "for i in range(12):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except BlockingIOError:\n"
        "        refused += 1\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        import time\n"
        "        time.sleep(5)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "assert len(kids) == 7 and refused == 5, (len(kids), refused)\n");
    EXPECT_TRUE(v.passed()) << v.result << v.err;
  }
}
