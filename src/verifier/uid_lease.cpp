#include "uid_lease.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bestofn/util/error.h"

namespace bestofn {
namespace {

// The lock directory: made if missing, and only used if it is a directory of root's (or this
// user's) that others cannot write, so that no one else can plant or swap the lock files.
bool usable_lock_dir(const char* dir) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return false;
  struct stat st{};
  return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 022) == 0;
}

const char* lock_dir() {
  if (usable_lock_dir("/run/bestofn") && usable_lock_dir("/run/bestofn/uids")) return "/run/bestofn/uids";
  if (usable_lock_dir("/tmp/bestofn-uids")) return "/tmp/bestofn-uids";
  return nullptr;
}

// A user or a group of that number (the sandbox uses it as both).
bool has_account(unsigned uid) {
  std::vector<char> buf(16384);
  passwd pw{}, *user = nullptr;
  group gr{}, *grp = nullptr;
  return (getpwuid_r(uid, &pw, buf.data(), buf.size(), &user) == 0 && user != nullptr) ||
         (getgrgid_r(uid, &gr, buf.data(), buf.size(), &grp) == 0 && grp != nullptr);
}

// The ids this process can switch to: /proc/self/uid_map's (or gid_map's) ranges. Where bestofn
// is root in a user namespace (rootless podman, Kubernetes hostUsers: false), only the mapped ids
// exist; setresuid to another fails.
struct IdMap {
  std::vector<std::pair<unsigned long long, unsigned long long>> ranges;  // [first, first + count)
  explicit IdMap(const char* path) {
    FILE* f = std::fopen(path, "re");
    if (!f) {
      ranges.push_back({0, 1ull << 32});  // no user namespaces here: every id
      return;
    }
    unsigned long long inside, outside, count;
    while (std::fscanf(f, "%llu %llu %llu", &inside, &outside, &count) == 3) ranges.push_back({inside, inside + count});
    std::fclose(f);
  }
  bool has(unsigned id) const {
    for (const auto& [first, end] : ranges)
      if (id >= first && id < end) return true;
    return false;
  }
};

}  // namespace

bool uid_has_processes(unsigned uid) {
  DIR* d = opendir("/proc");
  if (!d) return false;
  bool found = false;
  char path[300], buf[4096];
  while (!found) {
    const dirent* e = readdir(d);
    if (!e) break;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    const char* line = std::strstr(buf, "\nUid:");
    unsigned ids[4];
    if (line && std::sscanf(line + 5, "%u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) == 4)
      for (unsigned id : ids) found = found || id == uid;
  }
  closedir(d);
  return found;
}

UidLease& UidLease::operator=(UidLease&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    uid_ = o.uid_;
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

UidLease::~UidLease() {
  if (fd_ >= 0) close(fd_);  // the lock goes with it
}

UidLease UidLease::acquire(unsigned base, unsigned count) {
  const char* dir = lock_dir();
  if (!dir) throw Error("verifier: no directory for the sandbox uid locks (/run/bestofn/uids or /tmp/bestofn-uids, owned by this user, not writable by others)");
  const IdMap uids("/proc/self/uid_map"), gids("/proc/self/gid_map");
  // From a random place in the range: two hosts (containers) that share a kernel but not their
  // lock directories then rarely meet on one uid.
  unsigned start = 0;
  if (getrandom(&start, sizeof start, 0) != static_cast<ssize_t>(sizeof start)) start = static_cast<unsigned>(getpid());
  start %= count;
  unsigned mapped = 0;
  for (unsigned i = 0; i < count; ++i) {
    const unsigned uid = base + (start + i) % count;
    if (!uids.has(uid) || !gids.has(uid)) continue;
    ++mapped;
    char path[256];
    std::snprintf(path, sizeof path, "%s/%u.lock", dir, uid);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {  // another worker's, in this run or another
      close(fd);
      continue;
    }
    if (has_account(uid) || uid_has_processes(uid)) {
      close(fd);
      continue;
    }
    UidLease lease;
    lease.uid_ = uid;
    lease.fd_ = fd;
    return lease;
  }
  if (mapped == 0)
    throw Error("verifier: no sandbox uid in " + std::to_string(base) + ".." + std::to_string(base + count - 1) +
                " is mapped in this user namespace (/proc/self/uid_map, gid_map); choose a mapped range with "
                "BESTOFN_SANDBOX_UIDS=BASE[:COUNT]");
  throw Error("verifier: no free sandbox uid in " + std::to_string(base) + ".." + std::to_string(base + count - 1) +
              " (each is locked by a running worker, has an account, or has processes); choose another range with "
              "BESTOFN_SANDBOX_UIDS=BASE[:COUNT]");
}

}  // namespace bestofn
