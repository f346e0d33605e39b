// Sampling: the GPU twin of bestofn::sample_token (src/engine/sampler.cpp; the rule is documented in
// include/bestofn/engine/sampler.h), with the same counter-based Philox4x32-10 draw (src/util/rng.cpp).
//
// The multi-block sampler (the default): a row's vocabulary is cut into chunks of 1024 ids (the
// host sampler's blocks) spread over many blocks, in up to four passes (src/cuda/sample_passes.h
// describes them and holds the arithmetic both these kernels and the host emulation of
// tests/test_sampler_passes.cpp run):
//   kernel_max     grid (P, T): each block's largest logit, its first index, a NaN flag;
//   kernel_chunks  grid (P, T): per chunk, one warp: the candidates' mass in the host's 16-lane
//                  order (bit for bit its block_mass), every weight's mass, the candidate count;
//                  with a truncation, the candidates' histogram over bins of z;
//   kernel_gather  grid (P, T), truncation only: the candidates of the bins that fit one tile;
//   kernel_finish  grid T, 512 threads: the draw. Without truncation, the host's id-order walk
//                  through the chunk masses, then one chunk id by id (thread 0: the host's
//                  sequential double sums). With one, the tile sorted by probability (CUB's block
//                  radix sort on unique 64-bit keys) and walked by thread 0 in the host's order;
//                  further tiles (a flat row, ties) by radix select over the row.
// P blocks per row: enough that the T rows fill the SMs twice; nothing a row draws depends on P
// (maxima, integer counts, per-chunk sums, a sort of unique keys). The token is the host's,
// exactly (a top-p total summed in another order is certified, or redone in the host's order);
// the logprob is within the bound in tests/test_sampler_passes.cpp (the log-sum-exp's sum runs
// per chunk, then in chunk order, where the host sums each of its 16 lanes over the whole row).
// Passes over the logits: 2 (3 with top-k / top-p / min-p), each spread over P blocks, plus 4 KB
// per row in the finish; further tiles cost 6 single-block passes each.
//
// The one-block-per-row bisection kernel of before stays behind SampleOptions::legacy until a
// device run has timed both (benchmarks/bench_sampler_gpu.cu); it draws the host's rule with
// CUDA's expf and its own sum order, so near-ties may pick a neighbouring token.
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/sample_passes.h"

