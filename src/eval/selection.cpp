#include "bestofn/eval/selection.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include <openssl/evp.h>

#include "bestofn/eval/compare_outputs.h"
#include "bestofn/eval/intervals.h"
#include "bestofn/eval/outside_tests.h"
#include "bestofn/eval/public_tests.h"
#include "bestofn/eval/verify_jobs.h"
#include "bestofn/util/error.h"
#include "bestofn/util/trim_blanks.h"
#include "bestofn/verifier/verifier.h"

namespace bestofn {
namespace {
using nlohmann::json;
using nlohmann::ordered_json;

// Variations per public example for the cluster step: with HumanEval's ~3 examples a prompt, a
// dozen inputs more, each run once per candidate in the same sandbox run.
constexpr std::size_t kMutantsPerExample = 4;

// The SHA-256 of a candidate's outputs' keys, in hex: a signature short enough to keep per
// candidate (the keys of HumanEval's large outputs run to megabytes).
std::string digest(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr) != 1) return s;  // the key itself: longer, as good
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    const unsigned char c = md[i];
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

const json* tag(const json& v, const char* t) {
  if (!v.is_object() || v.size() != 1) return nullptr;
  const auto it = v.find(t);
  return it == v.end() ? nullptr : &*it;
}

// An exception in the frame's place of an output (outputs_program's errors_as_outputs).
const json* error_output(const json& v) {
  const json* e = tag(v, "E");
  return e && e->is_string() ? e : nullptr;
}

bool ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// One variation of a value, of the same type; null when this kind does not apply to it. Kinds
// cycle: a mutant per (argument, kind).
json mutate(const json& v, std::size_t kind) {
  if (v.is_boolean()) return kind == 0 ? json(!v.get<bool>()) : json();
  if (v.is_number_integer()) {  // (nlohmann reads a non-negative int as unsigned)
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > (1ull << 40)) return json();
    const std::int64_t x = v.get<std::int64_t>();
    if (x > (1ll << 40) || x < -(1ll << 40)) return json();
    switch (kind % 4) {
      case 0: return x + 1;
      case 1: return x - 1;
      case 2: return x == 0 ? 2 : -x;
      default: return x * 2;
    }
  }
  if (v.is_number_float()) {
    const double x = v.get<double>();
    switch (kind % 3) {
      case 0: return x + 1.0;
      case 1: return -x;
      default: return x / 2;
    }
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    switch (kind % 4) {
      case 0: return s.empty() ? std::string("a") : ascii(s) ? s.substr(0, s.size() - 1) : s + s;
      case 1: return s + (s.empty() ? std::string("b") : ascii(s) ? s.substr(0, 1) : s);
      case 2: {
        if (!ascii(s) || s.size() < 2) return json();
        return std::string(s.rbegin(), s.rend());
      }
      default: {
        if (!ascii(s)) return json();
        std::string t = s;
        for (char& c : t) c = static_cast<char>(std::isupper(static_cast<unsigned char>(c)) ? std::tolower(static_cast<unsigned char>(c))
                                                                                           : std::toupper(static_cast<unsigned char>(c)));
        return t;
      }
    }
  }
  if (v.is_array()) {
    json a = v;
    switch (kind % 4) {
      case 0:
        if (a.empty()) return json();
        a.erase(a.size() - 1);
        return a;
      case 1:
        if (a.empty()) return json();
        a.push_back(a[0]);
        return a;
      case 2:
        if (a.size() < 2) return json();
        std::reverse(a.begin(), a.end());
        return a;
      default: {
        if (a.empty()) return json();
        json m = mutate(a[0], 0);
        if (m.is_null()) return json();
        a[0] = m;
        return a;
      }
    }
  }
  if (const json* t = tag(v, "T")) {  // a tuple keeps its length: an element varies
    if (!t->is_array() || t->empty()) return json();
    json items = *t;
    const std::size_t i = kind % items.size();
    json m = mutate(items[i], kind / items.size());
    if (m.is_null()) return json();
    items[i] = m;
    return json{{"T", items}};
  }
  if (const json* d = tag(v, "D")) {
    if (!d->is_array() || d->empty()) return json();
    json items = *d;
    if (kind % 2 == 0) {
      items.erase(items.size() - 1);
    } else {
      json m = items[0].is_array() && items[0].size() == 2 ? mutate(items[0][1], 0) : json();
      if (m.is_null()) return json();
      items[0][1] = m;
    }
    return json{{"D", items}};
  }
  return json();  // None, sets, big ints, complex: left as they are
}

