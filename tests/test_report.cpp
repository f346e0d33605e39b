// The fail@k chart (parsed as XML by Python's ElementTree, an independent parser), the pass@k curve
// against hand-computed values, report.md, chat code extraction and the default stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bestofn/eval/datasets.h"
#include "bestofn/util/error.h"
#include "bestofn/eval/extract.h"
#include "bestofn/eval/report.h"
#include "test_util.h"

using namespace bestofn;
using nlohmann::json;

namespace {

// Python parses the SVG (a malformed document fails here) and lists every element as JSON:
// {"root": tag, "elements": [{"tag", "attrib", "text"}...]}; tags lose their namespace, root keeps it.
constexpr const char* kSvgToJson = R"PY(
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
out = [{"tag": e.tag.split("}")[-1], "attrib": dict(e.attrib), "text": "".join(e.itertext())} for e in root.iter()]
print(json.dumps({"root": root.tag, "elements": out}))
)PY";

json parse_svg(const std::string& svg) {
  test::TempDir dir;
  test::write_text(dir / "to_json.py", kSvgToJson);
  test::write_text(dir / "chart.svg", svg);
  const std::string cmd = "python3 " + (dir / "to_json.py").string() + " " + (dir / "chart.svg").string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed");
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  if (status != 0) throw std::runtime_error("the SVG does not parse as XML:\n" + out + "\n" + svg);
  return json::parse(out);
}

// Elements with this tag whose class attribute holds every word of cls.
std::vector<json> find(const json& doc, const std::string& tag, const std::string& cls = "") {
  std::vector<json> out;
  for (const json& e : doc["elements"]) {
    if (e["tag"] != tag) continue;
    const std::string have = " " + e["attrib"].value("class", "") + " ";
    std::istringstream words(cls);
    bool all = true;
    for (std::string w; words >> w;) all = all && have.find(" " + w + " ") != std::string::npos;
    if (all) out.push_back(e);
  }
  return out;
}

double num(const json& e, const char* attr) { return std::stod(e["attrib"][attr].get<std::string>()); }

std::vector<std::pair<double, double>> points(const json& polyline) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(polyline["attrib"]["points"].get<std::string>());
  for (std::string pt; in >> pt;) {
    const std::size_t comma = pt.find(',');
    out.emplace_back(std::stod(pt.substr(0, comma)), std::stod(pt.substr(comma + 1)));
  }
  return out;
}

// The axis as the chart's own tick labels define it: position of value v on a log axis, from the
// labelled ticks (value -> coordinate). Uses the first and last tick.
struct LogAxis {
  std::map<double, double> ticks;
  double at(double v) const {
    const auto [v0, c0] = *ticks.begin();
    const auto [v1, c1] = *ticks.rbegin();
    return c0 + (std::log10(v) - std::log10(v0)) / (std::log10(v1) - std::log10(v0)) * (c1 - c0);
  }
};

LogAxis axis(const json& doc, const char* cls, const char* coord) {
  LogAxis a;
  for (const json& t : find(doc, "text", cls)) a.ticks[std::stod(t["text"].get<std::string>())] = num(t, coord);
  return a;
}

// A realistic small-model curve (HumanEval-like): pass@k rising with k.
const std::vector<std::pair<int, double>> kCurve = {{1, 0.35}, {2, 0.45}, {5, 0.58}, {10, 0.66},
                                                   {20, 0.73}, {50, 0.80}, {100, 0.85}};

}  // namespace

TEST(FailAtKSvg, ParsesWithSvgRootViewBoxAxisTitlesAndDecadeTicks) {
  const json doc = parse_svg(fail_at_k_svg(kCurve, {{"GPT-4o", 0.902}}, "Llama 3.1 8B on HumanEval"));
  EXPECT_EQ(doc["root"], "{http://www.w3.org/2000/svg}svg");
  const json& root = doc["elements"][0]["attrib"];
  std::istringstream vb(root["viewBox"].get<std::string>());
  double x0 = -1, y0 = -1, w = 0, h = 0;
  vb >> x0 >> y0 >> w >> h;
  EXPECT_EQ(x0, 0);
  EXPECT_EQ(y0, 0);
  EXPECT_GT(w, 100);
  EXPECT_GT(h, 100);
  std::vector<std::string> texts;
  for (const json& t : find(doc, "text")) texts.push_back(t["text"]);
  for (const char* want : {"k (samples per problem)", "fail@k = 1 - pass@k", "Llama 3.1 8B on HumanEval", "GPT-4o pass@1 = 0.902"})
    EXPECT_NE(std::find(texts.begin(), texts.end(), want), texts.end()) << want;
  std::vector<std::string> xt, yt;
  for (const json& t : find(doc, "text", "xtick")) xt.push_back(t["text"]);
  for (const json& t : find(doc, "text", "ytick")) yt.push_back(t["text"]);
  EXPECT_EQ(xt, (std::vector<std::string>{"1", "10", "100"}));
  // Smallest fail: 0.098 (the reference) -> the decade 0.01.
  EXPECT_EQ(yt, (std::vector<std::string>{"0.01", "0.1", "1"}));
  EXPECT_EQ(find(doc, "line", "grid major").size(), 3u + 3u);
  EXPECT_EQ(find(doc, "line", "grid minor").size(), 2u * 8u + 2u * 8u);
}

