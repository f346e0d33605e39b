#pragma once
// An output that is complete or absent: lines go to "<path>.partial-XXXXXX" (a name of its own),
// flushed to disk and renamed into place by commit(); without commit (an error, an exception,
// SIGINT/SIGTERM/SIGHUP: bestofn/util/temp_paths.h) the partial file is removed. An empty path means
// stdout, written as it goes. A symlink is followed (the link stays; its target gets the output),
// a replaced regular file's permission bits are kept, a directory is refused, and an existing
// file that is no regular file (/dev/null, a FIFO), or a descriptor under /proc (/dev/stdout), is
// appended to in place: a rename over it would replace it with a file.
#include <sys/types.h>

#include <cstdio>
#include <filesystem>
#include <vector>
#include <optional>
#include <string>

namespace bestofn {

// An output path that names a file this run reads (the same file by any path): bestofn::Error
// before anything is written, instead of replacing the input with the output.
void check_not_input(const std::string& out, const std::string& input);
// The same for every input of a run: a file, or a directory whose files (not its subdirectories')
// the run reads (a model directory, a shard's run directory). `flag` names the output in the
// error ("--out", "--plot").
void check_not_inputs(const std::string& out, const std::vector<std::filesystem::path>& inputs, const std::string& flag);

// Where an output named `path` goes (symlinks followed, at most 40 of them).
struct OutputTarget {
  std::string path;            // the file to write
  bool in_place = false;       // it exists and is no regular file or directory: written directly
  std::optional<mode_t> mode;  // an existing regular file's permission bits
};
OutputTarget output_target(const std::string& path);

class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void line(const std::string& text);   // text + "\n"
  void write(const std::string& text);  // text as it is
  void commit();

 private:
  [[noreturn]] void write_failed(int err) const;
  std::string path_, partial_;
  OutputTarget target_;
  std::FILE* f_ = nullptr;
  bool done_ = false;
  int temp_ = -1;  // register_temp_path's handle
};

}  // namespace bestofn
