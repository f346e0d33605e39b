// Sampling: the GPU twin of bestofn::sample_token (src/engine/sampler.cpp; the rule is documented in
// include/bestofn/engine/sampler.h), with the same counter-based Philox4x32-10 draw (src/util/rng.cpp).
//
// One block per row. No sort and no temporary buffer: every step of the rule is a search for a
// boundary in the order the CPU walks, done by bisection over a 64-bit sort key, each probe one
// pass over the row with a block reduction:
//   key(i) = ord(z_i) << idbits | (V - 1 - i) when ordered by probability (z descending, then id
//            ascending, exactly the CPU's by_prob order), else V - 1 - i (the id-order walk);
//   top-k   = the largest key tau with count(key >= tau) >= k;
//   top-p   = the largest tau with mass(key >= tau) >= top_p * total;
//   min-p   = the smallest kept key whose weight is >= min_p (one min-reduction);
//   the draw = the largest tau with mass(key >= tau) > u * kept, i.e. the first candidate in walk
//            order whose cumulative mass exceeds u * kept.
// Cost: about 3 * (32 + log2 V) passes over the row in the worst case (top-k and top-p and the
// draw, ~150 for a 128K vocabulary), ~17 for the plain id-order draw. Rows above 2^31 - 1 tokens
// are not supported. Measure before tuning (benchmarks/GPU_TODO.md).
//
// Numerics: weights w = expf(z - zmax) in fp32 (CUDA expf is within 2 ulp; the CPU's
// exp_poly too, but not the same bits), all sums in double, as on the CPU, but summed per
// thread and then by a fixed tree instead of in the CPU's orders (src/engine/sampler.cpp). The keys, the candidate cut and top-k are exact; the top-p and min-p boundaries
// and the draw agree with the CPU except where u * kept (or top_p * total) lies within a few fp32
// ulps of a cumulative mass: near-ties may pick a neighbouring token. Deterministic run to run.
#include <cub/block/block_reduce.cuh>

#include <climits>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {

constexpr int kBlock = 512;
using u64 = unsigned long long;

// Philox4x32-10 exactly as bestofn::philox4x32_10 (src/util/rng.cpp).
__device__ void philox4x32_10(unsigned (&c)[4], unsigned k0, unsigned k1) {
  constexpr unsigned kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const u64 p0 = static_cast<u64>(kM0) * c[0], p1 = static_cast<u64>(kM1) * c[2];
    const auto hi0 = static_cast<unsigned>(p0 >> 32), lo0 = static_cast<unsigned>(p0);
    const auto hi1 = static_cast<unsigned>(p1 >> 32), lo1 = static_cast<unsigned>(p1);
    const unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
    k0 += kW0, k1 += kW1;
  }
}

// bestofn::uniform01: counter (step, candidate, prompt low, prompt high), key = the seed; 24 bits.
__device__ float uniform01(u64 seed, u64 prompt, u64 candidate, u64 step) {
  unsigned c[4] = {static_cast<unsigned>(step), static_cast<unsigned>(candidate), static_cast<unsigned>(prompt),
                   static_cast<unsigned>(prompt >> 32)};
  philox4x32_10(c, static_cast<unsigned>(seed), static_cast<unsigned>(seed >> 32));
  return static_cast<float>(c[0] >> 8) * 0x1p-24f;
}

struct ArgMax {
  float v;
  int i;
};
// The larger value; on equal values the lower index (std::max_element's first maximum).
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
  }
};
struct MinOp {
  __device__ u64 operator()(u64 a, u64 b) const { return b < a ? b : a; }
};

using ReduceD = cub::BlockReduce<double, kBlock>;
using ReduceA = cub::BlockReduce<ArgMax, kBlock>;
using ReduceU = cub::BlockReduce<u64, kBlock>;

// Block-wide scratch: CUB's temporary storage and the slot that broadcasts a result.
struct Scratch {
  union {
    ReduceD::TempStorage d;
    ReduceA::TempStorage a;
    ReduceU::TempStorage u;
  } tmp;
  double d;
  ArgMax a;
  u64 u;
};

// Each block reduction returns its result to every thread; the trailing barrier lets the next one
// reuse the scratch.
__device__ double block_sum(double x, Scratch& s) {
  const double r = ReduceD(s.tmp.d).Sum(x);
  if (threadIdx.x == 0) s.d = r;
  __syncthreads();
  const double out = s.d;
  __syncthreads();
  return out;
}

