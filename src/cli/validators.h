#pragma once
// CLI11 checks that its own validators leave open: they run on the flag's text before it is
// converted, so a bad value is a usage error (exit 2) that names the flag.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "bestofn/util/error.h"
#include "bestofn/util/trim_blanks.h"

namespace bestofn::cli {

// A finite number in [lo, hi]. (CLI::Range lets NaN through: every comparison with it is false.)
CLI::Validator finite_range(double lo, double hi);

// --temperature: 0 (greedy) or a finite number in [kMinTemperature (bestofn/engine/sampler.h), 100].
CLI::Validator temperature_value();

// A decimal integer in [0, 2^64 - 1]. (A uint64_t option takes "-1" as 2^64 - 1 and a larger
// number as the largest; two different seeds would give the same candidates.)
CLI::Validator seed_value();

// The flag's own parser as its check: `parse` throws bestofn::Error for a bad value, and its
// message (less a leading "--flag: ", which CLI11 says itself) becomes the usage error.
CLI::Validator checked_by(std::function<void(const std::string&)> parse, const std::string& type_name);

// A layer's parser run in a parse-complete callback: its bestofn::Error ("--flag: ...") becomes
// the usage error, word for word (the layers do not know CLI11).
template <class Parse>
auto usage_checked(Parse&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const Error& e) {
    throw CLI::ValidationError(std::string(e.what()));
  }
}

// --synthetic / --shape: a preset's name (synthetic_presets()), or a path to a config.json (names_a_preset).
CLI::Validator synthetic_shape();

// A path or name flag given as "": a usage error ("--out: is empty"), never the default or the
// current directory by accident.
CLI::Validator non_empty();

// Text that must be UTF-8 (--stop, --system): otherwise a usage error that says where it breaks
// (the byte offset, from 0), instead of a stop string that can never match or an error that blames
// the prompt the system message was rendered into.
CLI::Validator utf8_text();

// parse_ks (bestofn/eval/scoring.h) as a CLI11 check on --k: a malformed list is a usage error
// (exit 2), said before any file is read.
CLI::Validator k_list();

// Seconds, the most any sandbox timeout (--timeout, --plus-timeout) may be: an hour.
inline constexpr double kMaxTimeoutSeconds = 3600.0;

}  // namespace bestofn::cli
