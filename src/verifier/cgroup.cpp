#include "cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "bestofn/util/error.h"

#include <spdlog/spdlog.h>

namespace bestofn {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

bool has_word(const std::string& list, const std::string& word, char sep) {
  for (const auto& w : split(list, sep))
    if (w == word) return true;
  return false;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes `value` to a control file; false with errno set on failure.
bool write_control(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  const int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

struct Mount {
  std::string point, root;
};

// The directory of cgroup `path` (as /proc/self/cgroup names it) in a hierarchy mounted at `m`.
std::string cgroup_dir(const Mount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && rel.compare(0, m.root.size(), m.root) == 0) rel = rel.substr(m.root.size());
  if (rel.empty() || rel == "/") return m.point;
  return m.point + (rel[0] == '/' ? "" : "/") + rel;
}

std::string parent_of(const std::string& dir) { return dir.substr(0, dir.find_last_of('/')); }

// rmdir of the "bestofn-..." cgroups in `parent` that no live bestofn holds: each run holds a
// flock on its worker cgroups' directories for their life (a pid would not do: a run in another
// PID namespace may share the parent), and rmdir refuses a cgroup that still has processes.
void remove_stale(const std::string& parent) {
  DIR* d = opendir(parent.c_str());
  if (!d) return;
  while (const dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "bestofn-", 8) != 0) continue;
    const std::string dir = parent + "/" + e->d_name;
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) rmdir(dir.c_str());
    close(fd);
  }
  closedir(d);
}

// A worker cgroup that could not take its CPU bound: said once per run, the run goes on without it.
void warn_no_cpu_bound(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] { spdlog::warn("verifier: no CPU bound per worker ({}): a candidate's processes may take other workers' share", why); });
}

// Makes cgroup `dir` and returns it opened and locked, held for as long as the worker lives (see
// remove_stale). Another run starting on this host sweeps the cgroups no run holds: between the
// mkdir and the flock it may take the lock first and remove the new directory. Then the directory
// is made again; a lock is kept only on the directory that is still there (the same inode as the
// path's), since a lock on a removed one holds nothing.
int make_held(const std::string& dir) {
  constexpr int kTries = 20;
  for (int attempt = 1;; ++attempt) {
    // EEXIST only on a retry: the sweep that holds the directory has not removed it yet.
    if (mkdir(dir.c_str(), 0755) != 0 && !(errno == EEXIST && attempt > 1))
      throw Error(dir + ": cannot make the worker's cgroup: " + std::strerror(errno));
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
      struct stat held{}, there{};
      if (fstat(fd, &held) == 0 && stat(dir.c_str(), &there) == 0 && held.st_dev == there.st_dev && held.st_ino == there.st_ino)
        return fd;
      errno = ENOENT;
    }
    const int saved = errno;
    if (fd >= 0) close(fd);
    if (attempt == kTries) {
      rmdir(dir.c_str());  // ours, or already gone: nothing is left for a later sweep
      throw Error(dir + ": cannot lock the worker's cgroup: " + std::strerror(saved));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100 * attempt));
  }
}

}  // namespace

