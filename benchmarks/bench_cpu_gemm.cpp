// The CPU FP8 GEMM kernel alone (cpu::fp8::dot_strips, src/cpu/gemm_fp8.cpp) on one thread: GFLOP/s
// and the share of the one-core vdpbf16ps ceiling (bench_cpu_peak) for the bench-100m layer shapes
// at T tokens. Weights either stay in L2 (one small matrix, repeated) or stream from memory
// (enough copies of the matrix to leave every cache). One JSON line per (shape, T, placement):
//   bench_cpu_gemm [--seconds S] [--tokens 1,4,16] [--peak GFLOPS]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "bestofn/util/numeric.h"
#include "bestofn_version.h"
#include "cpu/gemm_fp8.h"

namespace {

struct Shape {
  const char* name;
  std::size_t out, in;
};

constexpr const char* kUsage = "usage: bench_cpu_gemm [--seconds S] [--tokens 1,4,16] [--peak GFLOPS]";

// A positive number, whole: stoul/stod accept "12x" and throw on "x".
template <class T>
bool parse_positive(const std::string& s, T& out) {
  try {
    std::size_t used = 0;
    const T v = std::is_integral_v<T> ? static_cast<T>(std::stoul(s, &used)) : static_cast<T>(std::stod(s, &used));
    if (used != s.size() || !(v > 0)) return false;
    out = v;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// "1,4,16": positive token counts, or empty on any bad part.
std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> v;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t comma = s.find(',', pos);
    std::size_t t = 0;
    if (!parse_positive(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos), t)) return {};
    v.push_back(t);
    if (comma == std::string::npos) return v;
    pos = comma + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.5, peak = 0.0;
  std::vector<std::size_t> tokens = {1, 4, 16};
  std::string command = argv[0];
  for (int i = 1; i < argc; i += 2) {  // flag value pairs
    const std::string a = argv[i];
    command += " " + a;
    const bool has_value = i + 1 < argc;
    const std::string value = has_value ? argv[i + 1] : "";
    bool ok = has_value;
    if (a == "--seconds") ok = ok && parse_positive(value, seconds);
    else if (a == "--peak") ok = ok && parse_positive(value, peak);
    else if (a == "--tokens") ok = ok && !(tokens = parse_list(value)).empty();
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "bench_cpu_gemm: bad argument '%s%s%s' (values are positive numbers)\n%s\n", a.c_str(), has_value ? " " : "",
                   value.c_str(), kUsage);
      return 2;
    }
    command += " " + value;
  }
  using namespace bestofn::cpu::fp8;
  // Every fast path this CPU runs (they give the same bits), and which one the engine picked.
  const Path best = best_path();
  std::vector<Path> paths;
  for (Path p : {Path::Avx512Bf16, Path::Avx512Fma, Path::Avx2, Path::Avx2F16c})
    if (available(p)) paths.push_back(p);
  if (paths.empty()) paths.push_back(Path::Generic);
  auto name = [](Path p) {
    return p == Path::Avx512Bf16 ? "avx512_bf16" : p == Path::Avx512Fma ? "avx512_fma" : p == Path::Avx2 ? "avx2_fma" : p == Path::Avx2F16c ? "avx2_f16c" : "generic";
  };
  const Shape shapes[] = {{"qkv_q", 768, 768}, {"kv", 256, 768}, {"gate_up", 2048, 768}, {"down", 768, 2048}};
  std::mt19937 rng(1);
  for (const Path path : paths)
  for (const Shape& s : shapes)
    for (const std::size_t T : tokens)
      for (const bool stream : {false, true}) {
        // Streaming: copies of the matrix totalling ~256 MB, walked in order.
        const std::size_t bytes = packed_weight_bytes(s.out, s.in);  // random codes, already in strips
        const std::size_t copies = stream ? std::max<std::size_t>(1, (256u << 20) / bytes) : 1;
        // On a 64-byte boundary, as the engine's arena is (a block split over two lines is slower).
        std::vector<std::uint8_t> w_buf(bytes * copies + 64);
        std::span<std::uint8_t> w(w_buf.data() + (64 - reinterpret_cast<std::uintptr_t>(w_buf.data()) % 64) % 64, bytes * copies);
        for (auto& c : w) {
          c = static_cast<std::uint8_t>(rng());
          if ((c & 0x7f) == 0x7f) c = 0x7e;  // no NaN codes, as in real weights
        }
        std::vector<float> x(T * s.in);
        for (auto& v : x) v = bestofn::fp8_e4m3_to_float_finite(static_cast<std::uint8_t>(rng() % 0x7e));
        std::vector<std::uint16_t> packed(packed_size(path, T, s.in));
        const std::vector<float> ones(T, 1.0f);
        pack_activations(path, x.data(), ones.data(), T, s.in, 0, T, packed.data());
        std::vector<float> acc(T * s.out);
        std::size_t calls = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0;
        while (elapsed < seconds) {
          for (int rep = 0; rep < 8; ++rep, ++calls)
            dot_strips(path, w.data() + (calls % copies) * bytes, s.out, s.in, 0, strip_count(s.out), packed.data(), T, acc.data(), s.out);
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        const double gflops = 2.0 * static_cast<double>(s.out * s.in * T) * static_cast<double>(calls) / elapsed / 1e9;
        nlohmann::json j = {{"bench", "cpu_gemm_fp8"},
                            {"shape", s.name},
                            {"out", s.out},
                            {"in", s.in},
                            {"tokens", T},
                            {"weights", stream ? "stream" : "l2"},
                            {"path", name(path)},
                            {"engine_path", path == best},
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
