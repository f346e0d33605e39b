#include "cpu/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "bestofn/model/quantize.h"
#include "util/exp_poly.h"
#include "cpu/gemm_fp8.h"
#include "cpu/gemm_wide.h"
#include "cpu/thread_pool.h"

namespace bestofn::cpu {
namespace {

void widen(const Tensor& t, std::int64_t r, std::size_t n, float* out) {
  const std::size_t off = static_cast<std::size_t>(r) * n;
  switch (t.dtype) {
    case DType::F32: std::memcpy(out, t.data + off * 4, n * 4); break;
    case DType::BF16: {
      const auto* p = t.data + off * 2;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
      }
      break;
    }
    case DType::F16: {
      const auto* p = t.data + off * 2;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_float(h);
      }
      break;
    }
    case DType::F8_E4M3: {
      const auto* p = t.data + off;
      for (std::size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_float_finite(p[i]);
      break;
    }
    default: throw Error("tensor '" + t.name + "': unsupported dtype for compute");
  }
}

// max(|x_i|) over n values, NaNs skipped (as std::max(amax, |x|) in order does): a max does not
// depend on its order, so 16 lanes give the sequential loop's result.
float abs_max(const float* x, std::size_t n) {
  typedef float V16 __attribute__((vector_size(64)));
  typedef std::uint32_t U16 __attribute__((vector_size(64)));
  V16 m = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    U16 b;
    std::memcpy(&b, x + i, sizeof b);
    b &= 0x7fffffffu;
    V16 a;
    std::memcpy(&a, &b, sizeof a);
    m = m < a ? a : m;
  }
  float amax = 0.0f;
  for (int k = 0; k < 16; ++k) amax = std::max(amax, m[k]);
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

void embedding(const Tensor& table, std::int64_t token, float* out) {
  widen(table, token, static_cast<std::size_t>(table.shape.back()), out);
}

void rmsnorm(float* out, const float* x, const Tensor& w, std::size_t rows, std::size_t dim, float eps) {
  thread_local std::vector<float> g;
  g.resize(dim);
  widen(w, 0, dim, g.data());
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float ss = 0.0f;
    for (std::size_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (std::size_t i = 0; i < dim; ++i) out[r * dim + i] = g[i] * (xr[i] * inv);
  }
}

namespace {

// y (T, out) += the layer's bias per row, after the product and its scales (one rounded add per
// element, as transformers' F.linear and the CUDA engine's epilogue). Nothing without a bias.
void add_bias(const Linear& l, std::size_t T, float* y) {
  const std::size_t out = l.bias.size();
  for (std::size_t t = 0; t < T && out > 0; ++t)
    for (std::size_t o = 0; o < out; ++o) y[t * out + o] += l.bias[o];
}

// n elements of `buf` (this thread's scratch, grown as needed) from a 64-byte boundary on, so
// that threads writing neighbouring ranges of it share as few cache lines as possible.
template <class T>
T* line_aligned(std::vector<T>& buf, std::size_t n) {
  buf.resize(n + 64 / sizeof(T));
  void* p = buf.data();
  std::size_t room = buf.size() * sizeof(T);
  return static_cast<T*>(std::align(64, n * sizeof(T), p, room));
}

// The wide GEMM's format of a layer that is not FP8 (weights.cpp admits F32, BF16 and F16 alone).
wide::Format wide_format(const Linear& l) {
  switch (l.weight.dtype) {
    case DType::BF16: return wide::Format::Bf16;
    case DType::F16: return wide::Format::F16;
    case DType::F32: return wide::Format::F32;
    default: throw Error("tensor '" + l.weight.name + "': " + std::string(dtype_name(l.weight.dtype)) + " is not a linear layer's dtype here");
  }
}

// A layer's packed weights: `given`, else packed into `own` for this call alone.
const void* packed_or_own(const Linear& l, const void* given, ThreadPool& pool, std::vector<std::uint8_t>& own) {
  if (given) return given;
  own.resize(packed_bytes(l));
  pack_linear(l, pool, own.data());
  return own.data();  // operator new's alignment: enough for the codes, 16-bit words and floats
}

const char* fp8_name(fp8::Path p) {
  switch (p) {
    case fp8::Path::Avx512Bf16: return "avx512_bf16";
    case fp8::Path::Avx512Fma: return "avx512_fma";
    case fp8::Path::Avx2: return "avx2";
    case fp8::Path::Avx2F16c: return "avx2_f16c";
    default: return "generic";
  }
}

// The GEMM path for FP8 weights: fp8::best_path() unless BESTOFN_FP8_PATH names another that this
// CPU runs (BESTOFN_FP8_GENERIC, as before: "generic"). All give the same bits; the variables are
// there to measure one against another.
fp8::Path fp8_path() {
  static const fp8::Path p = [] {
    const char* want = std::getenv("BESTOFN_FP8_GENERIC") ? "generic" : std::getenv("BESTOFN_FP8_PATH");
    if (!want) return fp8::best_path();
    for (fp8::Path q : {fp8::Path::Generic, fp8::Path::Avx2, fp8::Path::Avx2F16c, fp8::Path::Avx512Bf16, fp8::Path::Avx512Fma})
      if (std::string(want) == fp8_name(q)) {
        if (!fp8::available(q)) throw Error(std::string("BESTOFN_FP8_PATH=") + want + ": this CPU does not run that path");
        return q;
      }
    throw Error(std::string("BESTOFN_FP8_PATH=") + want + ": not a path (avx512_bf16, avx512_fma, avx2, avx2_f16c, generic)");
  }();
  return p;
}

}  // namespace

const char* fp8_kernel_name() { return fp8_name(fp8_path()); }
const char* wide_kernel_name() {
  switch (wide::best_path()) {
    case wide::Path::Avx512: return "avx512";
    case wide::Path::Avx2Fma: return "avx2";
    default: return "portable";
  }
}

namespace {

// FP8 linears that share their input x and its quantization (the same static input_scale, or
// none): x is quantized and packed once, then one pool loop covers every layer's strips. Each
// y[t, o] is what linear_fp8 alone computes. strips[i]: layer i's packed codes, or none (packed
// here, for this call).
void linear_fp8_many(std::span<const Linear* const> ls, const float* x, std::size_t T, std::span<float* const> ys,
                     std::span<const void* const> strips, ThreadPool& pool) {
  const Linear& first = *ls[0];
  const auto in = static_cast<std::size_t>(first.in_features());
  const fp8::Path path = fp8_path();
  std::vector<const std::uint8_t*> ws(ls.size());
  std::vector<std::vector<std::uint8_t>> own(ls.size());
  for (std::size_t i = 0; i < ls.size(); ++i)
    ws[i] = static_cast<const std::uint8_t*>(packed_or_own(*ls[i], i < strips.size() ? strips[i] : nullptr, pool, own[i]));
  thread_local std::vector<float> sx;
  thread_local std::vector<std::uint16_t> packed;
  sx.resize(T);
  // Plain pointers into this thread's buffers: inside the lambdas, on a worker, the names of the
  // thread_local vectors would mean the worker's own.
  float* sxw = sx.data();
  std::uint16_t* xpw = line_aligned(packed, fp8::packed_size(path, T, in));
  // Each row's scale (the static input_scale, else amax / 448), then its E4M3 values packed for
  // the kernels; rows are independent, so the pool splits them.
  auto prepare = [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) sxw[t] = first.input_scale ? *first.input_scale : fp8_row_scale(abs_max(x + t * in, in));
    fp8::pack_activations(path, x, sxw, T, in, t0, t1, xpw);
  };
  if (T >= 4) pool.run(T, prepare);
  else prepare(0, T);
  const std::uint16_t* xp = xpw;
  const float* sxp = sxw;
  // Strips of all the layers, one after the other: strip b is layer i's strip b - start[i].
  std::vector<std::size_t> start(ls.size() + 1, 0);
  for (std::size_t i = 0; i < ls.size(); ++i) start[i + 1] = start[i] + fp8::strip_count(static_cast<std::size_t>(ls[i]->out_features()));
  pool.run(start.back(), [&](std::size_t b0, std::size_t b1) {
    for (std::size_t i = 0; i < ls.size(); ++i) {
      const std::size_t lo = std::max(b0, start[i]), hi = std::min(b1, start[i + 1]);
      if (lo >= hi) continue;
      const Linear& l = *ls[i];
      const auto out = static_cast<std::size_t>(l.out_features());
      fp8::dot_strips(path, ws[i], out, in, lo - start[i], hi - start[i], xp, T, ys[i], out, sxp, l.weight_scale.data(),
                      l.weight_scale.size());
    }
  });
  for (std::size_t i = 0; i < ls.size(); ++i) add_bias(*ls[i], T, ys[i]);
}

// Whether the layers can share one quantized input (linear_fp8_many).
bool share_fp8_input(std::span<const Linear* const> ls) {
  for (const Linear* l : ls)
    if (!l->is_fp8() || l->in_features() != ls[0]->in_features() || l->input_scale.has_value() != ls[0]->input_scale.has_value() ||
        (l->input_scale && *l->input_scale != *ls[0]->input_scale))
      return false;
  return true;
}

}  // namespace

