// The on-disk GEMM algorithm cache (see gemm_algo_cache.h).
#include "cuda/gemm_algo_cache.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "util/json_file.h"

namespace bestofn::cuda {
namespace fs = std::filesystem;

int gemm_bucket(int T) {
  if (T < 1) throw Error("gemm_bucket", "expected a token count >= 1, got " + std::to_string(T));
  if (T > 65536) return T;
  int b = 1;
  while (b < T) b *= 2;
  return b;
}

std::string gemm_algo_key(const std::string& gpu, std::size_t lt_version, const std::string& type, int out, int in, int bucket) {
  return gpu + "|lt" + std::to_string(lt_version) + "|" + type + "|" + std::to_string(out) + "x" + std::to_string(in) + "|T" +
         std::to_string(bucket);
}

GemmAlgoCache::GemmAlgoCache(fs::path file) : file_(std::move(file)) {
  std::error_code ec;
  if (!fs::exists(file_, ec)) return;
  try {
    const nlohmann::json j = read_json_file(file_);
    if (j.value("version", 0) != 1) throw Error(file_.string(), "unknown version");
    for (const auto& [key, e] : j.at("entries").items()) {
      Entry entry;
      const auto& words = e.at("algo");
      if (!words.is_array() || words.size() != entry.algo.size()) throw Error(file_.string(), "entry '" + key + "': algo is not 8 words");
      for (std::size_t i = 0; i < entry.algo.size(); ++i) entry.algo[i] = words[i].get<std::uint64_t>();
      entry.us = e.at("us").get<double>();
      entries_[key] = entry;
    }
  } catch (const std::exception& e) {  // a cache is never worth failing a run for
    spdlog::warn("GEMM algorithm cache {} ignored: {}", file_.string(), e.what());
    entries_.clear();
  }
}

std::optional<GemmAlgoWords> GemmAlgoCache::find(const std::string& key) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.algo;
}

void GemmAlgoCache::put(const std::string& key, const GemmAlgoWords& algo, double us) {
  entries_[key] = {algo, us};
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [k, e] : entries_) entries[k] = {{"algo", e.algo}, {"us", e.us}};
  std::error_code ec;
  if (file_.has_parent_path()) fs::create_directories(file_.parent_path(), ec);
  try {
    write_json_file(file_, {{"version", 1}, {"entries", entries}});
  } catch (const std::exception& e) {  // measured algorithms still serve this run
    spdlog::warn("GEMM algorithm cache not saved: {}", e.what());
  }
}

fs::path GemmAlgoCache::default_file() {
  if (const char* p = std::getenv("BESTOFN_GEMM_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "bestofn" / "gemm_algos.json";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "bestofn" / "gemm_algos.json";
  return "gemm_algos.json";
}

}  // namespace bestofn::cuda
