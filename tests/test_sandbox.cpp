// The verifier's sandbox against honest and hostile programs. Each hostile program must get a
// non-pass verdict in bounded time and leave no process, file or connection behind.
// Over 500 lines on purpose: one case per attack, each short, all on the harness at the top.
#include <arpa/inet.h>
#include <fcntl.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "bestofn/util/error.h"
#include "bestofn/verifier/sandbox.h"
#include "test_util.h"
#include "verifier/cgroup.h"

using namespace bestofn;

namespace {

const Sandbox& box() {
  static const Sandbox s([] {
    SandboxLimits l;
    l.timeout_s = 2.0;
    return l;
  }());
  return s;
}

// Candidates here may start processes (--allow-processes): what they start must still be contained.
const Sandbox& hostile_box() {
  static const Sandbox s([] {
    SandboxLimits l;
    l.timeout_s = 2.0;
    l.new_processes = true;
    return l;
  }());
  return s;
}

#define REQUIRE_ISOLATION()                                                                              \
  do {                                                                                                   \
    if (!box().isolated()) GTEST_SKIP() << "sandbox isolation unavailable here: " << box().missing()[0];       \
  } while (0)

// Processes of a sandbox uid still alive anywhere. Each worker of each Sandbox leases a uid no
// one else has (ctest runs tests in parallel processes), so a uid's processes are its worker's.
int sandbox_processes(unsigned uid) {
  std::string needle = "\t";
  needle += std::to_string(uid);
  needle += '\t';
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Uid:", 0) == 0) {
        n += line.find(needle) != std::string::npos;
        break;
      }
  }
  return n;
}

const std::string kCheck = "def check(f):\n    assert f(2) == 4\n    assert f(3) == 9\n\n";

// Limits for a sandbox of the other path, one interpreter per candidate.
SandboxLimits fresh_limits() {
  SandboxLimits l;
  l.timeout_s = 2.0;
  l.zygote = false;
  return l;
}

}  // namespace

TEST(Sandbox, HonestProgramsPassAndWrongOnesFail) {
  const Verdict ok = box().run("def sq(x):\n    return x * x\n" + kCheck + "check(sq)");
  EXPECT_TRUE(ok.passed()) << ok.result << "\n" << ok.err;
  EXPECT_EQ(ok.result, "passed");
  const Verdict bad = box().run("def sq(x):\n    return x + x\n" + kCheck + "check(sq)");
  EXPECT_EQ(bad.status, Verdict::Status::Failed);
  EXPECT_EQ(bad.result, "failed: AssertionError") << bad.err;
  const Verdict syntax = box().run("def sq(x) return x\n" + kCheck + "check(sq)");
  EXPECT_EQ(syntax.status, Verdict::Status::Failed);
  EXPECT_NE(syntax.result.find("SyntaxError"), std::string::npos) << syntax.result;
  // The verdict names the exception that escaped: the last of a chain, a group by its own line.
  const Verdict chained = box().run("try:\n    {}['k']\nexcept KeyError:\n    raise ValueError('bad key')\n");
  EXPECT_EQ(chained.result, "failed: ValueError: bad key");
  const Verdict group = box().run("raise ExceptionGroup('two', [ValueError('a'), TypeError('b')])\n");
  EXPECT_EQ(group.result, "failed: ExceptionGroup: two (2 sub-exceptions)");
}

// A candidate may use the host's installed libraries: numpy loads its BLAS through Debian's
// /etc/alternatives links (EvalPlus's evaluator lets candidates import numpy; found when its
// verdicts and bestofn's differed on a solution returning numpy.float64).
TEST(Sandbox, InstalledLibrariesImportInBothPaths) {
  REQUIRE_ISOLATION();
  const std::string prog = "import numpy\nassert float(numpy.dot(numpy.ones(3), numpy.arange(3.0))) == 3.0\n";
  const Verdict zygote = box().run(prog);
  EXPECT_TRUE(zygote.passed()) << zygote.result;
  Sandbox fresh(fresh_limits());
  if (!fresh.isolated()) GTEST_SKIP() << fresh.missing()[0];
  const Verdict one = fresh.run(prog);
  EXPECT_TRUE(one.passed()) << one.result;
}

