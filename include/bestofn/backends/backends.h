#pragma once
// Which compute backends exist in this build and on this machine. src/backends/backends.cpp is the only
// file that knows whether CUDA was built.
#include <memory>
#include <string>
#include <vector>

#include "bestofn/backends/cuda_paths.h"
#include "bestofn/engine/engine.h"

namespace bestofn {

struct BackendInfo {
  bool cuda_built = false;                // compiled with the CUDA backend
  std::vector<std::string> cuda_devices;  // names of the visible devices (empty: none, or no driver)
  std::string cuda_error;                 // why no device is visible, when cuda_built
};

BackendInfo backend_info();

// The engine for --device cpu|cuda|auto. "auto" is the CUDA engine when it is built and a device
// is visible, else the CPU engine. Throws bestofn::Error naming --device when the choice cannot run.
std::unique_ptr<Engine> make_engine(std::shared_ptr<const Weights> weights, const std::string& device,
                                    const EngineOptions& options);

// The engine of a run (generate, eval, bench): make_engine's backend; on CUDA with the path `cuda`
// asks for (choose_cuda_path: the path named, or the defaults' choice for `shape` on this device
// and model, the switches given on top), logged with the reason at info level (-v). options.cuda
// keeps its device_index; its features are the choice's. On the CPU engine (--device auto without
// a usable device) a warning names the CUDA flags given. Throws bestofn::Error naming --cuda-path
// when the path named cannot run this model or shape.
std::unique_ptr<Engine> make_engine(std::shared_ptr<const Weights> weights, const std::string& device, EngineOptions options,
                                    const CudaFlags& cuda, const CudaShape& shape);

// The path that make_engine would run on CUDA device options.cuda.device_index (bench: whether
// the next N needs another engine). Throws as choose_cuda_path.
CudaChoice cuda_choice(const Weights& weights, const EngineOptions& options, const CudaFlags& cuda, const CudaShape& shape);

}  // namespace bestofn
