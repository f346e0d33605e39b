#include "bestofn/eval/evalplus_rules.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "bestofn/eval/compare_outputs.h"
#include "bestofn/eval/dataset_manifest.h"
#include "bestofn/util/error.h"
#include "bestofn/util/parallel.h"
#include "util/json_file.h"

namespace bestofn {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

int mbpp_number(const std::string& task_id) {
  if (!task_id.starts_with("Mbpp/")) return -1;
  char* end = nullptr;
  const long n = std::strtol(task_id.c_str() + 5, &end, 10);
  return end && *end == '\0' ? static_cast<int>(n) : -1;
}

bool in(int n, std::initializer_list<int> set) { return std::find(set.begin(), set.end(), n) != set.end(); }

// EvalPlus's special oracles of MBPP+ (evalplus/eval/_special_oracle.py): where its outputs are
// compared as sets, and the three tasks whose outputs are compared only with None.
bool set_eq_task(const std::string& entry) {
  for (const char* name : {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum", "intersection_array",
                           "find_dissimilar", "Diff"})
    if (entry == name) return true;
  return false;
}

// Mbpp/581's oracle: the surface of a square pyramid, the height taken as the apex's, rounded as
// Python's round() rounds (half to even).
bool surface_area_oracle(const json& args, double& out) {
  double b = 0, h = 0;
  if (!args.is_array() || args.size() != 2 || !plain_to_double(args[0], b) || !plain_to_double(args[1], h)) return false;
  const double slant = std::sqrt((b / 2) * (b / 2) + h * h);
  const double total = b * b + 4 * (b * slant) / 2;
  if (!std::isfinite(total)) return false;
  out = std::nearbyint(total);  // the default rounding mode: to nearest, ties to even
  return true;
}

// Mbpp/558's oracle: the sum of the digits' differences after padding the shorter number with
// zeros on the left. False where Python's would raise (a negative number: int('-')).
bool digit_distance_oracle(const json& args, long long& out) {
  if (!args.is_array() || args.size() != 2) return false;
  std::string a, b;
  for (int k = 0; k < 2; ++k) {
    const json& v = args[k];
    if (!v.is_number_integer() || v.is_boolean()) return false;
    (k ? b : a) = v.dump();
  }
  if (a.starts_with('-') || b.starts_with('-')) return false;
  const std::size_t n = std::max(a.size(), b.size());
  a.insert(0, n - a.size(), '0');
  b.insert(0, n - b.size(), '0');
  out = 0;
  for (std::size_t i = 0; i < n; ++i) out += std::abs((a[i] - '0') - (b[i] - '0'));
  return true;
}

// A list's or a tuple's items (nullptr for anything else, a value sent as its hash included: the
// verifier's harness never hashes a float or a list of floats).
const json* items_of(const json& v) {
  if (v.is_array()) return &v;
  if (v.is_object() && v.size() == 1 && v.contains("T") && v["T"].is_array()) return &v["T"];
  return nullptr;
}

// isinstance(v, float): numpy's float64 is a subclass of float.
bool is_float_instance(const json& v) {
  const std::string type = python_type(v);
  return type == "float" || type == "numpy.float64";
}

// EvalPlus's is_floats: a float, or a non-empty list or tuple of floats only.
bool is_floats(const json& v) {
  if (is_float_instance(v)) return true;
  const json* items = items_of(v);
  return items && !items->empty() && std::all_of(items->begin(), items->end(), is_float_instance);
}

// len() of a list or a tuple, a hashed one's too.
std::size_t length(const json& v) {
  if (const json* items = items_of(v)) return items->size();
  const json& h = v.at("H");  // python_type said list or tuple: a hashed value, its length third
  return h.at(2).is_number_unsigned() ? h.at(2).get<std::size_t>() : 0;
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json this_machine() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.starts_with("model name")) {
      cpu = line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1);
      while (!cpu.empty() && cpu.front() == ' ') cpu.erase(0, 1);
      break;
    }
  return {{"host", host}, {"cpu", cpu}, {"cpus", available_cpus()}};
}

std::string fingerprint(const Problem& p) {
  return sha256_text(p.prompt + p.canonical_solution + "\n" + p.base_input_json + "\n" + p.plus_input_json).substr(0, 16);
}

}  // namespace