TEST(Sandbox, ExitingEarlyIsNeverAPass) {
  for (const char* exit_call : {"import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit(0)", "quit()"}) {
    const Verdict v = box().run(std::string("def sq(x):\n    return x * x\n") + exit_call + "\n" + kCheck + "check(sq)");
    EXPECT_EQ(v.status, Verdict::Status::Failed) << exit_call << ": " << v.result;
  }
  // Printing something that looks like a pass does not help either.
  const Verdict v = box().run("print('passed')\nimport os\nos.write(1, b'passed\\n')\nos._exit(0)\n");
  EXPECT_FALSE(v.passed());
}

TEST(Sandbox, TheProofOfAPassSurvivesWhatAProgramMayDoToItsProcess) {
  // A program that replaces os.write still passes; one that closes fd 3 fails, saying why; it
  // sees the same sys.argv on both paths. Both paths: the zygote's (box) and one interpreter per candidate.
  const Sandbox fresh(fresh_limits());
  const std::string ok = "def sq(x):\n    return x * x\n";
  for (const Sandbox* s : {&box(), &fresh}) {
    const char* path = s->uses_zygote() ? "zygote" : "fresh";
    for (const char* patch : {"import os\nos.write = lambda fd, b: len(b)\n", "import sys\nassert sys.argv == ['-c'], sys.argv\n"}) {
      const Verdict v = s->run(ok + patch + kCheck + "check(sq)");
      EXPECT_TRUE(v.passed()) << path << ": " << patch << ": " << v.result << "\n" << v.err;
    }
    // Writes on the channel besides the token, however many, are named (more than the verifier
    // keeps, here five, too).
    const Verdict extra = s->run(ok + kCheck + "import os\nfor _ in range(5):\n    os.write(3, b'x')\ncheck(sq)\n");
    EXPECT_EQ(extra.result, "failed: the verifier's channel (fd 3) got writes other than the token from the program's main process")
        << path;
    const Verdict closed = s->run(ok + kCheck + "check(sq)\nimport os\nos.closerange(3, 256)\n");
    EXPECT_EQ(closed.status, Verdict::Status::Failed) << path;
    EXPECT_EQ(closed.result, "failed: the program closed the verifier's channel (fd 3): its tests returned, but that cannot be proven")
        << path;
  }
  // Where candidates may start processes: forks during the tests, so that several processes
  // return from them, still pass, however many tokens they write (16: more than the 8 the
  // verifier keeps, and still whole ones).
  SandboxLimits with_processes = fresh_limits();
  with_processes.new_processes = true;
  const Sandbox fresh_forking(with_processes);
  with_processes.zygote = true;
  const Sandbox zygote_forking(with_processes);
  for (const Sandbox* s : {&zygote_forking, &fresh_forking}) {
    const char* path = s->uses_zygote() ? "zygote" : "fresh";
    const Verdict forked = s->run(ok + kCheck + "import os\nchild = os.fork()\ncheck(sq)\nif child:\n    os.waitpid(child, 0)\n");
    EXPECT_TRUE(forked.passed()) << path << ": " << forked.result;
    const Verdict sixteen = s->run(ok + kCheck + "import os\nfor _ in range(4):\n    os.fork()\ncheck(sq)\n");
    EXPECT_TRUE(sixteen.passed()) << path << ": " << sixteen.result;
  }
  // By default a program that forks fails at its first fork, saying so.
  for (const Sandbox* s : {&box(), &fresh}) {
    const Verdict refused = s->run(ok + kCheck + "import os\nchild = os.fork()\ncheck(sq)\nif child:\n    os.waitpid(child, 0)\n");
    EXPECT_EQ(refused.status, Verdict::Status::Failed) << refused.result;
    EXPECT_NE(refused.result.find("tried to start a new process"), std::string::npos) << refused.result;
  }
}

TEST(Sandbox, TimeoutsAndStdin) {
  const auto t0 = std::chrono::steady_clock::now();
  const Verdict loop = box().run("while True:\n    pass\n");
  EXPECT_EQ(loop.status, Verdict::Status::TimedOut);
  EXPECT_EQ(loop.result, "timed out");
  const Verdict sleep = box().run("import time\ntime.sleep(1000)\n");
  EXPECT_EQ(sleep.status, Verdict::Status::TimedOut);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 8.0);
  const Verdict in = box().run("import sys\ndata = sys.stdin.read()\nassert data == ''\n");  // EOF at once
  EXPECT_TRUE(in.passed()) << in.result;
}