TEST(FailAtKSvg, OnePointPerKMovingRightAndDownOnTheTickMapping) {
  const json doc = parse_svg(fail_at_k_svg(kCurve, {}, "t"));
  const std::vector<json> lines = find(doc, "polyline", "series base");
  ASSERT_EQ(lines.size(), 1u);
  const auto pts = points(lines[0]);
  ASSERT_EQ(pts.size(), kCurve.size());
  EXPECT_EQ(find(doc, "circle", "marker base").size(), kCurve.size());
  const LogAxis x = axis(doc, "xtick", "x"), y = axis(doc, "ytick", "y");
  ASSERT_GE(x.ticks.size(), 2u);
  ASSERT_GE(y.ticks.size(), 2u);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(pts[i].first, pts[i - 1].first) << i;    // k grows to the right
      EXPECT_GT(pts[i].second, pts[i - 1].second) << i;  // fail@k falls: SVG y grows downwards
    }
    // Coordinates are printed with two decimals.
    EXPECT_NEAR(pts[i].first, x.at(kCurve[i].first), 0.011) << "k=" << kCurve[i].first;
    EXPECT_NEAR(pts[i].second, y.at(1.0 - kCurve[i].second), 0.011) << "k=" << kCurve[i].first;
  }
  // The frame holds every point.
  const json frame = find(doc, "rect", "frame").at(0);
  for (const auto& [px, py] : pts) {
    EXPECT_GE(px, num(frame, "x"));
    EXPECT_LE(px, num(frame, "x") + num(frame, "width"));
    EXPECT_GE(py, num(frame, "y"));
    EXPECT_LE(py, num(frame, "y") + num(frame, "height"));
  }
}

TEST(FailAtKSvg, ReferenceLineSitsAtOneMinusPassOnTheAxis) {
  const std::vector<std::pair<std::string, double>> refs = {{"GPT-4o", 0.902}, {"Claude", 0.91}, {"weak", 0.3}};
  const json doc = parse_svg(fail_at_k_svg(kCurve, refs, "t"));
  const std::vector<json> lines = find(doc, "line", "reference");
  ASSERT_EQ(lines.size(), refs.size());
  const LogAxis y = axis(doc, "ytick", "y");
  const json frame = find(doc, "rect", "frame").at(0);
  for (std::size_t i = 0; i < refs.size(); ++i) {
    EXPECT_NEAR(num(lines[i], "y1"), y.at(1.0 - refs[i].second), 0.011) << refs[i].first;
    EXPECT_EQ(num(lines[i], "y1"), num(lines[i], "y2"));  // horizontal
    EXPECT_EQ(num(lines[i], "x1"), num(frame, "x"));      // across the plot
    EXPECT_EQ(num(lines[i], "x2"), num(frame, "x") + num(frame, "width"));
    EXPECT_FALSE(lines[i]["attrib"].value("stroke-dasharray", "").empty());
  }
  // fail@1 of GPT-4o (0.098) is a hair below 0.1 on screen.
  EXPECT_GT(num(lines[0], "y1"), y.ticks.at(0.1));
  std::vector<std::string> labels;
  const std::vector<json> texts = find(doc, "text", "reference-label");
  for (const json& t : texts) labels.push_back(t["text"]);
  // fail 0.098 and 0.09 are 6.5 units apart on this axis (175 per decade): the labels must not collide.
  ASSERT_EQ(texts.size(), 2u + 1u);
  EXPECT_TRUE(std::fabs(num(texts[0], "y") - num(texts[1], "y")) >= 12 ||
              texts[0]["attrib"]["text-anchor"] != texts[1]["attrib"]["text-anchor"]);
  EXPECT_EQ(labels, (std::vector<std::string>{"GPT-4o pass@1 = 0.902", "Claude pass@1 = 0.91", "weak pass@1 = 0.3"}));
}

TEST(FailAtKSvg, TextIsEscaped) {
  const std::string title = "Llama <3.1> & \"friends\" 'q'";
  const std::string name = "A<B&C \x01";
  const std::string svg = fail_at_k_svg(kCurve, {{name, 0.5}}, title);
  EXPECT_EQ(svg.find("<3.1>"), std::string::npos);
  EXPECT_EQ(svg.find("A<B"), std::string::npos);
  const json doc = parse_svg(svg);  // a control character would make it unparsable
  EXPECT_EQ(find(doc, "text", "title").at(0)["text"], title);
  EXPECT_EQ(find(doc, "text", "reference-label").at(0)["text"], "A<B&C \xEF\xBF\xBD pass@1 = 0.5");
}