CgroupSupport CgroupSupport::detect() {
  CgroupSupport s;
  Mount v2, mem, pids, cpu;
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto left = split(line.substr(0, dash), ' ');
    const auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    const Mount m{left[4], left[3]};
    if (right[0] == "cgroup2" && v2.point.empty()) v2 = m;
    if (right[0] == "cgroup" && has_word(right[2], "memory", ',') && mem.point.empty()) mem = m;
    if (right[0] == "cgroup" && has_word(right[2], "pids", ',') && pids.point.empty()) pids = m;
    if (right[0] == "cgroup" && has_word(right[2], "cpu", ',') && cpu.point.empty()) cpu = m;
  }
  std::string v2_path, mem_path, pids_path, cpu_path;
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    if (has_word(controllers, "memory", ',')) mem_path = path;
    if (has_word(controllers, "pids", ',')) pids_path = path;
    if (has_word(controllers, "cpu", ',')) cpu_path = path;
  }
  std::string v2_why;
  if (!v2.point.empty() && !v2_path.empty()) {
    const std::string own = cgroup_dir(v2, v2_path);
    const std::string ctl = read_text(own + "/cgroup.controllers");
    if (has_word(ctl.substr(0, ctl.find('\n')), "memory", ' ')) {
      // Beside bestofn's own cgroup (its parent delegates memory and pids to it, so its parent
      // holds no process: the new cgroups may go there); below it only if it is the root.
      const bool root = own == v2.point;
      const std::string parent = root ? own : parent_of(own);
      std::string sub = read_text(parent + "/cgroup.subtree_control");
      if (root) {  // each controller on its own: one that is not there does not stop the others
        for (const char* c : {"+memory", "+pids", "+cpu"})
          if (!has_word(sub.substr(0, sub.find('\n')), c + 1, ' ')) write_control(parent + "/cgroup.subtree_control", c);
      }
      sub = read_text(parent + "/cgroup.subtree_control");
      const std::string first = sub.substr(0, sub.find('\n'));
      if (has_word(first, "memory", ' ') && access(parent.c_str(), W_OK) == 0) {
        s.version = Version::V2;
        s.v2_parent = parent;
        s.cpu = has_word(first, "cpu", ' ');
        remove_stale(parent);
        return s;
      }
      v2_why = "cgroup v2: " + parent + " cannot take new cgroups with the memory controller";
    } else {
      v2_why = "cgroup v2: no memory controller in " + own;
    }
  }
  if (!mem.point.empty() && !mem_path.empty()) {
    const std::string dir = cgroup_dir(mem, mem_path);
    if (access(dir.c_str(), W_OK) == 0) {
      s.version = Version::V1;
      s.v1_memory_parent = dir;
      remove_stale(dir);
      if (!pids.point.empty() && !pids_path.empty()) {
        const std::string p = cgroup_dir(pids, pids_path);
        if (access(p.c_str(), W_OK) == 0) {
          s.v1_pids_parent = p;
          remove_stale(p);
        }
      }
      if (!cpu.point.empty() && !cpu_path.empty()) {
        const std::string c = cgroup_dir(cpu, cpu_path);
        if (access(c.c_str(), W_OK) == 0) {
          s.v1_cpu_parent = c;
          s.cpu = true;
          if (c != dir && c != s.v1_pids_parent) remove_stale(c);
        }
      }
      return s;
    }
    s.why_not = "cgroup v1: " + dir + " is not writable";
  }
  if (s.why_not.empty()) s.why_not = !v2_why.empty() ? v2_why : "no cgroup hierarchy with the memory controller";
  return s;
}

WorkerCgroup::WorkerCgroup(WorkerCgroup&& o) noexcept { *this = std::move(o); }

WorkerCgroup& WorkerCgroup::operator=(WorkerCgroup&& o) noexcept {
  if (this != &o) {
    release();
    memory_dir_ = std::move(o.memory_dir_);
    pids_dir_ = std::move(o.pids_dir_);
    cpu_dir_ = std::move(o.cpu_dir_);
    for (int i = 0; i < kProcsFds; ++i) {
      fds_[i] = o.fds_[i];
      locks_[i] = o.locks_[i];
      o.fds_[i] = o.locks_[i] = -1;
    }
    v2_ = o.v2_;
    o.memory_dir_.clear();
    o.pids_dir_.clear();
    o.cpu_dir_.clear();
  }
  return *this;
}

WorkerCgroup::~WorkerCgroup() { release(); }

