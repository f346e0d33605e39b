#pragma once
// JSONL input: every non-blank line is one JSON value; errors name FILE:LINE.
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "util/json_file.h"

namespace bestofn {

// Calls fn(value, "FILE:LINE") for each non-blank line of `path` (plain or gzip; "-" is stdin,
// named "<stdin>:LINE"). A key repeated in one object is an error naming the line.
inline void for_each_jsonl(const std::string& path, const std::function<void(nlohmann::json&&, const std::string&)>& fn) {
  std::istringstream in(read_text_input(path));
  std::size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = input_name(path) + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = parse_json_unique_keys(line);  // {"prompt": "a", "prompt": "b"} is an error, not "b"
    } catch (const nlohmann::json::exception& e) {
      throw Error(where, std::string("not valid JSON: ") + e.what());
    } catch (const Error& e) {
      throw Error(where, e.what());
    }
    fn(std::move(j), where);
  }
}

}  // namespace bestofn
