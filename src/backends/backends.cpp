#include "bestofn/backends/backends.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "bestofn/util/error.h"

#if BESTOFN_HAVE_CUDA
#include "cuda/cublas_loader.h"
#include "cuda/cuda_api.h"
#endif

namespace bestofn {

BackendInfo backend_info() {
  BackendInfo info;
#if BESTOFN_HAVE_CUDA
  info.cuda_built = true;
  info.cuda_devices = cuda::list_devices(&info.cuda_error);
#endif
  return info;
}

namespace {
// --device auto on the CPU engine: the CUDA paths asked for do nothing there; say so by default
// (not only with -v), as --device cpu refuses them.
std::unique_ptr<Engine> auto_on_cpu(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
  const CudaOptions& o = options.cuda;
  std::string ignored;
  for (const auto& [on, flag] : {std::pair{o.prefix_gemm, "--cuda-prefix-gemm"}, {o.fused_qkv, "--fused-qkv"},
                                 {o.gemm_autotune, "--gemm-autotune"}, {o.paged_kv, "--paged-kv"}, {o.kv_blocks > 0, "--kv-blocks"},
                                 {o.device_sampling, "--device-sampling"}, {o.split_attention, "--split-attention"},
                                 {o.graphs, "--cuda-graphs"}, {o.cascade_attention, "--cascade-attention"},
                                 {o.small_m_linear, "--small-m-linear"}})
    if (on) ignored += (ignored.empty() ? "" : ", ") + std::string(flag);
  if (!ignored.empty()) spdlog::warn("--device auto is running the CPU engine, which ignores {} (CUDA engine paths)", ignored);
  return make_cpu_engine(std::move(weights), options);
}
}  // namespace

std::unique_ptr<Engine> make_engine(std::shared_ptr<const Weights> weights, const std::string& device,
                                    const EngineOptions& options) {
  if (device == "cpu") return make_cpu_engine(std::move(weights), options);
#if BESTOFN_HAVE_CUDA
  if (device == "cuda") return cuda::make_cuda_engine(std::move(weights), options);
  if (device == "auto") {
    std::string why;
    if (!cuda::list_devices(&why).empty()) {
      if (cuda::load_cublas(&why)) return cuda::make_cuda_engine(std::move(weights), options);
      spdlog::warn("--device auto: a CUDA device is visible but {}; using the CPU engine", why);
      return auto_on_cpu(std::move(weights), options);
    }
    spdlog::info("--device auto: no CUDA device ({}), using the CPU engine", why);
    return auto_on_cpu(std::move(weights), options);
  }
#else
  if (device == "cuda") throw Error("--device cuda: this build has no CUDA backend (nvcc was not found at build time, or -DBESTOFN_CUDA=OFF)");
  if (device == "auto") return auto_on_cpu(std::move(weights), options);
#endif
  throw Error("--device: '" + device + "' is not one of cpu, cuda, auto");
}

}  // namespace bestofn