TEST(FailAtKSvg, PassAtKOfOneIsDrawnAtTheFloorWithANote) {
  const std::vector<std::pair<int, double>> curve = {{1, 0.9}, {10, 0.999}, {100, 1.0}};
  const json doc = parse_svg(fail_at_k_svg(curve, {{"perfect", 1.0}}, "t"));
  const LogAxis y = axis(doc, "ytick", "y");
  EXPECT_EQ(y.ticks.begin()->first, kFailFloor);  // the lowest decade is the floor
  const auto pts = points(find(doc, "polyline", "series base").at(0));
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_NEAR(pts[2].second, y.ticks.at(kFailFloor), 0.011);
  EXPECT_NEAR(pts[1].second, y.at(0.001), 0.011);  // 1 - 0.999, a hair above the floor, not floored
  EXPECT_NEAR(num(find(doc, "line", "reference").at(0), "y1"), y.ticks.at(kFailFloor), 0.011);
  const std::vector<json> markers = find(doc, "circle", "marker base");
  ASSERT_EQ(markers.size(), 3u);
  EXPECT_EQ(markers[2]["attrib"]["fill"], "#ffffff");  // open: floored
  EXPECT_NE(markers[0]["attrib"]["fill"], "#ffffff");
  const std::vector<json> notes = find(doc, "text", "note");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0]["text"].get<std::string>().find("0.001"), std::string::npos);
  EXPECT_NE(find(doc, "text", "reference-label").at(0)["text"].get<std::string>().find("below 0.001"), std::string::npos);
}

TEST(FailAtKSvg, SingleKAndKUpTo1000WithPlusSeries) {
  const json one = parse_svg(fail_at_k_svg({{1, 0.2}}, {}, "t"));
  EXPECT_EQ(points(find(one, "polyline", "series base").at(0)).size(), 1u);
  EXPECT_EQ(axis(one, "xtick", "x").ticks.size(), 2u);  // 1 and 10: a single k still gets a decade
  EXPECT_TRUE(find(one, "text", "note").empty());

  std::vector<std::pair<int, double>> base, plus;
  for (const int k : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}) {
    base.emplace_back(k, 1.0 - 0.7 * std::pow(k, -0.4));
    plus.emplace_back(k, 1.0 - 0.8 * std::pow(k, -0.35));
  }
  const json doc = parse_svg(fail_at_k_svg(base, {{"GPT-4o", 0.902}}, "t", plus));
  std::vector<std::string> xt;
  for (const json& t : find(doc, "text", "xtick")) xt.push_back(t["text"]);
  EXPECT_EQ(xt, (std::vector<std::string>{"1", "10", "100", "1000"}));
  const LogAxis x = axis(doc, "xtick", "x"), y = axis(doc, "ytick", "y");
  const auto pp = points(find(doc, "polyline", "series plus").at(0));
  ASSERT_EQ(pp.size(), plus.size());
  for (std::size_t i = 0; i < pp.size(); ++i) {
    EXPECT_NEAR(pp[i].first, x.at(plus[i].first), 0.011);
    EXPECT_NEAR(pp[i].second, y.at(1.0 - plus[i].second), 0.011);
  }
  EXPECT_EQ(find(doc, "circle", "marker plus").size(), plus.size());
  bool legend = false;
  for (const json& t : find(doc, "text", "legend")) legend = legend || t["text"].get<std::string>().find("plus") != std::string::npos;
  EXPECT_TRUE(legend);
}

TEST(FailAtKSvg, DeterministicAndEmptySeriesStillDrawsAxes) {
  EXPECT_EQ(fail_at_k_svg(kCurve, {{"GPT-4o", 0.902}}, "t"), fail_at_k_svg(kCurve, {{"GPT-4o", 0.902}}, "t"));
  const json doc = parse_svg(fail_at_k_svg({}, {{"GPT-4o", 0.902}}, "t"));
  EXPECT_TRUE(find(doc, "polyline").empty());
  EXPECT_EQ(find(doc, "line", "reference").size(), 1u);
  EXPECT_NE(find(doc, "text", "note").at(0)["text"].get<std::string>().find("no pass@k"), std::string::npos);
}

TEST(FailAtKSvg, RejectsBadInput) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(fail_at_k_svg({{0, 0.5}}, {}, "t"), Error);
  EXPECT_THROW(fail_at_k_svg({{1, 0.5}, {1, 0.6}}, {}, "t"), Error);
  EXPECT_THROW(fail_at_k_svg({{2, 0.5}, {1, 0.6}}, {}, "t"), Error);
  EXPECT_THROW(fail_at_k_svg({{1, 1.5}}, {}, "t"), Error);
  EXPECT_THROW(fail_at_k_svg({{1, nan}}, {}, "t"), Error);
  EXPECT_THROW(fail_at_k_svg({{1, 0.5}}, {{"x", -0.1}}, "t"), Error);
  EXPECT_THROW(fail_at_k_svg({{1, 0.5}}, {}, "t", {{1, -0.5}}), Error);
}

