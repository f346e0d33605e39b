// The CPU FP8 GEMM kernel alone (cpu::fp8::dot_rows, src/cpu/gemm_fp8.cpp) on one thread: GFLOP/s
// and the share of the one-core vdpbf16ps ceiling (bench_cpu_peak) for the bench-100m layer shapes
// at T tokens. Weights either stay in L2 (one small matrix, repeated) or stream from memory
// (enough copies of the matrix to leave every cache). One JSON line per (shape, T, placement):
//   bench_cpu_gemm [--seconds S] [--tokens 1,4,16] [--peak GFLOPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bestofn/numeric.h"
#include "bestofn_version.h"
#include "cpu/gemm_fp8.h"

namespace {

struct Shape {
  const char* name;
  std::size_t out, in;
};

std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> v;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t comma = s.find(',', pos);
    v.push_back(std::stoul(s.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.5, peak = 0.0;
  std::vector<std::size_t> tokens = {1, 4, 16};
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    command += " " + a;
    if (a == "--seconds" && i + 1 < argc) seconds = std::stod(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--tokens" && i + 1 < argc) tokens = parse_list(argv[++i]), command += std::string(" ") + argv[i];
    else if (a == "--peak" && i + 1 < argc) peak = std::stod(argv[++i]), command += std::string(" ") + argv[i];
    else {
      std::fprintf(stderr, "usage: bench_cpu_gemm [--seconds S] [--tokens 1,4,16] [--peak GFLOPS]\n");
      return 2;
    }
  }
  using namespace bestofn::cpu::fp8;
  const Path path = best_path();
  const Shape shapes[] = {{"qkv_q", 768, 768}, {"kv", 256, 768}, {"gate_up", 2048, 768}, {"down", 768, 2048}};
  std::mt19937 rng(1);
  for (const Shape& s : shapes)
    for (const std::size_t T : tokens)
      for (const bool stream : {false, true}) {
        // Streaming: copies of the matrix totalling ~256 MB, walked in order.
        const std::size_t bytes = s.out * s.in;
        const std::size_t copies = stream ? std::max<std::size_t>(1, (256u << 20) / bytes) : 1;
        std::vector<std::uint8_t> w(bytes * copies);
        for (auto& c : w) {
          c = static_cast<std::uint8_t>(rng());
          if ((c & 0x7f) == 0x7f) c = 0x7e;  // no NaN codes, as in real weights
        }
        std::vector<float> x(T * s.in);
        for (auto& v : x) v = bestofn::fp8_e4m3_to_float_finite(static_cast<std::uint8_t>(rng() % 0x7e));
        std::vector<std::uint16_t> packed(T * packed_size(path, s.in));
        pack_activations(path, x.data(), T, s.in, packed.data());
        std::vector<float> acc(T * s.out);
        std::size_t calls = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0;
        while (elapsed < seconds) {
          for (int rep = 0; rep < 8; ++rep, ++calls)
            dot_rows(path, w.data() + (calls % copies) * bytes, s.in, 0, s.out, packed.data(), T, acc.data(), s.out);
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        const double gflops = 2.0 * static_cast<double>(s.out * s.in * T) * static_cast<double>(calls) / elapsed / 1e9;
        nlohmann::json j = {{"bench", "cpu_gemm_fp8"},
                            {"shape", s.name},
                            {"out", s.out},
                            {"in", s.in},
                            {"tokens", T},
                            {"weights", stream ? "stream" : "l2"},
                            {"path", path == Path::Avx512Bf16 ? "avx512_bf16" : "generic"},
                            {"gflop_per_s", gflops},
                            {"weight_gb_per_s", static_cast<double>(bytes) * static_cast<double>(calls) / elapsed / 1e9},
                            {"threads", 1},
                            {"commit", BESTOFN_COMMIT},
                            {"command", command}};
        if (peak > 0) j["share_of_peak"] = gflops / peak;
        std::printf("%s\n", j.dump().c_str());
      }
  return 0;
}
