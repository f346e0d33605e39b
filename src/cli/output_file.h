#pragma once
// An output that is complete or absent: lines go to "<path>.partial", renamed into place by
// commit(); without commit (an error, an exception) the partial file is removed. An empty path
// means stdout, written as it goes.
#include <cstdio>
#include <string>

namespace bestofn::cli {

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
};

}  // namespace bestofn::cli