// A call's text from its argument values: positional, then `name=value`.
std::string render_call(const std::string& entry, const json& values, const std::vector<std::string>& names) {
  std::string call = entry + "(";
  const std::size_t positional = values.size() - names.size();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) call += ", ";
    if (i >= positional) call += names[i - positional] + "=";
    const std::string r = python_repr(values[i], 1u << 20);
    if (r.size() >= (1u << 20) || r.find("nan") != std::string::npos || r.find("inf") != std::string::npos) return "";
    call += r;
  }
  return call + ")";
}

// Whether the bracket at `open` in `call` closes at its last character (quotes respected): so
// `f(1) + f(2)` is not one call of f.
bool closes_at_end(const std::string& call, std::size_t open) {
  int depth = 0;
  char quote = 0;
  for (std::size_t i = open; i < call.size(); ++i) {
    const char c = call[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && --depth == 0) {
      return i + 1 == call.size();
    }
  }
  return false;
}

// The lines of `code` that import (a prompt's `from typing import List`), for evaluating the
// examples' texts without the function the prompt defines.
std::string import_lines(const std::string& code) {
  std::string out;
  std::size_t at = 0;
  while (at < code.size()) {
    const std::size_t end = std::min(code.find('\n', at), code.size());
    const std::string line = code.substr(at, end - at);
    if (line.starts_with("import ") || line.starts_with("from ")) out += line + "\n";
    at = end + 1;
  }
  return out;
}

// The program the verifier runs for a candidate's whole code, without its tests (MBPP's test
// imports kept: its shown assert may call math.isclose).
std::string candidate_code(const Problem& p, const std::string& whole) {
  if (!is_mbpp(p)) return whole;
  std::string code = whole + "\n";
  for (const std::string& imp : p.test_imports) code += imp + "\n";
  return code;
}

// The frame of an errors_as_outputs run: `count` outputs, each plain data or an exception.
std::string read_frame(const std::string& out, std::size_t count, std::vector<json>& outputs) {
  return read_outputs(out, count, outputs, true);
}

}  // namespace

SelectStrategy parse_strategy(const std::string& text) {
  SelectStrategy s{trim_blanks(text), {}};
  std::set<std::string> seen;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string word = trim_blanks(text.substr(at, comma - at));
    if (word == "public") s.steps.push_back(SelectStep::Public);
    else if (word == "cluster") s.steps.push_back(SelectStep::Cluster);
    else if (word == "logprob") s.steps.push_back(SelectStep::Logprob);
    else throw Error("--select: '" + word + "' is not a strategy (public, cluster, logprob, or a chain of them such as public,cluster,logprob)");
    if (!seen.insert(word).second) throw Error("--select: '" + text + "' names " + word + " twice");
    at = comma + 1;
  }
  return s;
}

std::vector<SelectStrategy> default_strategies() {
  return {parse_strategy("logprob"), parse_strategy("public"), parse_strategy("cluster"), parse_strategy("public,cluster,logprob")};
}

std::vector<SelectStrategy> strategies_from(const std::vector<std::string>& select, const std::vector<SelectStrategy>& defaults) {
  if (select.empty()) return defaults;
  std::vector<SelectStrategy> out;
  std::set<std::string> seen;
  for (const std::string& s : select) {
    if (s == "none") return {};
    SelectStrategy st = parse_strategy(s);
    if (seen.insert(st.name).second) out.push_back(std::move(st));
  }
  return out;
}