namespace bestofn::cuda {
namespace {

using u64 = unsigned long long;
namespace sp = sampling;

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

// ==== the multi-block sampler ====

constexpr int kPassWarps = 4;  // warps per block of the row passes; one chunk per warp at a time
constexpr int kPassThreads = 32 * kPassWarps;
constexpr int kFinishThreads = 512;
constexpr int kItems = sp::kTileCap / kFinishThreads;  // keys per thread in the tile sort
static_assert(kItems * kFinishThreads == sp::kTileCap);
static_assert(sp::kChunk == 32 * 32);  // a warp takes a chunk in 32 loads of 32 ids

struct Partial {  // kernel_max's result per block
  float v;
  int i;
  int nan;
  int pad;
};
struct RowInfo {  // the row's maximum, as kernel_chunks found it
  float zmax, xbest;
  int best, valid;
};

// The launch shape: T rows of V logits, nb chunks each, P blocks per row of cpb chunks each.
struct Shape {
  int T, V, nb, P, cpb, idbits;
};

// The workspace, carved in this order (carve() gives the sizes): per row, P partials, the row
// info, nb chunk masses, nb weight masses, nb counts; with a truncation the histogram, the list
// of the first tile, its length and its last bin.
struct Work {
  Partial* partial;
  RowInfo* row;
  double* mass;
  double* all;
  int* count;
  unsigned* hist;
  u64* list;
  int* list_n;
  int* bstar;
};
std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }
// max_P bounds P (the sizes do not depend on the device); base may be null (sizes only).
std::size_t carve(char* base, int T, int nb, int max_P, bool truncation, Work& w) {
  const auto t = static_cast<std::size_t>(T), b = static_cast<std::size_t>(nb);
  std::size_t off = 0;
  auto take = [&](auto*& p, std::size_t n) {
    using E = std::remove_reference_t<decltype(*p)>;
    p = base ? reinterpret_cast<E*>(base + off) : nullptr;
    off += align_up(n * sizeof(E));
  };
  take(w.partial, t * static_cast<std::size_t>(max_P));
  take(w.row, t);
  take(w.mass, t * b);
  take(w.all, t * b);
  take(w.count, t * b);
  w.hist = nullptr, w.list = nullptr, w.list_n = nullptr, w.bstar = nullptr;
  if (truncation) {
    take(w.hist, t * sp::kBins);
    take(w.list, t * sp::kTileCap);
    take(w.list_n, t);
    take(w.bstar, t);
  }
  return off;
}
bool may_truncate(const SamplingParams& p) {
  return p.temperature > 0.0f && (p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f);
}

// ---- pass 1: each block's maximum ----
// Block p of row t takes chunks [p cpb, (p + 1) cpb). With a truncation it also clears its part of
// the row's histogram, and block 0 the list's length (kernel_chunks and kernel_gather add to them).
__global__ void __launch_bounds__(kPassThreads) kernel_max(const float* logits, Shape s, Work w) {
  const int t = static_cast<int>(blockIdx.y), p = static_cast<int>(blockIdx.x);
  const float* row = logits + static_cast<std::size_t>(t) * static_cast<std::size_t>(s.V);
  const int begin = p * s.cpb * sp::kChunk, end = min(s.V, (p + 1) * s.cpb * sp::kChunk);
  ArgMax best{-INFINITY, INT_MAX};
  int nan = 0;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kPassThreads) {
    const float x = row[i];
    if (x != x) nan = 1;
    else if (x > best.v || best.i == INT_MAX) best = ArgMax{x, i};
  }
  using Reduce = cub::BlockReduce<ArgMax, kPassThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const ArgMax r = Reduce(tmp).Reduce(best, ArgMaxOp());
  nan = __syncthreads_or(nan);
  if (threadIdx.x == 0) w.partial[static_cast<std::size_t>(t) * s.P + p] = Partial{r.v, r.i, nan, 0};
  if (w.hist) {
    unsigned* h = w.hist + static_cast<std::size_t>(t) * sp::kBins;
    const int per = (sp::kBins + s.P - 1) / s.P;
    for (int b = p * per + static_cast<int>(threadIdx.x); b < min(sp::kBins, (p + 1) * per); b += kPassThreads) h[b] = 0;
    if (p == 0 && threadIdx.x == 0) w.list_n[t] = 0;
  }
}

// The row's maximum from its P partials (the first warp), in every thread of the block.
__device__ RowInfo row_info(const Work& w, const Shape& s, int t, float inv_t, RowInfo& shared) {
  if (threadIdx.x < 32) {
    ArgMax best{-INFINITY, INT_MAX};
    int nan = 0;
    for (int p = static_cast<int>(threadIdx.x); p < s.P; p += 32) {
      const Partial q = w.partial[static_cast<std::size_t>(t) * s.P + p];
      nan |= q.nan;
      best = ArgMaxOp()(best, ArgMax{q.v, q.i});
    }
    for (int o = 16; o > 0; o /= 2) {
      const ArgMax other{__shfl_xor_sync(0xFFFFFFFFu, best.v, o), __shfl_xor_sync(0xFFFFFFFFu, best.i, o)};
      best = ArgMaxOp()(best, other);
      nan |= __shfl_xor_sync(0xFFFFFFFFu, nan, o);
    }
    if (threadIdx.x == 0) {
      // a NaN anywhere, a +Inf, or nothing above -Inf: no distribution (the host's row_max test)
      const bool valid = !nan && best.v > -INFINITY && best.v < INFINITY;
      shared = RowInfo{sp::fmul(best.v, inv_t), best.v, best.i, valid ? 1 : 0};
    }
  }
  __syncthreads();
  return shared;
}