TEST(PassAtKCurve, HandComputedValues) {
  // (10, 3): pass@1 = 0.3, pass@2 = 1 - C(7,2)/C(10,2) = 24/45, pass@5 = 1 - C(7,5)/C(10,5) = 231/252,
  // pass@10 = 1. (10, 0): 0 everywhere. (20, 20): 1 everywhere.
  const auto curve = pass_at_k_curve({{10, 3}, {10, 0}, {20, 20}});
  const std::vector<std::pair<int, double>> want = {
      {1, 1.3 / 3}, {2, (24.0 / 45 + 1) / 3}, {5, (231.0 / 252 + 1) / 3}, {10, 2.0 / 3}};
  ASSERT_EQ(curve.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(curve[i].first, want[i].first);
    EXPECT_NEAR(curve[i].second, want[i].second, 1e-12) << "k=" << want[i].first;
  }
}

TEST(PassAtKCurve, KValuesFollowTheSmallestN) {
  auto ks = [](const std::vector<std::pair<int, int>>& nc) {
    std::vector<int> out;
    for (const auto& kp : pass_at_k_curve(nc)) out.push_back(kp.first);
    return out;
  };
  EXPECT_EQ(ks({{8, 1}, {200, 5}}), (std::vector<int>{1, 2, 5, 8}));
  EXPECT_EQ(ks({{200, 1}, {200, 5}}), (std::vector<int>{1, 2, 5, 10, 20, 50, 100, 200}));
  EXPECT_EQ(ks({{1000, 1}}), (std::vector<int>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}));
  EXPECT_EQ(ks({{1500, 1}}), (std::vector<int>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1500}));
  EXPECT_EQ(ks({{1, 1}}), (std::vector<int>{1}));
  EXPECT_TRUE(ks({}).empty());
  EXPECT_TRUE(ks({{0, 0}, {10, 2}}).empty());
  EXPECT_THROW(pass_at_k_curve({{5, 6}}), Error);
}

namespace {

// A summary as `bestofn eval` writes it: HumanEval+, k = 1, 2, 10, 100 (out of lexicographic order
// on purpose), n = 50 for most problems.
json realistic_summary() {
  return json::parse(R"JSON({
    "bestofn_version": "0.1.0", "commit": "e60b6db", "model": "/models/Llama|3.1-8B-FP8",
    "dataset": {"name": "humaneval+", "path": "/data/humanevalplus/HumanEvalPlus.jsonl.gz", "problems": 164},
    "n": 50, "k": [1, 2, 10, 100],
    "sampling": {"temperature": 0.8, "top_p": 0.95, "top_k": 0, "min_p": 0.05, "seed": 7, "max_new_tokens": 512,
                 "stop": ["\ndef ", "\nclass ", "\n```"], "chat": false},
    "pass_at_k": {"1": 0.6210, "2": 0.7015, "10": 0.85, "100": null},
    "plus_pass_at_k": {"1": 0.55, "2": 0.6125, "10": 0.7804, "100": null},
    "problems_skipped": {"1": 0, "2": 0, "10": 0, "100": 164},
    "samples": 8200, "tokens": 1234567,
    "verdicts": {"passed": 5092, "failed": 3000, "timed_out": 100, "sandbox_error": 8},
    "time": {"generation_s": 600.25, "verification_s": 420.5, "wall_s": 640.0, "overlap_s": 480.0, "overlap_fraction": 0.75},
    "throughput": {"tok_per_s": 1928.95, "samples_per_s": 12.8125},
    "references": {"GPT-4o": 0.902},
    "device": "NVIDIA H200", "command": "bestofn eval --model /models/x --dataset humaneval+ -n 50 --stop $'\\n```'"
  })JSON");
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ReportMd, SaysHowTheVerdictsWereJudged) {
  json s = realistic_summary();
  EXPECT_FALSE(has(render_report_md(s, ""), "Judged")) << "a summary from before issue 45 has no judged line";
  s["judged"] = {{"in-process", 8200}};
  s["plus_judged"] = {{"outside", 5100}};
  const std::string md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "base tests: 8200 in-process; plus tests: 5100 outside.")) << md;
}

TEST(ReportMd, SaysWhichRulesJudgedAndWhereTheTimesCameFrom) {
  json s = realistic_summary();
  EXPECT_FALSE(has(render_report_md(s, ""), "| rules |")) << "a summary from before issue 47 has no rules";
  s["rules"] = json::parse(R"({"rules": "evalplus", "min_time_limit": 1.0, "time_limit_factor": 4.0,
      "reference_times": {"file": "/c/reference-times/humanevalplus.vm.json", "measured_to": "2026-12-06T21:09:06Z"}})");
  std::string md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "| rules | evalplus: EvalPlus 0.3.1's")) << md;
  EXPECT_TRUE(has(md, "within max(1 s, 4 x the reference's time)")) << md;
  EXPECT_TRUE(has(md, "reference times `/c/reference-times/humanevalplus.vm.json`, measured 2026-12-06T21:09:06Z |")) << md;
  s["rules"] = {{"rules", "human-eval"}};
  md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "| rules | human-eval: HumanEval's check() / MBPP's asserts, then the plus tests |")) << md;
}