std::size_t select_candidate(const std::vector<CandidateFacts>& c, const SelectStrategy& s) {
  std::vector<std::size_t> alive(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) alive[i] = i;
  auto keep = [&](auto pred) {
    std::vector<std::size_t> kept;
    for (std::size_t i : alive)
      if (pred(i)) kept.push_back(i);
    if (!kept.empty()) alive.swap(kept);  // a filter that would leave nothing leaves all
  };
  for (const SelectStep step : s.steps) {
    if (step == SelectStep::Public) {
      keep([&](std::size_t i) { return c[i].public_passed == 1; });
    } else if (step == SelectStep::Cluster) {
      std::map<std::string, std::size_t> size;
      for (std::size_t i : alive)
        if (!c[i].signature.empty()) ++size[c[i].signature];
      std::size_t largest = 0;
      for (const auto& [sig, n] : size) largest = std::max(largest, n);
      keep([&](std::size_t i) { return !c[i].signature.empty() && size[c[i].signature] == largest; });
    } else {
      double best = -INFINITY;
      for (std::size_t i : alive) best = std::max(best, c[i].mean_logprob);
      keep([&](std::size_t i) { return c[i].mean_logprob == best; });
    }
  }
  std::size_t chosen = alive.front();
  for (std::size_t i : alive)
    if (c[i].mean_logprob > c[chosen].mean_logprob) chosen = i;
  return chosen;
}

std::vector<json> mutate_args(const json& args, std::size_t count) {
  std::vector<json> out;
  if (!args.is_array() || args.empty()) return out;
  std::set<std::string> seen{args.dump()};
  // Argument by argument, kind by kind: the first arguments' simplest variations first.
  for (std::size_t kind = 0; kind < 8 && out.size() < count; ++kind)
    for (std::size_t i = 0; i < args.size() && out.size() < count; ++i) {
      json m = mutate(args[i], kind);
      if (m.is_null()) continue;
      json a = args;
      a[i] = std::move(m);
      if (seen.insert(a.dump()).second) out.push_back(std::move(a));
    }
  return out;
}

SelectionInputs selection_inputs(const Sandbox& sandbox, const Problem& problem, int worker) {
  SelectionInputs in;
  const PublicExamples ex = extract_public_examples(problem);
  in.unreadable = ex.unreadable;
  if (ex.examples.empty()) return in;
  // Each example read as two expressions: its arguments captured by a stand-in for the entry
  // point, and its expected value; a text that does not evaluate is an exception in the frame.
  json exprs = json::array();
  std::vector<const PublicExample*> kept;
  const std::string head = problem.entry_point + "(";
  for (const PublicExample& e : ex.examples) {
    // A call of the entry point itself has its arguments captured, for variations; any other
    // expression (MBPP's `set(f(x))`, `bool(math.isclose(f(x), y))`) is a public call only.
    const bool direct = e.call.starts_with(head) && closes_at_end(e.call, head.size() - 1);
    exprs.push_back(direct ? "_bestofn_capture(" + e.call.substr(head.size()) : std::string("None"));
    exprs.push_back(e.expected);
    kept.push_back(&e);
  }
  if (kept.empty()) return in;
  std::string code = is_mbpp(problem) ? std::string() : import_lines(problem.prompt);
  for (const std::string& imp : problem.test_imports) code += imp + "\n";
  code += "def _bestofn_capture(*args, **kwargs):\n    return [list(args), kwargs]\n";
  const Verdict v = sandbox.run(outputs_program(code, "", exprs.dump(), "example", {}, false, true), worker, 0, kOutsideStdoutBytes);
  std::vector<json> outs;
  if (!v.passed()) {
    in.error = "reading the examples of " + problem.task_id + ": " + v.result;
    return in;
  }
  if (std::string err = read_frame(v.out, exprs.size(), outs); !err.empty()) {
    in.error = "reading the examples of " + problem.task_id + ": " + err;
    return in;
  }
  for (std::size_t k = 0; k < kept.size(); ++k) {
    const json& captured = outs[2 * k];
    const json& expected = outs[2 * k + 1];
    if (error_output(captured) || error_output(expected)) {
      ++in.unreadable;
      continue;
    }
    in.public_calls.push_back(kept[k]->call);
    in.expected.push_back(expected);
    if (!captured.is_array() || captured.size() != 2 || !captured[0].is_array()) continue;  // not a direct call: no variations
    // The arguments as one list (positional, then keyword values), for the variations.
    json values = captured[0];
    std::vector<std::string> names;
    if (const json* d = tag(captured[1], "D"); d && d->is_array())
      for (const json& kv : *d)
        if (kv.is_array() && kv.size() == 2 && kv[0].is_string()) {
          names.push_back(kv[0].get<std::string>());
          values.push_back(kv[1]);
        }
    for (const json& m : mutate_args(values, kMutantsPerExample)) {
      const std::string call = render_call(problem.entry_point, m, names);
      if (!call.empty()) in.cluster_calls.push_back(call);
    }
  }
  in.cluster_calls.insert(in.cluster_calls.begin(), in.public_calls.begin(), in.public_calls.end());
  return in;
}

