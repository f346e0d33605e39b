#pragma once
// The CPU reference ops (the oracle every GPU kernel is tested against). Activations are fp32;
// weights are read in their stored dtype and widened on the fly, so an FP8 model reads one byte
// per weight per step.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "bestofn/model/model_config.h"
#include "bestofn/model/rope.h"
#include "bestofn/model/weights.h"

namespace bestofn::cpu {

class ThreadPool;

// out = x / rms(x) * w, per row of `dim` floats; fp32 throughout (HF: x * rsqrt(mean(x^2) + eps)).
// out may be x (in place): each row is read whole before it is written. Also Qwen3's q/k norm,
// each head a row of head_dim.
void rmsnorm(float* out, const float* x, const Tensor& w, std::size_t rows, std::size_t dim, float eps);

// The embedding lookup: row `token` of the table (vocab, dim), widened to float.
void embedding(const Tensor& table, std::int64_t token, float* out);

// A Linear's weights re-laid in the strips the CPU GEMM reads (FP8: fp8::pack_weights; BF16, F16
// and F32: wide::pack_weights; the same bytes as the checkpoint's plus padding): an engine packs
// its layers once and hands them to linear(). pack_linear writes packed_bytes(l) bytes into a
// buffer aligned for floats (the engine's: 64 bytes), the strips split over the pool.
std::size_t packed_bytes(const Linear& l);
void pack_linear(const Linear& l, ThreadPool& pool, void* packed);

// y (T x out) = x (T x in) W^T. FP8 weights: the activations are quantized to E4M3 first (the
// static input_scale, else one dynamic scale per token = amax / 448), products of E4M3 values are
// summed in fp32 (in the order cpu/gemm_fp8.h states, on every CPU) and scaled by
// x_scale[t] * w_scale[o] — the numerics contract, as cuBLASLt does. BF16, F16 and F32 weights:
// fp32 FMAs in the order cpu/gemm_wide.h states (one accumulator, input by input). A layer with a
// bias (Qwen2's q/k/v) then adds it: y[t, o] = product + bias[o], one rounded add.
// Each y[t, o] is computed by the same instruction sequence whatever T and the thread count:
// a candidate's numbers never depend on the batch around it.
// `packed`: pack_linear(l); without it the layer is packed for this call alone.
void linear(const Linear& l, const float* x, std::size_t T, float* y, ThreadPool& pool, const void* packed = nullptr);
// ys[i] = linear(*ls[i], x): the same numbers, but FP8 layers that quantize x alike (q/k/v,
// gate/up) quantize it once and share one pass of the thread pool.
// packed: one per layer (as linear's), or empty.
// The kernels linear() runs on this CPU for FP8 weights, "avx512_bf16", "avx512_fma", "avx2",
// "avx2_f16c" or "generic" (the environment's BESTOFN_FP8_PATH picks one this CPU runs; bestofn::Error for
// another), and for BF16, F16 and F32 weights, "avx512", "avx2" or "portable". Every one gives the
// same bits; they differ in speed alone.
const char* fp8_kernel_name();
const char* wide_kernel_name();
void linear_many(std::span<const Linear* const> ls, const float* x, std::size_t T, std::span<float* const> ys, ThreadPool& pool,
                 std::span<const void* const> packed = {});

// Rotates each of `n_heads` heads of `vec` (HF rotate_half layout: pairs (i, i + head_dim/2)).
void rope(float* vec, int n_heads, int head_dim, int pos, const std::vector<float>& inv_freq);
// rope in two steps, the angles of a position computed once for all its heads and layers:
// cs (head_dim) = cos of pos * inv_freq[i] for i < head_dim / 2, then their sines; then the
// rotation with them (rope's numbers exactly).
void rope_angles(int pos, const std::vector<float>& inv_freq, float* cs);
void rope_rotate(float* vec, int n_heads, int head_dim, const float* cs);

// gate = silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise; exp by exp_poly
// (within 2 ulp; libm's exp for gate < -88, where exp(-gate) overflows or nearly). An element's
// result depends on its values alone, not on n or where it sits.
void swiglu(float* gate, const float* up, std::size_t n);

}  // namespace bestofn::cpu
