#include "bestofn/eval/dataset_manifest.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "datasets_json.h"  // generated from data/datasets.json (CMakeLists.txt)

namespace bestofn {
namespace {
using nlohmann::json;

std::vector<DatasetFile> parse_manifest() {
  const json j = json::parse(reinterpret_cast<const char*>(kDatasetsJson),
                             reinterpret_cast<const char*>(kDatasetsJson) + kDatasetsJson_size);
  std::vector<DatasetFile> out;
  for (const json& e : j.at("datasets")) {
    DatasetFile d;
    d.name = e.at("name").get<std::string>();
    d.file = e.at("file").get<std::string>();
    d.alternative = e.value("alternative", "");
    d.size = e.at("size").get<std::uint64_t>();
    d.sha256 = e.at("sha256").get<std::string>();
    d.source = e.at("source").get<std::string>();
    d.licence = e.at("licence").get<std::string>();
    d.get = e.at("get").get<std::string>();
    out.push_back(std::move(d));
  }
  return out;
}

std::string hex(const unsigned char* bytes, unsigned n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

const std::vector<DatasetFile>& dataset_manifest() {
  static const std::vector<DatasetFile> manifest = parse_manifest();
  return manifest;
}

const DatasetFile* find_dataset(std::string_view name) {
  for (const DatasetFile& d : dataset_manifest())
    if (d.name == name) return &d;
  return nullptr;
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string(), "cannot open for reading");
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error(path.string(), "cannot start a SHA-256 digest");
  std::vector<char> buf(1 << 16);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw Error(path.string(), "read error");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  return hex(md, n);
}

std::string sha256_text(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(text.data(), text.size(), md, &n, EVP_sha256(), nullptr);
  return hex(md, n);
}

bool check_dataset_file(const DatasetFile& entry, const std::filesystem::path& path) {
  static std::mutex mutex;
  static std::map<std::string, bool> checked;  // path -> matched
  const std::lock_guard lock(mutex);
  if (const auto it = checked.find(path.string()); it != checked.end()) return it->second;
  const std::string found = sha256_file(path);
  const bool same = found == entry.sha256;
  if (!same)
    spdlog::warn("{}: differs from the published {} file (sha256 expected {}, found {}); using it as it is", path.string(),
                 entry.name, entry.sha256, found);
  checked.emplace(path.string(), same);
  return same;
}

}  // namespace bestofn
