// libFuzzer target: the JSONL reader of `score` samples and `generate` prompt files
// (src/util/jsonl.h). Every non-blank line is handed over once, in order, named FILE:LINE;
// anything else is a bestofn::Error naming FILE:LINE.
#include <string>

#include "bestofn/util/error.h"
#include "util/jsonl.h"
#include "fuzz_util.h"

using namespace bestofn;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  const std::string path = fuzz::write_scratch("samples.jsonl", text).string();
  std::size_t values = 0, last_line = 0;
  try {
    bestofn::for_each_jsonl(path, [&](nlohmann::json&&, const std::string& where) {
      fuzz::check(where.starts_with(path + ":"), "a value named " + where);
      const std::size_t line = std::stoul(where.substr(path.size() + 1));
      fuzz::check(line > last_line, "lines out of order: " + where);
      last_line = line;
      ++values;
    });
  } catch (const Error& e) {
    fuzz::check(std::string(e.what()).starts_with(path + ":"), std::string("an error that does not name the file: ") + e.what());
    return 0;
  }
  if (text.starts_with("\x1f\x8b")) return 0;  // gzip: the lines are inside the stream
  // Success: one value per non-blank line (blank: only spaces, tabs and CR).
  std::size_t lines = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (text.substr(start, end - start).find_first_not_of(" \t\r") != std::string_view::npos) ++lines;
    start = end + 1;
  }
  fuzz::check(values == lines, "values " + std::to_string(values) + " != non-blank lines " + std::to_string(lines));
  return 0;
}
