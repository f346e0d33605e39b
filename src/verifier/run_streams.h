#pragma once
// What a sandbox run's streams carry back to the verifier, and the verdict made of them: the
// candidate's stdout and stderr (capped), the setup-status pipe, and the verifier's channel, on
// which the kernel names the writer of every message (see Channel). Used by both ways of starting
// a candidate (sandbox.cpp).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "bestofn/verifier/sandbox.h"
#include "write_all.h"

namespace bestofn::sandbox_run {

// What drain keeps of the setup-status stream.
inline constexpr std::size_t kSmallStreamCap = 264;

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
  // main process), and nothing else. OtherWriters: anything else after the hello, with or without
  // the token (past kKept messages the token may be among those only counted: the extra writes
  // are what the verdict names).
  Proof proof(const std::string& token) const {
    if (messages.empty() || messages[0].data != sandbox_io::kSetupHello || messages[0].pid <= 0) return Proof::None;
    const pid_t main = messages[0].pid;
    bool proven = false, other = more > 0;
    for (std::size_t i = 1; i < messages.size(); ++i) {
      if (!proven && messages[i].pid == main && messages[i].data == token)
        proven = true;
      else
        other = true;
    }
    return other ? Proof::OtherWriters : proven ? Proof::Passed : Proof::None;
  }
};

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
// their sinks, keeping the last out_cap bytes of stdout and err_cap of stderr; a stream at its end
// is closed.
void drain(pollfd* fds, std::string* const* sinks, Channel& channel, Fds& guard, int& open_fds, std::size_t out_cap, std::size_t err_cap);

// The failure of a candidate killed for starting a process (SandboxLimits::new_processes).
inline constexpr const char* kNoNewProcess =
    "the program tried to start a new process (fork, subprocess, multiprocessing or exec), which the sandbox refuses "
    "while a candidate runs: a child could learn the tests' answers for it (--allow-processes lets it)";

// The verdict from what a run left: the setup-status text, the channel, the timeout, the wait
// status; stdout and stderr kept to out_bytes and err_bytes as stored (JSON-escaped).
Verdict make_verdict(std::string& out_s, std::string& err_s, const Channel& channel, const std::string& status_s,
                     const std::string& token, bool timed_out, int st, std::chrono::steady_clock::time_point t0,
                     std::size_t out_bytes, std::size_t err_bytes);

}  // namespace bestofn::sandbox_run
