#include "cli/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "bestofn/error.h"
#include "bestofn/temp_paths.h"

namespace bestofn::cli {

namespace fs = std::filesystem;

void check_not_input(const std::string& out, const std::string& input) {
  std::error_code ec;
  if (!out.empty() && !input.empty() && fs::equivalent(out, input, ec))
    throw Error(out, "is " + input + ", which this run reads; write the output to another file");
}

OutputTarget output_target(const std::string& path) {
  OutputTarget t;
  fs::path p = path;
  for (int hops = 0;; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) break;  // a new file (or an error that creating it will name)
    if (S_ISLNK(st.st_mode)) {
      if (hops == 40) throw Error(path, "too many levels of symbolic links");
      std::error_code ec;
      const fs::path to = fs::read_symlink(p, ec);
      if (ec) throw Error(path, "cannot read the symbolic link: " + ec.message());
      p = to.is_absolute() ? to : p.parent_path() / to;
      continue;
    }
    if (S_ISREG(st.st_mode)) t.mode = st.st_mode & 07777;
    else if (!S_ISDIR(st.st_mode)) t.in_place = true;
    break;
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
    f_ = std::fopen(target_.path.c_str(), "wb");
    if (!f_) throw Error(path_, std::string("cannot open: ") + std::strerror(errno));
    return;
  }
  // A name of its own (two runs writing the same --out must not share one partial file), made
  // with the replaced file's permission bits, else mode 0666 less the umask like any new file,
  // and removed if a signal ends the process.
  std::vector<char> name(target_.path.begin(), target_.path.end());
  for (char ch : std::string(".partial-XXXXXX")) name.push_back(ch);
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) throw Error(path_, std::string("cannot create: ") + std::strerror(errno));
  partial_ = name.data();
  temp_ = register_temp_path(partial_);
  mode_t mode = 0;
  if (target_.mode) {
    mode = *target_.mode;
  } else {
    const mode_t mask = umask(0);
    umask(mask);
    mode = 0666 & ~mask;
  }
  fchmod(fd, mode);
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

}  // namespace bestofn::cli
