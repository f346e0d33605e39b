#!/usr/bin/env python3
"""--speculate on the CPU: tok/s with and without drafts from sibling candidates, in one run.

HumanEval prompts (the first --problems), -n candidates each, T 0.8 / top-p 0.95, HumanEval's stop
strings. For each --batch, the runs of every K in --ks alternate --reps times (so that a busy
machine slows each alike); a line per (batch, K) with the median wall tok/s, the acceptance rate
and tokens per candidate step from generate's log, then a line per batch with the speedup over K 0.
Every run's JSONL must equal K 0's, byte for byte (the candidates do not change).

  python3 benchmarks/speculate.py --bestofn build/bestofn --model .models/smollm2-135m-instruct \\
      --data /work/shared/data/humaneval/HumanEval.jsonl.gz --problems 20 --batches 1,8,16 --ks 0,4
"""
import argparse, gzip, json, re, statistics, subprocess, sys, tempfile, time
from pathlib import Path

STOPS = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
LOG = re.compile(r"(\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s; prefill ([\d.]+) s, decode ([\d.]+) s, (\d+) steps\)")
SPEC = re.compile(r"(\d+) of (\d+) drafted tokens taken \(([\d.]+)\), ([\d.]+) tokens per candidate step; "
                  r"draft lookups ([\d.]+) s, sampling ([\d.]+) s")


def run(a, prompts, out, batch, k):
    cmd = [a.bestofn, "-v", "generate", "--model", a.model, "--prompts", str(prompts), "-n", str(a.n), "--temperature", "0.8",
           "--top-p", "0.95", "--seed", "1", "--max-new-tokens", str(a.max_new_tokens), "--batch", str(batch), "--speculate", str(k),
           "--device", "cpu", "--out", str(out)]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    for s in STOPS:
        cmd += ["--stop", s]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"speculate.py: {' '.join(cmd)} failed: {r.stderr.strip().splitlines()[-1:]}")
    m = LOG.search(r.stderr)
    row = {"tokens": int(m[1]), "seconds": float(m[2]), "tok_per_s": float(m[3]), "prefill_s": float(m[4]),
           "decode_s": float(m[5]), "steps": int(m[6]), "process_s": time.monotonic() - t0}
    if s := SPEC.search(r.stderr):
        row.update(accepted=int(s[1]), drafted=int(s[2]), acceptance_rate=float(s[3]), tokens_per_candidate_step=float(s[4]),
                   draft_s=float(s[5]), sample_s=float(s[6]))
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bestofn", default="build/bestofn")
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="HumanEval.jsonl(.gz)")
    p.add_argument("--problems", type=int, default=20)
    p.add_argument("-n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batches", default="1,8,16")
    p.add_argument("--ks", default="0,4")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    opener = gzip.open if a.data.endswith(".gz") else open
    with opener(a.data, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()][: a.problems]
    ks = [int(k) for k in a.ks.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"id": r["task_id"], "prompt": r["prompt"]}) + "\n" for r in rows))
        for batch in (int(b) for b in a.batches.split(",")):
            got = {k: [] for k in ks}
            for rep in range(a.reps):
                for k in ks:
                    out = Path(tmp) / f"b{batch}_k{k}_r{rep}.jsonl"
                    got[k].append(run(a, prompts, out, batch, k))
                    first = Path(tmp) / f"b{batch}_k{ks[0]}_r0.jsonl"
                    if out.read_bytes() != first.read_bytes():
                        sys.exit(f"speculate.py: --speculate {k} --batch {batch} changed the candidates")
            med = {}
            for k in ks:
                runs = got[k]
                med[k] = statistics.median(r["tok_per_s"] for r in runs)
                line = {"bench": "speculate", "batch": batch, "speculate": k, "problems": len(rows), "n": a.n,
                        "max_new_tokens": a.max_new_tokens, "tok_per_s": med[k], "runs": runs}
                for key in ("acceptance_rate", "tokens_per_candidate_step"):
                    if key in runs[0]:
                        line[key] = statistics.median(r[key] for r in runs)
                print(json.dumps(line), flush=True)
            for k in ks[1:]:
                print(json.dumps({"bench": "speculate_speedup", "batch": batch, "speculate": k, "speedup": med[k] / med[ks[0]],
                                  "same_candidates": True}), flush=True)


if __name__ == "__main__":
    main()