TEST(Sandbox, UnboundedOutputIsCappedAndContained) {
  const Verdict v = box().run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n");
  EXPECT_EQ(v.status, Verdict::Status::TimedOut);
  EXPECT_LE(v.out.size(), SandboxLimits{}.output_bytes);
  const Verdict e = box().run("import sys\nfor _ in range(100000):\n    sys.stderr.write('y' * 1000)\nraise ValueError('end')\n");
  EXPECT_EQ(e.result, "failed: ValueError: end");
}

// The cap holds for what a results row stores: 64 KB of \x01 (each six bytes as JSON, \u0001) on
// stderr as the last line, which becomes the result, and on stdout, keep at most the cap once
// escaped (it was ~6x before), their ends kept.
TEST(Sandbox, OutputIsCappedAsStoredNotBeforeEscaping) {
  const std::size_t cap = SandboxLimits{}.output_bytes;
  const Verdict v = box().run("import sys, os\nos.write(1, b'\\x01' * 65536 + b'out-end')\nos.write(2, b'\\x01' * 65536 + b'err-end')\nsys.exit(3)\n");
  EXPECT_EQ(v.status, Verdict::Status::Failed);
  for (const std::string* text : {&v.out, &v.err, &v.result}) {
    const std::string stored = nlohmann::json(*text).dump();
    EXPECT_LE(stored.size(), cap + 2) << stored.substr(0, 40);  // + the quotes
    EXPECT_GT(stored.size(), cap - 16) << "the cap kept less than it may";
  }
  EXPECT_EQ(v.out.substr(v.out.size() - 7), "out-end");
  EXPECT_EQ(v.err.substr(v.err.size() - 7), "err-end");
  EXPECT_EQ(v.result.rfind("failed: \x01", 0), 0u) << v.result.substr(0, 20);
}

TEST(Sandbox, MemoryHogFailsInsteadOfTakingTheMachine) {
  const Verdict v = box().run("x = bytearray(8 << 30)\n");
  EXPECT_EQ(v.status, Verdict::Status::Failed) << v.result;
  EXPECT_NE(v.result.find("MemoryError"), std::string::npos) << v.result;
}

// The memory limit is the candidate's own: address space above what the interpreter (with the
// program read in) already holds. Most of it must be usable and a little more must not, on both
// paths, whatever the program's size (a 3 MB program is read and written in several pieces).
TEST(Sandbox, TheMemoryLimitIsTheCandidatesAndBigProgramsRunWhole) {
  REQUIRE_ISOLATION();
  for (const bool zygote : {true, false}) {
    SCOPED_TRACE(zygote ? "zygote" : "fresh");
    SandboxLimits l;
    l.timeout_s = 5.0;
    l.zygote = zygote;
    l.memory_bytes = 256ull << 20;
    const Sandbox s(l);
    EXPECT_EQ(s.uses_zygote(), zygote);
    const std::string padding = "# " + std::string(3u << 20, 'x') + "\n";
    const std::string fits = padding + "x = bytearray(200 << 20)\nassert len(open('prog.py').read()) > (3 << 20)\n";
    const Verdict ok = s.run(fits);
    EXPECT_TRUE(ok.passed()) << ok.result;
    const Verdict over = s.run(padding + "x = bytearray(300 << 20)\n");
    EXPECT_EQ(over.status, Verdict::Status::Failed) << over.result;
    EXPECT_NE(over.result.find("MemoryError"), std::string::npos) << over.result;
  }
}

