#include "bestofn/util/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "bestofn/util/error.h"
#include "bestofn/util/temp_paths.h"

namespace bestofn {

namespace fs = std::filesystem;

void check_not_input(const std::string& out, const std::string& input) {
  std::error_code ec;
  // "-" is stdin: redirected from the output file, it is that file.
  if (!out.empty() && !input.empty() && fs::equivalent(out, input == "-" ? "/dev/stdin" : input, ec))
    throw Error(out, "is " + (input == "-" ? std::string("stdin") : input) + ", which this run reads; write the output to another file");
}

void check_not_inputs(const std::string& out, const std::vector<fs::path>& inputs, const std::string& flag) {
  if (out.empty() || out == "-") return;
  std::error_code ec;
  if (!fs::exists(out, ec)) return;  // a new file is no input
  auto refuse = [&](const fs::path& input) {
    throw Error(out, flag + ": is " + input.string() + ", which this run reads or writes; write the output to another file");
  };
  for (const auto& input : inputs) {
    if (input.empty()) continue;
    if (!fs::is_directory(input, ec)) {
      if (fs::equivalent(out, input, ec)) refuse(input);
      continue;
    }
    for (fs::directory_iterator it(input, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      if (it->is_regular_file(e2) && fs::equivalent(out, it->path(), e2)) refuse(it->path());
    }
  }
}

OutputTarget output_target(const std::string& path) {
  OutputTarget t;
  t.path = path;
  // What the path names in the end (links followed by the kernel): a device, a FIFO or a socket
  // is written in place, by its own name (/dev/stdout and /proc/self/fd/N are "magic" links whose
  // text, such as "pipe:[123]", names no file).
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(path, "is a directory; name a file");
    if (!S_ISREG(st.st_mode)) {
      t.in_place = true;
      return t;
    }
  }
  fs::path p = path;
  for (int hops = 0;; ++hops) {
    // The file descriptors of /proc (and /dev/fd, /dev/stdout through them) are written in place
    // too: a file open on stdout (`>>` appends to it) must not be replaced.
    if (p.lexically_normal().string().starts_with("/proc/")) {
      t.in_place = true;
      t.path = path;
      return t;
    }
    if (::lstat(p.c_str(), &st) != 0) break;  // a new file (or an error that creating it will name)
    if (!S_ISLNK(st.st_mode)) {
      if (S_ISREG(st.st_mode)) t.mode = st.st_mode & 0777;  // not setuid/setgid/sticky: new content
      break;
    }
    if (hops == 40) throw Error(path, "too many levels of symbolic links");
    std::error_code ec;
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) throw Error(path, "cannot read the symbolic link: " + ec.message());
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  t.path = p.string();
  return t;
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) {
    f_ = stdout;
    return;
  }
  target_ = output_target(path_);
  if (target_.in_place) {
    // Appending, never truncating: for a device or a FIFO the same, and /dev/stdout redirected to
    // a file with `>>` keeps what the file held.
    f_ = std::fopen(target_.path.c_str(), "ab");
    if (!f_) throw Error(path_, std::string("cannot open: ") + std::strerror(errno));
    return;
  }
  // A name of its own (two runs writing the same --out must not share one partial file), created
  // with mode 0666 less the umask like any new file (the kernel applies it), then given the
  // replaced file's permission bits if there was one; removed if a signal ends the process.
  static std::atomic<unsigned> serial{0};
  std::random_device rd;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".partial-%06x%u", rd() & 0xffffffu, serial++);
    partial_ = target_.path + suffix;
    fd = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100)) throw Error(path_, std::string("cannot create: ") + std::strerror(errno));
  }
  temp_ = register_temp_path(partial_);
  if (target_.mode && fchmod(fd, *target_.mode) != 0) {
    const int err = errno;
    close(fd);
    std::remove(partial_.c_str());
    unregister_temp_path(temp_);
    throw Error(path_, std::string("cannot set the mode of the new file: ") + std::strerror(err));
  }
  f_ = fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    close(fd);
    std::remove(partial_.c_str());
    unregister_temp_path(temp_);
    throw Error(path_, std::string("cannot create: ") + std::strerror(err));
  }
}

OutputFile::~OutputFile() {
  if (f_ && f_ != stdout) std::fclose(f_);
  if (!done_ && !partial_.empty()) std::remove(partial_.c_str());
  unregister_temp_path(temp_);
}

void OutputFile::write_failed(int err) const {
  throw Error(path_.empty() ? "<stdout>" : path_, std::string("write failed: ") + std::strerror(err));
}

void OutputFile::write(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), f_) != text.size()) write_failed(errno);
  // stdout goes as it is written (a consumer reads whole lines as they come), and a full disk or a
  // closed pipe there fails the run now, not after it reported success.
  if (f_ == stdout && std::fflush(f_) != 0) write_failed(errno);
}

void OutputFile::line(const std::string& text) { write(text + "\n"); }

void OutputFile::commit() {
  if (f_ == stdout) {
    done_ = true;
    return;
  }
  // Flushed to the disk before the rename: after a crash the file is the old one or the whole new
  // one, never an empty file under the new name.
  bool ok = std::fflush(f_) == 0 && (target_.in_place || fsync(fileno(f_)) == 0);
  int err = errno;
  if (std::fclose(f_) != 0 && ok) ok = false, err = errno;
  f_ = nullptr;
  if (!ok) write_failed(err);
  if (!target_.in_place) {
    std::error_code ec;
    fs::rename(partial_, target_.path, ec);
    if (ec) throw Error(path_, "cannot rename into place: " + ec.message());
  }
  done_ = true;
  unregister_temp_path(temp_);
  temp_ = -1;
}

}  // namespace bestofn
