#pragma once
// GEMM autotuning: the cuBLASLt algorithm of each GEMM shape, measured at its first use and kept
// in a JSON file across runs (plain C++, in bestofn_core, so it is tested without a GPU).
// Entries are keyed by GPU name, cuBLASLt version, input type, out, in and the token-count bucket;
// the value is the algorithm's opaque cublasLtMatmulAlgo_t words (valid for that GPU and
// cuBLASLt version only, hence the key) and the time measured.
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace bestofn::cuda {

// The bucket of a token count T >= 1: the next power of two (1, 2, 4, ..., 65536), T itself above.
int gemm_bucket(int T);

// "<gpu>|lt<version>|<type>|<out>x<in>|T<bucket>"
std::string gemm_algo_key(const std::string& gpu, std::size_t lt_version, const std::string& type, int out, int in, int bucket);

using GemmAlgoWords = std::array<std::uint64_t, 8>;  // cublasLtMatmulAlgo_t::data

class GemmAlgoCache {
 public:
  // Loads `file`; a missing file is an empty cache, an unreadable or malformed one too (with a
  // warning; it is replaced at the next put).
  explicit GemmAlgoCache(std::filesystem::path file);
  std::optional<GemmAlgoWords> find(const std::string& key) const;
  // Adds or replaces an entry and rewrites the file (temp file + rename: readers never see half).
  void put(const std::string& key, const GemmAlgoWords& algo, double us);
  const std::filesystem::path& file() const { return file_; }
  std::size_t size() const { return entries_.size(); }

  // $BESTOFN_GEMM_CACHE, else $XDG_CACHE_HOME/bestofn/gemm_algos.json, else
  // $HOME/.cache/bestofn/gemm_algos.json, else ./gemm_algos.json.
  static std::filesystem::path default_file();

 private:
  struct Entry {
    GemmAlgoWords algo{};
    double us = 0;
  };
  std::filesystem::path file_;
  std::map<std::string, Entry> entries_;
};

}  // namespace bestofn::cuda