// ---- pass 2: the chunks ----
// One warp per chunk: lane j loads ids base + 32 s + j (s = 0..31), i.e. lane j mod 16 of the
// host's group 2 s + j / 16; lanes 0..15 add their own group and then lane j + 16's, so that each
// of the host's 16 lane sums is formed in the host's order (groups in id order), and the chunk's
// sums are then put together as the host's sum_lanes does.
template <bool kHist>
__global__ void __launch_bounds__(kPassThreads) kernel_chunks(const float* logits, Shape s, Work w, float inv_t) {
  const int t = static_cast<int>(blockIdx.y), p = static_cast<int>(blockIdx.x);
  __shared__ RowInfo info_s;
  __shared__ unsigned hist_s[kHist ? sp::kBins : 1];
  const RowInfo info = row_info(w, s, t, inv_t, info_s);
  if (p == 0 && threadIdx.x == 0) w.row[t] = info;
  if (!info.valid) return;
  if (kHist) {
    for (int b = static_cast<int>(threadIdx.x); b < sp::kBins; b += kPassThreads) hist_s[b] = 0;
    __syncthreads();
  }
  const float* row = logits + static_cast<std::size_t>(t) * static_cast<std::size_t>(s.V);
  const float zmax = info.zmax, cut = sp::fsub(zmax, sp::kDropNats);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int c_end = min(s.nb, (p + 1) * s.cpb);
  for (int c = p * s.cpb + warp; c < c_end; c += kPassWarps) {
    const int base = c * sp::kChunk;
    double mass = 0.0, all = 0.0;
    int count = 0;
#pragma unroll 4
    for (int k = 0; k < 32; ++k) {
      const int i = base + 32 * k + lane;
      const bool in_row_group = base + 32 * k + 16 * (lane / 16) < s.V;  // the host's group exists
      const float x = i < s.V ? row[i] : -INFINITY;                        // the host pads with -inf
      const float z = sp::fmul(x, inv_t);
      const float wt = sp::exp_poly(sp::fsub(z, zmax));
      const bool cand = z >= cut;
      const float w_hi = __shfl_down_sync(0xFFFFFFFFu, wt, 16);
      const unsigned cands = __ballot_sync(0xFFFFFFFFu, cand), groups = __ballot_sync(0xFFFFFFFFu, in_row_group);
      if (lane < 16) {
        if (in_row_group) all += static_cast<double>(wt);
        if (cand) mass += static_cast<double>(wt);
        if ((groups >> (lane + 16)) & 1u) all += static_cast<double>(w_hi);
        if ((cands >> (lane + 16)) & 1u) mass += static_cast<double>(w_hi);
      }
      count += __popc(cands);
      if (kHist && cand) atomicAdd(&hist_s[sp::bin_of(z, zmax)], 1u);
    }
    // sum_lanes: lanes 0..7 in order, 8..15 in order, then the two
    double mass_lo = 0.0, mass_hi = 0.0, all_lo = 0.0, all_hi = 0.0;
    for (int l = 0; l < 8; ++l) {
      mass_lo += __shfl_sync(0xFFFFFFFFu, mass, l), mass_hi += __shfl_sync(0xFFFFFFFFu, mass, 8 + l);
      all_lo += __shfl_sync(0xFFFFFFFFu, all, l), all_hi += __shfl_sync(0xFFFFFFFFu, all, 8 + l);
    }
    if (lane == 0) {
      const std::size_t at = static_cast<std::size_t>(t) * s.nb + c;
      w.mass[at] = mass_lo + mass_hi;
      w.all[at] = all_lo + all_hi;
      w.count[at] = count;
    }
  }
  if (kHist) {
    __syncthreads();
    unsigned* h = w.hist + static_cast<std::size_t>(t) * sp::kBins;
    for (int b = static_cast<int>(threadIdx.x); b < sp::kBins; b += kPassThreads)
      if (hist_s[b]) atomicAdd(&h[b], hist_s[b]);
  }
}

// The row's candidate count (every thread; a sum of integers, in any order).
__device__ long long row_count(const Work& w, const Shape& s, int t) {
  long long n = 0;
  for (int c = 0; c < s.nb; ++c) n += w.count[static_cast<std::size_t>(t) * s.nb + c];
  return n;
}

