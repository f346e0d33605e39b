#!/usr/bin/env python3
"""One page that decides: per CUDA path, whether its tests passed, ms per decode step at each
benched N, HumanEval tok/s, against the cost model's prediction, and which path wins at each N.

    python3 benchmarks/device_summary.py RUN_DIR                 # a device run's $OUT
    python3 benchmarks/device_summary.py RUN_DIR... --out DIR    # several runs, one summary

A run folder holds what benchmarks/device_check.sh leaves in $OUT: summary.json (its steps),
ctest_gpu.xml (JUnit: ctest's, merged or not, or GoogleTest's own), bench_cuda_8b.jsonl, and the
generate logs (step_logs.tar.gz, else device_check.log). With one run and no --out it writes
RUN_DIR/summary.md and adds "paths", "winners", "ab" and "generate" to RUN_DIR/summary.json; with
--out it writes DIR/summary.md and DIR/paths.json. Later runs override earlier ones (a test's last
result, a path's last bench line at each N).

A bench line's path: its "cuda_path" field, else its command's CUDA flags matched exactly to one of
the five flag sets below (--gemm-autotune, --json, --n, --steps and the other sizes ignored); any
other flag set is an A/B row under its flags. A path's tests: the gpu tests of the features it
uses (FEATURES); a path whose tests failed never wins. Python 3 standard library only.
"""

import argparse
import fnmatch
import io
import json
import re
import shlex
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

GRAPHS = ["--split-attention", "--fused-qkv", "--device-sampling", "--cuda-graphs"]
PATHS = {
    "reference": [],
    "graphs": GRAPHS,
    "prefix-gemm": GRAPHS + ["--cuda-prefix-gemm", "--paged-kv"],
    "cascade": ["--cascade-attention", "--paged-kv", "--fused-qkv", "--device-sampling", "--cuda-graphs"],
    "small-m": GRAPHS + ["--small-m-linear"],
}
PATH_SETS = {name: frozenset(flags) for name, flags in PATHS.items()}
HEADLINE_STEPS = 64  # the bench's timed steps in device_check.sh's headline; other counts are A/B rows

# Options that say how big or where, not which path: left out of a command's key (with their value).
IGNORED_VALUED = {
    "--model", "--device", "--n", "--prompt-len", "--steps", "--tokenizer", "--prompts", "-n", "--max-new-tokens",
    "--batch", "--temperature", "--out", "--seed", "--threads", "--top-p", "--top-k", "--min-p", "--synthetic",
    "--dtype", "--keep-model", "--kv-blocks", "--prefill-tokens", "--data-dir", "--tokens", "--repeat", "--seconds",
    "--stop", "--chat-format", "--chat-template", "--system", "--shard", "--timeout", "--workers",
}
IGNORED_FLAGS = {"--json", "--gemm-autotune", "-v", "--verbose", "--ids", "--chat"}
# Options that change the path and take a value: kept as --name=value.
KEPT_VALUED = {"--kv-cache", "--speculate", "--small-m-blocks-per-sm", "--quantize", "--cuda-path"}
DEFAULT_VALUES = {"--speculate=0", "--kv-cache=bf16", "--quantize=none"}
# The CUDA switches (src/backends/cuda_paths.cpp's table): what a bench line's cuda_path field names.
SWITCHES = {"--cuda-prefix-gemm", "--fused-qkv", "--gemm-autotune", "--paged-kv", "--device-sampling", "--split-attention",
            "--cuda-graphs", "--cascade-attention", "--small-m-linear", "--small-m-split", "--small-m-pdl"}

