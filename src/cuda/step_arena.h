#pragma once
// One host-to-device copy per step: a step's index arrays (token ids, positions, lengths, the
// rows' KV descriptors, block tables, draw indexes) written by the step planner straight into
// pinned memory (src/cuda/step_plan.h lays them out) and copied with one cudaMemcpyAsync into the
// device arena of the step's bucket (bucket_of(T), step_plan.h). With CUDA graphs the arrays must
// sit at addresses that stay the same from step to step: one arena per bucket, reserved ahead and
// grow-only, so that a bucket's arena growing (or a prefill's) moves no other bucket's, and the
// graphs captured for them still replay.
//
// Double-buffered staging: two pinned buffers used alternately, each with an event recorded after
// the copy that reads it, and stage() waits on that event before handing the buffer out again, so
// the host writes step t+1's arrays while step t's copy may still be in flight. One device arena
// per bucket, not two: a graph bakes in the device addresses, and two arenas used alternately
// would make two graphs of every bucket; one is safe because the upload is ordered on the stream
// after the previous step's kernels, which are the only readers.
//
// prefill uses the older interface (clear, add, upload(stream), prefill_at): arrays gathered in a
// host vector, then staged in a third pinned buffer of its own (a prefill between two steps leaves
// step t+1's speculated arrays in theirs) and copied into a device buffer of its own.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <vector>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"

namespace bestofn::cuda {

class StepArena {
 public:
  StepArena() = default;
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;
  ~StepArena() {
    for (Staging& s : staging_)
      if (s.copied) cudaEventDestroy(s.copied);
    if (prefill_.copied) cudaEventDestroy(prefill_.copied);
  }

  // The device arena of `bucket` holds at least `bytes` (a cudaMalloc when it grows, and that
  // arena moves: call it ahead of a run).
  void reserve(int bucket, std::size_t bytes) { grow(steps_[bucket], bytes); }
  // Both step staging buffers hold `bytes` (Engine::reserve: nothing grows inside a run).
  void reserve_staging(std::size_t bytes) {
    for (Staging& s : staging_) s.pinned.resize(bytes);
  }
  // The prefill staging buffer and the prefill device buffer hold `bytes`.
  void reserve_prefill(std::size_t bytes) {
    prefill_.pinned.resize(bytes);
    grow(prefill_dev_, bytes);
  }
  // The next pinned staging buffer, at least `bytes` long, once the copy that last read it is done.
  char* stage(std::size_t bytes) {
    current_ ^= 1;
    return take(staging_[current_], bytes);
  }
  // The buffer stage() handed out last (StepAhead patches it in place).
  char* current() const { return staging_[current_].pinned.get<char>(); }
  bool is_current(const char* p) const { return p == current(); }
  // Copies the first `bytes` of the buffer stage() handed out last into the arena of `bucket`
  // (grown first to what was staged, outside any capture, when it is smaller), ordered on `stream`.
  void upload(int bucket, std::size_t bytes, cudaStream_t stream) {
    Staging& s = staging_[current_];
    DeviceBuffer& dev = steps_[bucket];
    grow(dev, s.staged);
    upload(s, dev, bytes, stream);
  }
  // The device address of the values at byte offset `off` of the arena of `bucket` (reserved or
  // uploaded to before).
  template <typename T>
  T* at(int bucket, std::size_t off) const {
    return reinterpret_cast<T*>(steps_.at(bucket).get<char>() + off);
  }
  const void* device_base(int bucket) const { return steps_.at(bucket).get(); }

  void clear() { host_.clear(); }
  // Appends n values (16-byte aligned); returns their byte offset in the arena.
  template <typename T>
  std::size_t add(const T* p, std::size_t n) {
    const std::size_t off = (host_.size() + 15) / 16 * 16;
    host_.resize(off + n * sizeof(T));
    if (n) std::memcpy(host_.data() + off, p, n * sizeof(T));
    return off;
  }
  template <typename T>
  std::size_t add(const std::vector<T>& v) {
    return add(v.data(), v.size());
  }
  // Stages and copies what was added.
  void upload(cudaStream_t stream) {
    const std::size_t n = std::max<std::size_t>(host_.size(), 16);
    std::memcpy(take(prefill_, n), host_.data(), host_.size());
    grow(prefill_dev_, n);
    upload(prefill_, prefill_dev_, host_.size(), stream);
  }
  // The device address of the added values at byte offset `off`.
  template <typename T>
  T* prefill_at(std::size_t off) const {
    return reinterpret_cast<T*>(prefill_dev_.get<char>() + off);
  }

 private:
  struct Staging {
    PinnedBuffer pinned;
    cudaEvent_t copied = nullptr;
    std::size_t staged = 0;
  };
  char* take(Staging& s, std::size_t bytes) {
    if (!s.copied) CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    wait_event(s.copied);  // recorded by the upload before last: long done after a step's sync
    if (bytes > s.pinned.size()) s.pinned.resize(std::max(bytes, 2 * s.pinned.size()));
    s.staged = bytes;
    return s.pinned.get<char>();
  }
  static void grow(DeviceBuffer& dev, std::size_t bytes) {
    if (bytes > dev.size()) dev.resize(std::max(bytes, std::size_t{4096}));
  }
  void upload(Staging& s, DeviceBuffer& dev, std::size_t bytes, cudaStream_t stream) {
    if (bytes > s.staged) throw Error("StepArena::upload: more bytes than were staged");
    CUDA_CHECK(cudaMemcpyAsync(dev.get(), s.pinned.get(), bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(s.copied, stream));
  }

  Staging staging_[2], prefill_;
  int current_ = 1;
  std::vector<char> host_;
  std::map<int, DeviceBuffer> steps_;  // the step arenas, by bucket
  DeviceBuffer prefill_dev_;
};

}  // namespace bestofn::cuda