TEST(Sandbox, EnvironmentIsScrubbed) {
  setenv("BESTOFN_TEST_SECRET", "hunter2", 1);
  const Verdict v = box().run("import os\nprint(sorted(os.environ.items()))\n");
  EXPECT_EQ(v.out.find("hunter2"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("PATH"), std::string::npos) << v.out;
  unsetenv("BESTOFN_TEST_SECRET");
}

// What the candidate starts with, whichever way it is started (the zygote's setup is the helper's
// C code, the fresh path's is child_main): the limits of SandboxLimits' defaults (a 2 s timeout:
// 3 CPU seconds), stdin from /dev/null, two pipes (stdout, stderr), the verifier's channel (a
// socket) and no other fd,
// the worker's uid and no groups, no_new_privs, the working directory with the program in it.
TEST(Sandbox, TheCandidateStartsWithItsLimitsAndNothingElse) {
  REQUIRE_ISOLATION();
  const std::string check =
      "import os, resource\n"
      "R = resource\n"
      "for r, v in ((R.RLIMIT_CORE, 0), (R.RLIMIT_FSIZE, 16 << 20), (R.RLIMIT_NOFILE, 64), (R.RLIMIT_CPU, 3),\n"
      "             (R.RLIMIT_NPROC, 64)):\n"
      "    assert R.getrlimit(r) == (v, v), (r, R.getrlimit(r))\n"
      "soft, hard = R.getrlimit(R.RLIMIT_AS)\n"
      "assert soft == hard and (1 << 30) < soft < (1 << 30) + (512 << 20), soft\n"
      // (Through fstat: the candidate has no /proc.)
      "import stat\n"
      "assert stat.S_ISCHR(os.fstat(0).st_mode) and os.fstat(0).st_rdev == os.stat('/dev/null').st_rdev\n"
      "assert all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in (1, 2))\n"
      "assert stat.S_ISSOCK(os.fstat(3).st_mode)\n"  // the verifier's channel
      "others = []\n"
      "for fd in range(4, 1024):\n"
      "    try:\n"
      "        os.fstat(fd)\n"
      "        others.append(fd)\n"
      "    except OSError:\n"
      "        pass\n"
      "assert others == [], others\n"
      "u = os.getuid()\n"
      "assert u != 0 and os.getresuid() == (u, u, u) and os.getresgid() == (u, u, u) and os.getgroups() == []\n"
      "import ctypes, platform\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "assert libc.prctl(39, 0, 0, 0, 0) == 1\n"  // PR_GET_NO_NEW_PRIVS
      "assert os.getcwd() == '/tmp/work' and os.listdir('.') == ['prog.py']\n"
      // A session of its own, which it leads, so no controlling terminal: the fresh path's
      // candidate is its PID namespace's init (pid 1), the zygote's children pid 2 each time.
      "assert os.getsid(0) == os.getpid() and os.getpid() in (1, 2), (os.getsid(0), os.getpid())\n"
      "try:\n    open('/dev/tty')\n    raise AssertionError('/dev/tty opened')\nexcept OSError:\n    pass\n"
      // The kernel keyrings are closed (seccomp): add_key and keyctl fail with EPERM.
      "add_key, keyctl = {'x86_64': (248, 250), 'aarch64': (217, 219)}[platform.machine()]\n"
      "assert libc.syscall(add_key, b'user', b'bestofn', b'secret', 6, -4) == -1 and ctypes.get_errno() == 1\n"
      "assert libc.syscall(keyctl, 0, -4, 0) == -1 and ctypes.get_errno() == 1\n"
      // Nor host-wide counters: sysinfo (EPERM), and no procfs at all (see SandboxAttacks).
      "assert libc.sysinfo(ctypes.create_string_buffer(256)) == -1 and ctypes.get_errno() == 1\n";
  const Verdict z = box().run(check);
  EXPECT_TRUE(z.passed()) << "zygote: " << z.result << z.err;
  SandboxLimits l;
  l.timeout_s = 2.0;
  l.zygote = false;
  const Sandbox fresh(l);
  const Verdict f = fresh.run(check);
  EXPECT_TRUE(f.passed()) << "fresh: " << f.result << f.err;
}

// bestofn's umask is not the candidate's: with 077 the program file would be unreadable to it.
TEST(Sandbox, AStrictUmaskDoesNotLockTheCandidateOut) {
  REQUIRE_ISOLATION();
  const mode_t saved = umask(077);
  for (const bool zygote : {true, false}) {
    SandboxLimits l;
    l.timeout_s = 2.0;
    l.zygote = zygote;
    const Sandbox s(l);
    const Verdict v = s.run("def sq(x):\n    return x * x\n" + kCheck + "check(sq)\nassert open('prog.py').read()\n");
    EXPECT_TRUE(v.passed()) << (zygote ? "zygote: " : "fresh: ") << v.result << v.err;
  }
  umask(saved);
}

TEST(Sandbox, HostileProgramsLeaveNothingBehind) {
  REQUIRE_ISOLATION();
  const std::string marker = "/tmp/bestofn-sandbox-escape-" + std::to_string(getpid());
  const std::string var_marker = "/var/tmp/bestofn-sandbox-escape-" + std::to_string(getpid());
  const struct {
    const char* name;
    std::string code;
  } hostile[] = {
      {"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"},
      {"detached grandchild",
       "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n    os._exit(0)\nos._exit(0)\n"},
      {"write outside the workdir", "open('" + marker + "', 'w').write('x')\nopen('/etc/bestofn-escape', 'w').write('x')\n"},
      // /var/tmp is writable by everyone on the host: read-only all the same in the sandbox.
      {"write to a world-writable host directory", "open('" + var_marker + "', 'w').write('x')\n"},
      {"kill the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nraise SystemExit(1)\n"},
  };
  for (const auto& h : hostile) {
    const auto t0 = std::chrono::steady_clock::now();
    const Verdict v = hostile_box().run(h.code);
    EXPECT_FALSE(v.passed()) << h.name;
    EXPECT_NE(v.status, Verdict::Status::SandboxError) << h.name << ": " << v.result;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << h.name;
    EXPECT_EQ(sandbox_processes(hostile_box().uid_of(0)), 0) << h.name << " left processes behind";
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_FALSE(std::filesystem::exists("/etc/bestofn-escape"));
  EXPECT_FALSE(std::filesystem::exists(var_marker));
}

TEST(Sandbox, NoNetworkEvenToLoopback) {
  REQUIRE_ISOLATION();
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(s, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const Verdict v = box().run("import socket\nsocket.create_connection(('127.0.0.1', " + std::to_string(port) + "), timeout=1)\n");
  EXPECT_EQ(v.status, Verdict::Status::Failed) << v.result;
  // Nothing reached the listener.
  fcntl(s, F_SETFL, O_NONBLOCK);
  EXPECT_LT(accept(s, nullptr, nullptr), 0);
  close(s);
}

TEST(Sandbox, TheTokenIsNotInTheProgramAndBadBytesAreData) {
  // Reading its own source and writing what it finds to fd 3 does not make a failing program pass.
  const Verdict forged = box().run(
      "import os, sys\n"
      "src = open('prog.py').read() if os.path.exists('prog.py') else ''\n"
      "for w in src.split():\n"
      "    if len(w) >= 32:\n"
      "        os.write(3, w.encode() + b'\\n')\n"
      "assert False\n");
  EXPECT_EQ(forged.status, Verdict::Status::Failed) << forged.result;
  // Raw bytes on stderr end up as valid UTF-8 in the verdict.
  const Verdict bytes = box().run("import os\nos.write(2, b'\\xff\\xfe broken\\n')\nraise SystemExit(3)\n");
  EXPECT_FALSE(bytes.passed());
  EXPECT_NE(bytes.err.find("\xEF\xBF\xBD"), std::string::npos);
}

namespace {

// Direct children of this process (the zygotes, when they run).
std::vector<pid_t> children() {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid()) out.push_back(std::stoi(name));
  }
  return out;
}

}  // namespace

namespace {

// Runs `leave` (which must pass), then `check` as the next candidate of the same worker.
void leave_then_check(const char* what, const std::string& leave, const std::string& check) {
  const Verdict first = box().run(leave);
  ASSERT_TRUE(first.passed()) << what << ": " << first.result << first.err;
  const Verdict next = box().run(check);
  EXPECT_TRUE(next.passed()) << what << ", the next candidate: " << next.result << next.err;
}

}  // namespace

TEST(SandboxZygote, CandidatesAreForkedAndShareNothing) {
  REQUIRE_ISOLATION();
  EXPECT_TRUE(box().uses_zygote());
  // Files in /tmp and /dev/shm, SysV shared memory and POSIX message queues do not carry from one
  // candidate to the next, though both run in the same worker's zygote (which shares one tmpfs
  // and one IPC namespace between its candidates, one after another).
  const std::string nothing_left =
      "import ctypes, os\n"
      "assert not os.path.exists('/tmp/work/left') and not os.path.exists('/tmp/left')\n"
      "assert os.listdir('/tmp') == ['work'] and os.listdir('/tmp/work') == ['prog.py']\n"
      // (/dev/shm: in the minimal root a link to /tmp, one tmpfs to renew, not two)
      "assert os.path.realpath('/dev/shm') == '/tmp' or not os.path.isdir('/dev/shm') or os.listdir('/dev/shm') == []\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "assert libc.shmget(0x5eed, 0, 0) == -1\n"
      "assert libc.mq_open(b'/bestofn-left', 0o2) == -1\n"
      "assert os.getcwd() == '/tmp/work' and os.getuid() != 0 and os.geteuid() != 0\n";
  leave_then_check("files and IPC objects",
                   "import ctypes, os\n"
                   "open('/tmp/work/left', 'w').write('x')\nopen('/tmp/left', 'w').write('x')\n"
                   "if os.path.isdir('/dev/shm'):\n    open('/dev/shm/left', 'w').write('x')\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\n"
                   "print('shm', libc.shmget(0x5eed, 4096, 0o1666) >= 0)\n"  // IPC_CREAT | 0666: refused where IPC is off
                   "print('mq', libc.mq_open(b'/bestofn-left', 0o102, 0o666, None) >= 0)\n",  // O_CREAT | O_RDWR
                   nothing_left);
  // Its working directory swapped for a link to a directory elsewhere holding a prog.py: the
  // zygote does not follow the link.
  leave_then_check("a swapped working directory",
                   "import os\n"
                   "os.chdir('/')\nos.unlink('/tmp/work/prog.py')\nos.rmdir('/tmp/work')\n"
                   "os.mkdir('/dev/shm/w')\nopen('/dev/shm/w/prog.py', 'w').write('x')\nos.symlink('/dev/shm/w', '/tmp/work')\n",
                   nothing_left);
  // A file unlinked but kept open by an fd in flight in a unix socket that holds itself (such a
  // socket outlives every process): the next candidate still gets all of /tmp, and no socket.
  leave_then_check("a file held by a unix socket in flight",
                   "import os, socket\n"
                   "fd = os.open('/tmp/pinned', os.O_CREAT | os.O_WRONLY, 0o600)\n"
                   "os.write(fd, b'x' * (16 << 20))\nos.unlink('/tmp/pinned')\n"
                   "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                   "socket.send_fds(a, [b'x'], [fd, a.fileno(), b.fileno()])\n",
                   "import os\n"
                   "st = os.statvfs('/tmp')\n"
                   "assert st.f_blocks - st.f_bfree < 16, (st.f_bfree, st.f_blocks)\n");  // its own prog.py only
  // /tmp holds a bounded number of files (what the zygote may have to clear away).
  leave_then_check("as many files as /tmp takes",
                   "n = 0\n"
                   "try:\n"
                   "    while n < 20000:\n"
                   "        open('/tmp/f%d' % n, 'w').close()\n"
                   "        n += 1\n"
                   "except OSError as e:\n"
                   "    assert e.errno == 28, e\n"
                   "assert 1000 < n < 16384, n\n",
                   nothing_left);
  // Each fork gets its own random state (Python reseeds after fork).
  const Verdict a = box().run("import random\nprint(random.random())\n");
  const Verdict b = box().run("import random\nprint(random.random())\n");
  ASSERT_TRUE(a.passed() && b.passed());
  EXPECT_NE(a.out, b.out);
}

// The second round's channels between candidates (issue 45): what one candidate of a worker could
// mark for the next through what they share. The next one's pid, its threads' ids, its files'
// inode numbers, its session and its niceness are the same whatever the one before did (here:
// 10 threads (each reserves a malloc arena of 64 MiB of address space: 15 reach the limit),
// 300 files, nice 19), so nothing is encoded in them.
TEST(SandboxZygote, NothingAfterOneCandidateTellsTheNextWhatItDid) {
  REQUIRE_ISOLATION();
  const std::string look =
      "import os, threading\n"
      "ids = []\n"
      "t = threading.Thread(target=lambda: ids.append(threading.get_native_id()))\n"
      "t.start()\n"
      "t.join()\n"
      "open('/tmp/mine', 'w').close()\n"
      "print('pid', os.getpid(), 'thread', ids[0], 'sid', os.getsid(0) == os.getpid(), 'inode', os.stat('/tmp/mine').st_ino,\n"
      "      'nice', os.nice(0), 'work', os.stat('/tmp/work').st_ino)\n";
  const std::string mark =
      "import os, threading, time\n"
      "os.nice(19)\n"
      "for i in range(300):\n"
      "    open('/tmp/f%d' % i, 'w').close()\n"
      "ts = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(10)]\n"
      "for t in ts:\n"
      "    t.start()\n"
      "for t in ts:\n"
      "    t.join()\n";
  const Verdict before = box().run(look);
  ASSERT_TRUE(before.passed()) << before.result << before.err;
  const Verdict marked = box().run(mark);
  ASSERT_TRUE(marked.passed()) << marked.result << marked.err;
  const Verdict after = box().run(look);
  ASSERT_TRUE(after.passed()) << after.result << after.err;
  EXPECT_EQ(after.out, before.out);
  EXPECT_NE(before.out.find("pid 2 thread 3 sid True"), std::string::npos) << before.out;
  EXPECT_NE(before.out.find("nice 0"), std::string::npos) << before.out;
}

TEST(SandboxZygote, APassingProgramsDetachedChildIsKilledAtOnce) {
  REQUIRE_ISOLATION();
  // The program passes, but leaves a setsid grandchild holding stdout: the verdict is taken when
  // the main process ends, and the grandchild dies with it (no wait for the timeout).
  // A Sandbox of its own: its worker's uid is its own, whatever other tests run meanwhile.
  SandboxLimits l;
  l.timeout_s = 2.0;
  l.new_processes = true;
  const Sandbox s(l);
  const auto t0 = std::chrono::steady_clock::now();
  const Verdict v = s.run(
      "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n    os._exit(0)\n"
      "def sq(x):\n    return x * x\n" + kCheck + "check(sq)");
  EXPECT_TRUE(v.passed()) << v.result;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.5);
  EXPECT_EQ(sandbox_processes(s.uid_of(0)), 0);
}

