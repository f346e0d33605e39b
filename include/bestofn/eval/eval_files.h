#pragma once
// The output directory of `bestofn eval`: run.json (the settings that decide the samples),
// samples.jsonl and results.jsonl appended one row per write() — so that a killed run leaves at
// most one torn last line, which --resume drops — and the files written whole at the end.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace bestofn {

class AppendFile {
 public:
  explicit AppendFile(std::filesystem::path path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  // One row, one write(): in the file when this returns. Throws bestofn::Error naming the file
  // (a full disk, say); the file then ends in at most one torn line.
  void line(const std::string& text);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// The rows of a JSONL file that a run appended to, each with "FILE:LINE". A torn last line (no
// newline: the run was killed mid-write) is dropped and cut from the file; any other bad line is
// an error naming FILE:LINE.
std::vector<std::pair<std::string, nlohmann::json>> read_appended_rows(const std::filesystem::path& path);

// A model or tokenizer path as run.json records it: absolute, lexically normal, no trailing
// slash (symlinks kept: shards on other nodes may resolve a shared mount differently).
std::string absolute_path(const std::string& path);
// The same with symlinks resolved, for comparing.
std::string canonical_path(const std::string& path);

// Whether a run.json setting has the same value in two runs: equal JSON, or for "model" and
// "tokenizer" the same file by canonical_path, so that a run resumed (or a shard merged) from
// another directory, or through another spelling of the same path, is the same run.
bool same_setting(const std::string& key, const nlohmann::json& a, const nlohmann::json& b);

// The whole content through an OutputFile (output_file.h): a partial file of its own, renamed into
// place, so the file is whole or absent; a device or FIFO written in place.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);

class RunFiles {
 public:
  // A new run (dir absent or without a run) or, with resume, the run in dir, which must have been
  // made with the same manifest: the first differing setting is named in the error.
  // Only one RunFiles per directory at a time, across processes (a lock on the directory): a
  // second is an Error naming it.
  RunFiles(const std::filesystem::path& dir, const nlohmann::ordered_json& manifest, bool resume);
  const std::vector<std::pair<std::string, nlohmann::json>>& samples() const { return samples_; }
  const std::vector<std::pair<std::string, nlohmann::json>>& results() const { return results_; }
  void append_sample(const nlohmann::json& row);
  void append_result(const nlohmann::json& row);

 private:
  // First member: released last, and also when the constructor throws after taking it.
  struct DirLock {
    int fd = -1;
    DirLock() = default;
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    ~DirLock();
  } lock_;
  std::vector<std::pair<std::string, nlohmann::json>> samples_, results_;
  std::unique_ptr<AppendFile> samples_out_, results_out_;
};

}  // namespace bestofn
