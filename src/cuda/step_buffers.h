#pragma once
// The device buffers a decode step's launches read or write. Each registers in the engine's set
// where it is declared (a StepBuffer member), so that the CUDA graph key, which holds every one's
// address (a buffer that grows moves, and a graph captured before would write the old one), cannot
// leave one out: there is no list to forget it in.
#include <cstdint>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/graph_cache.h"

namespace bestofn::cuda {

class StepBuffers {
 public:
  void add(const DeviceBuffer* b) { all_.push_back(b); }
  // Every registered buffer's address, in the order they were declared.
  void add_to_key(GraphKey& key) const {
    for (const DeviceBuffer* b : all_) key.push_back(key_address(b->get()));
  }

 private:
  std::vector<const DeviceBuffer*> all_;
};

// A DeviceBuffer registered in a StepBuffers set for as long as it lives (it cannot move).
class StepBuffer : public DeviceBuffer {
 public:
  explicit StepBuffer(StepBuffers& set) { set.add(this); }
  StepBuffer(const StepBuffer&) = delete;
  StepBuffer& operator=(const StepBuffer&) = delete;
  StepBuffer(StepBuffer&&) = delete;
  StepBuffer& operator=(StepBuffer&&) = delete;
};

}  // namespace bestofn::cuda
