#include "util/json_file.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"

namespace bestofn {
namespace fs = std::filesystem;

namespace {
// A number of valid JSON `text` that no double holds: one that underflows is read as 0 without a
// word (a temperature of 1e-400 would be greedy decoding), one that overflows is nlohmann's error.
void check_number_range(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') {  // a string: to its closing quote, past escapes
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      ++i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      std::size_t end = i;
      while (end < text.size() && std::strchr("+-0123456789.eE", text[end]) && text[end] != '\0') ++end;
      double v = 0;
      if (std::from_chars(text.data() + i, text.data() + end, v).ec == std::errc::result_out_of_range)
        throw Error("the number " + std::string(text.substr(i, std::min<std::size_t>(end - i, 40))) +
                    " is beyond what a double holds (it would be read as 0)");
      i = end;
    } else {
      ++i;
    }
  }
}
}  // namespace

nlohmann::json parse_json_unique_keys(std::string_view text) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> open;  // the keys seen in each object being read
  const json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open.emplace_back();
    else if (event == json::parse_event_t::object_end) open.pop_back();
    else if (event == json::parse_event_t::key && !open.back().insert(parsed.get<std::string>()).second)
      throw Error("key " + json_text(parsed) + " appears twice in one object");
    return true;
  };
  json j = json::parse(text.begin(), text.end(), cb);
  check_number_range(text);
  return j;
}

nlohmann::json read_json_file(const fs::path& path, bool repeated_keys) {
  return parse_json_text(read_text_file(path), path, repeated_keys);  // no hang on a FIFO, no endless read of a device
}

nlohmann::json parse_json_text(const std::string& text, const fs::path& path, bool repeated_keys) {
  try {
    return repeated_keys ? nlohmann::json::parse(text) : parse_json_unique_keys(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string(), std::string("not valid JSON: ") + e.what());
  } catch (const Error& e) {
    throw Error(path.string(), e.what());
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
