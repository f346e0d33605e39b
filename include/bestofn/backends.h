#pragma once
// Which compute backends exist in this build and on this machine. src/backends.cpp is the only
// file that knows whether CUDA was built.
#include <string>
#include <vector>

namespace bestofn {

struct BackendInfo {
  bool cuda_built = false;                // compiled with the CUDA backend
  std::vector<std::string> cuda_devices;  // names of the visible devices (empty: none, or no driver)
  std::string cuda_error;                 // why no device is visible, when cuda_built
};

BackendInfo backend_info();

}  // namespace bestofn
