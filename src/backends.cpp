#include "bestofn/backends.h"

#include "bestofn/error.h"

#if BESTOFN_HAVE_CUDA
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

std::unique_ptr<Engine> make_engine(std::shared_ptr<const Weights> weights, const std::string& device,
                                    const EngineOptions& options) {
  if (device == "cpu" || device == "auto") return make_cpu_engine(std::move(weights), options);
  if (device == "cuda") {
#if BESTOFN_HAVE_CUDA
    throw Error("--device cuda: the CUDA engine is not implemented yet (it is built for kernels and benchmarks only); use --device cpu");
#else
    throw Error("--device cuda: this build has no CUDA backend (nvcc was not found at build time, or -DBESTOFN_CUDA=OFF)");
#endif
  }
  throw Error("--device: '" + device + "' is not one of cpu, cuda, auto");
}

}  // namespace bestofn