# The gpu tests by the feature they check (the first pattern that matches names it; the rest is
# "shared": every path runs it), and the features each path uses.
FEATURES = [
    ("cascade", ["GpuEngine.Cascade*", "*/cascade_*", "*/gather_queries_bf16_cuda", "*Cascade*"]),
    ("small-m", ["*SmallM*", "*/linear_fp8_small_m*", "*/linear_fp8_mma*"]),
    ("prefix", ["*/gather_prefix_queries_cuda", "*/prefix_softmax_cuda", "*/prefix_merge_cuda", "GpuPrefixMerge.*",
                "GpuEngine.Part2*"]),
    ("split", ["*/decode_attention_tiled_cuda", "*/decode_merge_cuda", "GpuDecodeAttention.Split*",
               "GpuDecodeAttention.Tiled*"]),
    ("graphs", ["GpuEngine.Graphs*", "GpuEngine.DeviceSampling*", "*/sample_token_cuda", "GpuSample.*"]),
]
PATH_FEATURES = {
    "reference": ["shared"],
    "graphs": ["shared", "split", "graphs"],
    "prefix-gemm": ["shared", "split", "graphs", "prefix"],
    "small-m": ["shared", "split", "graphs", "small-m"],
    "cascade": ["shared", "graphs", "cascade"],
}
# The features a path is "not run" without: its own.
PATH_OWN = {"reference": ["shared"], "graphs": ["split", "graphs"], "prefix-gemm": ["prefix"],
            "small-m": ["small-m"], "cascade": ["cascade"]}
# device_check.sh's test steps and loop configurations: a failed or timed-out one fails its feature
# even where no JUnit record says which test (a crash, a time-out, memcheck).
STEP_FEATURES = {
    ("gpu_ops", None): "shared", ("gpu_other", None): "shared", ("tests_quick", None): "shared",
    ("gpu_engine", "default"): "shared", ("gpu_engine", "cascade"): "cascade", ("gpu_engine", "small-m"): "small-m",
    ("gpu_engine", "speculate"): "shared", ("gpu_engine", "qwen"): "shared", ("gpu_engine", "rest"): "shared",
    ("gpu_other", "gpu-rest"): "shared", ("gpu_other", "cuda-host"): "shared",
    ("memcheck", "small-m"): "small-m", ("memcheck", "cascade+steps"): "cascade", ("memcheck", "sampler"): "graphs",
    ("memcheck", None): "shared", ("ctest_gpu", None): "shared",
}
HE_SHAPE = {"prompts": 164, "candidates": 1312, "max_new_tokens": 64}  # the 2026-11-30 throughput run
GENERATE_INFO = re.compile(
    r"(\d+) prompts, (\d+) candidates, (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s; prefill ([\d.]+) s, "
    r"decode ([\d.]+) s, (\d+) steps\)")


def feature_of(test):
    for name, patterns in FEATURES:
        if any(fnmatch.fnmatchcase(test, p) for p in patterns):
            return name
    return "shared"


