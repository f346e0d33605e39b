#pragma once
// Reading and writing JSON files with errors that name the file.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace bestofn {

// Throws bestofn::Error "FILE: cannot open" / "FILE: not valid JSON: ...".
nlohmann::json read_json_file(const std::filesystem::path& path);
// The JSON in `text`, read from `path`; throws bestofn::Error "FILE: not valid JSON: ...".
nlohmann::json parse_json_text(const std::string& text, const std::filesystem::path& path);
// j as JSON text (indent < 0: one line). Bytes of its strings that are not UTF-8 (a path's, a
// flag's) become U+FFFD instead of throwing half way through an output.
template <class BasicJson>
std::string json_text(const BasicJson& j, int indent = -1) {
  return j.dump(indent, ' ', false, BasicJson::error_handler_t::replace);
}
// Writes `j` (indented) to "<path>.partial", then renames into place.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace bestofn
