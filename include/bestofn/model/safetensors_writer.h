#pragma once
// Streaming safetensors writer: the header is fixed up front from the tensor list, then tensors
// are written one by one in that order, so a model never needs to be held in memory. The file is
// written as "<path>.partial" and renamed into place only by finish(): an interrupted write
// never leaves a file that looks complete.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bestofn/util/dtype.h"

namespace bestofn {

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::size_t nbytes() const;
};

class SafetensorsWriter {
 public:
  SafetensorsWriter(std::filesystem::path path, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // removes the .partial file unless finish() ran
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next tensor in order; `bytes` may come in several calls (chunks) until its size is reached.
  const TensorSpec& current() const;
  void write(const void* bytes, std::size_t n);
  // Flushes, checks every tensor was written in full, and renames into place.
  void finish();

  // The header JSON alone (padded to a multiple of 8 with spaces), for tests and size planning.
  static std::string header_json(const std::vector<TensorSpec>& tensors, const std::map<std::string, std::string>& metadata);

 private:
  std::filesystem::path path_, partial_;
  std::vector<TensorSpec> tensors_;
  std::FILE* f_ = nullptr;
  std::size_t index_ = 0, written_in_current_ = 0;
  bool finished_ = false;
};

}  // namespace bestofn
