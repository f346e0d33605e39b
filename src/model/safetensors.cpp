#include "bestofn/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "util/json_file.h"

namespace bestofn {
namespace fs = std::filesystem;
using nlohmann::json;

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "]";
  return s;
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// A non-negative integer that fits in uint64, or an error naming the tensor and the field.
std::uint64_t get_uint(const json& v, const std::string& file, const std::string& tensor, const char* field) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    throw Error(file, "tensor '" + tensor + "': " + field + " must hold non-negative integers, got " + v.dump());
  return v.get<std::uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& e, std::size_t data_size, const std::string& file) {
  auto fail = [&](const std::string& what) { return Error(file, "tensor '" + name + "': " + what); };
  if (!e.is_object()) throw fail("entry must be an object, got " + e.dump());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) throw fail(std::string("missing \"") + key + "\"");
  TensorInfo t;
  t.name = name;
  if (!e["dtype"].is_string()) throw fail("dtype must be a string, got " + e["dtype"].dump());
  const auto dtype_s = e["dtype"].get<std::string>();
  const auto dt = parse_dtype(dtype_s);
  if (!dt) throw fail("unknown dtype '" + dtype_s + "'");
  t.dtype = *dt;
  if (!e["shape"].is_array()) throw fail("shape must be an array, got " + e["shape"].dump());
  std::uint64_t numel = 1;
  for (const auto& d : e["shape"]) {
    const std::uint64_t dim = get_uint(d, file, name, "shape");
    if (dim > (1ull << 40) || (dim != 0 && numel > (1ull << 62) / dim)) throw fail("shape " + e["shape"].dump() + " is too large");
    numel *= dim;
    t.shape.push_back(static_cast<std::int64_t>(dim));
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2) throw fail("data_offsets must be [begin, end], got " + off.dump());
  const std::uint64_t begin = get_uint(off[0], file, name, "data_offsets");
  const std::uint64_t end = get_uint(off[1], file, name, "data_offsets");
  if (end < begin) throw fail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before begin");
  if (end > data_size)
    throw fail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] outside the data section of " +
               std::to_string(data_size) + " bytes (truncated file?)");
  const std::uint64_t expected = numel * dtype_size(t.dtype);
  if (end - begin != expected)
    throw fail("byte size mismatch: shape " + shape_string(t.shape) + " x " + std::string(dtype_name(t.dtype)) + " = " +
               std::to_string(expected) + " bytes, but data_offsets span " + std::to_string(end - begin));
  t.offset = begin;
  t.nbytes = end - begin;
  return t;
}

json parse_header_json(std::string_view text, const std::string& file) {
  // Duplicate tensor names: nlohmann keeps the last one silently, so watch the top-level keys.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    throw Error(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) throw Error(file, "tensor '" + duplicate + "' appears twice in the header");
  if (!j.is_object()) throw Error(file, "header must be a JSON object");
  return j;
}

}  // namespace

