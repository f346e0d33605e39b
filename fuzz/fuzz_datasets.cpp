// libFuzzer target: the dataset readers (HumanEval / HumanEval+ JSONL, MBPP JSON, plain or gzip).
// The first byte picks the file name (hence the format); the rest is the file. Problems that load
// must have what program() and plus_program() need.
#include <string>

#include "bestofn/eval/datasets.h"
#include "bestofn/util/error.h"
#include "bestofn/util/utf8.h"
#include "fuzz_util.h"

using namespace bestofn;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const char* const kNames[] = {"problems.jsonl", "problems.json", "problems.jsonl.gz"};
  const char* name = kNames[data[0] % 3];
  const auto path = fuzz::write_scratch(name, fuzz::as_text(data + 1, size - 1));
  try {
    const auto problems = load_dataset(path.string(), fuzz::scratch_dir());
    fuzz::check(!problems.empty(), "an empty dataset loaded");
    for (const auto& p : problems) {
      fuzz::check(!p.task_id.empty() && !p.entry_point.empty(), "a problem without task_id or entry point");
      const std::string prog = program(p, "    return 1\n");
      fuzz::check(prog.find(p.test) != std::string::npos, p.task_id + ": the program lacks the tests");
      if (!p.plus_input_json.empty()) {
        const std::string plus = plus_program(p, "    return 1\n");
        fuzz::check(!utf8::first_invalid(plus), p.task_id + ": the plus program is not valid UTF-8");
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
