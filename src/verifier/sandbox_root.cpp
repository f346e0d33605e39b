#include "sandbox_root.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <filesystem>

namespace bestofn::sandbox_root {
namespace {

// The host's top-level trees the interpreter and its libraries live in, as links or directories
// (merged-/usr systems have /bin -> usr/bin, /lib -> usr/lib, ...).
constexpr const char* kSystemTrees[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
constexpr const char* kDevices[] = {"null", "zero", "random", "urandom"};

bool is_under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

std::string link_target(const std::string& path) {
  char buf[PATH_MAX];
  const ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

Plan make_plan(const std::string& python) {
  Plan plan;
  const std::string& r = plan.staging;
  auto add = [&](Entry::Kind kind, const std::string& inner, const std::string& source = "", mode_t mode = 0755) {
    plan.entries.push_back({kind, r + inner, source, mode});
  };
  std::vector<std::string> bound;  // host directories bound whole
  for (const char* tree : kSystemTrees) {
    struct stat st{};
    if (lstat(tree, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      const std::string target = link_target(tree);
      if (!target.empty()) add(Entry::Kind::Symlink, tree, target);
    } else if (S_ISDIR(st.st_mode)) {
      add(Entry::Kind::Bind, tree, tree);
      bound.push_back(tree);
    }
  }
  // An interpreter outside those trees (/opt/python3.12/bin/python3): its prefix as well, with
  // the directories above it; never a top-level directory or one in a home (/root/bin/python3
  // would bind all of /root). Such an interpreter then fails the probe, which says why.
  char real[PATH_MAX];
  if (realpath(python.c_str(), real)) {
    const std::string exe = real;
    bool covered = false;
    for (const std::string& b : bound) covered = covered || is_under(exe, b);
    const std::string prefix = std::filesystem::path(exe).parent_path().parent_path().string();
    const bool private_tree = is_under(prefix, "/home") || is_under(prefix, "/root");
    const bool top_level = std::filesystem::path(prefix).parent_path() == "/";
    if (!covered && !private_tree && !top_level) {
      std::string so_far;
      for (const auto& part : std::filesystem::path(prefix).parent_path().relative_path()) {
        so_far += '/';
        so_far += part.string();
        add(Entry::Kind::Dir, so_far);
      }
      add(Entry::Kind::Bind, prefix, prefix);
    }
  }
  add(Entry::Kind::Dir, "/etc");
  struct stat st{};
  if (stat("/etc/ld.so.cache", &st) == 0 && S_ISREG(st.st_mode)) add(Entry::Kind::BindFile, "/etc/ld.so.cache", "/etc/ld.so.cache");
  // Debian's alternatives: links such as /usr/lib/x86_64-linux-gnu/libblas.so.3 point through
  // /etc/alternatives back into /usr, and numpy loads its BLAS that way (EvalPlus's candidates may
  // import numpy; without it the import fails). Only links to what /usr already shows, read-only.
  if (lstat("/etc/alternatives", &st) == 0 && S_ISDIR(st.st_mode)) add(Entry::Kind::Bind, "/etc/alternatives", "/etc/alternatives");
  if (lstat("/etc/localtime", &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      const std::string target = link_target("/etc/localtime");
      if (!target.empty()) add(Entry::Kind::Symlink, "/etc/localtime", target);
    } else if (S_ISREG(st.st_mode)) {
      add(Entry::Kind::BindFile, "/etc/localtime", "/etc/localtime");
    }
  }
  add(Entry::Kind::DevTmpfs, "/dev");
  for (const char* d : kDevices) {
    const std::string host = std::string("/dev/") + d;
    if (stat(host.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) add(Entry::Kind::BindFile, host, host);
  }
  add(Entry::Kind::Symlink, "/dev/fd", "/proc/self/fd");
  add(Entry::Kind::Symlink, "/dev/stdin", "/proc/self/fd/0");
  add(Entry::Kind::Symlink, "/dev/stdout", "/proc/self/fd/1");
  add(Entry::Kind::Symlink, "/dev/stderr", "/proc/self/fd/2");
  // POSIX shared memory in /tmp: one tmpfs for the zygote to renew per candidate, not two.
  add(Entry::Kind::Symlink, "/dev/shm", "/tmp");
  add(Entry::Kind::Dir, "/proc", "", 0700);
  add(Entry::Kind::Proc, kPrivateProc);
  for (const char* dir : kZygoteDirs) add(Entry::Kind::Dir, dir, "", 0700);
  add(Entry::Kind::Dir, "/tmp", "", 01777);
  return plan;
}

}  // namespace bestofn::sandbox_root
