#!/usr/bin/env python3
"""Tokenizer speed: bestofn's C++ tokenizer against HF `tokenizers`, measured in the same run.

    pip install tokenizers
    python3 benchmarks/tokenizer_bench.py [--bestofn-bench build/benchmarks/bench_tokenizer]
                                          [--out FILE] [--repeat 5] [--tokenizer llama3 ...]

Input: the HumanEval prompts and canonical solutions from ../shared (override with
BESTOFN_SHARED), in file order, prompt then solution per problem: 328 pieces. "whole" is the
pieces joined with "\\n" (about 300 KB). Both sides encode without special tokens (no BOS).
MB/s means 1e6 bytes of UTF-8 input per second; "pieces" counts the sum of the piece lengths,
"whole" the length of the joined text.

Contract with the C++ bench (the executable given by --bestofn-bench):
    PATH --tokenizer TOKENIZER_JSON --text FILE --repeat N
  FILE is JSONL: each line is one JSON string, one piece. The program encodes each piece in turn
  ("pieces") and the pieces joined with "\\n" as one string ("whole"), each timed as the best of N
  runs after a warmup, single-threaded, add_special_tokens off, and prints one JSON line per mode
  on stdout containing at least {"mode": "pieces"|"whole", "mb_per_s": float}; it may add
  "bytes" (checked against ours) and "tokens" (the total token count, checked against HF).
  Other stdout lines that are not JSON objects with a "mode" are ignored.

Output: one JSON line per (tokenizer, mode) on stdout, and in --out when given. Exit status 1,
with a JSON error line, when the executable is missing or fails.
"""
import os

# HF must be single-threaded: set before tokenizers is imported.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from bench_common import cpu_model, emit, git_commit, read_jsonl_gz  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BESTOFN_SHARED", REPO.parent / "shared"))
DEFAULT_BENCH = "build/benchmarks/bench_tokenizer"
TOKENIZERS = ("llama3", "mistral")
MODES = ("pieces", "whole")



def fail(message, **fields):
    emit({"bench": "tokenizer", "error": message, **fields})
    sys.exit(1)




def humaneval_pieces():
    path = SHARED / "data" / "humaneval" / "HumanEval.jsonl.gz"
    problems = read_jsonl_gz(path)
    if problems is None:
        fail(f"missing {path}")
    return [piece for p in problems for piece in (p["prompt"], p["canonical_solution"])]


def best_of(fn, repeat):
    fn()  # warmup
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def hf_measure(tok, pieces, whole, repeat):
    """{mode: (seconds, tokens)}: best of `repeat` after a warmup, one thread."""
    def enc_pieces():
        return sum(len(tok.encode(p, add_special_tokens=False).ids) for p in pieces)

    def enc_whole():
        return len(tok.encode(whole, add_special_tokens=False).ids)

    return {"pieces": (best_of(enc_pieces, repeat), enc_pieces()),
            "whole": (best_of(enc_whole, repeat), enc_whole())}


def run_bestofn(exe, tokenizer_json, text_file, repeat):
    cmd = [str(exe), "--tokenizer", str(tokenizer_json), "--text", str(text_file), "--repeat", str(repeat)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        fail(f"cannot run {exe}: {e}", bestofn_command=shlex.join(cmd))
    if r.returncode != 0:
        fail(f"{exe} exited with {r.returncode}", bestofn_command=shlex.join(cmd), stderr=r.stderr[-2000:])
    results = {}
    for line in r.stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("mode") in MODES and "mb_per_s" in obj:
            results[obj["mode"]] = obj
    missing = [m for m in MODES if m not in results]
    if missing:
        fail(f"{exe} printed no result for mode(s) {missing}", bestofn_command=shlex.join(cmd),
             stdout=r.stdout[-2000:])
    return cmd, results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bestofn-bench", default=DEFAULT_BENCH,
                    help=f"the C++ bench executable (default {DEFAULT_BENCH}, relative to the repo root)")
    ap.add_argument("--out", help="also write the result lines to this file")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement, best kept (default 5)")
    ap.add_argument("--tokenizer", action="append", choices=TOKENIZERS,
                    help="measure only this tokenizer (repeatable; default: all)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    exe = Path(args.bestofn_bench)
    if not exe.is_absolute() and args.bestofn_bench == DEFAULT_BENCH:
        exe = REPO / exe
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        fail(f"bestofn tokenizer bench not found or not executable: {exe}", bestofn_bench=str(exe))

    names = args.tokenizer or list(TOKENIZERS)
    tok_paths = {n: SHARED / "tokenizers" / n / "tokenizer.json" for n in names}
    for n, p in tok_paths.items():
        if not p.is_file():
            fail(f"missing {p}", tokenizer=n)

    pieces = humaneval_pieces()
    whole = "\n".join(pieces)
    nbytes = {"pieces": sum(len(p.encode("utf-8")) for p in pieces), "whole": len(whole.encode("utf-8"))}
    common = {
        "hf_tokenizers_version": tokenizers.__version__,
        "machine": {"node": platform.node(), "cpu": cpu_model()},
        "commit": git_commit(REPO),
        "command": shlex.join([Path(sys.executable).name] + sys.argv),
    }

    out_file = open(args.out, "w", encoding="utf-8") if args.out else None
    try:
        with tempfile.TemporaryDirectory(prefix="bestofn_tokbench_") as tmp:
            text_file = Path(tmp) / "humaneval_pieces.jsonl"
            with open(text_file, "w", encoding="utf-8") as f:
                for p in pieces:
                    f.write(json.dumps(p, ensure_ascii=False) + "\n")
            for name in names:
                tok = Tokenizer.from_file(str(tok_paths[name]))
                hf = hf_measure(tok, pieces, whole, args.repeat)
                cmd, ours = run_bestofn(exe, tok_paths[name], text_file, args.repeat)
                for mode in MODES:
                    hf_s, hf_tokens = hf[mode]
                    hf_mbps = nbytes[mode] / hf_s / 1e6
                    mbps = float(ours[mode]["mb_per_s"])
                    line = {
                        "bench": "tokenizer", "tokenizer": name, "mode": mode, "bytes": nbytes[mode],
                        "bestofn_mb_per_s": round(mbps, 3), "hf_mb_per_s": round(hf_mbps, 3),
                        "ratio": round(mbps / hf_mbps, 4), "hf_tokens": hf_tokens,
                    }
                    if "tokens" in ours[mode]:
                        line["bestofn_tokens"] = ours[mode]["tokens"]
                        line["tokens_match"] = ours[mode]["tokens"] == hf_tokens
                    if "bytes" in ours[mode] and ours[mode]["bytes"] != nbytes[mode]:
                        line["bestofn_bytes"] = ours[mode]["bytes"]  # a different input: flag it
                    line.update(common)
                    line["bestofn_command"] = shlex.join(cmd)
                    emit(line, out_file)
    finally:
        if out_file is not None:
            out_file.close()


if __name__ == "__main__":
    main()