def command_key(command):
    """The path-relevant flags of a command, in order, as 'flag' or 'flag=value' strings."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    key, i = [], 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("|", "||", "&&", ";") or t.startswith(">") or t.startswith("2>"):
            break
        if t.startswith("-") and len(t) > 1:
            name, _, inline = t.partition("=")
            if name in IGNORED_VALUED:
                i += 1 if inline else 2
                continue
            if name in IGNORED_FLAGS:
                i += 1
                continue
            if name in KEPT_VALUED:
                value = inline or (tokens[i + 1] if i + 1 < len(tokens) else "")
                i += 1 if inline else 2
                item = f"{name}={value}"
                if item not in DEFAULT_VALUES:
                    key.append(item)
                continue
            key.append(t)
        i += 1
    return key


def classify(command, cuda_path=None):
    """(path or None, label): the path a command ran, or its A/B label (the nearest path + extras).

    The flag set that ran: a bench line's cuda_path field ("graphs", "reference --fused-qkv": a path
    and the switches added to it; "custom": read the command) with the command's other options, else
    the command's --cuda-path NAME and switches, else its switches alone (before --cuda-path, no
    flag meant part 1)."""
    key = command_key(command)
    named = None
    if cuda_path and cuda_path != "custom":
        words = cuda_path.split()
        named = words[0]
        added = command_key(" ".join(["x"] + words[1:]))
        switches = set(added) | {k for k in key if k not in SWITCHES and not k.startswith("--cuda-path=")}
    else:
        named = next((k.split("=", 1)[1] for k in key if k.startswith("--cuda-path=")), None)
        switches = {k for k in key if not k.startswith("--cuda-path=")}
    flags = set(PATH_SETS.get(named, frozenset())) | switches
    for name, fs in PATH_SETS.items():
        if flags == fs:
            return name, name
    base = max((n for n, fs in PATH_SETS.items() if fs <= flags), key=lambda n: len(PATH_SETS[n]))
    order = [k for k in key if k in flags and not k.startswith("--cuda-path=")]
    order += sorted(flags - set(order))
    extras = [f for f in order if f not in PATH_SETS[base]]
    return None, f"{base} + {' '.join(extras)}"


# ---- reading a run ----

def read_junit(path):
    """({test name: "passed" | "failed" | "skipped" | "not run"}, {suite name: [status...]}) from a
    JUnit file (device_check.sh names each suite by its step and loop configuration)."""
    results, suites = {}, {}
    root = ET.parse(path).getroot()
    for suite in root.iter("testsuite"):
        suites[suite.get("name", "")] = []
        for case in suite.iter("testcase"):
            suites[suite.get("name", "")].append(case_status(case))
    for case in root.iter("testcase"):
        name, cls = case.get("name", ""), case.get("classname", "")
        full = name if (not cls or cls == name or name.startswith(cls + ".")) else f"{cls}.{name}"
        results[full] = case_status(case)
    return results, suites


def case_status(case):
    tags = {child.tag for child in case}
    status = case.get("status", "run")
    if "failure" in tags or "error" in tags or status == "fail":
        return "failed"
    if "skipped" in tags or case.get("result") == "skipped" or status == "skipped":
        return "skipped"
    if status in ("notrun", "disabled"):
        return "not run"
    return "passed"


def read_logs(run):
    """[(source, text)]: the steps' whole logs (step_logs.tar.gz), else the console log."""
    logs = []
    tar = run / "step_logs.tar.gz"
    if tar.is_file():
        with tarfile.open(tar) as t:
            for m in sorted(t.getmembers(), key=lambda m: m.name):
                if m.isfile() and m.name.endswith(".log"):
                    logs.append((m.name, t.extractfile(m).read().decode("utf-8", "replace")))
    if not logs and (run / "device_check.log").is_file():
        logs.append(("device_check.log", (run / "device_check.log").read_text(errors="replace")))
    return logs


def read_generate_runs(run):
    runs = []
    for source, text in read_logs(run):
        step = Path(source).stem if source != "device_check.log" else None
        command = None
        for line in text.splitlines():
            m = re.match(r"=== \[([^\]]+)\]", line)
            if m and source == "device_check.log":
                step = m.group(1)
            if re.search(r"bestofn\S*\s+(-v\s+)?generate\s", line):
                command = line.split(": bash -c ", 1)[-1] if ": bash -c " in line else line.lstrip("+ ").strip()
            g = GENERATE_INFO.search(line)
            if g and command:
                words = command.split()
                max_new = next((int(words[i + 1]) for i, w in enumerate(words[:-1]) if w == "--max-new-tokens"), None)
                path, label = classify(command)
                runs.append({
                    "run": run.name, "step": step, "command": command, "path": path, "label": label,
                    "prompts": int(g.group(1)), "candidates": int(g.group(2)), "tokens": int(g.group(3)),
                    "seconds": float(g.group(4)), "tok_per_s": float(g.group(5)), "prefill_s": float(g.group(6)),
                    "decode_s": float(g.group(7)), "steps": int(g.group(8)), "max_new_tokens": max_new,
                })
                command = None
    return runs


def read_run(run):
    data = {"name": run.name, "dir": run, "summary": None, "tests": {}, "suites": {}, "bench": [], "generate": []}
    if (run / "summary.json").is_file():
        data["summary"] = json.loads((run / "summary.json").read_text())
    if (run / "ctest_gpu.xml").is_file():
        data["tests"], data["suites"] = read_junit(run / "ctest_gpu.xml")
    if (run / "bench_cuda_8b.jsonl").is_file():
        for line in (run / "bench_cuda_8b.jsonl").read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                data["bench"].append(json.loads(line))
    data["generate"] = read_generate_runs(run)
    return data


# ---- deciding ----