// The zygote writes a failing candidate's exception without the traceback module in the common
// case: its text must be exactly what traceback.format_exception_only writes, which the
// reference (the same program run under a wrapper that catches and formats with it) gives.
TEST(SandboxZygote, ExceptionTextIsTracebacksOwn) {
  REQUIRE_ISOLATION();
  ASSERT_TRUE(box().uses_zygote());
  const std::vector<std::string> programs = {
      "assert 1 == 2\n",
      "assert False, 'the message \u00fc'\n",
      "{}['k']\n",
      "class E(Exception):\n    pass\nraise E()\n",
      "class Outer:\n    class Inner(Exception):\n        pass\nraise Outer.Inner('x')\n",
      "class M(Exception):\n    pass\nM.__module__ = 'mymod'\nraise M('y')\n",
      "class N(Exception):\n    pass\nN.__module__ = 5\nraise N('z')\n",
      "class S(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise S()\n",
      "class Empty(Exception):\n    def __str__(self):\n        return ''\nraise Empty('hidden')\n",
      "e = ValueError('v')\ne.add_note('note one\\nnote two')\nraise e\n",
      "def f(:\n    pass\n",
      "raise ExceptionGroup('g', [ValueError('a')])\n",
      "import json\njson.loads('{')\n",
      "def r():\n    r()\nr()\n",
      "raise KeyboardInterrupt\n",
      "1 / 0\n",
      "[][3]\n",
      "int('x')\n",
      "undefined_name\n",
      "(1).nosuchattribute\n",
      "raise ValueError(42)\n",
      "class Odd:\n    def __str__(self):\n        return ''\nraise ValueError(Odd())\n",
      "class Boom:\n    def __str__(self):\n        raise RuntimeError\nraise ValueError(Boom())\n",
      "class Text(str):\n    def __str__(self):\n        return 'other'\nclass Obj:\n    def __str__(self):\n        return Text('mine')\n"
      "raise TypeError(Obj())\n",
      "try:\n    1 / 0\nexcept ZeroDivisionError:\n    assert False\n",
  };
  const auto hex = [](const std::string& text) {
    std::string h;
    char b[3];
    for (unsigned char c : text) {
      std::snprintf(b, sizeof b, "%02x", c);
      h += b;
    }
    return h;
  };
  for (const std::string& program : programs) {
    const Verdict got = box().run(program);
    const std::string reference =
        "import sys, traceback\n"
        "src = bytes.fromhex('" + hex(program) + "').decode()\n"
        "import os\n"
        "os.remove('prog.py')\n"  // root's copy of this wrapper; the directory is the candidate's
        "with open('prog.py', 'w') as f:\n"  // where a SyntaxError's line is looked up, as for the candidate
        "    f.write(src)\n"
        "try:\n"
        "    exec(compile(src, 'prog.py', 'exec'), {})\n"
        "except BaseException as e:\n"
        "    sys.stderr.write('\\n' + ''.join(traceback.format_exception_only(type(e), e)))\n"
        "    sys.exit(1)\n";
    const Verdict want = box().run(reference);
    EXPECT_EQ(got.status, Verdict::Status::Failed) << program;
    ASSERT_EQ(want.status, Verdict::Status::Failed) << want.err;
    EXPECT_EQ(got.err, want.err) << program;
    EXPECT_EQ(got.result, want.result) << program;
  }
}

