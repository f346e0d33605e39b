// The CPU's multiply-add ceilings, the roofline the FP8 GEMM (src/cpu/gemm_fp8.cpp) is measured
// against: vdpbf16ps (32 BF16 products into 16 fp32 lanes per instruction: the FP8 kernels' inner
// instruction), fp32 vfmadd on zmm, and fp32 vfmadd on ymm (the AVX2 FP8 kernels' inner
// instruction), each with 16 independent accumulators (12 on ymm) so that latency never limits, on 1 thread
// and on every core. Prints one JSON line per (instruction, threads):
//   bench_cpu_peak [--seconds S]
// GFLOP/s counts 2 per multiply-add. A CPU without an instruction gets a line that says so and 0.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bestofn_version.h"

namespace {

constexpr int kAcc = 16;

// The accumulators' sum, so that the loops cannot be dropped (stored, then added: GCC 12 warns on
// _mm512_reduce_add_ps's "undefined" vectors under -Werror).
__attribute__((target("avx512f"))) float sum(const __m512 (&a)[kAcc]) {
  alignas(64) float lanes[16];
  float s = 0.0f;
  for (const auto& x : a) {
    _mm512_store_ps(lanes, x);
    for (float l : lanes) s += l;
  }
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_loop(long iters) {
  __m512 a[kAcc];
  for (auto& x : a) x = _mm512_setzero_ps();
  __m512bh w = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80)), v = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f00));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) a[k] = _mm512_dpbf16_ps(a[k], w, v);
    asm volatile("" : "+v"(w), "+v"(v));  // keep the operands live and the loop real
  }
  return sum(a);
}

__attribute__((target("avx512f"))) float fma_loop(long iters) {
  __m512 a[kAcc];
  for (auto& x : a) x = _mm512_setzero_ps();
  __m512 w = _mm512_set1_ps(1.0f), v = _mm512_set1_ps(0.5f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) a[k] = _mm512_fmadd_ps(w, v, a[k]);
    asm volatile("" : "+v"(w), "+v"(v));
  }
  return sum(a);
}

constexpr int kAcc256 = 12;  // AVX2 has 16 registers: 12 accumulators and the 2 operands

__attribute__((target("avx2,fma"))) float fma256_loop(long iters) {
  __m256 a[kAcc256];
  for (auto& x : a) x = _mm256_setzero_ps();
  __m256 w = _mm256_set1_ps(1.0f), v = _mm256_set1_ps(0.5f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kAcc256; ++k) a[k] = _mm256_fmadd_ps(w, v, a[k]);
    asm volatile("" : "+v"(w), "+v"(v));
  }
  alignas(32) float lanes[8];
  float s = 0.0f;
  for (const auto& x : a) {
    _mm256_store_ps(lanes, x);
    for (float l : lanes) s += l;
  }
  return s;
}

// GFLOP/s of `loop` on `threads` threads, each running `iters` iterations; best of 3.
double gflops(float (*loop)(long), long iters, int threads, double flops_per_iter) {
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    std::vector<float> sink(static_cast<std::size_t>(threads));
    for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { sink[static_cast<std::size_t>(i)] = loop(iters); });
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_iter * static_cast<double>(iters) * threads / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.5;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--seconds") seconds = std::stod(argv[i + 1]);
  __builtin_cpu_init();
  const bool bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  // Iterations for about `seconds` at 4 GHz and 2 instructions per cycle.
  const long iters = static_cast<long>(seconds * 4e9 * 2 / kAcc);
  for (int threads : {1, cores}) {
    for (const std::string op : {"vdpbf16ps", "vfmadd_f32", "vfmadd_f32_ymm"}) {
      const bool ok = op == "vdpbf16ps" ? bf16 : op == "vfmadd_f32" ? avx512 : avx2;
      const double g = !ok                  ? 0.0
                       : op == "vdpbf16ps"  ? gflops(dpbf16_loop, iters, threads, kAcc * 64.0)
                       : op == "vfmadd_f32" ? gflops(fma_loop, iters, threads, kAcc * 32.0)
                                            : gflops(fma256_loop, iters * kAcc / kAcc256, threads, kAcc256 * 16.0);
      nlohmann::json row = {{"bench", "cpu_peak"}, {"op", op}, {"threads", threads}, {"gflop_per_s", g}, {"supported", ok},
                            {"cores", cores}, {"commit", BESTOFN_COMMIT}, {"command", command}};
      std::printf("%s\n", row.dump().c_str());
    }
    if (cores == 1) break;
  }
  return 0;
}
