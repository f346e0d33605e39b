#include "bestofn/model/rope.h"

#include <cmath>

namespace bestofn {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> f(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i)
    f[static_cast<std::size_t>(i)] =
        1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::Linear) {
    for (auto& v : f) v /= static_cast<float>(s.factor);
  } else if (s.type == RopeScalingType::Llama3) {
    // HF _compute_llama3_parameters: long wavelengths are divided by `factor`, short ones kept,
    // and the band between interpolates smoothly.
    const float old_ctx = static_cast<float>(s.original_max_position_embeddings);
    const float factor = static_cast<float>(s.factor), lo = static_cast<float>(s.low_freq_factor),
                hi = static_cast<float>(s.high_freq_factor);
    const float low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
    for (auto& v : f) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / v;
      const float scaled = wavelen > low_wavelen ? v / factor : v;
      if (wavelen < high_wavelen || wavelen > low_wavelen) {
        v = scaled;
      } else {
        const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
        v = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
    }
  }
  return f;
}

}  // namespace bestofn