TEST(ReportMd, RealisticSummary) {
  const std::string md = render_report_md(realistic_summary(), "fail_at_k.svg");
  // Settings, with the pipe in the model path escaped for the table and the stop strings as JSON.
  EXPECT_TRUE(has(md, "| model | `/models/Llama\\|3.1-8B-FP8` |")) << md;
  EXPECT_TRUE(has(md, "humaneval+, 164 problems")) << md;
  EXPECT_TRUE(has(md, "| samples per problem (n) | 50 |")) << md;
  EXPECT_TRUE(has(md, "temperature 0.8, top-p 0.95, top-k 0, min-p 0.05, seed 7, max new tokens 512")) << md;
  EXPECT_TRUE(has(md, R"(`"\ndef "` `"\nclass "` ````"\n```"````)")) << md;
  EXPECT_TRUE(has(md, "| device | NVIDIA H200 |")) << md;
  EXPECT_TRUE(has(md, "0.1.0, commit `e60b6db`")) << md;
  // pass@k with the plus column, rows in k order, a null shown as n/a with its skipped count.
  EXPECT_TRUE(has(md, "| k | pass@k (base tests) | pass@k (plus tests) | problems skipped (n < k) |")) << md;
  const std::size_t r1 = md.find("| 1 | 0.6210 | 0.5500 | 0 |"), r2 = md.find("| 2 | 0.7015 | 0.6125 | 0 |"),
                    r10 = md.find("| 10 | 0.8500 | 0.7804 | 0 |"), r100 = md.find("| 100 | n/a | n/a | 164 |");
  ASSERT_NE(r1, std::string::npos) << md;
  ASSERT_NE(r2, std::string::npos) << md;
  ASSERT_NE(r10, std::string::npos) << md;
  ASSERT_NE(r100, std::string::npos) << md;
  EXPECT_LT(r1, r2);
  EXPECT_LT(r2, r10);
  EXPECT_LT(r10, r100);
  EXPECT_TRUE(has(md, "- GPT-4o: pass@1 = 0.902, fail@1 = 0.098")) << md;
  EXPECT_TRUE(has(md, "![fail@k = 1 - pass@k against k](fail_at_k.svg)")) << md;
  // Verdicts (total = the sum), time with the overlap, throughput.
  EXPECT_TRUE(has(md, "| passed | 5092 |")) << md;
  EXPECT_TRUE(has(md, "| timed out | 100 |")) << md;
  EXPECT_TRUE(has(md, "| sandbox error | 8 |")) << md;
  EXPECT_TRUE(has(md, "| total | 8200 |")) << md;
  EXPECT_TRUE(has(md, "| generation | 600.2 s |") || has(md, "| generation | 600.3 s |")) << md;
  EXPECT_TRUE(has(md, "| both at once (overlap) | 480.0 s (75.0% of the wall time) |")) << md;
  EXPECT_TRUE(has(md, "| wall | 640.0 s |")) << md;
  EXPECT_TRUE(has(md, "| tokens generated | 1234567 |")) << md;
  EXPECT_TRUE(has(md, "| tokens per second | 1928.9 |") || has(md, "| tokens per second | 1929.0 |")) << md;
  EXPECT_TRUE(has(md, "| samples per second | 12.81 |")) << md;
  // The command holds ``` so its fence is longer.
  EXPECT_TRUE(has(md, "````sh\nbestofn eval --model /models/x --dataset humaneval+ -n 50 --stop $'\\n```'\n````\n")) << md;
  EXPECT_EQ(md.rfind("# bestofn eval: ", 0), 0u);
}

TEST(ReportMd, WithoutPlusPlotOrPassAtK) {
  json s = realistic_summary();
  s.erase("plus_pass_at_k");
  std::string md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "| k | pass@k | problems skipped (n < k) |")) << md;
  EXPECT_TRUE(has(md, "| 10 | 0.8500 | 0 |")) << md;
  EXPECT_FALSE(has(md, "plus tests")) << md;
  EXPECT_FALSE(has(md, "![")) << md;

  s.erase("pass_at_k");
  s["pass_at_k_note"] = "--stop-on-pass: generation stops at the first passing candidate, so pass@k is not estimated";
  md = render_report_md(s, "plot with space.svg");
  EXPECT_FALSE(has(md, "| k |")) << md;
  EXPECT_TRUE(has(md, "Note: --stop-on-pass: generation stops")) << md;
  EXPECT_TRUE(has(md, "(<plot with space.svg>)")) << md;
}

TEST(ReportMd, MissingOrMistypedFieldsDoNotThrow) {
  std::string md;
  ASSERT_NO_THROW(md = render_report_md(json::object(), ""));
  EXPECT_TRUE(has(md, "n/a")) << md;
  EXPECT_FALSE(has(md, "## Command")) << md;
  for (const json& s : {json(), json::array({1, 2}), json("text"),
                        json::parse(R"({"time": 5, "k": "1,10", "pass_at_k": {"1": "x", "ten": 0.5}, "sampling": [],
                                       "verdicts": {"passed": 1.5}, "references": {"a": "b"}, "dataset": "he",
                                       "command": 3, "plus_pass_at_k": 7})")}) {
    EXPECT_NO_THROW(md = render_report_md(s, "p.svg")) << s.dump();
  }
  // No "k": the rows come from the keys of pass_at_k, in numeric order.
  md = render_report_md(json::parse(R"({"pass_at_k": {"100": 0.9, "2": 0.5, "10": 0.7}})"), "");
  EXPECT_LT(md.find("| 2 |"), md.find("| 10 |")) << md;
  EXPECT_LT(md.find("| 10 |"), md.find("| 100 |")) << md;
  EXPECT_TRUE(has(md, "| 2 | 0.5000 | n/a |")) << md;  // no problems_skipped: unknown, not 0
}