// Sampling parameters as the kernel uses them; inv_t = 1 / temperature as the CPU rounds it.
struct Args {
  bool greedy;
  float inv_t;
  int top_k;
  float top_p, min_p;
  u64 seed;
  int idbits;  // bits that hold V - 1
};

// z maps to an unsigned key in the order of the floats; -0 and +0 are one value, as the CPU's
// comparison z != z' treats them.
__device__ __forceinline__ unsigned ord(float z) {
  const unsigned b = __float_as_uint(z == 0.0f ? 0.0f : z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One row seen through the sampling rule: z = logit * inv_t, candidates z >= zcut.
struct Row {
  const float* logits;
  int V;
  float inv_t, zmax, zcut;
  bool ordered;
  int idbits;
  __device__ float z(int i) const { return __fmul_rn(logits[i], inv_t); }
  __device__ u64 key(float z, int i) const {
    const u64 id = static_cast<u64>(V - 1 - i);
    return ordered ? (static_cast<u64>(ord(z)) << idbits) | id : id;
  }
  // The number (count) or the weight sum of the candidates with key >= tau.
  __device__ double measure(u64 tau, bool count, Scratch& s) const {
    double acc = 0.0;
    for (int i = static_cast<int>(threadIdx.x); i < V; i += kBlock) {
      const float zi = z(i);
      if (!(zi >= zcut) || key(zi, i) < tau) continue;
      acc += count ? 1.0 : static_cast<double>(expf(__fsub_rn(zi, zmax)));
    }
    return block_sum(acc, s);
  }
};

// The largest tau in [lo, hi] with pred(tau), for a pred that is true at lo and, once false, stays
// false as tau grows; lo when pred(lo) is false. pred is block-uniform (it reduces over the block).
template <typename Pred>
__device__ u64 last_true(u64 lo, u64 hi, Pred pred) {
  while (lo < hi) {
    const u64 mid = lo + (hi - lo + 1) / 2;
    if (pred(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// log(sum_i exp(logit_i * inv_t - zmax)) + zmax, the sum in double (sampler.cpp's log_sum_exp).
__device__ float log_sum_exp(const float* logits, int V, float inv_t, float zmax, Scratch& s) {
  double acc = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < V; i += kBlock)
    acc += exp(static_cast<double>(__fsub_rn(__fmul_rn(logits[i], inv_t), zmax)));
  return __fadd_rn(zmax, static_cast<float>(log(block_sum(acc, s))));
}

// The first index of the maximum logit.
__device__ ArgMax block_argmax(const float* logits, int V, Scratch& s) {
  ArgMax best{-INFINITY, INT_MAX};
  for (int i = static_cast<int>(threadIdx.x); i < V; i += kBlock)
    if (logits[i] > best.v || best.i == INT_MAX) best = ArgMax{logits[i], i};
  const ArgMax r = ReduceA(s.tmp.a).Reduce(best, ArgMaxOp());
  if (threadIdx.x == 0) s.a = r;
  __syncthreads();
  const ArgMax out = s.a;
  __syncthreads();
  return out;
}

// min-p: the smallest key >= lo among candidates of weight >= min_p; hi (the best) when none.
__device__ u64 min_p_boundary(const Row& row, u64 lo, u64 hi, float min_p, Scratch& s) {
  u64 m = ~0ull;
  for (int i = static_cast<int>(threadIdx.x); i < row.V; i += kBlock) {
    const float zi = row.z(i);
    if (!(zi >= row.zcut)) continue;
    const u64 k = row.key(zi, i);
    if (k >= lo && k < m && expf(__fsub_rn(zi, row.zmax)) >= min_p) m = k;
  }
  const u64 r = ReduceU(s.tmp.u).Reduce(m, MinOp());
  if (threadIdx.x == 0) s.u = r;
  __syncthreads();
  const u64 out = s.u;
  __syncthreads();
  return out == ~0ull ? hi : out;
}

}  // namespace

// logits (T, V); prompt / candidate / step (T); tokens (T); logprobs (T). grid = T, block = kBlock.
__global__ void __launch_bounds__(kBlock) kernel_sample(const float* logits, int V, Args a, const u64* prompt,
                                                        const u64* candidate, const u64* step, int* tokens,
                                                        float* logprobs) {
  __shared__ Scratch s;
  const int t = static_cast<int>(blockIdx.x);
  const float* row = logits + static_cast<std::size_t>(t) * static_cast<std::size_t>(V);
  const ArgMax best = block_argmax(row, V, s);
  if (a.greedy) {  // the first maximum; logprob under softmax(logits)
    if (threadIdx.x == 0) tokens[t] = best.i;
    const float lse = log_sum_exp(row, V, 1.0f, best.v, s);
    if (threadIdx.x == 0) logprobs[t] = __fsub_rn(best.v, lse);
    return;
  }
  // z = logits / T; candidates: z >= zmax - 30
  const float zmax = __fmul_rn(best.v, a.inv_t);
  Row r{row, V, a.inv_t, zmax, __fsub_rn(zmax, 30.0f), false, a.idbits};
  const double count = a.top_k > 0 ? r.measure(0, true, s) : 0.0;
  const bool top_k = a.top_k > 0 && static_cast<double>(a.top_k) < count;
  // by probability (z descending, id ascending) when truncating, else by id
  r.ordered = top_k || a.top_p < 1.0f || a.min_p > 0.0f;
  u64 lo = r.ordered ? static_cast<u64>(ord(r.zcut)) << a.idbits : 0;  // every candidate's key is >= lo
  const u64 hi = r.ordered ? r.key(zmax, best.i) : static_cast<u64>(V - 1);
  // top-k: keep the k most probable
  if (top_k) lo = last_true(lo, hi, [&](u64 tau) { return r.measure(tau, true, s) >= static_cast<double>(a.top_k); });
  // top-p: the shortest prefix whose mass reaches top_p * total
  if (a.top_p < 1.0f) {
    const double target = static_cast<double>(a.top_p) * r.measure(lo, false, s);
    lo = last_true(lo, hi, [&](u64 tau) { return r.measure(tau, false, s) >= target; });
  }
  // min-p: drop the tail below min_p * p_max (the best's weight is 1), keeping at least the best
  if (a.min_p > 0.0f) lo = min_p_boundary(r, lo, hi, a.min_p, s);
  // the draw: the first kept candidate whose cumulative mass exceeds u * kept
  const double kept = r.measure(lo, false, s);
  const double target = static_cast<double>(uniform01(a.seed, prompt[t], candidate[t], step[t])) * kept;
  const u64 key = last_true(lo, hi, [&](u64 tau) { return r.measure(tau, false, s) > target; });
  const u64 id_mask = a.idbits >= 64 ? ~0ull : (1ull << a.idbits) - 1;
  const int token = V - 1 - static_cast<int>(key & id_mask);
  const float lse = log_sum_exp(row, V, a.inv_t, zmax, s);
  if (threadIdx.x == 0) {
    tokens[t] = token;
    logprobs[t] = __fsub_rn(__fmul_rn(row[token], a.inv_t), lse);
  }
}

void sample_token_cuda(const float* logits, int T, int V, const SamplingParams& params, const std::uint64_t* prompt,
                 const std::uint64_t* candidate, const std::uint64_t* step, int* tokens, float* logprobs,
                 cudaStream_t stream) {
  if (V <= 0) throw Error("sample_token_cuda", "expected a vocabulary of at least 1 token, got " + std::to_string(V));
  if (T < 0) throw Error("sample_token_cuda", "expected T >= 0, got " + std::to_string(T));
  if (T == 0) return;
  Args a{};
  a.greedy = params.temperature <= 0.0f;
  a.inv_t = a.greedy ? 1.0f : 1.0f / params.temperature;
  a.top_k = params.top_k, a.top_p = params.top_p, a.min_p = params.min_p, a.seed = params.seed;
  while ((1ull << a.idbits) < static_cast<u64>(V)) ++a.idbits;
  static_assert(sizeof(u64) == sizeof(std::uint64_t));
  kernel_sample<<<static_cast<unsigned>(T), kBlock, 0, stream>>>(logits, V, a, reinterpret_cast<const u64*>(prompt),
                                                                 reinterpret_cast<const u64*>(candidate),
                                                                 reinterpret_cast<const u64*>(step), tokens, logprobs);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace bestofn::cuda
