#pragma once
// An item of a comma-separated list as a user typed it ("1, 10"): the flags' lists and --tasks.
#include <string>

namespace bestofn {

// s without leading and trailing spaces and tabs.
inline std::string trim_blanks(const std::string& s) {
  const std::size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

}  // namespace bestofn
