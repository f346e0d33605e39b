#include "cli/validators.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bestofn/eval/scoring.h"
#include "bestofn/util/error.h"
#include "bestofn/engine/sampler.h"
#include "bestofn/model/synthetic.h"
#include "bestofn/util/utf8.h"

namespace bestofn::cli {

namespace {
std::string number_text(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

CLI::Validator finite_range(double lo, double hi) {
  const std::string range = "[" + number_text(lo) + ", " + number_text(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        // Decimal only (CLI11 would read "0x10" as 16), and a value a double holds: "1e-400" would
        // be 0 (greedy, for a temperature) and "1e999" infinite.
        const char* b = s.data() + (!s.empty() && s[0] == '+');
        double v = 0;
        const auto r = std::from_chars(b, s.data() + s.size(), v, std::chars_format::general);
        if (s.empty() || r.ptr != s.data() + s.size() || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
          return "'" + s + "' is not a number";
        if (r.ec == std::errc::result_out_of_range) return "'" + s + "' is beyond what a double holds (" + range + " expected)";
        if (!std::isfinite(v) || v < lo || v > hi) return "must be a number in " + range + ", got '" + s + "'";
        return "";
      },
      "NUMBER in " + range);
}

CLI::Validator temperature_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string range_error = finite_range(0.0, 100.0)(s);
        if (!range_error.empty()) return range_error;
        const double v = std::strtod(s.c_str(), nullptr);
        if (v != 0.0 && v < kMinTemperature) return "must be 0 (greedy) or from 1e-20 to 100, got '" + s + "'";
        return "";
      },
      "0 or NUMBER in [1e-20, 100]");
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || s[0] == '-' || s[0] == '+' || r.ec != std::errc() || r.ptr != s.data() + s.size())
          return "must be an integer from 0 to 18446744073709551615, got '" + s + "'";
        s = std::to_string(v);  // CLI11 would read "010" as octal 8: it gets the decimal digits only
        return "";
      },
      "UINT64");
}

CLI::Validator checked_by(std::function<void(const std::string&)> parse, const std::string& type_name) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
          return "";
        } catch (const Error& e) {
          const std::string m = e.what();
          const std::size_t colon = m.find(": ");
          return m.rfind("--", 0) == 0 && colon != std::string::npos ? m.substr(colon + 2) : m;
        }
      },
      type_name);
}

CLI::Validator k_list() {
  return checked_by([](const std::string& s) { parse_ks(s); }, "K,K,...");
}

CLI::Validator non_empty() {
  return CLI::Validator([](std::string& s) { return s.empty() ? std::string("is empty") : std::string(); }, "TEXT");
}

CLI::Validator utf8_text() {
  return CLI::Validator(
      [](std::string& s) {
        const auto bad = utf8::first_invalid(s);
        return bad ? "is not valid UTF-8 at byte " + std::to_string(*bad) : std::string();
      },
      "TEXT");
}

CLI::Validator synthetic_shape() {
  return checked_by(
      [](const std::string& v) {
        if (!names_a_preset(v)) return;  // a config.json: its loader names a missing or bad file (exit 1, as for every input)
        const auto presets = synthetic_presets();
        if (std::find(presets.begin(), presets.end(), v) != presets.end()) return;
        std::string names;
        for (const auto& n : presets) names += n + ", ";
        throw Error("unknown preset '" + v + "'; presets: " + names + "or the path of a config.json");
      },
      "PRESET");
}

}  // namespace bestofn::cli
