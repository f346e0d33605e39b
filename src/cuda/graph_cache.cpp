#include "cuda/graph_cache.h"

#include <exception>

#include "cuda/cuda_check.h"

namespace bestofn::cuda {

void GraphCache::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  seen_.clear();
}

void GraphCache::run(const GraphKey& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  if (!enabled()) return enqueue();
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    CUDA_CHECK(cudaGraphLaunch(it->second, stream));
    ++launches_;
    return;
  }
  if (seen_.size() >= kMaxSeen) seen_.clear();  // keys seen once and never again (batch makeups that passed)
  if (seen_.insert(key).second) return enqueue();  // first sight: eager
  if (graphs_.size() >= kMaxGraphs) clear();
  // Thread-local capture: engines on other threads (one engine per device) are not affected.
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::string failed;
  try {
    enqueue();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (failed.empty() && end != cudaSuccess) failed = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  if (failed.empty()) {
    std::size_t nodes = 0;
    if (cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess) last_nodes_ = nodes;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    if (inst != cudaSuccess) failed = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!failed.empty()) {
    cudaGetLastError();  // capture errors are not sticky; clear the last one
    disabled_ = failed;
    clear();
    return enqueue();  // nothing of the failed capture ran: this step eagerly
  }
  graphs_.emplace(key, exec);
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ++launches_;
}

}  // namespace bestofn::cuda