TEST(SandboxZygote, AKilledZygoteIsRestarted) {
  REQUIRE_ISOLATION();
  SandboxLimits l;
  l.timeout_s = 2.0;
  const Sandbox s(l);
  const auto before = children();
  ASSERT_TRUE(s.run("assert 1 + 1 == 2\n").passed());
  std::vector<pid_t> zygotes;
  for (pid_t p : children())
    if (std::find(before.begin(), before.end(), p) == before.end()) zygotes.push_back(p);
  ASSERT_EQ(zygotes.size(), 1u);
  kill(zygotes[0], SIGKILL);
  usleep(100000);
  const Verdict v = s.run("assert 2 + 2 == 4\n");
  EXPECT_TRUE(v.passed()) << v.result;
}

TEST(SandboxFresh, OneInterpreterPerCandidateKeepsTheRules) {
  const Sandbox s(fresh_limits());
  EXPECT_FALSE(s.uses_zygote());
  EXPECT_TRUE(s.run("def sq(x):\n    return x * x\n" + kCheck + "check(sq)").passed());
  EXPECT_EQ(s.run("def sq(x):\n    return x + x\n" + kCheck + "check(sq)").result, "failed: AssertionError");
  EXPECT_EQ(s.run("import os\nos._exit(0)\n" + kCheck).status, Verdict::Status::Failed);
  EXPECT_EQ(s.run("while True:\n    pass\n").status, Verdict::Status::TimedOut);
}

