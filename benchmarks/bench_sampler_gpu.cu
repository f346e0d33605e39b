// The device sampler (sample_token_cuda, kernels/sample.cu) alone: the time of one call over T rows
// of V = 128256 logits, the multi-block sampler against the legacy one-block-per-row kernel
// (SampleOptions::legacy), for T = 1, 64, 1024, three rows as in bench_sampler ("peaked",
// "spread", "flat") and three modes (temperature 1 alone; top-p 0.95; top-k 50 with top-p 0.9).
// Each line also counts, over the first 16 rows, the tokens that differ from the host sampler's
// (0 expected of the multi-block sampler). One JSON line per configuration:
//   bench_sampler_gpu [--seconds S] [--t 1,64,1024]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bestofn/engine/sampler.h"
#include "bestofn_version.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace {

struct Mode {
  const char* name;
  float top_p;
  int top_k;
};

std::vector<float> make_rows(const std::string& kind, int T, int V) {
  std::vector<float> x(static_cast<std::size_t>(T) * static_cast<std::size_t>(V));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int t = 0; t < T; ++t) {
    float* row = x.data() + static_cast<std::size_t>(t) * static_cast<std::size_t>(V);
    for (int i = 0; i < V; ++i) row[i] = (kind == "flat" ? 0.05f : 2.5f) * normal(rng);
    if (kind == "peaked")
      for (int k = 0; k < 5; ++k) row[rng() % static_cast<unsigned>(V)] = 12.0f + static_cast<float>(k);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bestofn;
  double seconds = 0.3;
  std::vector<int> Ts = {1, 64, 1024};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seconds") seconds = std::stod(argv[i + 1]);
    if (a == "--t") {
      Ts.clear();
      std::stringstream s(argv[i + 1]);
      for (std::string v; std::getline(s, v, ',');) Ts.push_back(std::stoi(v));
    }
  }
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int V = 128256;
  const Mode modes[] = {{"temperature", 1.0f, 0}, {"top_p 0.95", 0.95f, 0}, {"top_k 50 top_p 0.9", 0.9f, 50}};
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int T : Ts)
    for (const std::string kind : {"peaked", "spread", "flat"}) {
      const std::vector<float> logits = make_rows(kind, T, V);
      std::vector<std::uint64_t> prompt(static_cast<std::size_t>(T)), cand(static_cast<std::size_t>(T)), step(static_cast<std::size_t>(T), 3);
      for (int t = 0; t < T; ++t) prompt[static_cast<std::size_t>(t)] = 7, cand[static_cast<std::size_t>(t)] = static_cast<std::uint64_t>(t);
      float* d_logits;
      std::uint64_t* d_idx;
      int* d_tokens;
      float* d_lp;
      const std::size_t n = static_cast<std::size_t>(T);
      CUDA_CHECK(cudaMalloc(&d_logits, logits.size() * sizeof(float)));
      CUDA_CHECK(cudaMalloc(&d_idx, 3 * n * sizeof(std::uint64_t)));
      CUDA_CHECK(cudaMalloc(&d_tokens, n * sizeof(int)));
      CUDA_CHECK(cudaMalloc(&d_lp, n * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d_idx, prompt.data(), n * sizeof(std::uint64_t), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d_idx + n, cand.data(), n * sizeof(std::uint64_t), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d_idx + 2 * n, step.data(), n * sizeof(std::uint64_t), cudaMemcpyHostToDevice));
      for (const Mode& m : modes) {
        SamplingParams p;
        p.temperature = 1.0f, p.top_p = m.top_p, p.top_k = m.top_k, p.seed = 1;
        const std::size_t bytes = cuda::sample_token_workspace_bytes(T, V, p);
        void* work;
        CUDA_CHECK(cudaMalloc(&work, std::max<std::size_t>(bytes, 1)));
        for (const bool legacy : {false, true}) {
          cuda::SampleOptions o;
          o.workspace = work, o.workspace_bytes = bytes, o.legacy = legacy;
          auto call = [&] {
            cuda::sample_token_cuda(d_logits, T, V, p, d_idx, d_idx + n, d_idx + 2 * n, d_tokens, d_lp, stream, o);
          };
          call();  // warm-up
          CUDA_CHECK(cudaStreamSynchronize(stream));
          int reps = 0;
          float ms = 0.0f;
          const auto t0 = std::chrono::steady_clock::now();
          do {
            CUDA_CHECK(cudaEventRecord(e0, stream));
            call();
            CUDA_CHECK(cudaEventRecord(e1, stream));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float one = 0.0f;
            CUDA_CHECK(cudaEventElapsedTime(&one, e0, e1));
            ms += one, ++reps;
          } while (reps < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
          // parity with the host sampler over the first 16 rows
          std::vector<int> tokens(n);
          CUDA_CHECK(cudaMemcpy(tokens.data(), d_tokens, n * sizeof(int), cudaMemcpyDeviceToHost));
          SamplerScratch scratch;
          int differ = 0;
          const int checked = std::min(T, 16);
          for (int t = 0; t < checked; ++t) {
            const std::span<const float> row(logits.data() + static_cast<std::size_t>(t) * V, static_cast<std::size_t>(V));
            const auto i = static_cast<std::size_t>(t);
            differ += sample_token(row, p, prompt[i], cand[i], step[i], scratch).token != tokens[i];
          }
          const double us = 1e3 * static_cast<double>(ms) / reps;
          const nlohmann::json line = {{"bench", "sampler_gpu"}, {"sampler", legacy ? "legacy" : "multiblock"},
                                       {"T", T}, {"vocab", V}, {"row", kind}, {"mode", m.name},
                                       {"us_per_call", us}, {"us_per_row", us / T},
                                       {"logit_gb_per_s", 4.0 * T * V / (us * 1e3)}, {"reps", reps},
                                       {"host_differ", differ}, {"host_checked", checked}, {"device", prop.name},
                                       {"commit", BESTOFN_COMMIT}, {"command", command}};
          std::printf("%s\n", line.dump().c_str());
          std::fflush(stdout);
        }
        CUDA_CHECK(cudaFree(work));
      }
      CUDA_CHECK(cudaFree(d_logits));
      CUDA_CHECK(cudaFree(d_idx));
      CUDA_CHECK(cudaFree(d_tokens));
      CUDA_CHECK(cudaFree(d_lp));
    }
  return 0;
}
