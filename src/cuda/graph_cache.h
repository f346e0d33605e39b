#pragma once
// CUDA graphs: a decode step's kernels and GEMMs captured once into a CUDA graph and replayed.
// A graph bakes in every launch argument, so it is keyed by everything host-side a step's launches
// depend on: the batch size, the flags, the structure of the prefix groups, and the address of
// every device buffer it touches (a buffer that grows moves, and then the key changes). A key is
// first run eagerly (GEMM plans, autotuning and buffer sizes settle), captured the second time it
// is seen, then replayed. Bounded: past kMaxGraphs graphs, or kMaxSeen keys seen once, it starts
// over.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace bestofn::cuda {

using GraphKey = std::vector<std::uint64_t>;
// A device address as a key entry.
inline std::uint64_t key_address(const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); }

class GraphCache {
 public:
  static constexpr std::size_t kMaxGraphs = 64;
  static constexpr std::size_t kMaxSeen = 1024;  // keys remembered as seen once, at most
  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() { clear(); }

  // Runs `enqueue` (which only enqueues work on `stream`: no allocation, no synchronization, no
  // host-to-device copy from pageable memory) for `key`: eagerly the first time, captured and
  // launched the second, launched from the cache after. A capture that fails (an operation CUDA
  // cannot capture) turns graphs off for this cache, with the reason in disabled_reason(), and
  // the step runs eagerly.
  void run(const GraphKey& key, cudaStream_t stream, const std::function<void()>& enqueue);
  bool enabled() const { return disabled_.empty(); }
  const std::string& disabled_reason() const { return disabled_; }
  std::size_t size() const { return graphs_.size(); }
  long long launches() const { return launches_; }  // steps replayed from a graph
  // The nodes (kernels, copies) of the graph captured last: a step's launches, counted by CUDA
  // (tests/test_gpu_engine.cpp checks small-M linear's fused layer with it).
  std::size_t last_nodes() const { return last_nodes_; }
  void clear();

 private:
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<GraphKey> seen_;
  std::string disabled_;
  long long launches_ = 0;
  std::size_t last_nodes_ = 0;
};

}  // namespace bestofn::cuda
