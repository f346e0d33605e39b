#!/usr/bin/env python3
"""Registers and spills of every CUDA kernel, checked against kernels/resource_budget.json.

Compiles each given .cu to a cubin for one architecture with `nvcc --resource-usage` (ptxas's
report: registers, spill stores/loads, stack frame, shared memory per entry function), groups the
entry functions by kernel name (namespaces, template arguments and parameters dropped, so every
instantiation of a template counts against its one budget) and fails when

  - a kernel uses more registers than its budget's max_registers,
  - it spills more bytes (stores or loads) than max_spill_bytes (0 unless the entry says why),
  - its stack frame is over max_stack_bytes (default 0 where max_spill_bytes is 0),
  - a kernel has no budget entry (a new kernel states its budget when it lands), or an entry names
    no kernel that was compiled (a stale entry).

Run by ctest (test `kernel_resources`, label unit) when the CUDA backend is built; the GPU is not
needed, only nvcc. Usage:
  check_kernel_resources.py --nvcc NVCC --arch 90a --budget kernels/resource_budget.json \
      [--flags "-I... -D..."] [--file-flags FILE=FLAGS ...] FILE.cu ...
Prints one line per kernel; --json prints the measured table instead (to write a new budget).
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"Compiling entry function '([^']+)'")
SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")


def strip_templates(name):
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def kernel_name(mangled):
    """`_ZN7bestofn4cuda13kernel_argmaxEPKfiPi` -> `kernel_argmax`."""
    demangled = subprocess.run(["c++filt", mangled], capture_output=True, text=True, check=True).stdout.strip()
    # Drop the parameter list (the last top-level parenthesis group), the templates, the return type.
    name = strip_templates(demangled.replace("(anonymous namespace)::", ""))
    name = name.split("(", 1)[0].strip()
    name = name.split(" ")[-1]
    return name.split("::")[-1]


def parse(report):
    """ptxas --resource-usage text -> {mangled: {registers, spill_stores, spill_loads, stack}}."""
    entries, current = {}, None
    for line in report.splitlines():
        m = ENTRY.search(line)
        if m:
            current = m.group(1)
            entries[current] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0}
            continue
        if current is None:
            continue
        m = SPILL.search(line)
        if m:
            entries[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = USED.search(line)
        if m:
            entries[current]["registers"] = int(m.group(1))
    return entries


def measure(args):
    table = {}  # kernel name -> worst over its instantiations, with the file it came from
    file_flags = {}
    for spec in args.file_flags or []:
        path, _, flags = spec.partition("=")
        file_flags[os.path.realpath(path)] = shlex.split(flags)
    with tempfile.TemporaryDirectory() as tmp:
        def compile_one(i, cu):
            cmd = [args.nvcc, "-std=c++20", f"-arch=sm_{args.arch}", "-cubin", "--resource-usage", "-o",
                   os.path.join(tmp, f"{i}.cubin")] + shlex.split(args.flags or "") + file_flags.get(os.path.realpath(cu), []) + [cu]
            return cu, subprocess.run(cmd, capture_output=True, text=True)
        # The files compile side by side (one nvcc per core): the test is CI's last to finish.
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = list(pool.map(lambda a: compile_one(*a), enumerate(args.files)))
        for cu, r in results:
            if r.returncode != 0:
                sys.exit(f"check_kernel_resources: {cu}: nvcc failed ({r.returncode}):\n{r.stderr[-4000:]}")
            for mangled, res in parse(r.stdout + r.stderr).items():
                name = kernel_name(mangled)
                worst = table.setdefault(name, {"registers": 0, "spill_bytes": 0, "stack": 0, "file": os.path.basename(cu),
                                                "instantiations": 0})
                worst["registers"] = max(worst["registers"], res["registers"])
                worst["spill_bytes"] = max(worst["spill_bytes"], res["spill_stores"], res["spill_loads"])
                worst["stack"] = max(worst["stack"], res["stack"])
                worst["instantiations"] += 1
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--arch", default="90a")
    ap.add_argument("--budget", required=True)
    ap.add_argument("--flags", default="")
    ap.add_argument("--file-flags", action="append", help="FILE=FLAGS: extra flags for one file")
    ap.add_argument("--json", action="store_true", help="print the measured table as JSON and exit 0")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()

    table = measure(args)
    if args.json:
        print(json.dumps(table, indent=2, sort_keys=True))
        return 0
    try:
        with open(args.budget) as f:
            budget = json.load(f)["kernels"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"check_kernel_resources: {args.budget}: {e}")

    problems = []
    for name, got in sorted(table.items()):
        b = budget.get(name)
        if b is None:
            problems.append(f"{name} ({got['file']}): no budget in {os.path.basename(args.budget)} "
                            f"(measured {got['registers']} registers, {got['spill_bytes']} spill bytes)")
            continue
        max_regs = b["max_registers"]
        max_spill = b.get("max_spill_bytes", 0)
        max_stack = b.get("max_stack_bytes", 0 if max_spill == 0 else 1 << 20)
        verdict = "ok"
        if got["registers"] > max_regs:
            verdict = "OVER"
            problems.append(f"{name}: {got['registers']} registers, budget {max_regs}")
        if got["spill_bytes"] > max_spill:
            verdict = "OVER"
            problems.append(f"{name}: {got['spill_bytes']} spill bytes, budget {max_spill}")
        if got["stack"] > max_stack:
            verdict = "OVER"
            problems.append(f"{name}: {got['stack']} bytes of stack frame, budget {max_stack}")
        print(f"{verdict:4} {name}: {got['registers']}/{max_regs} registers, {got['spill_bytes']}/{max_spill} spill bytes, "
              f"stack {got['stack']}, {got['instantiations']} instantiation(s) in {got['file']}")
    for name in sorted(set(budget) - set(table)):
        problems.append(f"{name}: budget entry for a kernel that was not compiled (remove it)")
    for p in problems:
        print(f"check_kernel_resources: {p}", file=sys.stderr)
    print(f"{len(table)} kernels, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