TEST(ExtractCode, PrefersTheBlockDefiningTheEntryPoint) {
  const std::string reply =
      "Sure! First a helper:\n\n```python\ndef _norm(x):\n    return abs(x)\n```\n\n"
      "Now the function:\n\n```python\nfrom typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
      "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```\n\n"
      "Example usage (a longer block):\n\n```python\nprint(has_close_elements([1.0, 2.0, 3.0], 0.5))\n"
      "print(has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3))\nprint(has_close_elements([], 0.3))\n"
      "print(has_close_elements([1.0], 0.3))\nprint(has_close_elements([5.0, 5.0], 0.0))\n```\n";
  EXPECT_EQ(extract_code(reply, "has_close_elements"),
            "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
            "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n");
  // Without an entry point match, the longest block.
  EXPECT_EQ(extract_code(reply, "other"),
            "print(has_close_elements([1.0, 2.0, 3.0], 0.5))\nprint(has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3))\n"
            "print(has_close_elements([], 0.3))\nprint(has_close_elements([1.0], 0.3))\n"
            "print(has_close_elements([5.0, 5.0], 0.0))\n");
}

TEST(ExtractCode, EntryPointMatchIsAWholeName) {
  const std::string reply = "```py\ndef add_one(x):\n    return x + 1\n```\n```\nclass S:\n    async def add (self, x, y):\n"
                            "        return x + y\n```\n";
  EXPECT_EQ(extract_code(reply, "add"), "class S:\n    async def add (self, x, y):\n        return x + y\n");
  EXPECT_EQ(extract_code(reply, "add_one"), "def add_one(x):\n    return x + 1\n");
}

TEST(ExtractCode, NoFenceUnterminatedFenceCrlfAndOtherLanguages) {
  const std::string bare = "def f(x):\r\n    return x\r\n";
  EXPECT_EQ(extract_code(bare, "f"), bare);  // no fence: unchanged, CRLF included
  EXPECT_EQ(extract_code("", "f"), "");
  // Cut by max_new_tokens inside the block: everything after the fence.
  EXPECT_EQ(extract_code("Here you go:\n```python\ndef f(x):\n    return [i for i in", "f"),
            "def f(x):\n    return [i for i in\n");
  EXPECT_EQ(extract_code("Here:\r\n```python\r\ndef f(x):\r\n    return x\r\n```\r\nDone.\r\n", "f"), "def f(x):\n    return x\n");
  // A longer bash block does not count; a text-only reply of other languages stays as it is.
  const std::string mixed = "```bash\npip install numpy\npip install scipy\npip install sympy\n```\n```python\nimport numpy\n```\n";
  EXPECT_EQ(extract_code(mixed, "f"), "import numpy\n");
  const std::string other = "```text\nno code here\n```\n";
  EXPECT_EQ(extract_code(other, "f"), other);
  // A four-backtick fence holds a ``` line; an indented fence (in a list) counts.
  EXPECT_EQ(extract_code("````python\ns = '''\n```\n'''\n````\n", "f"), "s = '''\n```\n'''\n");
  EXPECT_EQ(extract_code("1. Code:\n   ```Python\n   def f(): pass\n   ```\n", "f"), "   def f(): pass\n");
}

namespace {

// The text a generation keeps: up to the earliest occurrence of any stop string.
std::string cut(const std::string& text, const std::vector<std::string>& stops) {
  std::size_t at = text.size();
  for (const std::string& s : stops) at = std::min(at, text.find(s));
  return text.substr(0, at);
}

std::filesystem::path data_dir() {
  test::require_shared("data/humaneval/HumanEval.jsonl.gz");
  test::require_shared("data/humanevalplus/HumanEvalPlus.jsonl.gz");
  test::require_shared("data/mbpp/sanitized-mbpp.json");
  return test::shared_path("data");
}

}  // namespace

TEST(DefaultStopStrings, SetsPerDatasetAndChat) {
  const std::vector<std::string> he = {"\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert "};
  EXPECT_EQ(default_stop_strings("humaneval"), he);
  EXPECT_EQ(default_stop_strings("humaneval+"), he);
  EXPECT_EQ(default_stop_strings("mbpp"), (std::vector<std::string>{"\nassert ", "\nif __name__", "\nprint(", "\n```"}));
  for (const char* d : {"humaneval", "humaneval+", "mbpp"}) EXPECT_TRUE(default_stop_strings(d, true).empty()) << d;
  EXPECT_THROW(default_stop_strings("HumanEval.jsonl"), Error);
}