CandidateFacts candidate_evidence(const Sandbox& sandbox, const Problem& problem, const SelectionInputs& in, const std::string& code,
                                  int worker, double timeout_s) {
  CandidateFacts f;
  if (in.cluster_calls.empty()) return f;
  const json calls(in.cluster_calls);
  // Each call has its own budget in the run; the run as a whole, room for all of them.
  const double budget = std::max(timeout_s, kCallBudgetSeconds * static_cast<double>(calls.size()) + 1.0);
  const Verdict v = sandbox.run(outputs_program(candidate_code(problem, code), "", calls.dump(), "input", {}, is_mbpp(problem), true),
                                worker, budget, kOutsideStdoutBytes);
  std::vector<json> outs;
  if (!v.passed() || !read_frame(v.out, calls.size(), outs).empty()) {
    if (!in.public_calls.empty()) f.public_passed = 0;  // it did not even run: it passes nothing
    return f;
  }
  f.public_passed = in.public_calls.empty() ? -1 : 1;
  for (std::size_t i = 0; i < in.public_calls.size(); ++i)
    if (error_output(outs[i]) || !evalplus_same(outs[i], in.expected[i], 0)) f.public_passed = 0;
  // A candidate that raises on every input is in no group: programs that fail alike (a NameError,
  // a missing function) would otherwise outvote a right one that is alone.
  if (std::all_of(outs.begin(), outs.end(), [](const json& o) { return error_output(o) != nullptr; })) return f;
  std::string key;
  for (const json& o : outs) key += error_output(o) ? "E:" + o["E"].get<std::string>() + ";" : equality_key(o) + "|";
  f.signature = digest(key);
  return f;
}

ordered_json selection_summary(const std::vector<SelectionPool>& pools, const std::vector<SelectStrategy>& strategies, bool has_plus) {
  double p1 = 0, pn = 0, plus_p1 = 0, plus_pn = 0;
  std::size_t problems = 0;
  for (const SelectionPool& p : pools) {
    if (p.facts.empty()) continue;
    ++problems;
    const double n = static_cast<double>(p.passed.size());
    p1 += static_cast<double>(std::count(p.passed.begin(), p.passed.end(), true)) / n;
    pn += std::count(p.passed.begin(), p.passed.end(), true) > 0;
    plus_p1 += static_cast<double>(std::count(p.plus_passed.begin(), p.plus_passed.end(), true)) / n;
    plus_pn += std::count(p.plus_passed.begin(), p.plus_passed.end(), true) > 0;
  }
  const double P = problems ? static_cast<double>(problems) : 1.0;
  auto gap = [](double selected, double at1, double atn) { return atn > at1 ? json((selected - at1) / (atn - at1)) : json(); };
  ordered_json out;
  out["problems"] = problems;
  out["pass_at_1"] = p1 / P;
  out["pass_at_n"] = pn / P;
  if (has_plus) {
    out["plus_pass_at_1"] = plus_p1 / P;
    out["plus_pass_at_n"] = plus_pn / P;
  }
  ordered_json per = ordered_json::object();
  for (const SelectStrategy& s : strategies) {
    double sel = 0, plus_sel = 0;
    std::vector<double> hits, plus_hits;  // per problem: the pick passed (1) or not (0), for the intervals
    for (const SelectionPool& p : pools) {
      if (p.facts.empty()) continue;
      const std::size_t i = select_candidate(p.facts, s);
      sel += p.passed[i];
      plus_sel += i < p.plus_passed.size() && p.plus_passed[i];
      hits.push_back(p.passed[i] ? 1.0 : 0.0);
      plus_hits.push_back(i < p.plus_passed.size() && p.plus_passed[i] ? 1.0 : 0.0);
    }
    ordered_json r;
    r["selected_at_1"] = sel / P;
    r["selected_at_1_interval"] = interval_json(bootstrap_interval(hits));  // over problems (intervals.h)
    r["gap_closed"] = gap(sel / P, p1 / P, pn / P);
    if (has_plus) {
      r["plus_selected_at_1"] = plus_sel / P;
      r["plus_selected_at_1_interval"] = interval_json(bootstrap_interval(plus_hits));
      r["plus_gap_closed"] = gap(plus_sel / P, plus_p1 / P, plus_pn / P);
    }
    per[s.name] = r;
  }
  out["strategies"] = per;
  return out;
}