// ---- pass 3 (truncation): the first tile's candidates, gathered ----
// Every block finds b* (sp::plan_first_tile) from the row's histogram, then lists the candidates of
// its chunks in bins <= b* (in no particular order: the finish sorts them, and keys are unique).
__global__ void __launch_bounds__(kPassThreads) kernel_gather(const float* logits, Shape s, Work w, sp::Params a) {
  const int t = static_cast<int>(blockIdx.y), p = static_cast<int>(blockIdx.x);
  const RowInfo info = w.row[t];
  if (!info.valid) return;
  const sp::Rule rule = sp::make_rule(a, row_count(w, s, t));
  if (!sp::truncates(rule)) return;
  // first bins where the prefix count exceeds the tile / reaches k
  constexpr int kPer = sp::kBins / kPassThreads;
  using Scan = cub::BlockScan<unsigned, kPassThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int over_s, reach_s, bstar_s;
  if (threadIdx.x == 0) over_s = sp::kBins, reach_s = sp::kBins;
  unsigned h[kPer];
  const unsigned* hist = w.hist + static_cast<std::size_t>(t) * sp::kBins;
  for (int j = 0; j < kPer; ++j) h[j] = hist[static_cast<int>(threadIdx.x) * kPer + j];
  Scan(scan_tmp).InclusiveSum(h, h);
  __syncthreads();
  for (int j = 0; j < kPer; ++j) {
    const int b = static_cast<int>(threadIdx.x) * kPer + j;
    if (h[j] > static_cast<unsigned>(a.cap)) atomicMin(&over_s, b);
    if (static_cast<long long>(h[j]) >= rule.k) atomicMin(&reach_s, b);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    bstar_s = sp::plan_first_tile(rule, over_s, reach_s);
    if (p == 0) w.bstar[t] = bstar_s;
  }
  __syncthreads();
  const int bstar = bstar_s;
  if (bstar < 0) return;
  const float* row = logits + static_cast<std::size_t>(t) * static_cast<std::size_t>(s.V);
  const float zmax = info.zmax, cut = sp::fsub(zmax, sp::kDropNats);
  const sp::KeyCode code{s.V, s.idbits};
  u64* list = w.list + static_cast<std::size_t>(t) * sp::kTileCap;
  const int begin = p * s.cpb * sp::kChunk, end = min(s.V, (p + 1) * s.cpb * sp::kChunk);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int i0 = begin; i0 < end; i0 += kPassThreads) {  // whole warps step together (the ballot)
    const int i = i0 + static_cast<int>(threadIdx.x);
    float z = 0.0f;
    bool take = false;
    if (i < end) {
      z = sp::fmul(row[i], a.inv_t);
      take = z >= cut && sp::bin_of(z, zmax) <= bstar;
    }
    const unsigned m = __ballot_sync(0xFFFFFFFFu, take);
    if (!m) continue;
    int at = 0;
    if (lane == __ffs(m) - 1) at = atomicAdd(&w.list_n[t], __popc(m));
    at = __shfl_sync(0xFFFFFFFFu, at, __ffs(m) - 1);
    if (take) list[at + __popc(m & ((1u << lane) - 1u))] = code.key(z, i);
  }
}

// ---- pass 4: the draw, one block per row ----
constexpr int kMaxChunks = 2048;  // rows of up to 2M ids (the finish stages the chunk masses)
using TileSort = cub::BlockRadixSort<u64, kFinishThreads, kItems>;

struct FinishShared {
  union {
    typename TileSort::TempStorage sort;
    u64 keys[sp::kTileCap];          // a tile gathered by the finish block
    unsigned digits[sp::kDigits];    // radix select
    struct {
      float w[sp::kTileCap];
      int id[sp::kTileCap];
    } tile;                          // the sorted tile: weights and ids in probability order
    struct {
      double mass[kMaxChunks];
      float w[sp::kChunk];           // one chunk's candidate weights, -1 for the others
    } ids;                           // the id-order walk and the exact top-p total
  } u;
  sp::Walk walk;
  sp::Rule rule;
  double total, r, cum;
  u64 min_key, prefix;
  long long count, rank;
  float lse;
  int loaded, tile_n, gathered, chunk, token, last;
};

struct RowView {
  const float* logits;
  float inv_t, zmax, cut;
  sp::KeyCode code;
  __device__ float z(int i) const { return sp::fmul(logits[i], inv_t); }
};

// Chunk b's candidate weights into sm.u.ids.w (-1 for the other ids), then a barrier.
__device__ void stage_chunk(const RowView& row, const Shape& s, int b, FinishShared& sm) {
  for (int j = static_cast<int>(threadIdx.x); j < sp::kChunk; j += kFinishThreads) {
    const int i = b * sp::kChunk + j;
    float v = -1.0f;
    if (i < s.V) {
      const float z = row.z(i);
      if (z >= row.cut) v = sp::exp_poly(sp::fsub(z, row.zmax));
    }
    sm.u.ids.w[j] = v;
  }
  __syncthreads();
}