def step_failures(summary, suites):
    """{feature: [why]} for a run's failed test steps and configurations that its JUnit records do
    not explain: no suite of that step (killed before ctest wrote it, memcheck), or one whose tests
    all passed. A skipped step (rc -1) says nothing."""
    failed = {}
    if not summary:
        return failed

    def unexplained(suite):
        return not any(st in ("failed", "skipped") for st in suites.get(suite, []))

    for s in summary.get("steps", []):
        name, rc = s.get("step"), s.get("rc", 0)
        configs = s.get("configs") or []
        for c in configs:
            if c.get("rc", 0) != 0 and unexplained(f"{name}/{c.get('config')}"):
                feature = STEP_FEATURES.get((name, c.get("config")))
                if feature:
                    failed.setdefault(feature, []).append(f"{name}/{c.get('config')} rc={c.get('rc')}")
        if rc not in (0, -1) and not any(c.get("rc", 0) != 0 for c in configs) and unexplained(name):
            feature = STEP_FEATURES.get((name, None))
            if feature:
                failed.setdefault(feature, []).append(f"{name} rc={rc}" + (f": {s['note']}" if s.get("note") else ""))
    return failed


def decide(runs, prediction=None):
    tests = {}
    for r in runs:  # later runs override
        tests.update(r["tests"])
    by_feature = {}
    for name, status in tests.items():
        by_feature.setdefault(feature_of(name), []).append((name, status))
    # A run's failed test steps count for a feature unless a later run ran that feature's tests again.
    step_failed = {}
    for i, r in enumerate(runs):
        for f, why in step_failures(r["summary"], r["suites"]).items():
            if any(feature_of(t) == f for later in runs[i + 1:] for t in later["tests"]):
                continue
            step_failed.setdefault(f, []).extend(f"{r['name']}: {w}" for w in why)

    paths, why_failed = {}, {}
    for path, features in PATH_FEATURES.items():
        bad = [n for f in features for n, s in by_feature.get(f, []) if s in ("failed", "skipped")]
        bad += [w for f in features for w in step_failed.get(f, [])]
        ran = any(s != "not run" for f in PATH_OWN[path] for _, s in by_feature.get(f, []))
        status = "failed" if bad else ("passed" if ran else "not run")
        paths[path] = {"tests": status, "ms_per_step": {}, "humaneval_tok_s": None}
        why_failed[path] = bad

    # Bench lines: a path's value at N from its last line with the headline step count, else its
    # last line at all (its step count shown); every other line is an A/B row.
    chosen, ab = {}, {}
    for r in runs:
        for line in r["bench"]:
            if "n" not in line or "ms_per_step" not in line:
                continue
            path, label = classify(line.get("command", ""), line.get("cuda_path"))
            steps = line.get("steps", HEADLINE_STEPS)
            n = str(line["n"])
            row = {"ms": line["ms_per_step"], "tok_s": line.get("tok_per_s"), "steps": steps, "run": r["name"],
                   "attention_ms": (line.get("split_ms_per_step") or {}).get("attention"),
                   "command": line.get("command", "")}
            if path and steps == HEADLINE_STEPS:
                chosen[(path, n)] = row
            else:
                if path:
                    chosen[(path, n, "other")] = row
                ab_label = label if steps == HEADLINE_STEPS else f"{label} (--steps {steps})"
                ab.setdefault(ab_label, {})[n] = row
    bench_rows = {}
    for path in PATHS:
        ns = {k[1] for k in chosen if k[0] == path}
        for n in sorted(ns, key=int):
            row = chosen.get((path, n)) or chosen.get((path, n, "other"))
            bench_rows[(path, n)] = row
            paths[path]["ms_per_step"][n] = round(row["ms"], 2)

    he_runs = [g for r in runs for g in r["generate"]]
    for g in he_runs:  # later runs override
        if g["path"] and (g["prompts"], g["candidates"], g["max_new_tokens"]) == tuple(HE_SHAPE.values()):
            paths[g["path"]]["humaneval_tok_s"] = round(g["tok_per_s"], 1)

    winners = {}
    all_n = sorted({n for p in paths.values() for n in p["ms_per_step"]}, key=int)
    for n in all_n:
        contenders = [(p["ms_per_step"][n], name) for name, p in paths.items()
                      if p["tests"] == "passed" and n in p["ms_per_step"]]
        if contenders:
            winners[n] = min(contenders)[1]
    return {"tests": tests, "by_feature": by_feature, "why_failed": why_failed, "paths": paths, "winners": winners,
            "bench_rows": bench_rows, "ab": ab, "generate": he_runs, "prediction": read_prediction(prediction)}


