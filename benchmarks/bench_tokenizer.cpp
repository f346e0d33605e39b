// Tokenizer encode speed, single thread, for benchmarks/tokenizer_bench.py (which runs HF
// `tokenizers` on the same text in the same run and prints the ratio):
//   bench_tokenizer --tokenizer TOKENIZER_JSON --text PIECES.jsonl [--repeat N]
// PIECES.jsonl holds one JSON string per line. Prints one JSON line per mode: "pieces" encodes
// each piece in turn, "whole" the pieces joined with "\n", and "load" is the best time of
// Tokenizer::load over those runs. Best of N runs after a warmup; the
// piece cache is cleared before every run (a fresh tokenizer), so the cache only helps within a run.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn_version.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path, text_path;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") tok_path = argv[i + 1];
    else if (a == "--text") text_path = argv[i + 1];
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  if (tok_path.empty() || text_path.empty()) {
    std::cerr << "usage: bench_tokenizer --tokenizer TOKENIZER_JSON --text PIECES.jsonl [--repeat N]\n";
    return 2;
  }
  try {
    std::vector<std::string> pieces;
    std::ifstream in(text_path);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) pieces.push_back(nlohmann::json::parse(line).get<std::string>());
    std::string whole;
    std::size_t piece_bytes = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      whole += (i ? "\n" : "") + pieces[i];
      piece_bytes += pieces[i].size();
    }
    double best_load = 1e30;
    for (const char* mode : {"pieces", "whole"}) {
      const bool per_piece = std::string(mode) == "pieces";
      double best = 1e30;
      std::size_t tokens = 0;
      for (int r = 0; r <= repeat; ++r) {  // run 0 is the warmup
        const auto t_load = std::chrono::steady_clock::now();
        const bestofn::Tokenizer tok = bestofn::Tokenizer::load(tok_path);
        if (r > 0) best_load = std::min(best_load, seconds_since(t_load));
        const auto t0 = std::chrono::steady_clock::now();
        tokens = 0;
        if (per_piece)
          for (const auto& p : pieces) tokens += tok.encode(p).size();
        else
          tokens = tok.encode(whole).size();
        const double s = seconds_since(t0);
        if (r > 0) best = std::min(best, s);
      }
      const std::size_t bytes = per_piece ? piece_bytes : whole.size();
      std::cout << nlohmann::json{{"bench", "bench_tokenizer"}, {"mode", mode}, {"tokenizer", tok_path},
                                  {"bytes", bytes}, {"tokens", tokens}, {"best_s", best},
                                  {"mb_per_s", static_cast<double>(bytes) / best / 1e6}, {"repeat", repeat},
                                  {"commit", BESTOFN_COMMIT}}
                       .dump()
                << "\n";
    }
    // Loading tokenizer.json (+ tokenizer_config.json): part of every bestofn command's start.
    std::cout << nlohmann::json{{"bench", "bench_tokenizer"}, {"mode", "load"}, {"tokenizer", tok_path},
                                {"best_s", best_load}, {"repeat", 2 * repeat}, {"commit", BESTOFN_COMMIT}}
                     .dump()
              << "\n";
  } catch (const std::exception& e) {
    std::cout << nlohmann::json{{"bench", "bench_tokenizer"}, {"error", e.what()}}.dump() << "\n";
    return 1;
  }
  return 0;
}