bool evalplus_rules_for(const std::string& rules, const std::string& dataset, const std::vector<Problem>& problems) {
  const bool inputs = !problems.empty() && std::all_of(problems.begin(), problems.end(), has_evalplus_inputs);
  if (rules.empty()) return inputs && (dataset == "humaneval+" || dataset == "mbpp+" || problems.front().dataset.ends_with('+'));
  if (rules == "human-eval") {
    for (const Problem& p : problems)
      if (p.dataset == "mbpp+" && p.test_list.empty())
        throw Error("--rules human-eval: " + p.task_id + " of " + dataset + " has no \"assertion\" (the original MBPP asserts that rule runs)");
    return false;
  }
  if (rules != "evalplus") throw Error("--rules: '" + rules + "' is not a rule set (evalplus or human-eval)");
  if (!inputs)
    throw Error("--rules evalplus: dataset " + dataset +
                " has no base_input / plus_input (EvalPlus's rules judge HumanEval+ and MBPP+; use --dataset humaneval+ or mbpp+)");
  return true;
}

std::string mbpp_input_conversion(const std::string& task_id) {
  const int n = mbpp_number(task_id);
  if (n < 0) return "";
  // Which tasks, and what each rebuilds: EvalPlus 0.3.1's mbpp_deserialize_inputs.
  if (in(n, {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740, 744, 809}))
    return "[[tuple(a) for a in c] for c in _CALLS]";
  if (in(n, {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}))
    return "[[[tuple(x) for x in a] for a in c] for c in _CALLS]";
  if (in(n, {75, 413, 444, 753})) return "[[[tuple(x) for x in c[0]], c[1]] for c in _CALLS]";
  if (in(n, {106, 750})) return "[[c[0], tuple(c[1])] for c in _CALLS]";
  // An empty list becomes {} (an empty dict), as in EvalPlus.
  if (n == 115) return "[[[set(x) if isinstance(x, list) and len(x) else {} for x in c[0]]] for c in _CALLS]";
  if (n == 124) return "[(float(c[0]), complex(c[1])) for c in _CALLS]";
  if (in(n, {250, 405, 446, 617, 720, 763, 808})) return "[[tuple(c[0]), c[1]] for c in _CALLS]";
  if (in(n, {259, 401, 445})) return "[[tuple(tuple(x) for x in a) for a in c] for c in _CALLS]";
  if (n == 278) return "[[tuple(tuple(x) if isinstance(x, list) else x for x in c[0])] for c in _CALLS]";
  if (n == 307) return "[[tuple(c[0]), c[1], c[2]] for c in _CALLS]";
  if (n == 722) return "[[{k: tuple(v) for k, v in c[0].items()}] + c[1:] for c in _CALLS]";
  if (n == 252) return "[[complex(c[0])] for c in _CALLS]";
  if (in(n, {580, 615, 791}))  // every list, at any depth, a tuple (the input itself too)
    return "(lambda t: [t(t, c) for c in _CALLS])(lambda t, x: tuple(t(t, y) for y in x) if isinstance(x, list) else x)";
  return "";
}

bool mbpp_not_none_task(const std::string& entry) { return entry == "check_str" || entry == "text_match_three" || entry == "text_starta_endb"; }

bool evalplus_match(const Problem& problem, const json& args, const json& got, const json& expected, double& atol) {
  // Python's ==; two processes' NaNs are different objects, so a NaN is never equal.
  bool exact = python_equal(got, expected) && !holds_nan(expected);
  const std::string& entry = problem.entry_point;
  if (problem.dataset == "mbpp+") {
    if (entry == "are_equivalent") {  // Mbpp/164
      exact = true;
    } else if (entry == "sum_div") {  // Mbpp/295
      exact = exact || python_equal(got, json(0));
    } else if (entry == "surface_Area") {  // Mbpp/581
      double want = 0, g = 0;
      if (!exact) {
        if (!surface_area_oracle(args, want) || !plain_to_double(got, g)) return false;  // Python would raise
        exact = std::fabs(g - want) <= atol;
      }
    } else if (entry == "digit_distance_nums") {  // Mbpp/558
      long long want = 0;
      if (!exact) {
        if (!digit_distance_oracle(args, want)) return false;
        exact = python_equal(got, json(want));
      }
    } else if (set_eq_task(entry)) {
      const std::optional<bool> same = python_set_equal(got, expected);
      if (!same) return false;  // set() raised
      exact = *same;
    }
  }
  if (problem.dataset == "humaneval+" && entry == "find_zero") return args.is_array() && !args.empty() && find_zero_ok(args[0], got, atol);
  if (atol == 0 && is_floats(expected)) atol = 1e-6;  // and so it stays for the task's later inputs
  if (exact || atol == 0) return exact;
  const std::string type = python_type(expected);
  if (python_type(got) != type) return false;
  if ((type == "list" || type == "tuple") && length(got) != length(expected)) return false;
  return numpy_allclose(got, expected, 1e-07, atol);
}