def read_prediction(path):
    """What benchmarks/results/2026-12-03-cost-model/prediction.json predicts, by path."""
    if not path or not Path(path).is_file():
        return None
    p = json.loads(Path(path).read_text())
    model_path = {"tiled": "graphs", "cascade": "cascade"}
    try:
        shown = str(Path(path).resolve().relative_to(Path(__file__).resolve().parent.parent))
    except ValueError:
        shown = str(path)
    out = {"file": shown, "ms_per_step": {}, "he8_step_ms": None, "best_of_100": [], "attention_n256_ms": {}}
    for c in p.get("calibration", []):
        what = c.get("what", "")
        m = re.match(r"bench n=(\d+)", what)
        if m and ("graphs" in what or "tiled" in what):
            out["ms_per_step"].setdefault("graphs", {})[m.group(1)] = (c.get("predicted_ms"), c.get("measured_ms"))
        elif what.startswith("HumanEval"):
            out["he8_step_ms"] = (c.get("predicted_ms"), c.get("measured_ms"), what)
    for pr in p.get("predictions", []):
        out["best_of_100"].append({"path": model_path.get(pr.get("path"), pr.get("path")), "scenario": pr.get("scenario"),
                                   "tok_per_s": pr.get("tok_per_s"), "mean_step_ms": pr.get("mean_step_ms"),
                                   "as_built": not pr.get("overrides")})
    for k, v in (p.get("attention_n256_prompt512_ms") or {}).items():
        path = "graphs" if k.startswith("tiled") else ("cascade" if k.startswith("cascade") else k)
        out["attention_n256_ms"].setdefault(path, []).append((k, v))
    return out


# ---- writing ----

