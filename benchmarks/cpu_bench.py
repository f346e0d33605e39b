#!/usr/bin/env python3
"""CPU benchmark: bestofn best-of-N decoding against llama.cpp, on the same weights, in one run.

  1. `bestofn bench --synthetic bench-100m --dtype fp8 --device cpu --n 1,2,...` times prefill and
     decode for each N and keeps the synthetic model it made (--keep-model);
  2. that model is converted to GGUF (benchmarks/convert_gguf.py, Q8_0 by default) and
     llama-cpp-python times the same prompt length and decode steps for one sequence;
  3. one JSON line per bestofn configuration, one llama.cpp line and a summary line go to stdout
     (and --out FILE).

  python benchmarks/cpu_bench.py --bestofn build/bestofn --steps 128 --out benchmarks/results/cpu.jsonl

Targets (docs/development.md): tok/s at N=16 >= 6x tok/s at N=1; bestofn N=1 >= llama.cpp N=1.
The llama.cpp side uses Q8_0 (1.06 bytes per weight, embeddings and the output tensor included) as
the closest GGUF match to bestofn's FP8 weights; --gguf-type f16 is there too. bestofn keeps the
checkpoint's BF16 lm_head unless --quantize-lm-head (then FP8, as Q8_0 has its output tensor in
8 bits). Threads: 2 on both sides.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import convert_gguf  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}"


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_bestofn(args, model_dir: Path) -> list[dict]:
    cmd = [str(args.bestofn), "bench", "--synthetic", args.shape, "--dtype", "fp8", "--device", "cpu",
           "--n", args.n, "--prompt-len", str(args.prompt_len), "--steps", str(args.steps),
           "--threads", str(args.threads), "--json", "--keep-model", str(model_dir)]
    if args.quantize_lm_head:
        cmd.append("--quantize-lm-head")
    print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # stderr passes through
    if proc.returncode != 0:
        raise SystemExit(f"bestofn bench failed with exit code {proc.returncode}")
    rows = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if "n" in row and "tok_per_s" in row:
            row.setdefault("side", "bestofn")
            row.setdefault("command", shlex.join(cmd))
            rows.append(row)
    if not rows:
        raise SystemExit("bestofn bench printed no JSON lines with 'n' and 'tok_per_s'")
    if not (model_dir / "config.json").exists():
        raise SystemExit(f"bestofn bench --keep-model {model_dir}: no config.json there")
    return rows


def time_llamacpp(gguf_path: Path, vocab_size: int, args) -> dict:
    """Prefill of prompt_len random ids, then `steps` greedy decode steps of one sequence, each fed
    with llm.eval([tok]). Best of `repeats` runs after one warmup run."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=args.n_ctx, n_batch=512, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, verbose=False)
    rng = np.random.default_rng(args.seed)
    prompt = rng.integers(3, vocab_size, size=args.prompt_len).tolist()  # no BOS: ids only
    if args.prompt_len + args.steps > args.n_ctx:
        raise SystemExit(f"--prompt-len + --steps = {args.prompt_len + args.steps} exceeds n_ctx {args.n_ctx}")

    def one_run() -> tuple[float, float]:
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for _ in range(args.steps):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))  # greedy on the last logits
            llm.eval([tok])
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3 / args.steps

    one_run()  # warmup
    runs = [one_run() for _ in range(args.repeats)]
    prefill_ms = min(r[0] for r in runs)
    ms_per_step = min(r[1] for r in runs)
    llm.close() if hasattr(llm, "close") else None
    return {"prefill_ms": round(prefill_ms, 3), "ms_per_step": round(ms_per_step, 4),
            "tok_per_s": round(1e3 / ms_per_step, 2), "runs_ms_per_step": [round(r[1], 4) for r in runs],
            "llama_cpp_python": getattr(llama_cpp, "__version__", "unknown")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bestofn", type=Path, default=REPO / "build" / "bestofn", help="bestofn binary")
    ap.add_argument("--shape", default="bench-100m", help="synthetic preset")
    ap.add_argument("--n", default="1,2,4,8,16,32", help="best-of-N values for bestofn")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=128, help="decode steps per configuration")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf-type", choices=["q8_0", "f16"], default="q8_0")
    ap.add_argument("--quantize-lm-head", action="store_true",
                    help="bestofn bench --quantize-lm-head: the lm_head in FP8 as llama.cpp's Q8_0 file has its "
                         "output tensor in Q8_0 (default: the checkpoint's BF16 lm_head)")
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3, help="llama.cpp: best of this many runs after a warmup")
    ap.add_argument("--seed", type=int, default=0, help="llama.cpp prompt ids")
    ap.add_argument("--workdir", type=Path, help="where the model and GGUF go (default: a new temp dir)")
    ap.add_argument("--model-dir", type=Path,
                    help="skip bestofn: benchmark llama.cpp alone on this existing model directory")
    ap.add_argument("--out", type=Path, help="also write every JSON line to this file")
    args = ap.parse_args()

    command = shlex.join([sys.executable, *sys.argv])
    common = {"machine": machine(), "commit": commit()}
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bestofn-cpu-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    lines: list[dict] = []

    def emit(row: dict) -> None:
        lines.append(row)
        print(json.dumps(row), flush=True)

    # a) bestofn, which also leaves the synthetic model behind.
    if args.model_dir:
        model_dir, ours = args.model_dir, []
    else:
        model_dir = workdir / "model"
        if model_dir.exists():
            raise SystemExit(f"{model_dir} already exists; choose another --workdir")
        ours = run_bestofn(args, model_dir)
        for row in ours:
            emit({"bench": "cpu_bestofn", **common, **row})

    # b) llama.cpp on the same weights.
    gguf_path = workdir / f"model-{args.gguf_type}.gguf"
    conv = convert_gguf.convert(model_dir, gguf_path, args.gguf_type)
    cfg = convert_gguf.read_config(model_dir)
    theirs = time_llamacpp(gguf_path, cfg["vocab_size"], args)
    emit({"bench": "cpu_llamacpp", "side": "llama.cpp", "n": 1, **theirs, "gguf_type": args.gguf_type,
          "gguf_bytes": conv["bytes"], "prompt_len": args.prompt_len, "steps": args.steps,
          "threads": args.threads, "n_batch": 512, "n_ctx": args.n_ctx, "model": str(model_dir), **common,
          "command": command})

    # c) summary: ratios against the baseline measured in this run.
    by_n = {int(r["n"]): float(r["tok_per_s"]) for r in ours}
    n1, n16, lc = by_n.get(1), by_n.get(16), theirs["tok_per_s"]
    ratio = lambda a, b: round(a / b, 3) if a and b else None  # noqa: E731
    summary = {"bench": "cpu_summary", "tok_s_n1_bestofn": n1, "tok_s_n16_bestofn": n16,
               "ratio_n16_over_n1": ratio(n16, n1), "target_ratio_n16_over_n1": 6.0,
               "tok_s_n1_llamacpp": lc, "ratio_bestofn_over_llamacpp_n1": ratio(n1, lc),
               "target_ratio_bestofn_over_llamacpp_n1": 1.0, "gguf_type": args.gguf_type,
               "bestofn_lm_head": "fp8" if args.quantize_lm_head else "bf16",
               "prompt_len": args.prompt_len, "steps": args.steps, "threads": args.threads,
               # where the vCPUs sat when N=1 and N=16 ran (bestofn bench's core_round_trip_ns:
               # ~85 ns sharing a last-level cache, ~370 ns not, on the development VM)
               "core_round_trip_ns": {str(r["n"]): round(r["core_round_trip_ns"])
                                      for r in ours if int(r["n"]) in (1, 16) and "core_round_trip_ns" in r},
               **common, "command": command}
    emit(summary)

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