TEST(DefaultStopStrings, NeverCutACanonicalHumanEvalBodyAndEndEveryTopLevelFollowUp) {
  const std::filesystem::path dir = data_dir();
  for (const char* name : {"humaneval", "humaneval+"}) {
    const std::vector<std::string> stops = default_stop_strings(name);
    const std::vector<Problem> problems = load_dataset(name, dir);
    ASSERT_EQ(problems.size(), 164u) << name;
    int failures = 0;
    for (const Problem& p : problems) {
      const std::string& body = p.canonical_solution;
      if (cut(body, stops) != body && ++failures <= 5) ADD_FAILURE() << name << " " << p.task_id << " cut early";
      // What a base model writes after the body: the harness's own test, a main guard, a print.
      for (const std::string& tail : std::vector<std::string>{
               "\ndef check(candidate):\n    assert candidate(1)\n", "\nif __name__ == '__main__':\n    main()\n",
               "\nprint(" + p.entry_point + "(1))\n", "\nassert " + p.entry_point + "(1) == 1\n", "\nclass Solution:\n    pass\n"})
        if (cut(body + tail, stops) != body && ++failures <= 5) ADD_FAILURE() << name << " " << p.task_id << " not cut: " << tail;
    }
    EXPECT_EQ(failures, 0) << name;
  }
  // Inside a body: nested definitions, indented prints and asserts, a comment at column 0.
  const std::string body = "    def helper(y):\n        print(y)\n        assert y\n        return y\n# a note\n    return helper(x)\n";
  EXPECT_EQ(cut(body, default_stop_strings("humaneval")), body);
}

