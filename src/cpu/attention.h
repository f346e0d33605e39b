#pragma once
// CPU twins of the attention kernels (kernels/attention_decode.cu, kernels/attention_prefill.cu):
// the same arguments as decode_attention_cuda / prefill_attention_cuda in src/cuda/kernels.h, on
// host pointers, with the arithmetic of CpuEngine::attend_decode / attend_prefill
// (src/cpu/cpu_engine.cpp) over a BF16 KV cache.
#include <cstdint>

namespace bestofn::cpu {

// Decode attention for T query rows. q (T, n_heads, hd). Row t attends over prefix_len[t] K/V rows
// starting at k_prefix[t] / v_prefix[t] and suffix_len[t] rows at k_suffix[t] / v_suffix[t]; each
// row is kv_dim = n_kv * hd BF16 values; query head h reads KV head h / (n_heads / n_kv).
// scale = 1 / sqrt(hd); each side gives (max m, sum l, unnormalized O); the two merge by
// log-sum-exp (Hydragen, arXiv 2402.05099): o = (O_p a + O_s b) / (l_p a + l_s b),
// a = exp(m_p - m), b = exp(m_s - m), m = max(m_p, m_s); the weights exp(s - m) inside each side
// by exp_poly (src/util/exp_poly.h), as the engine computes them. An empty side contributes nothing; a row
// with both sides empty gets zeros. out (T, n_heads, hd).
void decode_attention(const float* q, const std::uint16_t* const* k_prefix, const std::uint16_t* const* v_prefix,
                      const int* prefix_len, const std::uint16_t* const* k_suffix, const std::uint16_t* const* v_suffix,
                      const int* suffix_len, int T, int n_heads, int n_kv, int hd, float* out);

// Causal attention over a prompt, or over a chunk of it that starts at position q_offset: q (T,
// n_heads, hd), the rows at positions q_offset .. q_offset + T - 1; k / v (q_offset + T, n_kv *
// hd) BF16, the prompt's rows from position 0; row t sees positions 0..q_offset + t: m = max s_j,
// e_j = exp_poly(s_j - m), l = sum of e_j in order, out = sum_j (e_j / l) v_j in order. out (T,
// n_heads, hd).
void prefill_attention(const float* q, const std::uint16_t* k, const std::uint16_t* v, int T, int n_heads, int n_kv,
                       int hd, float* out, int q_offset = 0);

}  // namespace bestofn::cpu