ReferenceTimes::ReferenceTimes(fs::path file) : file_(std::move(file)) {
  std::error_code ec;
  if (fs::exists(file_, ec)) {
    try {
      doc_ = read_json_file(file_);
      if (!doc_.is_object() || !doc_.contains("tasks") || !doc_["tasks"].is_object()) throw Error(file_.string(), "not a reference-times file");
      const json here = this_machine();
      if (doc_.value("machine", json::object()).value("host", "") != here["host"] || doc_["machine"].value("cpu", "") != here["cpu"]) {
        spdlog::info("{}: measured on another machine ({}); the reference solutions are timed again here", file_.string(),
                     doc_["machine"].dump());
        doc_ = json();
      }
    } catch (const std::exception& e) {
      spdlog::warn("{}; the reference solutions are timed again", e.what());
      doc_ = json();
    }
  }
  if (doc_.is_null())
    doc_ = {{"about", "bestofn's record of each reference solution's seconds per input on this machine (--rules evalplus's time limits)"},
            {"machine", this_machine()},
            {"tasks", json::object()}};
}

std::optional<std::vector<double>> ReferenceTimes::get(const Problem& problem, bool plus) const {
  std::lock_guard<std::mutex> lock(mu_);
  const json& tasks = doc_["tasks"];
  const auto it = tasks.find(problem.task_id);
  if (it == tasks.end() || !it->is_object() || it->value("fingerprint", "") != fingerprint(problem)) return std::nullopt;
  const auto t = it->find(plus ? "plus" : "base");
  if (t == it->end() || !t->is_array()) return std::nullopt;
  std::vector<double> out;
  for (const json& s : *t) {
    if (!s.is_number() || !(s.get<double>() >= 0)) return std::nullopt;
    out.push_back(s.get<double>());
  }
  return out;
}

void ReferenceTimes::put(const Problem& problem, bool plus, const std::vector<double>& seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  json& task = doc_["tasks"][problem.task_id];
  const std::string fp = fingerprint(problem);
  if (!task.is_object() || task.value("fingerprint", "") != fp) task = {{"fingerprint", fp}};
  task["measured"] = today_utc();
  task[plus ? "plus" : "base"] = seconds;
  ++added_;
}

void ReferenceTimes::save() {
  std::lock_guard<std::mutex> lock(mu_);
  if (added_ == 0) return;
  std::error_code ec;
  fs::create_directories(file_.parent_path(), ec);
  write_json_file(file_, doc_);
}

std::pair<std::string, std::string> ReferenceTimes::measured(const std::vector<const Problem*>& problems) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string lo, hi;
  for (const Problem* p : problems) {
    const auto it = doc_["tasks"].find(p->task_id);
    if (it == doc_["tasks"].end() || !it->contains("measured")) continue;
    const std::string d = (*it)["measured"].get<std::string>();
    if (lo.empty() || d < lo) lo = d;
    if (hi.empty() || d > hi) hi = d;
  }
  return {lo, hi};
}

int ReferenceTimes::measured_now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return added_;
}

fs::path reference_times_file(const std::string& dataset, const std::vector<fs::path>& files) {
  fs::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = fs::path(x) / "bestofn";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = fs::path(h) / ".cache" / "bestofn";
  else dir = fs::path(".cache") / "bestofn";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string name = dataset;
  if (!find_dataset(dataset) && !files.empty()) {
    std::error_code ec;
    name = files.front().stem().string() + "-" + (fs::exists(files.front(), ec) ? sha256_file(files.front()).substr(0, 12) : "missing");
  }
  std::string file;
  for (char c : name) file += c == '+' ? std::string("plus") : c == '/' ? std::string("_") : std::string(1, c);
  return dir / "reference-times" / (file + "." + host + ".json");
}

