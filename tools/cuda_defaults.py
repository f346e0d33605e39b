#!/usr/bin/env python3
"""The CUDA defaults table, src/backends/default_paths.inc, from a device run's paths summary.

usage: tools/cuda_defaults.py SUMMARY_JSON > src/backends/default_paths.inc

`--device cuda` (and `auto` when it picks CUDA) runs, when no --cuda-path is given, the fastest
named path that passed its tests on the device run this table comes from (src/backends/cuda_paths.cpp
reads it; docs/gpu.md). The summary (benchmarks/device_summary.py writes one per run) is

  {"date": "2026-11-30", "device": "NVIDIA H200", "commit": "bf1e9c789877",
   "paths": {"graphs": {"tests": "passed" | "failed" | "not run",
                        "ms_per_step": {"1": 5.18, "64": 15.4},     # candidates on one prompt
                        "humaneval_tok_s": 9310.3 | null}, ...},
   "winners": {"1": "graphs", ...}}

and, optionally (defaults below):
  "capability": "9.0"                       the device's (else known from its name: H100, H200)
  "verified": {"weights": [...], "kv": [...]}  what the run's tests verified the paths on
  "humaneval_shape": {"prompts": 164, "candidates": 8}  the shape of humaneval_tok_s (one batch)

The table: one row per measured shape (candidates of one prompt in a step, prompts in a step),
ranking the paths whose tests passed and that measured there, fastest first; a path whose tests
failed or did not run is in no row, so never a default. The engine takes the row nearest to a
run's shape and the first path of it that accepts the run, else `reference`.

Writes the table to stdout; a summary it cannot read is one line on stderr and exit 1; bad
arguments, exit 2. A `winners` entry that is not the row's first path is reported on stderr (the
table follows the tests and the numbers). Python 3 standard library only.
"""
import json
import math
import re
import sys

# The named paths of src/backends/cuda_paths.cpp (test_cuda_paths checks the table names no other).
KNOWN_PATHS = ("reference", "graphs", "prefix-gemm", "cascade", "small-m")
TESTS = ("passed", "failed", "not run")
# Compute capability by device name, for a summary that does not say it.
CAPABILITY = (("GH200", "9.0"), ("H200", "9.0"), ("H100", "9.0"), ("H800", "9.0"))
# What the gpu tests of 2026-11-30 ran the part-2 paths on (tests/test_gpu_engine.cpp:
# Llama260kMatchesTheCpuEngine on F32, Part2PathsMatchPart1OnFp8Models on FP8; BF16 weights only on
# the part-1 path, FP8 KV not at all): a summary without "verified" is taken to say no more.
VERIFIED = {"weights": ["fp8", "f32"], "kv": ["bf16"]}
WEIGHTS, KV = ("fp8", "bf16", "f32"), ("bf16", "fp8")
# benchmarks/device_check.sh's humaneval_gen steps: 164 prompts, -n 8, --batch 1312.
HUMANEVAL = {"prompts": 164, "candidates": 8}
MAX_RANKING = 6  # DefaultRow::ranking's size in src/backends/cuda_paths.cpp


class Bad(Exception):
    """A summary that cannot make a table: its message is the one line printed."""