// Two runs on one host: one starting (CgroupSupport::detect removes the worker cgroups no run
// holds) while the other makes its workers' cgroups. A cgroup made and not yet locked looked
// stale to the sweep, which removed it under its maker: "cannot lock the worker's cgroup: No such
// file or directory" (seen in a parallel ctest run, 2026-12-07).
TEST(SandboxCgroups, ARunStartingBesideAnotherNeverRemovesItsNewCgroups) {
  const CgroupSupport support = CgroupSupport::detect();
  if (support.version == CgroupSupport::Version::None) GTEST_SKIP() << "no cgroups here: " << support.why_not;
  std::atomic<bool> done{false};
  std::thread other_run([&] {
    while (!done) CgroupSupport::detect();
  });
  int failures = 0, made = 0;
  std::string first;
  for (int i = 0; i < 300; ++i) {
    try {
      const WorkerCgroup g = WorkerCgroup::create(support, i, 64u << 20, 16, 1.0);
      if (!std::filesystem::is_directory(g.memory_dir())) throw Error(g.memory_dir() + ": made, then gone");
      ++made;
    } catch (const Error& e) {
      if (failures++ == 0) first = e.what();
    }
  }
  done = true;
  other_run.join();
  EXPECT_EQ(failures, 0) << "of 300, first: " << first;
  EXPECT_EQ(made, 300);
}
