#include "run_streams.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "bestofn/util/utf8.h"

namespace bestofn::sandbox_run {
namespace {

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

// Bytes a character takes in a JSON string as the results files store it (nlohmann::json's dump:
// control characters other than \b \f \n \r \t as \u00XX, '"' and '\\' escaped, the rest as is).
std::size_t json_size(unsigned char c) {
  if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') return 2;
  return c < 0x20 ? 6 : 1;
}

// Keeps the longest tail of valid UTF-8 `s` whose JSON encoding fits in `cap` bytes, cut at a
// character's start: the documented cap holds for what is stored, not only before escaping (64 KB of
// \x01 would otherwise store six times as much).
void keep_json_tail(std::string& s, std::size_t cap) {
  std::size_t size = 0, begin = s.size();
  while (begin > 0) {
    const std::size_t c = json_size(static_cast<unsigned char>(s[begin - 1]));
    if (size + c > cap) break;
    size += c;
    --begin;
  }
  while (begin < s.size() && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) ++begin;  // not mid-character
  s.erase(0, begin);
}

}  // namespace

void drain(pollfd* fds, std::string* const* sinks, Channel& channel, Fds& guard, int& open_fds, std::size_t out_cap, std::size_t err_cap) {
  char buf[65536];
  for (int i = 0; i < 4; ++i) {
    if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    bool open = true;
    if (i == 2) {
      open = channel.read(fds[i].fd);
    } else {
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0)
        keep_tail(*sinks[i], buf, static_cast<std::size_t>(n), i == 0 ? out_cap : i == 1 ? err_cap : kSmallStreamCap);
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

Verdict make_verdict(std::string& out_s, std::string& err_s, const Channel& channel, const std::string& status_s,
                     const std::string& token, bool timed_out, int st, std::chrono::steady_clock::time_point t0,
                     std::size_t out_bytes, std::size_t err_bytes) {
  Verdict v;
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out_s.size() > out_bytes) out_s.erase(0, out_s.size() - out_bytes);
  if (err_s.size() > err_bytes) err_s.erase(0, err_s.size() - err_bytes);
  // Captured text is data for JSON: malformed UTF-8 (a raw byte, a character cut by the cap)
  // becomes U+FFFD.
  v.out = utf8::lossy(out_s);
  v.err = utf8::lossy(err_s);
  keep_json_tail(v.out, out_bytes);
  keep_json_tail(v.err, err_bytes);
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
    // SIGSYS: the no-new-process filter's kill (seccomp_filter.h), whatever the program printed.
    std::string why = WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS ? std::string(kNoNewProcess) : last_line(v.err);
    if (why.empty())
      why = WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st))
                            : "exited (status " + std::to_string(WEXITSTATUS(st)) + ") before the tests finished";
    const std::string failed = "failed: ";
    keep_json_tail(why, err_bytes - std::min(err_bytes, failed.size()));
    v.result = failed + why;
  }
  return v;
}

}  // namespace bestofn::sandbox_run
