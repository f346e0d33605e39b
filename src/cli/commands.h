#pragma once
// One file per subcommand. Each adds itself to the app and returns the function that runs it
// after parsing: the command's run_<command> in its layer. Exit codes: bestofn/util/exit_codes.h.
#include <CLI/CLI.hpp>
#include <functional>

#include "bestofn/util/exit_codes.h"

namespace bestofn::cli {

using Runner = std::function<int()>;

Runner add_inspect(CLI::App& app);
Runner add_make_synthetic(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_detokenize(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_score(CLI::App& app);
Runner add_compare(CLI::App& app);
// `command`: the whole command line, recorded in each JSON line.
Runner add_bench(CLI::App& app, const std::string& command);
Runner add_eval(CLI::App& app, const std::string& command);
Runner add_merge(CLI::App& app, const std::string& command);

}  // namespace bestofn::cli
