#include "bestofn/backends/backends.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "bestofn/backends/cuda_paths.h"
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
// --device auto on the CPU engine: the CUDA flags given do nothing there; say so by default (not
// only with -v), as --device cpu refuses them. ignored: those flags, ", "-separated.
std::unique_ptr<Engine> auto_on_cpu(std::shared_ptr<const Weights> weights, const EngineOptions& options, const std::string& ignored) {
  if (!ignored.empty()) spdlog::warn("--device auto is running the CPU engine, which ignores {} (CUDA engine paths)", ignored);
  return make_cpu_engine(std::move(weights), options);
}

// Which engine --device names: the CPU's, CUDA's, or (auto, no usable device) the CPU's with a
// warning. Throws bestofn::Error naming --device when the choice cannot run.
enum class Backend { Cpu, Cuda, AutoCpu };
Backend backend_of(const std::string& device) {
  if (device == "cpu") return Backend::Cpu;
#if BESTOFN_HAVE_CUDA
  if (device == "cuda") return Backend::Cuda;
  if (device == "auto") {
    std::string why;
    if (!cuda::list_devices(&why).empty()) {
      if (cuda::load_cublas(&why)) return Backend::Cuda;
      spdlog::warn("--device auto: a CUDA device is visible but {}; using the CPU engine", why);
      return Backend::AutoCpu;
    }
    spdlog::info("--device auto: no CUDA device ({}), using the CPU engine", why);
    return Backend::AutoCpu;
  }
#else
  if (device == "cuda") throw Error("--device cuda: this build has no CUDA backend (nvcc was not found at build time, or -DBESTOFN_CUDA=OFF)");
  if (device == "auto") return Backend::AutoCpu;
#endif
  throw Error("--device: '" + device + "' is not one of cpu, cuda, auto");
}

std::unique_ptr<Engine> cuda_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
#if BESTOFN_HAVE_CUDA
  // The engine speaks of its features (paged KV, cascade attention, ...); the command line's
  // context goes in front of its refusals here, with the path that asked for them.
  try {
    return cuda::make_cuda_engine(std::move(weights), options);
  } catch (const Error& e) {
    const std::string& path = options.cuda.path;  // "graphs --paged-kv": the path and the switches added
    throw Error("--device cuda" + (path.empty() || path == "reference" ? std::string() : ", --cuda-path " + path) + ": " + e.what());
  }
#else
  (void)weights, (void)options;
  throw Error("--device cuda: this build has no CUDA backend");  // backend_of never says Cuda here
#endif
}

// The device facts the defaults read: its compute capability (0 when none is visible: the engine
// then says so), whether FlashInfer was built.
CudaRun device_run(const Weights& w, const EngineOptions& options, const CudaShape& shape) {
#if BESTOFN_HAVE_CUDA
  return cuda_run(w, options.kv, shape, cuda::device_capability(options.cuda.device_index), cuda::cascade_built());
#else
  return cuda_run(w, options.kv, shape, 0, false);
#endif
}
}  // namespace

CudaChoice cuda_choice(const Weights& weights, const EngineOptions& options, const CudaFlags& cuda, const CudaShape& shape) {
  return choose_cuda_path(cuda, device_run(weights, options, shape));
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<const Weights> weights, const std::string& device,
                                    const EngineOptions& options) {
  switch (backend_of(device)) {
    case Backend::Cpu: return make_cpu_engine(std::move(weights), options);
    case Backend::AutoCpu: return auto_on_cpu(std::move(weights), options, cuda_switches_text(options.cuda, ", "));
    case Backend::Cuda: break;
  }
  return cuda_engine(std::move(weights), options);
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<const Weights> weights, const std::string& device, EngineOptions options,
                                    const CudaFlags& cuda, const CudaShape& shape) {
  switch (backend_of(device)) {
    case Backend::Cpu: return make_cpu_engine(std::move(weights), options);
    case Backend::AutoCpu: {
      std::string ignored = cuda.path == "auto" ? "" : "--cuda-path " + cuda.path;
      const std::string switches = cuda_switches_text(cuda.added, ", ");
      if (!switches.empty()) ignored += (ignored.empty() ? "" : ", ") + switches;
      return auto_on_cpu(std::move(weights), options, ignored);
    }
    case Backend::Cuda: break;
  }
  const CudaChoice choice = cuda_choice(*weights, options, cuda, shape);
  const int device_index = options.cuda.device_index;
  options.cuda = choice.options;
  options.cuda.device_index = device_index;
  spdlog::info("CUDA path {} (--cuda-path {}): {}", choice.options.path, cuda.path, choice.why);
  return cuda_engine(std::move(weights), options);
}

}  // namespace bestofn
