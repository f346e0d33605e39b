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

void check_not_input(const std::string& out, const std::string& input) {
  std::error_code ec;
  if (!out.empty() && !input.empty() && std::filesystem::equivalent(out, input, ec))
    throw Error(out, "is " + input + ", which this run reads; write the output to another file");
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) {
    f_ = stdout;
    return;
  }
  // A name of its own (two runs writing the same --out must not share one partial file), made
  // with mode 0666 less the umask like any new file, and removed if a signal ends the process.
  std::vector<char> name(path_.begin(), path_.end());
  for (char ch : std::string(".partial-XXXXXX")) name.push_back(ch);
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) throw Error(path_, std::string("cannot create: ") + std::strerror(errno));
  partial_ = name.data();
  temp_ = register_temp_path(partial_);
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
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

void OutputFile::line(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fputc('\n', f_) == EOF)
    throw Error(path_.empty() ? "<stdout>" : path_, std::string("write failed: ") + std::strerror(errno));
  if (f_ == stdout) std::fflush(f_);
}

void OutputFile::commit() {
  if (f_ == stdout) {
    done_ = true;
    return;
  }
  bool ok = std::fflush(f_) == 0;
  int err = errno;
  if (std::fclose(f_) != 0 && ok) ok = false, err = errno;
  f_ = nullptr;
  if (!ok) throw Error(path_, std::string("write failed: ") + std::strerror(err));
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec) throw Error(path_, "cannot rename into place: " + ec.message());
  done_ = true;
  unregister_temp_path(temp_);
  temp_ = -1;
}

}  // namespace bestofn::cli