def fmt(v, digits=2):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def page(runs, d):
    out = io.StringIO()
    w = out.write
    first = next((r["summary"] for r in runs if r["summary"]), None) or {}
    last = next((r["summary"] for r in reversed(runs) if r["summary"]), None) or {}
    w(f"# Device check: {last.get('device', first.get('device', '?'))}, {last.get('date', '?')}\n\n")
    w("Made by `benchmarks/device_summary.py` from " + ", ".join(f"`{r['name']}`" for r in runs) + ".\n\n")
    for r in runs:
        s = r["summary"]
        if not s:
            continue
        plan = s.get("plan") or {}
        head = f"## Run `{r['name']}`: commit {s.get('commit')}, {'ok' if s.get('ok') else '**failed**'}, {s.get('seconds')} s"
        if plan:
            head += f" (plan: {plan.get('expected_s')} s expected, limits {plan.get('limit_s')} s of {plan.get('budget_s')} s)"
        w(head + "\n\n| step | rc | seconds | expected | limit | note |\n|---|---|---|---|---|---|\n")
        for st in s.get("steps", []):
            note = st.get("note", "")
            bad = [f"{c['config']} rc={c['rc']}" for c in st.get("configs") or [] if c.get("rc", 0) != 0]
            if bad and "failed:" not in note:
                note = (note + "; " if note else "") + "failed: " + ", ".join(bad)
            w(f"| {st.get('step')} | {st.get('rc')} | {st.get('seconds')} | {st.get('expected_s', '-')} | "
              f"{st.get('limit_s', '-')} | {note.replace('|', '/')} |\n")
        w("\n")

    ns = sorted({n for p in d["paths"].values() for n in p["ms_per_step"]}, key=int)
    w("## CUDA paths: ms per decode step (synthetic Llama-3.1-8B FP8, prompt 512)\n\n")
    w("| path | flags | tests | " + " | ".join(f"N = {n}" for n in ns) + " | HumanEval 164 x 8 tok/s |\n")
    w("|---|---|---|" + "---|" * len(ns) + "---|\n")
    for name, p in d["paths"].items():
        cells = []
        for n in ns:
            row = d["bench_rows"].get((name, n))
            if not row:
                cells.append("-")
                continue
            cell = fmt(row["ms"])
            if d["winners"].get(n) == name:
                cell = f"**{cell}**"
            if row["steps"] != HEADLINE_STEPS:
                cell += f" ({row['steps']} steps)"
            cells.append(cell)
        flags = " ".join(PATHS[name]) or "(none)"
        w(f"| {name} | `{flags}` | {p['tests']} | " + " | ".join(cells) + f" | {fmt(p['humaneval_tok_s'], 1)} |\n")
    w("\nBold: the winner at that N, the fastest path whose tests passed (a failed path never wins).\n\n")
    w("## Winners\n\n| N | path | ms per step | next |\n|---|---|---|---|\n")
    for n in ns:
        ranked = sorted((p["ms_per_step"][n], name) for name, p in d["paths"].items()
                        if p["tests"] == "passed" and n in p["ms_per_step"])
        if not ranked:
            w(f"| {n} | none: no path benched here passed its tests | - | - |\n")
            continue
        nxt = f"{ranked[1][1]} {fmt(ranked[1][0])} ({ranked[1][0] / ranked[0][0]:.2f}x)" if len(ranked) > 1 else "-"
        w(f"| {n} | {ranked[0][1]} | {fmt(ranked[0][0])} | {nxt} |\n")
    w("\n")

    w("## Tests by path\n\n| path | tests | features | failed or skipped |\n|---|---|---|---|\n")
    for name, p in d["paths"].items():
        counts = []
        for f in PATH_FEATURES[name]:
            rows = d["by_feature"].get(f, [])
            passed = sum(1 for _, s in rows if s == "passed")
            counts.append(f"{f} {passed}/{len(rows)}")
        bad = d["why_failed"][name]
        w(f"| {name} | {p['tests']} | {', '.join(counts)} | {', '.join(bad[:8]) + (' ...' if len(bad) > 8 else '') or '-'} |\n")
    total = len(d["tests"])
    passed = sum(1 for s in d["tests"].values() if s == "passed")
    w(f"\n{passed} of {total} gpu tests passed (each test's last result).\n\n")

    if d["ab"]:
        w("## A/B rows (flag sets that are no path)\n\n| flags | run | " + " | ".join(f"N = {n}" for n in ns) +
          " | other N |\n|---|---|" + "---|" * len(ns) + "---|\n")
        for label, rows in d["ab"].items():
            cells = [fmt(rows[n]["ms"]) if n in rows else "-" for n in ns]
            other = ", ".join(f"{n}: {fmt(r['ms'])}" for n, r in sorted(rows.items(), key=lambda x: int(x[0])) if n not in ns)
            runs_of = sorted({r["run"] for r in rows.values()})
            w(f"| `{label}` | {', '.join(runs_of)} | " + " | ".join(cells) + f" | {other or '-'} |\n")
        w("\n")

    if d["generate"]:
        w("## Generate runs (HumanEval prompts)\n\n| run | step | path or flags | prompts x candidates | new tokens | "
          "tok/s | decode s | steps | ms per step |\n|---|---|---|---|---|---|---|---|---|\n")
        for g in d["generate"]:
            per = g["candidates"] // g["prompts"] if g["prompts"] else 0
            ms = 1000 * g["decode_s"] / g["steps"] if g["steps"] else None
            w(f"| {g['run']} | {g['step']} | {g['path'] or '`' + g['label'] + '`'} | {g['prompts']} x {per} | "
              f"{g['max_new_tokens']} | {fmt(g['tok_per_s'], 1)} | {fmt(g['decode_s'])} | {g['steps']} | {fmt(ms, 1)} |\n")
        w("\n")

    pr = d["prediction"]
    if pr:
        w(f"## Against the cost model (`{pr['file']}`)\n\n| what | path | predicted | measured here |\n|---|---|---|---|\n")
        for path, rows in pr["ms_per_step"].items():
            for n, (pred, _) in sorted(rows.items(), key=lambda x: int(x[0])):
                got = d["paths"].get(path, {}).get("ms_per_step", {}).get(n)
                w(f"| ms per step, N = {n} | {path} | {fmt(pred)} | {fmt(got)} |\n")
        for path, rows in pr["attention_n256_ms"].items():
            row = d["bench_rows"].get((path, "256"))
            got = row["attention_ms"] if row else None
            for k, v in rows:
                w(f"| attention ms at N = 256 ({k}) | {path} | {fmt(v)} | {fmt(got)} |\n")
        if pr["he8_step_ms"]:
            pred, meas, what = pr["he8_step_ms"]
            got = [f"{fmt(1000 * g['decode_s'] / g['steps'], 1)} (`{g['label']}`, {g['run']})" for g in d["generate"]
                   if (g["prompts"], g["candidates"], g["max_new_tokens"]) == tuple(HE_SHAPE.values()) and g["steps"]
                   and g["label"].split(" + ")[0] == "graphs"]
            w(f"| HumanEval 164 x 8 decode ms per step (calibration: {what}; measured there {fmt(meas)}) | graphs | "
              f"{fmt(pred)} | {', '.join(got) or '-'} |\n")
        best = [g for g in d["generate"] if g["candidates"] == 100 * g["prompts"] and g["max_new_tokens"] == 200]
        for b in pr["best_of_100"]:
            got = [f"{fmt(g['tok_per_s'], 0)} ({g['prompts']} prompts)" for g in best if g["path"] == b["path"]]
            label = "best-of-100 tok/s" + ("" if b["as_built"] else f": {b['scenario']}")
            w(f"| {label} | {b['path']} | {fmt(b['tok_per_s'], 0)} | {', '.join(got) if b['as_built'] and got else '-'} |\n")
        w("\n")
    return out.getvalue()


