#pragma once
// Reading and writing JSON files with errors that name the file.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace bestofn {

// nlohmann::json::parse, except that a key given twice in one object is an error (a DOM keeps the
// last value without a word: {"prompt": "a", "prompt": "b"}), and so is a number that underflows
// a double (1e-400 would be read as 0). Throws nlohmann's exceptions, and
// bestofn::Error "key \"K\" appears twice in one object" (to be prefixed with the file).
nlohmann::json parse_json_unique_keys(std::string_view text);
// Throws bestofn::Error "FILE: cannot open" / "FILE: not valid JSON: ..."; a repeated key is an
// error unless `repeated_keys` (tokenizer.json, read as HF reads it: the last value wins).
nlohmann::json read_json_file(const std::filesystem::path& path, bool repeated_keys = false);
// The JSON in `text`, read from `path`; throws bestofn::Error "FILE: not valid JSON: ...".
nlohmann::json parse_json_text(const std::string& text, const std::filesystem::path& path, bool repeated_keys = false);
// j as JSON text (indent < 0: one line). Bytes of its strings that are not UTF-8 (a path's, a
// flag's) become U+FFFD instead of throwing half way through an output.
template <class BasicJson>
std::string json_text(const BasicJson& j, int indent = -1) {
  return j.dump(indent, ' ', false, BasicJson::error_handler_t::replace);
}
// Writes `j` (indented) to "<path>.partial", then renames into place.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace bestofn
