#include "json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "bestofn/error.h"
#include "bestofn/text_file.h"

namespace bestofn {
namespace fs = std::filesystem;

nlohmann::json read_json_file(const fs::path& path) {
  return parse_json_text(read_text_file(path), path);  // no hang on a FIFO, no endless read of a device
}

nlohmann::json parse_json_text(const std::string& text, const fs::path& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string(), std::string("not valid JSON: ") + e.what());
  }
}

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out << json_text(j, 2) << "\n";
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(partial, ec);
      throw Error(path.string(), "write failed");
    }
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) throw Error(path.string(), "cannot rename into place: " + ec.message());
}

}  // namespace bestofn
