// bestofn: best-of-N code generation. main() parses the command line, runs one subcommand,
// and turns every error into one line on stderr and an exit code.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "bestofn/backends/backends.h"
#include "bestofn/backends/cuda_paths.h"
#include "bestofn/util/error.h"
#include "bestofn/util/parallel.h"
#include "bestofn/util/temp_paths.h"
#include "bestofn/util/utf8.h"
#include "bestofn_version.h"
#include "cli/commands.h"

namespace {

// The version, the CUDA backend and its devices, and (a second line) the device run that
// --cuda-path auto's defaults come from.
std::string version_string() {
  const auto info = bestofn::backend_info();
  std::string s = "bestofn " BESTOFN_VERSION " (commit " BESTOFN_COMMIT "), CUDA backend: ";
  if (!info.cuda_built) s += "not built";
  else if (info.cuda_devices.empty()) s += "built, no device (" + info.cuda_error + ")";
  else {
    s += "built, devices:";
    for (const auto& d : info.cuda_devices) s += " [" + d + "]";
  }
  return s + "\nCUDA defaults: " + bestofn::cuda_defaults_source() + " (--cuda-path auto; docs/gpu.md)";
}

// Errors are printed on exactly one line.
// A message is one line of UTF-8 (each byte that is not, as U+FFFD) of at most about 1000 bytes:
// a longer one (a parser quoting the 5 MB JSON line it stopped in) keeps its start, which names
// the file and the problem, and its end, with the middle cut out and counted.
std::string one_line(std::string s) {
  for (auto& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  s = bestofn::utf8::lossy(s);
  constexpr std::size_t kHead = 700, kTail = 200;
  if (s.size() <= kHead + kTail + 100) return s;
  std::size_t head = kHead, tail = s.size() - kTail;
  auto continuation = [&](std::size_t i) { return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  while (head > 0 && continuation(head)) --head;  // cut before a character, never inside one
  while (tail < s.size() && continuation(tail)) ++tail;
  return s.substr(0, head) + " [... " + std::to_string(tail - head) + " bytes cut ...] " + s.substr(tail);
}

// CLI11's "--threads: At Most 1 required but received 2" is a flag given twice: say so.
std::string plain_words(std::string s) {
  const std::string twice = "At Most 1 required but received ";
  if (const auto at = s.find(twice); at != std::string::npos)
    s = s.substr(0, at) + "given " + s.substr(at + twice.size()) + " times; give it once";
  return s;
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

int run_main(int argc, char** argv) {
  using namespace bestofn::cli;
  using bestofn::kExitError, bestofn::kExitUsage;
  bestofn::install_temp_path_cleanup();  // partial outputs go with the process on a signal that ends it (temp_paths.h)
  auto logger = spdlog::stderr_color_mt("bestofn");
  logger->set_pattern("%^%l%$: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);

  CLI::App app{"bestofn: best-of-N code generation with a small model, many samples and a test verifier.\n"
               "Exit codes: 0 ok, 1 bad input or failure, 2 usage error, 3 eval below a --fail-under threshold\n"
               "(or compare --fail-if-worse: B worse than A beyond noise), "
               "130 eval interrupted (--resume finishes it).",
               "bestofn"};
  app.set_version_flag("--version", version_string);
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Log progress to stderr");
  app.add_flag("-q,--quiet", quiet, "Log only errors");
  app.require_subcommand(1);
  app.fallthrough();
  const std::vector<std::pair<std::string, Runner>> commands = {
      {"inspect", add_inspect(app)},
      {"make-synthetic", add_make_synthetic(app)},
      {"tokenize", add_tokenize(app)},
      {"detokenize", add_detokenize(app)},
      {"generate", add_generate(app)},
      {"score", add_score(app)},
      {"eval", add_eval(app, command_line(argc, argv))},
      {"merge", add_merge(app, command_line(argc, argv))},
      {"compare", add_compare(app)},
      {"bench", add_bench(app, command_line(argc, argv))},
  };

  // A first word that is no option and no command: say so, rather than "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const auto* sub : app.get_subcommands({})) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "bestofn: usage error: unknown command '" << one_line(argv[1]) << "'; commands: " << names
                << " (see 'bestofn --help')\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string help = "bestofn";  // the subcommand's own --help lists its flags
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      help += " " + sub->get_name();
    }
    std::cerr << "bestofn: usage error: " << one_line(plain_words(e.what())) << " (see '" << help << " --help')\n";
    return kExitUsage;
  }
  try {
    bestofn::threads_from_env();  // a malformed $BESTOFN_THREADS is the caller's mistake, as a bad --threads is
  } catch (const bestofn::Error& e) {
    std::cerr << "bestofn: usage error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
  if (verbose) spdlog::set_level(spdlog::level::info);
  if (quiet) spdlog::set_level(spdlog::level::err);

  try {
    for (auto* sub : app.get_subcommands())
      for (const auto& [name, run] : commands)
        if (sub->get_name() == name) return run();
    return kExitUsage;
  } catch (const bestofn::Error& e) {
    std::cerr << "bestofn: error: " << one_line(e.what()) << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "bestofn: error: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "bestofn: error: " << one_line(e.what()) << "\n";
  }
  return kExitError;
}

// What a successful command printed must have reached stdout: a full disk there is a failed run
// (exit 1), not a truncated output with exit 0. (A failed command has said why already.)
int check_stdout(int rc) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (rc != 0 || (flushed && !std::ferror(stdout) && std::cout.good())) return rc;
  std::cerr << "bestofn: error: <stdout>: write failed" << (err ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
  return bestofn::kExitError;
}

}  // namespace

int main(int argc, char** argv) { return check_stdout(run_main(argc, argv)); }