// The draw through the chunk masses in id order (no truncation): the host's block walk, then its
// id-by-id walk, thread 0 adding in the host's order.
__device__ int id_order_draw(const RowView& row, const Shape& s, double u, int best, FinishShared& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    const double r = u * sm.total;
    double cum = 0.0;
    int b = 0;
    while (b + 1 < s.nb && cum + sm.u.ids.mass[b] <= r) cum += sm.u.ids.mass[b++];
    sm.r = r, sm.cum = cum, sm.chunk = b, sm.token = -1, sm.last = best;
  }
  __syncthreads();
  for (int b = sm.chunk; b < s.nb; ++b) {
    stage_chunk(row, s, b, sm);
    if (tid == 0) {
      double cum = sm.cum;
      for (int j = 0; j < sp::kChunk; ++j) {
        const float v = sm.u.ids.w[j];
        if (v < 0.0f) continue;
        sm.last = b * sp::kChunk + j;
        cum += static_cast<double>(v);
        if (cum > sm.r) {
          sm.token = sm.last;
          break;
        }
      }
      sm.cum = cum;
    }
    __syncthreads();
    if (sm.token >= 0) break;
  }
  return sm.token >= 0 ? sm.token : sm.last;
}

// The host's top-p total without top-k: every candidate's weight added in id order (thread 0).
__device__ double host_order_total(const RowView& row, const Shape& s, FinishShared& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) sm.cum = 0.0, sm.loaded = -1;  // the staging below overwrites the tile
  for (int b = 0; b < s.nb; ++b) {
    __syncthreads();
    stage_chunk(row, s, b, sm);
    if (tid == 0) {
      double cum = sm.cum;
      for (int j = 0; j < sp::kChunk; ++j)
        if (sm.u.ids.w[j] >= 0.0f) cum += static_cast<double>(sm.u.ids.w[j]);
      sm.cum = cum;
    }
  }
  __syncthreads();
  return sm.cum;
}