std::size_t packed_bytes(const Linear& l) {
  const auto out = static_cast<std::size_t>(l.out_features()), in = static_cast<std::size_t>(l.in_features());
  if (l.is_fp8()) return fp8::packed_weight_bytes(out, in);
  return wide::packed_weight_bytes(wide_format(l), out, in);
}

void pack_linear(const Linear& l, ThreadPool& pool, void* packed) {
  const auto out = static_cast<std::size_t>(l.out_features()), in = static_cast<std::size_t>(l.in_features());
  if (l.is_fp8()) {
    auto* p = static_cast<std::uint8_t*>(packed);
    pool.run(fp8::strip_count(out), [&](std::size_t s0, std::size_t s1) { fp8::pack_weights(l.weight.data, out, in, s0, s1, p); });
  } else {
    const wide::Format f = wide_format(l);
    pool.run(wide::strip_count(out), [&](std::size_t s0, std::size_t s1) { wide::pack_weights(f, l.weight.data, out, in, s0, s1, packed); });
  }
}

namespace {

// A BF16, F16 or F32 layer: x packed input by input into chunks of 16 tokens (split over the pool
// by input), then the strips over the pool.
void linear_wide(const Linear& l, const float* x, std::size_t T, float* y, ThreadPool& pool, const void* strips) {
  const auto out = static_cast<std::size_t>(l.out_features()), in = static_cast<std::size_t>(l.in_features());
  const wide::Format f = wide_format(l);
  std::vector<std::uint8_t> own;
  strips = packed_or_own(l, strips, pool, own);
  thread_local std::vector<float> xp;
  float* xpw = line_aligned(xp, wide::packed_size(T, in));  // this thread's buffer, named plainly for the workers
  auto pack = [&](std::size_t k0, std::size_t k1) { wide::pack_activations(x, T, in, k0, k1, xpw); };
  if (T >= 4) pool.run(in, pack);
  else pack(0, in);
  const float* xs = xpw;
  const wide::Path path = wide::best_path();
  pool.run(wide::strip_count(out), [&](std::size_t s0, std::size_t s1) { wide::dot_strips(path, f, strips, out, in, s0, s1, xs, T, y, out); });
  add_bias(l, T, y);
}

}  // namespace