SafetensorsHeader parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& file) {
  if (size < 8) throw Error(file, "file is " + std::to_string(size) + " bytes, too short for a safetensors header");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxSafetensorsHeader)
    throw Error(file, "absurd header length " + std::to_string(n) + " (limit " + std::to_string(kMaxSafetensorsHeader) +
                          "): not a safetensors file?");
  if (n > size - 8)
    throw Error(file, "header length " + std::to_string(n) + " exceeds the file size " + std::to_string(size) +
                          " (truncated file?)");
  if (n == 0 || bytes[8] != '{') throw Error(file, "header does not start with '{': not a safetensors file?");
  const std::size_t data_size = size - 8 - n;
  json j = parse_header_json(std::string_view(reinterpret_cast<const char*>(bytes + 8), n), file);

  SafetensorsHeader h;
  h.header_len = n;
  for (auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw Error(file, "__metadata__ must be an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw Error(file, "__metadata__ value '" + k + "' must be a string");
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(name, entry, data_size, file));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  std::size_t expect = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.offset < expect)
      throw Error(file, "tensor '" + t.name + "': data_offsets start at " + std::to_string(t.offset) +
                            ", overlapping tensor '" + prev->name + "' which ends at " + std::to_string(expect));
    if (t.offset > expect)
      throw Error(file, "tensor '" + t.name + "': data_offsets start at " + std::to_string(t.offset) + ", leaving a gap after " +
                            (prev ? "tensor '" + prev->name + "'" : std::string("the header")) + " at " + std::to_string(expect));
    expect = t.offset + t.nbytes;
    prev = &t;
  }
  if (expect != data_size)
    throw Error(file, "data section is " + std::to_string(data_size) + " bytes but the tensors cover " +
                          std::to_string(expect) + " (truncated or padded file?)");
  return h;
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path.string()) {
  const int fd = open_input(path);  // refuses directories and devices; a FIFO is left for mmap's check
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path_, "not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw Error(path_, "file is " + std::to_string(size_) + " bytes, too short for a safetensors header");
  }
  map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(path_, std::string("mmap failed: ") + std::strerror(errno));
  }
  const auto* bytes = static_cast<const std::uint8_t*>(map_);
  try {
    header_ = parse_safetensors(bytes, size_, path_);
  } catch (...) {
    munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
  data_start_ = bytes + 8 + header_.header_len;
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) by_name_.emplace(header_.tensors[i].name, i);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

ModelFiles::ModelFiles(const fs::path& dir) : dir_(dir.string()) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir_, fs::exists(dir, ec) ? "not a directory" : "no such model directory");
  if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    open_index(dir / "model.safetensors.index.json");
    return;
  }
  if (fs::exists(dir / "model.safetensors", ec)) {
    add_shard(dir / "model.safetensors");
    return;
  }
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") found.push_back(e.path());
  if (found.size() != 1)
    throw Error(dir_, found.empty() ? "no model.safetensors or model.safetensors.index.json (is this a Hugging Face model directory?)"
                                    : "several .safetensors files but no model.safetensors.index.json");
  add_shard(found[0]);
}

void ModelFiles::add_shard(const fs::path& path) {
  shards_.push_back(std::make_unique<SafetensorsFile>(path));
  const std::size_t s = shards_.size() - 1;
  for (const auto& t : shards_[s]->tensors()) {
    auto [it, inserted] = index_.emplace(t.name, std::make_pair(s, &t));
    if (!inserted)
      throw Error(path.string(), "tensor '" + t.name + "' is also in " + shards_[it->second.first]->path());
  }
}

void ModelFiles::open_index(const fs::path& index_path) {
  const std::string file = index_path.string();
  const json j = read_json_file(index_path);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(file, "missing the \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensor names
  for (auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) throw Error(file, "tensor '" + name + "': shard must be a file name, got " + shard.dump());
    const auto s = shard.get<std::string>();
    const fs::path p(s);
    if (s.empty() || p.has_parent_path() || s == "." || s == "..")
      throw Error(file, "tensor '" + name + "': shard '" + s + "' must be a plain file name in the model directory");
    by_shard[s].push_back(name);
  }
  if (by_shard.empty()) throw Error(file, "weight_map is empty");
  for (const auto& [shard, names] : by_shard) {
    const fs::path p = index_path.parent_path() / shard;
    std::error_code ec;  // a name the file system rejects (too long, say) is a missing shard, not an exception
    if (!fs::exists(p, ec)) throw Error(file, "points to missing shard '" + shard + "' (tensor '" + names.front() + "')");
    add_shard(p);
    for (const auto& name : names)
      if (!shards_.back()->find(name)) throw Error(p.string(), "tensor '" + name + "' listed in " + file + " is not in this shard");
  }
}

TensorView ModelFiles::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) return {};
  const auto& shard = *shards_[it->second.first];
  return {it->second.second, shard.data(*it->second.second), &shard.path()};
}

std::vector<TensorView> ModelFiles::all() const {
  std::vector<TensorView> v;
  for (const auto& s : shards_)
    for (const auto& t : s->tensors()) v.push_back({&t, s->data(t), &s->path()});
  return v;
}

}  // namespace bestofn
