#pragma once
// bestofn::Error: every input problem the library finds. The message names the file (and the
// tensor or field) and says what was expected and what was found. The CLI prints it on one line
// and exits 1.
#include <stdexcept>
#include <string>

namespace bestofn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  // "FILE: MESSAGE"
  Error(const std::string& file, const std::string& message) : std::runtime_error(file + ": " + message) {}
};

}  // namespace bestofn
