#pragma once
// Every launcher of src/cuda/kernels.h against its CPU twin, one row each (after llama.cpp's
// test-backend-ops). test_gpu_op_names (no GPU) fails when kernels.h declares a launcher without a
// row here, or a row names a test that does not exist; test_gpu_ops runs the rows whose comparison
// lives there and fails when such a row has no check. Plain data: no CUDA header, so that the name
// check builds and runs everywhere.

namespace bestofn::test {

struct GpuOpRow {
  const char* launcher;   // as declared in src/cuda/kernels.h
  const char* twin;       // the CPU function (or loop) it must agree with
  const char* tolerance;  // how close, and why that close
  const char* file;       // the test file that compares them (seeded random inputs), under tests/
  const char* test;       // Suite.Name in that file
};

inline constexpr GpuOpRow kGpuOps[] = {
    {"embedding_cuda", "cpu::embedding", "bit for bit: a row copy, BF16 widened exactly", "test_gpu_elementwise.cpp",
     "GpuElementwise.EmbeddingMatchesTensorRowBitForBit"},
    {"rmsnorm_cuda", "cpu::rmsnorm", "relative 2^-24 (8 + 2 sqrt(dim)): the sum of squares is added in another order",
     "test_gpu_elementwise.cpp", "GpuElementwise.RmsNormMatchesCpuWithinReductionTolerance"},
    {"rmsnorm_quant_fp8_cuda", "cpu::rmsnorm, then quantize_fp8_rows",
     "one E4M3 step: a normalized value that differs in its last bits may round the other way", "test_gpu_elementwise.cpp",
     "GpuElementwise.RmsNormQuantFp8MatchesCpuWithinOneStep"},
    {"quantize_act_fp8_cuda", "quantize_fp8_rows", "bit for bit: the row maximum and the division are order-free",
     "test_gpu_elementwise.cpp", "GpuElementwise.QuantizeActFp8MatchesCpuBitForBit"},
    {"f32_to_bf16_cuda", "bf16_from_float", "bit for bit: both round to nearest even", "test_gpu_elementwise.cpp",
     "GpuElementwise.F32ToBf16MatchesCpuBitForBit"},
    {"bf16_to_f32_cuda", "bf16_to_float", "bit for bit: widening BF16 is exact", "test_gpu_ops.cpp", "GpuOps.Bf16ToF32"},
    {"scale_output_cuda", "the store step of cpu::linear", "bit for bit: the same two rounded multiplies",
     "test_gpu_elementwise.cpp", "GpuElementwise.ScaleOutputMatchesCpuStoreStepBitForBit"},
    {"swiglu_cuda", "cpu::swiglu", "relative 8 eps: CUDA's expf and the CPU's exp differ by a few ulp",
     "test_gpu_elementwise.cpp", "GpuElementwise.SwigluMatchesCpuWithinExpTolerance"},
    {"swiglu_quant_fp8_cuda", "cpu::swiglu, then quantize_fp8_rows",
     "one E4M3 step: the exp's last bits may move a value across a rounding boundary", "test_gpu_elementwise.cpp",
     "GpuElementwise.SwigluQuantFp8MatchesCpuWithinOneStep"},
    {"residual_add_cuda", "the CPU engine's residual loops", "bit for bit: one rounded add", "test_gpu_elementwise.cpp",
     "GpuElementwise.ResidualAddMatchesCpuBitForBit"},
    {"argmax_cuda", "std::max_element", "exact: the first index of the maximum", "test_gpu_elementwise.cpp",
     "GpuElementwise.ArgmaxMatchesMaxElementExactly"},
    {"fp8_rows_to_f32_cuda", "the CPU engine's KV read, fp8_e4m3_to_float(code) * scale", "bit for bit: one rounded multiply",
     "test_gpu_attention.cpp", "GpuConvert.Fp8RowsWidenToTheirValues"},
    {"rope_kv_write_cuda", "cpu::rope, then bf16_from_float",
     "q 4e-6 + 2^-22 relative (CUDA's and glibc's sin/cos differ by <= 3 ulp); v bit for bit; k one BF16 ulp on <= 1%",
     "test_gpu_attention.cpp", "GpuRopeKv.MatchesCpuRopeAndBf16Rounding"},
    {"decode_attention_cuda", "cpu::decode_attention", "5e-5 + 2e-4 relative: softmax sums in another order",
     "test_gpu_attention.cpp", "GpuDecodeAttention.MatchesCpuTwin"},
    {"decode_merge_cuda", "cpu::decode_attention (the split path's merge)", "as decode_attention_cuda: chunks merged by log-sum-exp",
     "test_gpu_attention.cpp", "GpuDecodeAttention.SplitPositionsMatchCpuTwin"},
    {"decode_attention_tiled_cuda", "cpu::decode_attention", "as decode_attention_cuda: positions summed in tiles",
     "test_gpu_attention.cpp", "GpuDecodeAttention.TiledMatchesCpuTwin"},
    {"gather_prefix_queries_cuda", "a copy of each (t, h) query row to state_row(t, h)", "bit for bit: a copy",
     "test_gpu_ops.cpp", "GpuOps.GatherPrefixQueries"},
    {"prefix_softmax_cuda", "each row's max, exp(s - max) and its sum, in double",
     "m exact; exp 4 ulp (CUDA's expf); l 2^-24 (4 + L) relative: the sum in another order", "test_gpu_ops.cpp",
     "GpuOps.PrefixSoftmax"},
    // No direct twin yet: its prefix state comes from the GEMMs; the engine with --cuda-prefix-gemm
    // is compared with the CPU engine, which is the twin of the three launchers together.
    {"prefix_merge_cuda", "the CPU engine's attention (through --cuda-prefix-gemm)", "the engine parity bounds",
     "test_gpu_engine.cpp", "GpuEngine.Part2PathsMatchPart1OnFp8Models"},
    {"prefill_attention_cuda", "cpu::prefill_attention", "as decode_attention_cuda: softmax sums in another order",
     "test_gpu_attention.cpp", "GpuPrefillAttention.MatchesCpuTwin"},
    {"sample_token_cuda", "bestofn::sample_token", "the same token on all but a small fraction of rows: the softmax's sums differ in order",
     "test_gpu_attention.cpp", "GpuSample.RandomLogitsMatchCpu"},
};

}  // namespace bestofn::test