std::vector<double> evalplus_time_limits(const JudgeRules& rules, const std::vector<double>& seconds) {
  std::vector<double> limits;
  for (double t : seconds) limits.push_back(std::max(rules.min_time_limit, rules.time_limit_factor * t));
  return limits;
}

double evalplus_run_seconds(const JudgeRules& rules, const std::vector<double>& limits) {
  double sum = 0;
  for (double l : limits) sum += l;
  return std::min(rules.task_time_cap, sum) + 2.0;
}

int prepare_references(const Sandbox& sandbox, ReferenceOutputs& refs, const std::vector<const Problem*>& problems, const JudgeRules& rules,
                       int workers) {
  std::vector<std::pair<const Problem*, bool>> work;
  for (const Problem* p : problems)
    if (has_evalplus_inputs(*p))
      for (bool plus : {false, true}) work.emplace_back(p, plus);
  std::atomic<std::size_t> next{0};
  std::atomic<int> failed{0};
  auto run = [&](int worker) {
    for (std::size_t i; (i = next++) < work.size();) {
      const auto [p, plus] = work[i];
      const ReferenceOutputs::Entry& e = refs.evalplus(sandbox, *p, plus, worker);
      if (!e.error.empty()) {
        ++failed;
        spdlog::warn("{}", e.error);
      } else if (rules.times && !rules.times->get(*p, plus)) {
        rules.times->put(*p, plus, e.seconds);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < std::max(1, workers); ++w) threads.emplace_back(run, w);
  run(0);
  for (auto& t : threads) t.join();
  return failed;
}

RulesSetup::RulesSetup(const RulesOptions& o, const std::string& dataset, const std::vector<Problem>& problems,
                       const std::vector<fs::path>& dataset_files) {
  rules.evalplus = evalplus_rules_for(o.rules, dataset, problems);
  rules.min_time_limit = o.min_time_limit;
  rules.time_limit_factor = o.time_limit_factor;
  if (!rules.evalplus) return;
  times_ = std::make_unique<ReferenceTimes>(o.reference_times.empty() ? reference_times_file(dataset, dataset_files) : fs::path(o.reference_times));
  rules.times = times_.get();
}

void RulesSetup::apply(SandboxLimits& limits) const {
  if (!rules.evalplus) return;
  limits.memory_bytes = kEvalPlusMemoryBytes;
  limits.sandbox_memory_bytes = std::max(limits.sandbox_memory_bytes, kEvalPlusMemoryBytes + (std::size_t{256} << 20));
}

void RulesSetup::prepare(const Sandbox& sandbox, ReferenceOutputs& refs, const std::vector<const Problem*>& problems, int workers) {
  if (!rules.evalplus) return;
  std::size_t missing = 0;
  for (const Problem* p : problems) missing += !times_->get(*p, false) || !times_->get(*p, true);
  if (missing > 0)
    spdlog::info("timing {} reference solutions on this machine for EvalPlus's time limits (once; kept in {})", missing, times_->file().string());
  const int failed = prepare_references(sandbox, refs, problems, rules, workers > 0 ? workers : available_cpus());
  if (failed > 0) spdlog::warn("{} reference runs failed: their problems' samples are sandbox errors", failed);
  times_->save();
}

nlohmann::ordered_json RulesSetup::summary(const std::vector<const Problem*>& problems) const {
  nlohmann::ordered_json s = {{"rules", rules.evalplus ? "evalplus" : "human-eval"}};
  if (!rules.evalplus) return s;
  const auto [from, to] = times_->measured(problems);
  s["min_time_limit"] = rules.min_time_limit;
  s["time_limit_factor"] = rules.time_limit_factor;
  s["task_time_cap"] = rules.task_time_cap;
  s["memory_bytes"] = kEvalPlusMemoryBytes;
  s["reference_times"] = {{"file", times_->file().string()}, {"measured_from", from}, {"measured_to", to},
                          {"measured_now", times_->measured_now()}, {"machine", this_machine()}};
  return s;
}

}  // namespace bestofn
