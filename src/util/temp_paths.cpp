#include "bestofn/util/temp_paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace bestofn {
namespace {

constexpr int kSlots = 32;
// The signals whose default action ends the process and that arrive from outside it: a user's
// ^C or ^\, kill, a hangup, a closed pipe, an exceeded CPU or file size limit, a timer, and the
// user signals no part of bestofn uses. (Not faults: SIGSEGV and the like mean the process is
// broken, and its partial files are named as partial.)
constexpr int kFatalSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU, SIGXFSZ, SIGALRM, SIGUSR1, SIGUSR2};
constexpr std::size_t kPathMax = 4096;

struct Slot {
  std::atomic<bool> used{false};   // claimed by an owner
  std::atomic<bool> ready{false};  // path written: the handler may act on it
  char path[kPathMax];
};
Slot g_slots[kSlots];

// Removes the entries directly in dir (files: a staging directory holds no subdirectory), then
// dir. Only system calls: async-signal-safe.
void remove_flat_dir(const char* dir) noexcept {
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[8192];
  for (;;) {
    const long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name
      unsigned short reclen = 0;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) unlinkat(fd, name, 0);
      off += reclen;
    }
  }
  close(fd);
  rmdir(dir);
}

// A writer thread may still add a file after one listing: list and remove again, a few times.
void remove_flat_dir_retrying(const char* dir) noexcept {
  for (int i = 0; i < 4; ++i) {
    remove_flat_dir(dir);
    if (access(dir, F_OK) != 0) return;
  }
}

// Runs with every one of kFatalSignals blocked (sa_mask): a second signal (a hangup sends two)
// waits for the cleanup instead of killing the process half way through it.
extern "C" void on_fatal_signal(int sig) {
  const int saved = errno;
  remove_temp_paths_now();
  errno = saved;
  signal(sig, SIG_DFL);
  raise(sig);  // pending until the handler returns: then the process ends as the signal says
}

}  // namespace

int register_temp_path(const std::string& path) {
  if (path.empty() || path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].used.compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].ready.store(true, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temp_path(int handle) {
  if (handle < 0 || handle >= kSlots) return;
  g_slots[handle].ready.store(false, std::memory_order_release);
  g_slots[handle].used.store(false, std::memory_order_release);
}

void remove_temp_paths_now() noexcept {
  for (auto& s : g_slots) {
    if (!s.ready.load(std::memory_order_acquire)) continue;
    if (unlink(s.path) != 0 && (errno == EISDIR || errno == EPERM)) remove_flat_dir_retrying(s.path);
  }
}

void install_temp_path_cleanup() {
  for (int sig : kFatalSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup: keep ignoring
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (int other : kFatalSignals) sigaddset(&sa.sa_mask, other);
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace bestofn
