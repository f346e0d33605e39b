#pragma once
// The rotary embedding's inverse frequencies, a property of the model (both engines and the tests
// compute their rotations from them).
#include <vector>

#include "bestofn/model/model_config.h"

namespace bestofn {

// RoPE inverse frequencies (head_dim / 2), with llama3 or linear scaling, in fp32 as HF computes them.
std::vector<float> rope_inv_freq(const ModelConfig& c);

}  // namespace bestofn
