#pragma once
// The launchers of src/cuda/kernels.h, one name each: the list both GPU op tests check against.
// test_gpu_op_names (no GPU) fails when kernels.h declares a launcher this list lacks, when the list
// names one kernels.h lacks, or when a name has no row in the op table of tests/test_gpu_ops.cpp;
// test_gpu_ops checks the compiled table against it. Plain data, no CUDA header: the name check
// builds and runs everywhere.
#include <string_view>

namespace bestofn::test {

inline constexpr std::string_view kGpuOpLaunchers[] = {
    // elementwise and row ops
    "embedding_cuda", "rmsnorm_cuda", "rmsnorm_quant_fp8_cuda", "quantize_act_fp8_cuda", "f32_to_bf16_cuda", "bf16_to_f32_cuda",
    "scale_output_cuda", "bias_add_cuda", "linear_fp8_small_m_cuda", "linear_fp8_small_m_fused_cuda", "linear_fp8_mma_cuda", "swiglu_cuda", "swiglu_quant_fp8_cuda", "residual_add_cuda", "argmax_cuda",
    // attention, the KV cache and sampling
    "fp8_rows_to_f32_cuda", "rope_kv_write_cuda", "decode_attention_cuda", "decode_merge_cuda", "decode_attention_tiled_cuda",
    "prefill_attention_cuda", "prefill_attention_segments_cuda", "sample_token_cuda",
    // shared-prefix attention around the GEMMs (--cuda-prefix-gemm)
    "gather_prefix_queries_cuda", "prefix_softmax_cuda", "prefix_merge_cuda",
    // a decode step's index arrays
    "expand_step_pointers_cuda",
    // shared-prefix attention on tensor cores (--cascade-attention)
    "gather_queries_bf16_cuda", "cascade_prefix_attention_cuda", "cascade_merge_cuda",
    // its suffix side on FlashInfer's paged decode (--cascade-attention --paged-kv)
    "cascade_suffix_attention_cuda", "cascade_state_merge_cuda",
};

}  // namespace bestofn::test
