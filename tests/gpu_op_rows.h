#pragma once
// The checks of the GPU op table's attention rows (tests/test_gpu_ops_attention.cpp), for the
// table in tests/test_gpu_ops.cpp. Each runs its launcher on seeded random inputs against the CPU
// twin and reports through gtest; each needs a device.

namespace bestofn::gpu_ops {

void fp8_rows_to_f32();
void rope_kv_write();
void decode_attention();
void decode_merge();
void decode_attention_tiled();
void prefill_attention();
void prefill_attention_segments();
void sample_token();
void gather_prefix_queries();
void prefix_softmax();
void prefix_merge();
void expand_step_pointers();
void cascade_merge();
// tests/test_gpu_ops_cascade.cpp
void gather_queries_bf16();
void cascade_prefix_attention();
// tests/test_gpu_ops_cascade_suffix.cpp
void cascade_suffix_attention();
void cascade_state_merge();
// tests/test_gpu_ops_small_m.cpp
void linear_fp8_small_m_fused();
void linear_fp8_mma();

}  // namespace bestofn::gpu_ops
