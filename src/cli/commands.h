#pragma once
// One file per subcommand. Each adds itself to the app and returns the function that runs it
// after parsing. Exit codes (README "Exit codes"): 0 ok, 1 bad input or failure, 2 usage error.
#include <CLI/CLI.hpp>
#include <functional>

namespace bestofn::cli {

using Runner = std::function<int()>;

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBelowThreshold = 3;  // eval --fail-under

Runner add_inspect(CLI::App& app);
Runner add_make_synthetic(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_score(CLI::App& app);
// `command`: the whole command line, recorded in each JSON line.
Runner add_bench(CLI::App& app, const std::string& command);
Runner add_eval(CLI::App& app, const std::string& command);
Runner add_merge(CLI::App& app, const std::string& command);

}  // namespace bestofn::cli
