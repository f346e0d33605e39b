#include "bestofn/eval/eval_summary.h"

#include <algorithm>

#include "bestofn/util/error.h"
#include "bestofn/eval/report.h"
#include "bestofn_version.h"
#include "bestofn/eval/eval_files.h"
#include "bestofn/util/output_file.h"
#include "util/json_file.h"

namespace bestofn {
using nlohmann::json;
using nlohmann::ordered_json;

std::pair<std::string, double> name_value(const std::string& s, const std::string& flag) {
  const std::size_t eq = s.rfind('=');
  double v = -1;
  std::size_t used = 0;
  if (eq != std::string::npos && eq > 0) {
    try {
      v = std::stod(s.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
  }
  if (eq == std::string::npos || eq == 0 || used == 0 || used != s.size() - eq - 1 || !(v >= 0 && v <= 1))
    throw Error(flag, "'" + s + "' must be NAME=VALUE with VALUE in [0, 1]");
  return {s.substr(0, eq), v};
}

RunSummary build_summary(const ordered_json& m, const std::string& kind, const std::vector<int>& ks, const Tally& tally, bool has_plus) {
  RunSummary r;
  ordered_json& s = r.json;
  const auto tasks = m.at("tasks").get<std::vector<std::string>>();
  s = {{"bestofn_version", BESTOFN_VERSION}, {"commit", BESTOFN_COMMIT}, {"model", m.at("model")},
       {"dataset", {{"name", m.at("dataset")}, {"kind", kind}, {"problems", tasks.size()}}},
       {"n", m.at("n")}, {"k", ks}};
  if (m.contains("shard") && m["shard"].value("count", 1) > 1) s["shard"] = m["shard"];
  s["sampling"] = {{"temperature", m.at("temperature")}, {"top_p", m.at("top_p")}, {"top_k", m.at("top_k")}, {"min_p", m.at("min_p")},
                   {"seed", m.at("seed")}, {"max_new_tokens", m.at("max_new_tokens")}, {"stop", m.at("stop")}, {"chat", m.at("chat")}};
  add_judged(s, tally, has_plus);
  const int until = m.value("until_pass", 0);
  if (m.value("stop_on_pass", false) || until > 0) {
    const auto solved = std::count_if(tasks.begin(), tasks.end(), [&](const std::string& t) { return tally.passed(t) > 0; });
    s["solved"] = solved;
    s["solve_rate"] = tasks.empty() ? 0.0 : static_cast<double>(solved) / static_cast<double>(tasks.size());
    if (until > 0) s["until_pass"] = until;
    s["pass_at_k_note"] =
        std::string(until > 0 ? "--until-pass " + std::to_string(until) + ": generation for a problem stopped once that many samples passed"
                              : "--stop-on-pass: generation for a problem stopped at its first passing sample") +
        ", so problems have different, biased numbers of samples and pass@k is not an estimate of anything; solved / "
        "solve_rate count the problems with a passing sample among at most n (the same problems as a run of all n: each "
        "candidate's draws depend only on its problem, index and seed)";
    return r;
  }
  r.passk = tally.pass_at_k(tasks, ks, false);
  if (has_plus) r.passk_plus = tally.pass_at_k(tasks, ks, true);
  add_pass_at_k(s, r.passk, has_plus ? &r.passk_plus : nullptr);
  return r;
}

void check_plot_path(const std::string& plot, const std::filesystem::path& out_dir, std::vector<std::filesystem::path> inputs) {
  namespace fs = std::filesystem;
  if (plot.empty()) return;
  const fs::path file(plot);
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw Error(plot, "--plot: is a directory; give the path of an .svg file");
  const fs::path parent = fs::absolute(file).parent_path().lexically_normal();
  if (!fs::is_directory(parent, ec) && parent != fs::absolute(out_dir).lexically_normal())
    throw Error(plot, "--plot: directory " + parent.string() + " does not exist");
  for (const char* name : {"run.json", "samples.jsonl", "results.jsonl", "summary.json", "report.md"}) inputs.push_back(out_dir / name);
  check_not_inputs(plot, inputs, "--plot");
}

namespace {

// The band around a fail@k curve: each point's interval over problems, or none when a point has
// none (fewer than 2 problems).
std::vector<Interval> curve_band(const std::vector<std::pair<int, int>>& nc, const std::vector<std::pair<int, double>>& curve) {
  std::vector<int> ks;
  for (const auto& point : curve) ks.push_back(point.first);
  std::vector<PassAtK> r = pass_at_k(nc, ks);
  add_intervals(r);
  std::vector<Interval> band;
  for (const PassAtK& p : r) {
    if (!p.interval) return {};
    band.push_back(*p.interval);
  }
  return band;
}

}  // namespace

void write_summary_files(const std::filesystem::path& dir, ordered_json& summary, const Tally& tally, const std::vector<std::string>& task_ids,
                         const std::vector<std::string>& references, const std::string& plot, const std::string& title) {
  ordered_json refs = ordered_json::object();
  std::vector<std::pair<std::string, double>> ref_pairs;
  for (const auto& ref : references) {
    ref_pairs.push_back(name_value(ref, "--reference"));
    refs[ref_pairs.back().first] = ref_pairs.back().second;
  }
  summary["references"] = refs;
  std::string plot_rel;
  if (summary.contains("pass_at_k")) {
    const bool has_plus = summary.contains("plus_pass_at_k");
    const std::filesystem::path file = plot.empty() ? dir / "fail_at_k.svg" : std::filesystem::path(plot);
    std::vector<std::pair<int, int>> base_nc, plus_nc;
    for (const auto& t : task_ids) {
      base_nc.push_back(tally.n_c(t, false));
      if (has_plus) plus_nc.push_back(tally.n_c(t, true));
    }
    std::vector<std::pair<std::string, double>> selected;  // selection without the hidden tests, at k = 1
    if (summary.contains("selection") && summary["selection"].contains("strategies"))
      for (const auto& [name, r] : summary["selection"]["strategies"].items())
        if (r.contains("selected_at_1") && r["selected_at_1"].is_number()) selected.emplace_back(name, r["selected_at_1"].get<double>());
    const auto base = pass_at_k_curve(base_nc), plus = has_plus ? pass_at_k_curve(plus_nc) : std::vector<std::pair<int, double>>{};
    const std::string svg = fail_at_k_svg(base, ref_pairs, title, plus, selected, curve_band(base_nc, base), curve_band(plus_nc, plus));
    write_file_atomic(file, svg);
    summary["plot"] = std::filesystem::absolute(file).lexically_normal().string();  // (eval and merge alike, whatever the cwd)
    plot_rel = std::filesystem::absolute(file).lexically_relative(std::filesystem::absolute(dir)).string();
  }
  write_file_atomic(dir / "summary.json", json_text(summary, 2) + "\n");
  write_file_atomic(dir / "report.md", render_report_md(json(summary), plot_rel));
}

}  // namespace bestofn