TEST(DefaultStopStrings, NeverCutACanonicalMbppSolutionAndEndTheTestsThatFollow) {
  const std::vector<std::string> stops = default_stop_strings("mbpp");
  const std::vector<Problem> problems = load_dataset("mbpp", data_dir());
  ASSERT_GT(problems.size(), 400u);
  int failures = 0, with_helpers = 0;
  for (const Problem& p : problems) {
    const std::string& code = p.canonical_solution;  // the whole program: imports, helpers, the function
    with_helpers += code.find("\ndef ") != std::string::npos;
    if (cut(code, stops) != code && ++failures <= 5) ADD_FAILURE() << p.task_id << " cut early";
    for (const std::string& tail : std::vector<std::string>{"\nassert " + p.entry_point + "(1) == 2\n", "\n```\n\nThis works by",
                                                            "\nprint(" + p.entry_point + "(3))\n"})
      if (cut(code + tail, stops) != code && ++failures <= 5) ADD_FAILURE() << p.task_id << " not cut: " << tail;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(with_helpers, 0);  // solutions with a second top-level def survive: "\ndef " is no MBPP stop
}

// selected@1 per strategy (issue 46): one diamond per strategy at k = 1, at fail = 1 - selected@1 on
// the chart's own tick mapping, labelled; a value outside [0, 1] is refused.
TEST(FailAtKSvg, SelectedAtOneIsADiamondPerStrategyAtKOne) {
  const json doc = parse_svg(fail_at_k_svg(kCurve, {}, "t", {}, {{"logprob", 0.40}, {"public,cluster,logprob", 0.62}}));
  const std::vector<json> d = find(doc, "polygon", "selected");
  ASSERT_EQ(d.size(), 2u);
  const LogAxis x = axis(doc, "xtick", "x"), y = axis(doc, "ytick", "y");
  for (std::size_t i = 0; i < d.size(); ++i) {
    std::istringstream in(d[i]["attrib"]["points"].get<std::string>());
    std::string top, right;
    in >> top >> right;
    const double cx = std::stod(top.substr(0, top.find(','))), cy = std::stod(right.substr(right.find(',') + 1));
    EXPECT_NEAR(cx, x.at(1), 0.02);
    EXPECT_NEAR(cy, y.at(i == 0 ? 0.60 : 0.38), 0.05);
  }
  std::vector<std::string> labels;
  for (const json& t : find(doc, "text", "selected-label")) labels.push_back(t["text"]);
  EXPECT_EQ(labels, (std::vector<std::string>{"logprob selected@1 = 0.4", "public,cluster,logprob selected@1 = 0.62"}));
  EXPECT_THROW(fail_at_k_svg(kCurve, {}, "t", {}, {{"x", 1.5}}), bestofn::Error);
}

TEST(FailAtKSvg, BandSpansEachKsIntervalOnTheChartsOwnAxes) {
  // Each k's interval over problems (intervals.h): the band's upper edge at fail = 1 - hi, left to
  // right, then back along fail = 1 - lo, at the chart's own tick mapping.
  std::vector<Interval> band;
  for (const auto& [k, p] : kCurve) band.push_back({p - 0.05, std::min(1.0, p + 0.04)});
  const std::vector<std::pair<int, double>> plus = {{1, 0.30}, {10, 0.60}};
  const json doc = parse_svg(fail_at_k_svg(kCurve, {}, "t", plus, {}, band, {{0.25, 0.36}, {0.52, 0.67}}));
  const std::vector<json> base = find(doc, "polygon", "band base"), plus_band = find(doc, "polygon", "band plus");
  ASSERT_EQ(base.size(), 1u);
  ASSERT_EQ(plus_band.size(), 1u);
  const LogAxis x = axis(doc, "xtick", "x"), y = axis(doc, "ytick", "y");
  const auto pts = points(base[0]);
  ASSERT_EQ(pts.size(), 2 * kCurve.size());
  for (std::size_t i = 0; i < kCurve.size(); ++i) {
    const std::size_t back = pts.size() - 1 - i;
    EXPECT_NEAR(pts[i].first, x.at(kCurve[i].first), 0.02) << i;
    EXPECT_NEAR(pts[i].second, y.at(1 - band[i].hi), 0.02) << i;
    EXPECT_NEAR(pts[back].first, x.at(kCurve[i].first), 0.02) << i;
    EXPECT_NEAR(pts[back].second, y.at(1 - band[i].lo), 0.02) << i;
  }
  const auto pp = points(plus_band[0]);
  ASSERT_EQ(pp.size(), 4u);
  EXPECT_NEAR(pp[1].second, y.at(1 - 0.67), 0.02);
  EXPECT_NEAR(pp[2].second, y.at(1 - 0.52), 0.02);
  // Under the curve: the band comes before the polylines in the document.
  std::size_t band_at = 0, line_at = 0;
  for (std::size_t i = 0; i < doc["elements"].size(); ++i) {
    const std::string cls = doc["elements"][i]["attrib"].value("class", "");
    if (cls == "band base") band_at = i;
    if (cls == "series base") line_at = i;
  }
  EXPECT_LT(band_at, line_at);
  bool legend = false;
  for (const json& t : find(doc, "text", "legend")) legend = legend || t["text"] == "95% interval over problems";
  EXPECT_TRUE(legend);
  // A band whose high end lies below the curve's lowest fail@k widens the y axis to show it.
  const json low = parse_svg(fail_at_k_svg({{1, 0.95}, {2, 0.98}}, {}, "t", {}, {}, {{0.9, 0.999}, {0.97, 0.9995}}));
  EXPECT_NEAR(axis(low, "ytick", "y").ticks.begin()->first, 1e-3, 1e-12);  // the floor (kFailFloor), not 1e-2
  EXPECT_NEAR(axis(parse_svg(fail_at_k_svg({{1, 0.95}, {2, 0.98}}, {}, "t")), "ytick", "y").ticks.begin()->first, 1e-2, 1e-12);
  // No band: no polygon, no legend entry; a band of another length or out of order is an error.
  EXPECT_TRUE(find(parse_svg(fail_at_k_svg(kCurve, {}, "t")), "polygon", "band").empty());
  EXPECT_THROW(fail_at_k_svg(kCurve, {}, "t", {}, {}, {{0.1, 0.2}}), bestofn::Error);
  band[2] = {0.7, 0.6};
  EXPECT_THROW(fail_at_k_svg(kCurve, {}, "t", {}, {}, band), bestofn::Error);
}

TEST(ReportMd, ShowsEachScoresIntervalAndHowItWasMade) {
  json s = realistic_summary();
  s["pass_at_k_interval"] = json::parse(R"({"1": [0.5901, 0.6498], "2": [0.67, 0.73], "10": [0.81, 0.88], "100": null})");
  s["plus_pass_at_k_interval"] = json::parse(R"({"1": [0.52, 0.58], "2": null, "10": [0.75, 0.81], "100": null})");
  s["interval"] = {{"method", "percentile bootstrap over problems"}, {"level", 0.95}, {"resamples", 2000}, {"seed", 47}};
  s["selection"] = json::parse(R"({"problems": 164, "pass_at_1": 0.62, "pass_at_n": 0.9, "strategies": {
      "public": {"selected_at_1": 0.75, "selected_at_1_interval": [0.69, 0.81], "gap_closed": 0.46}}})");
  s.erase("plus_pass_at_k");
  std::string md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "| 1 | 0.6210 (95% CI 0.5901\xE2\x80\x93" "0.6498) | 0 |")) << md;
  EXPECT_TRUE(has(md, "| 100 | n/a | 164 |")) << md;  // null: no interval shown
  EXPECT_TRUE(has(md, "| public | 0.7500 (95% CI 0.6900\xE2\x80\x93" "0.8100) | 46% |")) << md;
  EXPECT_TRUE(has(md, "CI: 95% interval over problems (percentile bootstrap over problems, 2000 resamples, seed 47)")) << md;
  s["plus_pass_at_k"] = realistic_summary()["plus_pass_at_k"];
  md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "| 2 | 0.7015 (95% CI 0.6700\xE2\x80\x93" "0.7300) | 0.6125 | 0 |")) << md;  // plus interval null
  // A level other than 95 is said as such; an interval of the wrong shape is left out.
  s["interval"]["level"] = 0.9;
  s["pass_at_k_interval"]["10"] = json::array({0.8});
  md = render_report_md(s, "");
  EXPECT_TRUE(has(md, "| 1 | 0.6210 (90% CI 0.5901\xE2\x80\x93" "0.6498) |")) << md;
  EXPECT_TRUE(has(md, "| 10 | 0.8500 | 0.7804 (90% CI 0.7500\xE2\x80\x93" "0.8100) | 0 |")) << md;
}