void linear_many(std::span<const Linear* const> ls, const float* x, std::size_t T, std::span<float* const> ys, ThreadPool& pool,
                 std::span<const void* const> strips) {
  if (ls.size() != ys.size()) throw Error("linear_many: " + std::to_string(ls.size()) + " layers but " + std::to_string(ys.size()) + " outputs");
  if (!strips.empty() && strips.size() != ls.size())
    throw Error("linear_many: " + std::to_string(ls.size()) + " layers but " + std::to_string(strips.size()) + " packed weights");
  if (ls.empty()) return;
  if (share_fp8_input(ls)) {
    linear_fp8_many(ls, x, T, ys, strips, pool);
    return;
  }
  for (std::size_t i = 0; i < ls.size(); ++i) linear(*ls[i], x, T, ys[i], pool, strips.empty() ? nullptr : strips[i]);
}

void linear(const Linear& l, const float* x, std::size_t T, float* y, ThreadPool& pool, const void* strips) {
  if (l.is_fp8()) {
    const Linear* one[] = {&l};
    float* out[] = {y};
    const void* packed[] = {strips};
    linear_fp8_many(one, x, T, out, packed, pool);
    return;
  }
  linear_wide(l, x, T, y, pool, strips);
}

void rope_angles(int pos, const std::vector<float>& inv_freq, float* cs) {
  const std::size_t half = inv_freq.size();
  for (std::size_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cs[i] = std::cos(angle), cs[half + i] = std::sin(angle);
  }
}

void rope(float* vec, int n_heads, int head_dim, int pos, const std::vector<float>& inv_freq) {
  thread_local std::vector<float> cs;
  cs.resize(2 * inv_freq.size());
  rope_angles(pos, inv_freq, cs.data());
  rope_rotate(vec, n_heads, head_dim, cs.data());
}

void rope_rotate(float* vec, int n_heads, int head_dim, const float* cs) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cs[i], s = cs[half + i];
    for (int h = 0; h < n_heads; ++h) {
      float* x = vec + h * head_dim;
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

void swiglu(float* gate, const float* up, std::size_t n) {
  // 16 elements at a time, the last few through a zero-padded vector: every element takes the
  // same instructions wherever it sits. exp_poly covers -g <= 88; past that (g < -88) libm's exp,
  // which overflows to inf there as exp_poly's clamp would not.
  for (std::size_t i = 0; i < n; i += 16) {
    const std::size_t k = std::min<std::size_t>(16, n - i);
    ExpV16 g{}, u{};
    if (k == 16) std::memcpy(&g, gate + i, sizeof g), std::memcpy(&u, up + i, sizeof u);  // fixed sizes: no memcpy call
    else std::memcpy(&g, gate + i, k * sizeof(float)), std::memcpy(&u, up + i, k * sizeof(float));
    ExpV16 e = exp_poly(-g);
    const ExpI16 far = g < -88.0f, none{};
    if (std::memcmp(&far, &none, sizeof far) != 0)
      for (std::size_t j = 0; j < 16; ++j)
        if (g[j] < -88.0f) e[j] = std::exp(-g[j]);
    const ExpV16 r = g / (1.0f + e) * u;
    if (k == 16) std::memcpy(gate + i, &r, sizeof r);
    else std::memcpy(gate + i, &r, k * sizeof(float));
  }
}

}  // namespace bestofn::cpu