def paths_section(d):
    return {"paths": d["paths"], "winners": d["winners"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders ($OUT of benchmarks/device_check.sh), oldest first")
    ap.add_argument("--out", type=Path, help="write summary.md and paths.json here (needed with several runs)")
    default_prediction = Path(__file__).resolve().parent / "results/2026-12-03-cost-model/prediction.json"
    ap.add_argument("--prediction", type=Path, default=default_prediction, help="the cost model's prediction.json")
    a = ap.parse_args(argv)
    for r in a.runs:
        if not r.is_dir():
            print(f"device_summary.py: {r}: not a folder", file=sys.stderr)
            return 1
    if len(a.runs) > 1 and not a.out:
        print("device_summary.py: several runs need --out DIR", file=sys.stderr)
        return 1
    runs = [read_run(r) for r in a.runs]
    d = decide(runs, a.prediction)
    text = page(runs, d)
    section = paths_section(d)
    extra = {"ab": {k: {n: round(r["ms"], 2) for n, r in v.items()} for k, v in d["ab"].items()},
             "generate": [{k: g[k] for k in ("run", "step", "path", "label", "prompts", "candidates", "max_new_tokens",
                                             "tokens", "tok_per_s", "decode_s", "steps")} for g in d["generate"]]}
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "summary.md").write_text(text)
        first = next((r["summary"] for r in runs if r["summary"]), None) or {}
        last = next((r["summary"] for r in reversed(runs) if r["summary"]), None) or {}
        doc = {"date": last.get("date"), "device": last.get("device") or first.get("device"),
               "commit": last.get("commit"), "runs": [r["name"] for r in runs],
               "command": "python3 benchmarks/device_summary.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "humaneval_shape": {"prompts": HE_SHAPE["prompts"], "candidates": HE_SHAPE["candidates"] // HE_SHAPE["prompts"]}}
        doc.update(section)
        doc.update(extra)
        (a.out / "paths.json").write_text(json.dumps(doc, indent=2) + "\n")
        print(f"device_summary.py: wrote {a.out / 'summary.md'} and {a.out / 'paths.json'}")
    else:
        run = a.runs[0]
        (run / "summary.md").write_text(text)
        summary_file = run / "summary.json"
        doc = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
        doc.update(section)
        doc.update(extra)
        summary_file.write_text(json.dumps(doc) + "\n")
        print(f"device_summary.py: wrote {run / 'summary.md'} and the paths in {summary_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
