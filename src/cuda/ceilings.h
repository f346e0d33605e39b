#pragma once
// The two ceilings bench reports a GPU run against, measured in the same run.
#include <cuda_runtime.h>

#include "bestofn/engine/engine.h"
#include "cuda/gemm.h"

namespace bestofn::cuda {

// Copy bandwidth: a 1 GiB device-to-device copy, read + write bytes counted (as
// benchmarks/gemm_fp8.cu counts them), best of 5. GEMM: `type` (FP8 or BF16) through `gemm` at
// 8192^3 with an F32 output, best of 5, launch cost included. Synchronizes the stream.
EngineStatistics::Ceilings measure_device_ceilings(Gemm& gemm, GemmInput type, cudaStream_t stream);

}  // namespace bestofn::cuda
