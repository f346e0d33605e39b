#include "bestofn/eval/eval_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "bestofn/util/output_file.h"
#include "util/json_file.h"

namespace bestofn {
namespace fs = std::filesystem;
using nlohmann::json;

AppendFile::AppendFile(fs::path path) : path_(std::move(path)) {
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path_.string(), std::string("cannot open for writing: ") + std::strerror(errno));
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) close(fd_);
}

void AppendFile::line(const std::string& text) {
  const std::string row = text + "\n";
  std::size_t done = 0;
  while (done < row.size()) {
    const ssize_t n = write(fd_, row.data() + done, row.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(path_.string(), std::string("write failed: ") + std::strerror(n < 0 ? errno : ENOSPC) +
                                                " (the rows before this one are intact; --resume continues)");
    done += static_cast<std::size_t>(n);
  }
}

std::vector<std::pair<std::string, json>> read_appended_rows(const fs::path& path) {
  std::vector<std::pair<std::string, json>> rows;
  std::ifstream in(path, std::ios::binary);
  if (!in) return rows;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const std::size_t end = text.rfind('\n');
  const std::size_t keep = end == std::string::npos ? 0 : end + 1;
  if (keep < text.size()) {
    spdlog::warn("{}: dropped a torn last line ({} bytes) left by an interrupted run", path.string(), text.size() - keep);
    std::error_code ec;
    fs::resize_file(path, keep, ec);
    if (ec) throw Error(path.string(), "cannot cut the torn last line: " + ec.message());
    text.resize(keep);
  }
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(line_no);
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error(where, "not a JSON object; the file is damaged (not by an interruption)");
    rows.emplace_back(where, std::move(j));
  }
  return rows;
}

namespace {
std::string without_trailing_slash(fs::path p) {
  if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.string();
}
}  // namespace

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  return without_trailing_slash(fs::absolute(path, ec).lexically_normal());
}

std::string canonical_path(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? absolute_path(path) : without_trailing_slash(p);
}

bool same_setting(const std::string& key, const nlohmann::json& a, const nlohmann::json& b) {
  if (a == b) return true;
  return (key == "model" || key == "tokenizer") && a.is_string() && b.is_string() &&
         canonical_path(a.get<std::string>()) == canonical_path(b.get<std::string>());
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  if (path.empty()) throw Error("write_file_atomic: an empty path");  // OutputFile("") is stdout
  OutputFile out(path.string());
  out.write(content);
  out.commit();
}

RunFiles::RunFiles(const fs::path& dir, const nlohmann::ordered_json& manifest, bool resume) {
  const fs::path run = dir / "run.json";
  std::error_code ec;
  // One writer per run directory: a second eval (or --resume) on it while the first runs would
  // append the same samples twice. The lock is on the directory itself (no extra file in it) and
  // goes with this process.
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string(), "cannot create the output directory: " + ec.message());
  lock_.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_.fd < 0) throw Error(dir.string(), std::string("cannot open the output directory: ") + std::strerror(errno));
  if (flock(lock_.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw Error(dir.string(), "another bestofn is writing this run directory now; wait for it to end or choose another --out-dir");
    // A file system without flock on directories (NFS, some FUSE): run, unguarded.
    spdlog::warn("{}: cannot lock the run directory ({}); make sure no other eval writes to it meanwhile", dir.string(),
                 std::strerror(errno));
  }
  if (fs::exists(run, ec)) {
    if (!resume)
      throw Error(dir.string(), "holds a run already (run.json); pass --resume to continue it, or choose another --out-dir");
    std::ifstream in(run);
    const json old = json::parse(in, nullptr, false);
    if (old.is_discarded() || !old.is_object()) throw Error(run.string(), "not valid JSON");
    // A setting written only when set (--until-pass, --prompt-style, ...) that this command does not set.
    for (const auto& [key, value] : old.items())
      if (!manifest.contains(key))
        throw Error(run.string(), "this run was made with " + key + " = " + value.dump() + ", and this command has it unset; --resume needs the same settings");
    for (const auto& [key, value] : manifest.items()) {
      // As run.json holds it: bytes that are not UTF-8 (a path's) as U+FFFD.
      const json now = json::parse(json_text(json(value)));
      if (!old.contains(key) || !same_setting(key, old[key], now))
        throw Error(run.string(), "this run was made with " + key + " = " + (old.contains(key) ? old[key].dump() : std::string("(unset)")) +
                                      ", and this command has " + now.dump() + "; --resume needs the same settings");
    }
    samples_ = read_appended_rows(dir / "samples.jsonl");
    results_ = read_appended_rows(dir / "results.jsonl");
  } else {
    if (fs::exists(dir / "samples.jsonl", ec) || fs::exists(dir / "results.jsonl", ec))
      throw Error(dir.string(), "has samples.jsonl or results.jsonl but no run.json: not a bestofn eval directory to write into");
    // A new run goes into a new or empty directory only: its report.md, summary.json, ... would
    // replace files of the same names that are not a run's (a model directory, someone's notes).
    // (A run.json.partial-* that a SIGKILL left behind, before run.json was in place, is no file
    // of anyone's.)
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (!it->path().filename().string().starts_with("run.json.partial-"))
        throw Error(dir.string(), "is not empty and holds no run (no run.json); a new run needs a new or empty --out-dir");
    if (ec) throw Error(dir.string(), "cannot list the output directory: " + ec.message());
    write_file_atomic(run, json_text(manifest, 2) + "\n");
  }
  samples_out_ = std::make_unique<AppendFile>(dir / "samples.jsonl");
  results_out_ = std::make_unique<AppendFile>(dir / "results.jsonl");
}

RunFiles::DirLock::~DirLock() {
  if (fd >= 0) ::close(fd);
}

void RunFiles::append_sample(const json& row) { samples_out_->line(json_text(row)); }
void RunFiles::append_result(const json& row) { results_out_->line(json_text(row)); }

}  // namespace bestofn