// The `want`-th largest candidate key below `bound`, by radix select over the row (kDigitBits a pass).
__device__ u64 radix_select(const RowView& row, const Shape& s, u64 bound, long long want, FinishShared& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  const int passes = (row.code.width() + sp::kDigitBits - 1) / sp::kDigitBits;
  if (tid == 0) sm.prefix = 0, sm.rank = want;
  for (int pass = passes - 1; pass >= 0; --pass) {
    const int shift = pass * sp::kDigitBits, hi = shift + sp::kDigitBits;
    __syncthreads();
    for (int d = tid; d < sp::kDigits; d += kFinishThreads) sm.u.digits[d] = 0;
    __syncthreads();
    const u64 prefix = sm.prefix;
    for (int i = tid; i < s.V; i += kFinishThreads) {
      const float z = row.z(i);
      if (!(z >= row.cut)) continue;
      const u64 key = row.code.key(z, i);
      if (key >= bound || (hi < 64 && (key >> hi) != (prefix >> hi))) continue;
      atomicAdd(&sm.u.digits[(key >> shift) & (sp::kDigits - 1)], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      long long above = 0;
      const int d = sp::choose_digit(sm.u.digits, sp::kDigits, sm.rank, above);
      sm.rank -= above;
      sm.prefix |= static_cast<u64>(d) << shift;
    }
  }
  __syncthreads();
  return sm.prefix;
}

// Tile j of the order into sm.u.tile (sorted), unless it is there already: tile 0 from the list
// kernel_gather made (when its bins fit), else the a.cap largest candidate keys below `bound`.
__device__ void load_tile(const RowView& row, const Shape& s, const Work& w, int t, const sp::Params& a, int j, u64 bound,
                          long long seen, FinishShared& sm) {
  if (sm.loaded == j) return;
  const int tid = static_cast<int>(threadIdx.x);
  u64 keys[kItems];
  int n;
  const int bstar = w.bstar[t];
  if (j == 0 && bstar >= 0) {
    n = w.list_n[t];
    const u64* list = w.list + static_cast<std::size_t>(t) * sp::kTileCap;
    for (int k = 0; k < kItems; ++k) {
      const int at = tid * kItems + k;
      keys[k] = at < n ? list[at] : 0;
    }
  } else {
    const long long remaining = sm.count - seen;
    const long long want = remaining < a.cap ? remaining : a.cap;
    const u64 tau = remaining <= a.cap ? 0 : radix_select(row, s, bound, want, sm);
    if (tid == 0) sm.gathered = 0;
    __syncthreads();
    for (int i = tid; i < s.V; i += kFinishThreads) {
      const float z = row.z(i);
      if (!(z >= row.cut)) continue;
      const u64 key = row.code.key(z, i);
      if (key >= tau && key < bound) {
        const int at = atomicAdd(&sm.gathered, 1);
        if (at < sp::kTileCap) sm.u.keys[at] = key;
      }
    }
    __syncthreads();
    n = min(sm.gathered, sp::kTileCap);
    for (int k = 0; k < kItems; ++k) {
      const int at = tid * kItems + k;
      keys[k] = at < n ? sm.u.keys[at] : 0;
    }
  }
  __syncthreads();  // the keys leave shared memory before the sort reuses it
  TileSort(sm.u.sort).SortDescending(keys, 0, row.code.width());  // keys are > 0: the padding sorts last
  __syncthreads();
  for (int k = 0; k < kItems; ++k) {
    const int at = tid * kItems + k;
    if (at >= n) break;
    const float z = row.code.z(keys[k]);
    sm.u.tile.w[at] = sp::exp_poly(sp::fsub(z, row.zmax));
    sm.u.tile.id[at] = row.code.id(keys[k]);
    if (at == n - 1) sm.min_key = keys[k];
  }
  if (tid == 0) sm.loaded = j, sm.tile_n = n;
  __syncthreads();
}

// One walk (sp::Walk's phases) over the order, tile by tile.
__device__ void run_walk(const RowView& row, const Shape& s, const Work& w, int t, const sp::Params& a, int phase,
                         FinishShared& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    const double r = sm.walk.r;
    sp::walk_start(sm.walk, phase);
    sm.walk.r = r;
  }
  __syncthreads();
  const int bstar = w.bstar[t];
  long long seen = 0;
  u64 bound = ~0ull;
  for (int j = 0;; ++j) {
    load_tile(row, s, w, t, a, j, bound, seen, sm);
    if (tid == 0) {  // in registers, not through shared memory, while it walks
      const sp::Rule rule = sm.rule;
      sp::Walk walk = sm.walk;
      sp::walk_tile(rule, walk, sm.u.tile.w, sm.u.tile.id, sm.tile_n);
      sm.walk = walk;
    }
    __syncthreads();
    seen += sm.tile_n;
    if (sm.walk.done || seen >= sm.count || sm.tile_n == 0) break;
    if (j == 0 && bstar >= 0 && (bstar == sp::kBins - 1 || sp::first_tile_suffices(sm.rule, bstar, sm.tile_n))) break;
    bound = sm.min_key;
  }
  if (tid == 0) sp::walk_end(sm.rule, sm.walk);
  __syncthreads();
}

// The draw with a truncation: the walks of sp::Walk over the candidates in probability order.
__device__ int ordered_draw(const RowView& row, const Shape& s, const Work& w, int t, const sp::Params& a, double u,
                            FinishShared& sm) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) sm.loaded = -1;
  __syncthreads();
  if (sm.rule.top_k && sm.rule.top_p) {  // the host's total: the top-k's mass
    run_walk(row, s, w, t, a, sp::kTotal, sm);
    if (tid == 0) sm.rule.need_lo = sm.rule.need_hi = static_cast<double>(a.top_p) * sm.walk.total;
  } else if (sm.rule.top_p) {  // the host's total: every candidate in id order; the chunks' sum, certified
    if (a.exact_total) {
      const double total = host_order_total(row, s, sm);
      if (tid == 0) sm.rule.need_lo = sm.rule.need_hi = static_cast<double>(a.top_p) * total;
    } else if (tid == 0) {
      sp::top_p_need_bounds(sm.total, sm.count, s.nb, a.top_p, sm.rule.need_lo, sm.rule.need_hi);
    }
  }
  __syncthreads();
  run_walk(row, s, w, t, a, sp::kCut, sm);
  if (sm.walk.ambiguous) {  // the cut moved within the bound: the host's own total
    const double total = host_order_total(row, s, sm);
    if (tid == 0) sm.rule.need_lo = sm.rule.need_hi = static_cast<double>(a.top_p) * total;
    __syncthreads();
    run_walk(row, s, w, t, a, sp::kCut, sm);
  }
  if (tid == 0) sm.walk.r = u * sm.walk.kept;
  __syncthreads();
  run_walk(row, s, w, t, a, sp::kDraw, sm);
  return sm.walk.token;
}