def number(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise Bad(f"{where}: expected a positive number, got {json.dumps(value)}")
    return float(value)


def count(text, where):
    if not isinstance(text, str) or not re.fullmatch(r"[1-9][0-9]{0,5}", text):
        raise Bad(f"{where}: expected a candidate count such as \"64\", got {json.dumps(text)}")
    return int(text)


def text_field(summary, key):
    value = summary.get(key)
    if not isinstance(value, str) or not value.strip() or '"' in value or "\\" in value:
        raise Bad(f"\"{key}\": expected a string without quotes or backslashes, got {json.dumps(value)}")
    return value.strip()


def capability_of(summary, device):
    if "capability" in summary:
        cap = summary["capability"]
        if not isinstance(cap, str) or not re.fullmatch(r"[1-9][0-9]?\.[0-9]", cap):
            raise Bad(f"\"capability\": expected major.minor such as \"9.0\", got {json.dumps(cap)}")
        return cap
    for name, cap in CAPABILITY:
        if name in device:
            return cap
    raise Bad(f"\"device\": {device} is not a device whose compute capability this script knows; add \"capability\": \"X.Y\"")


def verified_of(summary):
    verified = summary.get("verified", VERIFIED)
    if not isinstance(verified, dict):
        raise Bad("\"verified\": expected {\"weights\": [...], \"kv\": [...]}")
    out = {}
    for key, allowed in (("weights", WEIGHTS), ("kv", KV)):
        items = verified.get(key)
        if not isinstance(items, list) or any(item not in allowed for item in items):
            raise Bad(f"\"verified\".\"{key}\": expected a list of {', '.join(allowed)}, got {json.dumps(items)}")
        out[key] = [item for item in allowed if item in items]
    return out


def humaneval_shape_of(summary):
    shape = summary.get("humaneval_shape", HUMANEVAL)
    if not isinstance(shape, dict):
        raise Bad("\"humaneval_shape\": expected {\"prompts\": P, \"candidates\": N}")
    return {key: count(str(shape.get(key)), f"\"humaneval_shape\".\"{key}\"") for key in ("prompts", "candidates")}


def read_paths(summary):
    paths = summary.get("paths")
    if not isinstance(paths, dict) or not paths:
        raise Bad("\"paths\": expected an object of paths by name")
    out = {}
    for name, path in paths.items():
        where = f"\"paths\".\"{name}\""
        if name not in KNOWN_PATHS:
            raise Bad(f"{where}: not a path of --cuda-path ({', '.join(KNOWN_PATHS)})")
        if not isinstance(path, dict) or path.get("tests") not in TESTS:
            raise Bad(f"{where}.\"tests\": expected one of {', '.join(TESTS)}")
        ms = path.get("ms_per_step", {})
        if not isinstance(ms, dict):
            raise Bad(f"{where}.\"ms_per_step\": expected an object of ms by candidate count")
        tok_s = path.get("humaneval_tok_s")
        out[name] = {
            "passed": path["tests"] == "passed",
            "ms": {count(n, f"{where}.\"ms_per_step\""): number(v, f"{where}.\"ms_per_step\".\"{n}\"") for n, v in ms.items()},
            "tok_s": None if tok_s is None else number(tok_s, f"{where}.\"humaneval_tok_s\""),
        }
    return out


def figure(value):
    """A measured number as the table prints it: at most 4 significant digits, no trailing zeros."""
    return f"{value:.4g}" if value < 1e4 else f"{value:.0f}"


def rank(paths, measure, reverse):
    """Names of the passed paths with a number, best first (ties: KNOWN_PATHS's order)."""
    named = [(measure(p), KNOWN_PATHS.index(n), n) for n, p in paths.items() if p["passed"] and measure(p) is not None]
    named.sort(key=lambda t: (-t[0] if reverse else t[0], t[1]))
    return [n for _, _, n in named][:MAX_RANKING], named


def rows_of(paths, humaneval):
    rows = []
    counts = sorted({n for p in paths.values() if p["passed"] for n in p["ms"]})
    for n in counts:
        order, named = rank(paths, lambda p, n=n: p["ms"].get(n), reverse=False)
        numbers = ", ".join(f"{name} {figure(v)}" for v, _, name in sorted(named, key=lambda t: (t[0], t[1])))
        rows.append((n, 1, order, f"ms/step, {n} candidate{'s' if n > 1 else ''} on one prompt: {numbers}"))
    order, named = rank(paths, lambda p: p["tok_s"], reverse=True)
    if order:
        numbers = ", ".join(f"{name} {figure(v)}" for v, _, name in sorted(named, key=lambda t: (-t[0], t[1])))
        rows.append((humaneval["candidates"], humaneval["prompts"], order,
                     f"tok/s, HumanEval ({humaneval['prompts']} prompts x {humaneval['candidates']} in one batch): {numbers}"))
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows


def check_winners(summary, rows):
    winners = summary.get("winners", {})
    if not isinstance(winners, dict):
        raise Bad("\"winners\": expected an object of paths by candidate count")
    first = {r[0]: r[2][0] for r in rows if r[1] == 1 and r[2]}
    for n, name in sorted(winners.items(), key=lambda kv: kv[0]):
        c = count(n, "\"winners\"")
        if first.get(c) != name:
            print(f"cuda_defaults.py: note: \"winners\".\"{n}\" is {name}; the table takes {first.get(c, 'no path')} there "
                  f"(the fastest path whose tests passed)", file=sys.stderr)


def table(summary, source):
    if not isinstance(summary, dict):
        raise Bad("expected a JSON object")
    date = text_field(summary, "date")[:10]
    device, commit = text_field(summary, "device"), text_field(summary, "commit")
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise Bad(f"\"commit\": expected a git commit (7 to 40 hex digits), got {commit}")
    major, minor = capability_of(summary, device).split(".")
    verified = verified_of(summary)
    paths = read_paths(summary)
    rows = rows_of(paths, humaneval_shape_of(summary))
    check_winners(summary, rows)
    never = [n for n, p in paths.items() if not p["passed"]]
    out = [
        f"// Generated by tools/cuda_defaults.py from {source}; do not edit. Regenerate:",
        f"//   tools/cuda_defaults.py SUMMARY_JSON > src/backends/default_paths.inc  (docs/gpu.md, \"The defaults table\")",
        "// Included by src/backends/cuda_paths.cpp. The device run the defaults come from:",
        f"constexpr DefaultsRun kRun = {{\"{date}\", \"{device}\", \"{commit[:7]}\", {int(major) * 10 + int(minor)}}};",
        "// The weights and KV caches its tests ran the paths on.",
        "constexpr const char* kVerifiedWeights[] = {" + ", ".join(f"\"{w}\"" for w in verified["weights"] or ["none"]) + "};",
        "constexpr const char* kVerifiedKv[] = {" + ", ".join(f"\"{k}\"" for k in verified["kv"] or ["none"]) + "};",
        "// Per measured shape (candidates of one prompt in a step, prompts in a step): the paths whose",
        "// tests passed, fastest first, and what they measured there.",
    ]
    if never:
        out.append(f"// Never a default (tests not passed): {', '.join(never)}.")
    out.append("constexpr DefaultRow kRows[] = {")
    for c, p, order, measured in rows or [(1, 1, [], "no path passed its tests")]:
        out.append(f"    {{{c}, {p}, {{{', '.join(chr(34) + n + chr(34) for n in order)}}}, \"{measured}\"}},")
    out.append("};")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print("cuda_defaults.py: usage: tools/cuda_defaults.py SUMMARY_JSON > src/backends/default_paths.inc (--help: the format)",
              file=sys.stderr)
        return 2
    source = argv[1]
    try:
        with open(source, encoding="utf-8") as f:
            summary = json.load(f)
        sys.stdout.write(table(summary, source))
    except (OSError, ValueError) as e:
        print(f"cuda_defaults.py: {source}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except Bad as e:
        print(f"cuda_defaults.py: {source}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
