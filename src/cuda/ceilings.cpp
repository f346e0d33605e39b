#include "cuda/ceilings.h"

#include <algorithm>
#include <functional>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/event_pair.h"

namespace bestofn::cuda {

EngineStatistics::Ceilings measure_device_ceilings(Gemm& gemm, GemmInput type, cudaStream_t stream) {
  EngineStatistics::Ceilings c;
  EventPair events;
  auto best_ms = [&](const std::function<void()>& f) {
    f();  // warm-up
    float best = 1e30f;
    for (int i = 0; i < 5; ++i) {
      events.start(stream);
      f();
      events.stop(stream);
      best = std::min(best, events.elapsed_ms());
    }
    return static_cast<double>(best);
  };
  {
    const std::size_t bytes = std::size_t{1} << 30;
    DeviceBuffer a(bytes), b(bytes);
    CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, stream));
    const double ms = best_ms([&] { CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream)); });
    c.copy_gbps = 2.0 * static_cast<double>(bytes) / ms / 1e6;
  }
  {
    const int n = 8192;
    const bool fp8 = type == GemmInput::FP8;
    const std::size_t elem = fp8 ? 1 : 2, nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    DeviceBuffer w(nn * elem), x(nn * elem), y(nn * 4);
    CUDA_CHECK(cudaMemsetAsync(w.get(), 0x38, nn * elem, stream));  // 1.0 in E4M3; a small BF16 (0x3838) otherwise
    CUDA_CHECK(cudaMemsetAsync(x.get(), 0x38, nn * elem, stream));
    const GemmInput t = fp8 ? GemmInput::FP8 : GemmInput::BF16;
    const double ms = best_ms([&] { gemm.run(t, w.get(), x.get(), y.get<float>(), n, n, n); });
    c.gemm_tflops = 2.0 * static_cast<double>(nn) * n / ms / 1e9;
    c.gemm = std::string(fp8 ? "fp8" : "bf16") + " gemm 8192x8192x8192, f32 out";
  }
  return c;
}

}  // namespace bestofn::cuda
