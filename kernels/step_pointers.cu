// A decode step's per-layer cache row pointers from its per-row descriptors (src/cuda/step_plan.h):
// the GPU twin of expand_step_pointers, bit for bit (integer adds). The host stages 56 bytes per
// batch row instead of 48 x layers (3 MB at B = 2048 and 32 layers); this kernel writes the arrays
// rope_kv_write_cuda and the attention kernels read, before the step's first layer.
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

constexpr int kPointerBlock = 256;

// One thread per (layer, row): i = l T + t. Six 8-byte stores, coalesced across t.
__global__ void __launch_bounds__(kPointerBlock)
    kernel_expand_step_pointers(const StepRowDesc* desc, int T, int n_layers, std::uint64_t* rows, std::uint64_t* ptrs) {
  const std::size_t n = static_cast<std::size_t>(T);
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * kPointerBlock + threadIdx.x;
  if (i >= n * static_cast<std::size_t>(n_layers)) return;
  const std::size_t l = i / n, t = i % n;
  const StepRowDesc d = desc[t];
  const std::uint64_t ps = l * d.prefix_stride, ss = l * d.suffix_stride;
  rows[2 * l * n + t] = d.k_suffix + ss + d.write;
  rows[(2 * l + 1) * n + t] = d.v_suffix + ss + d.write;
  std::uint64_t* p = ptrs + 4 * l * n + t;
  p[0] = d.k_prefix + ps;
  p[n] = d.v_prefix + ps;
  p[2 * n] = d.k_suffix + ss;
  p[3 * n] = d.v_suffix + ss;
}

}  // namespace

void expand_step_pointers_cuda(const StepRowDesc* desc, int T, int n_layers, std::uint16_t** rows, const std::uint16_t** ptrs,
                               cudaStream_t stream) {
  if (T <= 0 || n_layers <= 0) return;
  const std::size_t n = static_cast<std::size_t>(T) * static_cast<std::size_t>(n_layers);
  const auto blocks = static_cast<unsigned>((n + kPointerBlock - 1) / kPointerBlock);
  kernel_expand_step_pointers<<<blocks, kPointerBlock, 0, stream>>>(desc, T, n_layers, reinterpret_cast<std::uint64_t*>(rows),
                                                              reinterpret_cast<std::uint64_t*>(ptrs));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
