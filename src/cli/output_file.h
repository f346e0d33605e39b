#pragma once
// An output that is complete or absent: lines go to "<path>.partial-XXXXXX" (a name of its own),
// renamed into place by commit(); without commit (an error, an exception, SIGINT/SIGTERM/SIGHUP:
// bestofn/temp_paths.h) the partial file is removed. An empty path means stdout, written as it goes.
#include <cstdio>
#include <string>

namespace bestofn::cli {

// An output path that names a file this run reads (the same file by any path): bestofn::Error
// before anything is written, instead of replacing the input with the output.
void check_not_input(const std::string& out, const std::string& input);

class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void line(const std::string& text);  // text + "\n"
  void commit();

 private:
  std::string path_, partial_;
  std::FILE* f_ = nullptr;
  bool done_ = false;
  int temp_ = -1;  // register_temp_path's handle
};

}  // namespace bestofn::cli
