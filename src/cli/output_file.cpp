#include "cli/output_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "bestofn/error.h"

namespace bestofn::cli {

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) {
    f_ = stdout;
    return;
  }
  partial_ = path_ + ".partial";
  f_ = std::fopen(partial_.c_str(), "wb");
  if (!f_) throw Error(path_, std::string("cannot create: ") + std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (f_ && f_ != stdout) std::fclose(f_);
  if (!done_ && !partial_.empty()) std::remove(partial_.c_str());
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
}

}  // namespace bestofn::cli