__global__ void __launch_bounds__(kFinishThreads) kernel_finish(const float* logits, Shape s, Work w, sp::Params a,
                                                                const u64* prompt, const u64* candidate, const u64* step,
                                                                int* tokens, float* logprobs) {
  __shared__ FinishShared sm;
  const int t = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  const RowInfo info = w.row[t];
  if (!info.valid) {
    if (tid == 0) tokens[t] = -1, logprobs[t] = NAN;
    return;
  }
  const float* logits_t = logits + static_cast<std::size_t>(t) * static_cast<std::size_t>(s.V);
  const std::size_t at = static_cast<std::size_t>(t) * s.nb;
  // the log-sum-exp (chunk order), the candidates' total (chunk order) and count
  for (int c = tid; c < s.nb; c += kFinishThreads) sm.u.ids.mass[c] = w.all[at + c];
  __syncthreads();
  if (tid == 0) {
    double all = 0.0;
    for (int c = 0; c < s.nb; ++c) all += sm.u.ids.mass[c];
    sm.lse = sp::fadd(info.zmax, static_cast<float>(log(all)));
  }
  __syncthreads();
  for (int c = tid; c < s.nb; c += kFinishThreads) sm.u.ids.mass[c] = w.mass[at + c];
  __syncthreads();
  if (tid == 0) {
    double total = 0.0;
    long long count = 0;
    for (int c = 0; c < s.nb; ++c) total += sm.u.ids.mass[c], count += w.count[at + c];
    sm.total = total, sm.count = count;
    sm.rule = sp::make_rule(a, count);
  }
  __syncthreads();
  const float lse = sm.lse;
  if (!isfinite(lse)) {
    if (tid == 0) tokens[t] = -1, logprobs[t] = lse;
    return;
  }
  if (a.greedy) {
    if (tid == 0) tokens[t] = info.best, logprobs[t] = sp::fsub(info.xbest, lse);
    return;
  }
  const double u = static_cast<double>(uniform01(a.seed, prompt[t], candidate[t], step[t]));
  const RowView row{logits_t, a.inv_t, info.zmax, sp::fsub(info.zmax, sp::kDropNats), sp::KeyCode{s.V, s.idbits}};
  const int token = sp::truncates(sm.rule) ? ordered_draw(row, s, w, t, a, u, sm) : id_order_draw(row, s, u, info.best, sm);
  if (tid == 0) tokens[t] = token, logprobs[t] = sp::fsub(row.z(token), lse);
}

// ==== the legacy sampler (SampleOptions::legacy): one block per row, bisection over a sort key ====
// Every step of the rule is a search for a boundary in the order the CPU walks, done by bisection
// over a 64-bit key, each probe one pass over the row with a block reduction: ~20 passes for the
// id-order draw, ~100 with top-p, ~150 with top-k and top-p. Weights from CUDA's expf, sums in a
// block tree: near-ties may pick a neighbouring token.
namespace legacy {

constexpr int kBlock = 512;

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


}  // namespace legacy

}  // namespace

std::size_t sample_token_workspace_bytes(int T, int V, const SamplingParams& params) {
  if (T <= 0 || V <= 0) return 0;
  const int nb = (V + sp::kChunk - 1) / sp::kChunk;
  Work w{};
  return carve(nullptr, T, nb, nb, may_truncate(params), w);
}

