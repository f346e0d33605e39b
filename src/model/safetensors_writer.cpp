#include "bestofn/model/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"

namespace bestofn {
namespace fs = std::filesystem;

std::size_t TensorSpec::nbytes() const {
  std::size_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::string SafetensorsWriter::header_json(const std::vector<TensorSpec>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    if (h.contains(t.name)) throw Error("safetensors writer: duplicate tensor '" + t.name + "'");
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  return s;
}

SafetensorsWriter::SafetensorsWriter(fs::path path, std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), partial_(path_.string() + ".partial"), tensors_(std::move(tensors)) {
  const std::string header = header_json(tensors_, metadata);
  f_ = std::fopen(partial_.c_str(), "wb");
  if (!f_) throw Error(partial_.string(), std::string("cannot create: ") + std::strerror(errno));
  std::uint8_t len[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, f_) != 8 || std::fwrite(header.data(), 1, header.size(), f_) != header.size())
    throw Error(partial_.string(), std::string("write failed: ") + std::strerror(errno));
  while (index_ < tensors_.size() && tensors_[index_].nbytes() == 0) ++index_;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) std::fclose(f_);
  if (!finished_) {
    std::error_code ec;
    fs::remove(partial_, ec);
  }
}

const TensorSpec& SafetensorsWriter::current() const {
  if (index_ >= tensors_.size()) throw Error(path_.string(), "all tensors already written");
  return tensors_[index_];
}

void SafetensorsWriter::write(const void* bytes, std::size_t n) {
  const auto& t = current();
  if (written_in_current_ + n > t.nbytes())
    throw Error(path_.string(), "tensor '" + t.name + "': " + std::to_string(written_in_current_ + n) +
                                    " bytes written, expected " + std::to_string(t.nbytes()));
  if (std::fwrite(bytes, 1, n, f_) != n) throw Error(partial_.string(), std::string("write failed: ") + std::strerror(errno));
  written_in_current_ += n;
  if (written_in_current_ == t.nbytes()) {
    written_in_current_ = 0;
    ++index_;
    while (index_ < tensors_.size() && tensors_[index_].nbytes() == 0) ++index_;
  }
}

void SafetensorsWriter::finish() {
  if (index_ != tensors_.size())
    throw Error(path_.string(), "tensor '" + tensors_[index_].name + "' was not written in full");
  const bool ok = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
  const int err = errno;
  std::fclose(f_);
  f_ = nullptr;
  if (!ok) throw Error(partial_.string(), std::string("write failed: ") + std::strerror(err));
  std::error_code ec;
  fs::rename(partial_, path_, ec);
  if (ec) throw Error(path_.string(), "cannot rename into place: " + ec.message());
  finished_ = true;
}

}  // namespace bestofn
