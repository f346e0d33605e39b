#pragma once
// The benchmark files bestofn knows by name: data/datasets.json, compiled into the binary, says
// where each lies under the data folder, its published size and SHA-256, and where to get it.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace bestofn {

struct DatasetFile {
  std::string name;         // "humaneval", "humaneval+", "mbpp": the name load_dataset takes
  std::string file;         // under the data folder: "humaneval/HumanEval.jsonl.gz"
  std::string alternative;  // another file read in its place, unchecked ("humaneval/HumanEval.jsonl"), or empty
  std::uint64_t size = 0;   // bytes of `file` as published
  std::string sha256;       // of `file` as published, lowercase hex
  std::string source;       // what it is and who publishes it
  std::string licence;
  std::string get;          // where to download it
};

// The manifest's entries, parsed once.
const std::vector<DatasetFile>& dataset_manifest();

// The entry named `name`, or nullptr.
const DatasetFile* find_dataset(std::string_view name);

// The SHA-256 of a file's bytes, lowercase hex. Throws bestofn::Error when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

// The SHA-256 of `text`, lowercase hex.
std::string sha256_text(std::string_view text);

// Hashes `path`, a copy of `entry.file`, once per path in a process, and logs one warning (the
// file, the expected and the found checksum) when it differs from the published one: a patched
// copy is the user's choice, so it is never an error. Returns whether the checksums match.
bool check_dataset_file(const DatasetFile& entry, const std::filesystem::path& path);

}  // namespace bestofn
