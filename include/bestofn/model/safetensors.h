#pragma once
// safetensors reading: an mmap'd file with a validated header, and a model's set of shards.
// Format: 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
// then the data section; offsets are relative to its start.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bestofn/util/dtype.h"

namespace bestofn {

// Larger headers are rejected as corrupt (the same bound as the reference implementation).
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100u << 20;

// "[4096, 14336]", for messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;  // from the start of the data section
  std::size_t nbytes = 0;
  std::int64_t numel() const;
};

struct SafetensorsHeader {
  std::size_t header_len = 0;                     // N
  std::vector<TensorInfo> tensors;                // in file order (by offset)
  std::map<std::string, std::string> metadata;    // "__metadata__"
};

// Parses and validates the header of a file held in memory (the fuzz target's entry point).
// `file` only names the source in errors. Throws bestofn::Error naming the file and the tensor.
// Checks: a sane header length, valid JSON, no duplicate names, known dtypes, byte size =
// numel x dtype size, offsets inside the data section, contiguous and non-overlapping, and the
// data section covered exactly.
SafetensorsHeader parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& file);

// A tensor's bytes in a file (or in owned storage). `data` stays valid while its owner lives.
struct TensorView {
  const TensorInfo* info = nullptr;
  const std::uint8_t* data = nullptr;
  const std::string* file = nullptr;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::size_t file_size() const { return size_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  const std::uint8_t* data(const TensorInfo& t) const { return data_start_ + t.offset; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  const std::uint8_t* data_start_ = nullptr;
  SafetensorsHeader header_;
  std::unordered_map<std::string_view, std::size_t> by_name_;
};

// All the safetensors of a model directory: `model.safetensors.index.json` (sharded), else
// `model.safetensors`, else the single `*.safetensors` file there.
class ModelFiles {
 public:
  explicit ModelFiles(const std::filesystem::path& dir);
  // nullopt-like: view.info == nullptr when absent.
  TensorView find(std::string_view name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor, shard by shard.
  std::vector<TensorView> all() const;
  std::size_t tensor_count() const { return index_.size(); }
  const std::string& dir() const { return dir_; }

 private:
  void open_index(const std::filesystem::path& index_path);
  void add_shard(const std::filesystem::path& path);
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, std::pair<std::size_t, const TensorInfo*>> index_;
};

}  // namespace bestofn