void print_selection(const ordered_json& s) {
  if (!s.contains("strategies")) return;
  for (const auto& item : s["strategies"].items()) {
    const std::string& name = item.key();
    const ordered_json& r = item.value();  // not a structured binding: clang 14 cannot capture one in a lambda
    auto interval = [&](const char* key) {
      if (const auto it = r.find(key); it != r.end() && it->is_array())
        std::printf(" (%g%% CI %.4f to %.4f)", 100 * IntervalSettings{}.level, (*it)[0].get<double>(), (*it)[1].get<double>());
    };
    std::printf("selected@1 %s: %.4f", name.c_str(), r["selected_at_1"].get<double>());
    interval("selected_at_1_interval");
    if (r["gap_closed"].is_number())
      std::printf(" (closes %.0f%% of the gap from pass@1 %.4f to pass@n %.4f)", 100 * r["gap_closed"].get<double>(), s["pass_at_1"].get<double>(),
                  s["pass_at_n"].get<double>());
    if (r.contains("plus_selected_at_1")) {
      std::printf("; plus %.4f", r["plus_selected_at_1"].get<double>());
      interval("plus_selected_at_1_interval");
    }
    std::printf("\n");
  }
}

std::vector<SelectionPool> gather_pools(const Sandbox& sandbox, const std::vector<const Problem*>& problems, const std::vector<json>& rows,
                                        int workers, double timeout_s) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < problems.size(); ++i) index[problems[i]->task_id] = i;
  std::vector<std::vector<const json*>> by_problem(problems.size());
  for (const json& r : rows)
    if (const auto it = index.find(r.value("task_id", "")); it != index.end() && (r.contains("completion") || r.contains("solution"))) by_problem[it->second].push_back(&r);
  // The problems' inputs first (one run each), then every candidate's run, all on the pool.
  std::vector<SelectionInputs> inputs(problems.size());
  std::mutex mu;
  {
    std::vector<VerifyJob> jobs;
    for (std::size_t p = 0; p < problems.size(); ++p)
      if (!by_problem[p].empty())
        jobs.push_back({"inputs " + std::to_string(p), [&, p](int worker) {
                          SelectionInputs in = selection_inputs(sandbox, *problems[p], worker);
                          std::lock_guard<std::mutex> lock(mu);
                          inputs[p] = std::move(in);
                          return std::vector<Verdict>{};
                        }});
    verify_all(std::move(jobs), workers);
  }
  std::vector<SelectionPool> pools(problems.size());
  std::map<std::pair<std::size_t, std::string>, CandidateFacts> facts;  // identical completions run once
  {
    std::vector<VerifyJob> jobs;
    for (std::size_t p = 0; p < problems.size(); ++p)
      for (const json* r : by_problem[p]) {
        const std::string completion = row_code(*problems[p], *r);  // the whole code
        jobs.push_back({std::to_string(p) + " " + completion, [&, p, completion](int worker) {
                          CandidateFacts f = candidate_evidence(sandbox, *problems[p], inputs[p], completion, worker, timeout_s);
                          std::lock_guard<std::mutex> lock(mu);
                          facts[{p, completion}] = std::move(f);
                          return std::vector<Verdict>{};
                        }});
      }
    verify_all(std::move(jobs), workers);
  }
  for (std::size_t p = 0; p < problems.size(); ++p)
    for (const json* r : by_problem[p]) {
      CandidateFacts f = facts[{p, row_code(*problems[p], *r)}];
      const double tokens = r->value("num_tokens", 0.0);
      f.mean_logprob = tokens > 0 && r->contains("logprob") && (*r)["logprob"].is_number() ? (*r)["logprob"].get<double>() / tokens : 0.0;
      pools[p].facts.push_back(std::move(f));
      pools[p].passed.push_back(r->value("passed", false));
      pools[p].plus_passed.push_back(r->value("plus_passed", false));
    }
  return pools;
}

}  // namespace bestofn
