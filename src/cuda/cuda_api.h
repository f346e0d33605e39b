#pragma once
// The host-side CUDA API that the rest of bestofn may call. Pure C++: no CUDA header here, so
// that backends.cpp and the tests compile with the host compiler alone.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"

namespace bestofn::cuda {

// Names of the visible devices. Never throws: with no driver or no device it returns an empty
// list and sets *error to the runtime's message.
std::vector<std::string> list_devices(std::string* error);

// The compute capability of a visible device, major * 10 + minor (90: 9.0); 0 when it cannot be
// read. Never throws.
int device_capability(int device);
// Whether this build has cascade attention's FlashInfer kernels (cmake/Cuda.cmake).
bool cascade_built();

// GPU twin of quantize_fp8_rows, on host buffers (copies in, runs kernel_quantize_fp8_rows,
// copies out). Throws bestofn::Error on any CUDA failure.
void quantize_fp8_rows_host(const float* x, std::size_t rows, std::size_t cols, std::uint8_t* q, float* scales);

// The CUDA engine (src/cuda/cuda_engine.cpp). Throws bestofn::Error when no device is visible.
std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options);

}  // namespace bestofn::cuda