void sample_token_cuda(const float* logits, int T, int V, const SamplingParams& params, const std::uint64_t* prompt,
                       const std::uint64_t* candidate, const std::uint64_t* step, int* tokens, float* logprobs,
                       cudaStream_t stream, const SampleOptions& options) {
  if (V <= 0) throw Error("sample_token_cuda", "expected a vocabulary of at least 1 token, got " + std::to_string(V));
  if (T < 0) throw Error("sample_token_cuda", "expected T >= 0, got " + std::to_string(T));
  if (T == 0) return;
  static_assert(sizeof(u64) == sizeof(std::uint64_t));
  const auto* d_prompt = reinterpret_cast<const u64*>(prompt);
  const auto* d_candidate = reinterpret_cast<const u64*>(candidate);
  const auto* d_step = reinterpret_cast<const u64*>(step);
  if (options.legacy) {
    legacy::Args a{};
    a.greedy = params.temperature <= 0.0f;
    a.inv_t = a.greedy ? 1.0f : 1.0f / params.temperature;
    a.top_k = params.top_k, a.top_p = params.top_p, a.min_p = params.min_p, a.seed = params.seed;
    while ((1ull << a.idbits) < static_cast<u64>(V)) ++a.idbits;
    legacy::kernel_sample<<<static_cast<unsigned>(T), legacy::kBlock, 0, stream>>>(logits, V, a, d_prompt, d_candidate,
                                                                                   d_step, tokens, logprobs);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int nb = (V + sp::kChunk - 1) / sp::kChunk;
  if (nb > kMaxChunks)
    throw Error("sample_token_cuda", "expected a vocabulary of at most " + std::to_string(kMaxChunks * sp::kChunk) +
                                         " tokens, got " + std::to_string(V));
  if (T > 65535) throw Error("sample_token_cuda", "expected at most 65535 rows, got " + std::to_string(T));
  if (options.tile_cap < 0 || options.tile_cap > sp::kTileCap)
    throw Error("sample_token_cuda", "tile_cap must be 0 or 1.." + std::to_string(sp::kTileCap));
  // P blocks per row: T * P about twice the SMs (at most one per chunk).
  int P = options.blocks_per_row;
  if (P <= 0) {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    P = (2 * sms + T - 1) / T;
  }
  P = std::min(std::max(P, 1), nb);
  const int cpb = (nb + P - 1) / P;
  P = (nb + cpb - 1) / cpb;
  const Shape s{T, V, nb, P, cpb, sp::id_bits(V)};

  const bool truncation = may_truncate(params);
  Work w{};
  const std::size_t bytes = carve(nullptr, T, nb, nb, truncation, w);
  void* base = options.workspace;
  if (base && options.workspace_bytes < bytes)
    throw Error("sample_token_cuda", "workspace of " + std::to_string(options.workspace_bytes) + " bytes, " +
                                         std::to_string(bytes) + " needed (sample_token_workspace_bytes)");
  if (!base) CUDA_CHECK(cudaMallocAsync(&base, bytes, stream));
  carve(static_cast<char*>(base), T, nb, nb, truncation, w);

  sp::Params a{};
  a.greedy = params.temperature <= 0.0f;
  a.inv_t = a.greedy ? 1.0f : 1.0f / params.temperature;
  a.top_k = params.top_k, a.top_p = params.top_p, a.min_p = params.min_p, a.seed = params.seed;
  a.d_stop = params.min_p > 0.0f ? sp::min_p_stop(params.min_p) : 0.0f;
  a.cap = options.tile_cap > 0 ? options.tile_cap : sp::kTileCap;
  a.exact_total = options.exact_total;

  const dim3 grid(static_cast<unsigned>(P), static_cast<unsigned>(T));
  kernel_max<<<grid, kPassThreads, 0, stream>>>(logits, s, w);
  CUDA_CHECK(cudaGetLastError());
  if (truncation) kernel_chunks<true><<<grid, kPassThreads, 0, stream>>>(logits, s, w, a.inv_t);
  else kernel_chunks<false><<<grid, kPassThreads, 0, stream>>>(logits, s, w, a.inv_t);
  CUDA_CHECK(cudaGetLastError());
  if (truncation) {
    kernel_gather<<<grid, kPassThreads, 0, stream>>>(logits, s, w, a);
    CUDA_CHECK(cudaGetLastError());
  }
  kernel_finish<<<static_cast<unsigned>(T), kFinishThreads, 0, stream>>>(logits, s, w, a, d_prompt, d_candidate, d_step,
                                                                         tokens, logprobs);
  CUDA_CHECK(cudaGetLastError());
  if (!options.workspace) CUDA_CHECK(cudaFreeAsync(base, stream));
}

}  // namespace bestofn::cuda
