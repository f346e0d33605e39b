#pragma once
// Which compute backends exist in this build and on this machine. src/backends/backends.cpp is the only
// file that knows whether CUDA was built.
#include <memory>
#include <string>
#include <vector>

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

}  // namespace bestofn