void WorkerCgroup::release() {
  for (int& fd : fds_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  // Removed while still locked (no other run may take it for stale meanwhile), then unlocked.
  // The processes are dead and reaped when this runs; the kernel may still be taking the last of
  // them out of the group for a moment.
  for (const std::string* dir : {&memory_dir_, &pids_dir_, &cpu_dir_}) {
    if (dir->empty() || (dir == &cpu_dir_ && (*dir == memory_dir_ || *dir == pids_dir_))) continue;
    for (int i = 0; i < 100 && rmdir(dir->c_str()) != 0 && errno == EBUSY; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  memory_dir_.clear();
  pids_dir_.clear();
  cpu_dir_.clear();
  for (int& fd : locks_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

WorkerCgroup WorkerCgroup::create(const CgroupSupport& support, int worker, std::uint64_t memory_max, int pids_max, double cpus) {
  static std::atomic<unsigned> serial{0};
  const std::string name = "bestofn-" + std::to_string(getpid()) + "-" + std::to_string(serial++) + "-w" + std::to_string(worker);
  WorkerCgroup g;
  auto make = [&](const std::string& parent, int i) {
    const std::string dir = parent + "/" + name;
    g.locks_[i] = make_held(dir);
    (i == 0 ? g.memory_dir_ : i == 1 ? g.pids_dir_ : g.cpu_dir_) = dir;
    return dir;
  };
  auto set = [&](const std::string& file, const std::string& value, bool optional = false) {
    if (!write_control(file, value) && !(optional && errno == ENOENT))
      throw Error(file + ": cannot set " + value + ": " + std::strerror(errno));
  };
  auto open_procs = [&](const std::string& dir, int i) {
    g.fds_[i] = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (g.fds_[i] < 0) throw Error(dir + "/cgroup.procs: " + std::strerror(errno));
  };
  const std::string mem = std::to_string(memory_max), pids = std::to_string(pids_max);
  // CPU time per 100 ms period (the kernel's default period): cpus CPUs' worth, at least 1 ms.
  const long long period_us = 100000, quota_us = std::max(1000LL, static_cast<long long>(cpus * period_us));
  if (support.version == CgroupSupport::Version::V2) {
    g.v2_ = true;
    make(support.v2_parent, 0);
    set(g.memory_dir_ + "/memory.max", mem);
    set(g.memory_dir_ + "/memory.swap.max", "0", true);
    set(g.memory_dir_ + "/pids.max", pids, true);  // the pids controller is welcome, not required
    if (support.cpu) {  // welcome, not required (as the pids controller)
      if (write_control(g.memory_dir_ + "/cpu.max", std::to_string(quota_us) + " " + std::to_string(period_us)))
        g.cpu_dir_ = g.memory_dir_;
      else
        warn_no_cpu_bound(g.memory_dir_ + "/cpu.max: " + std::strerror(errno));
    }
    open_procs(g.memory_dir_, 0);
  } else if (support.version == CgroupSupport::Version::V1) {
    make(support.v1_memory_parent, 0);
    set(g.memory_dir_ + "/memory.limit_in_bytes", mem);
    set(g.memory_dir_ + "/memory.memsw.limit_in_bytes", mem, true);  // only with swap accounting
    open_procs(g.memory_dir_, 0);
    if (support.v1_pids_parent == support.v1_memory_parent) {  // both controllers on one hierarchy
      set(g.memory_dir_ + "/pids.max", pids);
    } else if (!support.v1_pids_parent.empty()) {
      make(support.v1_pids_parent, 1);
      set(g.pids_dir_ + "/pids.max", pids);
      open_procs(g.pids_dir_, 1);
    }
    if (support.cpu) {  // welcome, not required: a hierarchy that refuses it leaves the worker without one
      try {
        if (support.v1_cpu_parent == support.v1_memory_parent) {  // cpu on the memory hierarchy
          g.cpu_dir_ = g.memory_dir_;
        } else if (support.v1_cpu_parent == support.v1_pids_parent) {
          g.cpu_dir_ = g.pids_dir_;
        } else {
          make(support.v1_cpu_parent, 2);
          open_procs(g.cpu_dir_, 2);
        }
        set(g.cpu_dir_ + "/cpu.cfs_period_us", std::to_string(period_us));
        set(g.cpu_dir_ + "/cpu.cfs_quota_us", std::to_string(quota_us));
      } catch (const Error& e) {
        warn_no_cpu_bound(e.what());
        for (int* fd : {&g.fds_[2], &g.locks_[2]})
          if (*fd >= 0) close(*fd), *fd = -1;
        if (!g.cpu_dir_.empty() && g.cpu_dir_ != g.memory_dir_ && g.cpu_dir_ != g.pids_dir_) rmdir(g.cpu_dir_.c_str());
        g.cpu_dir_.clear();
      }
    }
  }
  return g;
}

std::uint64_t WorkerCgroup::peak_bytes() const {
  if (memory_dir_.empty()) return 0;
  std::ifstream f(memory_dir_ + (v2_ ? "/memory.peak" : "/memory.max_usage_in_bytes"));
  std::uint64_t v = 0;
  return f >> v ? v : 0;
}

}  // namespace bestofn
