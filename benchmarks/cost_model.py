#!/usr/bin/env python3
"""Predicted output tok/s of a best-of-N run on one H200, from measured per-op times and the
scheduler's batch trace (issue 32: every change's expected gain written down before a device
confirms it).

  benchmarks/cost_model.py --trace TRACE.jsonl [--results benchmarks/results/2026-11-30-nvidia-h200]
                           [--calibrate] [--json]

TRACE.jsonl comes from benchmarks/batch_trace (the real scheduler, the real prompts and tokenizer,
a stand-in engine): one line per prefill and per decode step with the batch T, its prefix groups,
and the prefix and suffix positions its attention reads.

Every number the model uses is either measured on the H200 (files under --results, named in the
output) or a stated assumption (the `assumptions` block of the output: each with its reason, and the
device check that will settle it, benchmarks/GPU_TODO.md). The step time is

  step(T) = gemm(T) + rest(T) + attention(step) + host

  gemm(T)      the per-layer FP8 GEMMs (fused qkv, o, fused gate/up, down) x 32 layers and the
               lm_head, from run1/gemm_fp8.json (cuBLASLt, M = 1..512, GPU time); above M = 512
               the throughput ramps linearly from the M = 512 rate to `large_m_tflops` at M = 2048
               (an assumption: the 8192^3 FP8 GEMM measured 1711 TFLOP/s).
  rest(T)      norms, quantization, RoPE/KV writes, residuals, sampling: the bench's "rest" phase
               (run3, eager event timing, the tiled configuration) at T = 64 and T = 256, extended
               linearly in T (these kernels stream (T, dim) activations: their cost grows with T).
  attention    per path:
     tiled     (today's fastest measured path at large batches, --split-attention): every row reads
               its prefix and its suffix; bytes / the bandwidth the tiled kernel reached at N = 256
               in run3 (derived below, ~0.8 TB/s).
     cascade   (issue 32): each prefix group's shared prompt read once per step (tensor cores,
               FlashInfer's prefill kernel over all groups), each row's suffix read by a decode
               kernel at `suffix_tbps`, the two merged; plus the prefix's matrix products at
               `prefix_tflops`.
  host         the scheduler's host time per step (batch_trace's summary, measured here) plus the
               engine's step preparation (benchmarks/bench_step_plan, measured here), serial with
               the GPU today (the step returns when its samples are back).
  prefill      the prompts' forward: one prompt at a time as measured (run3 bench prefill_ms at 512
               tokens, per token), or batched at the GEMM throughput of M = the chunk.

--calibrate compares the model with the measured totals it did not use: the bench's ms_per_step at
N = 1, 8, 64, 256 (run3) and the 2026-11-30 HumanEval run (164 prompts x 8, 64 tokens, 1312 rows:
decode 4.70 s over 63 steps, run2/device_check.log).
"""
import argparse
import bisect
import json
import os
import sys

LAYERS = 32
KV_BYTES_PER_POS_LAYER_BF16 = 2 * 8 * 128 * 2  # K and V, 8 KV heads x 128, BF16
KV_BYTES_PER_POS_LAYER_FP8 = 2 * (8 * 128 + 8 * 4)  # E4M3 codes and one F32 scale per KV head
N_HEADS, HEAD_DIM = 32, 128
GEMM_SHAPES = ["qkv", "o", "gate_up", "down"]
FLOP_PER_ROW = 2 * (LAYERS * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336) + 128256 * 4096)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Measured:
    """The H200 numbers the model reads, each with the file it came from."""

    def __init__(self, results):
        self.results = results
        g = os.path.join(results, "run1", "gemm_fp8.json")
        self.sources = {"gemm": g}
        self.gemm = {}  # (shape, dtype) -> sorted [(M, ms)]
        for d in read_jsonl(g):
            if d.get("kind") == "gemm" and "median_ms" in d:
                self.gemm.setdefault((d["shape"], d["dtype"]), []).append((d["M"], d["median_ms"]))
            if d.get("kind") == "copy" and d.get("method", "").startswith("cudaMemcpyAsync"):
                self.copy_tbps = d["gbps_read_write"] / 1000.0
        for v in self.gemm.values():
            v.sort()
        b = os.path.join(results, "run3", "bench_cuda_8b.jsonl")
        self.sources["bench"] = b
        self.bench = [d for d in read_jsonl(b)]
        tiled = [d for d in self.bench if d["steps"] == 64 and not d["paths"]["cuda_prefix_gemm"]]
        self.tiled = {d["n"]: d for d in tiled}

    def gemm_ms(self, shape, dtype, m, large_m_tflops, n, k):
        pts = self.gemm[(shape, dtype)]
        ms = [p[0] for p in pts]
        if m <= ms[-1]:
            i = bisect.bisect_left(ms, m)
            if ms[i] == m or i == 0:
                return pts[i][1]
            (m0, t0), (m1, t1) = pts[i - 1], pts[i]
            return t0 + (t1 - t0) * (m - m0) / (m1 - m0)
        m_last, t_last = pts[-1]
        rate_last = 2.0 * m_last * n * k / (t_last * 1e-3) / 1e12  # TFLOP/s at the largest M measured
        ramp = min(1.0, (m - m_last) / (2048 - m_last))
        rate = rate_last + (large_m_tflops - rate_last) * ramp
        return 2.0 * m * n * k / (rate * 1e12) * 1e3


SHAPE_NK = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}


class Model:
    def __init__(self, meas, a):
        self.m, self.a = meas, a
        t64, t256 = meas.tiled[64]["split_ms_per_step"], meas.tiled[256]["split_ms_per_step"]
        self.rest_a = t64["rest"]
        self.rest_b = (t256["rest"] - t64["rest"]) / (256 - 64)
        # The tiled kernel's attained bandwidth at N = 256 (prompt 512, 64 steps: mean suffix 32.5),
        # from the graph-replayed step total less the GEMMs and the rest: the eager split's own
        # attention phase sums with the others to less than the total (run3: 32.4 of 46.4 ms).
        d = meas.tiled[256]
        positions = 256 * (d["prompt_len"] + (d["steps"] + 1) / 2)
        attention_ms = d["ms_per_step"] - self.gemm(256) - self.rest(256)
        self.tiled_tbps = positions * LAYERS * KV_BYTES_PER_POS_LAYER_BF16 / (attention_ms * 1e-3) / 1e12

    def gemm(self, T):
        a = self.a
        ms = LAYERS * sum(self.m.gemm_ms(s, "e4m3xe4m3->bf16", T, a.large_m_tflops, *SHAPE_NK[s]) for s in GEMM_SHAPES)
        head = "e4m3xe4m3->bf16" if a.fp8_lm_head else "bf16xbf16->bf16"
        return ms + self.m.gemm_ms("lm_head", head, T, a.large_m_tflops / (1 if a.fp8_lm_head else 2), *SHAPE_NK["lm_head"])

    def rest(self, T):
        return self.rest_a + self.rest_b * (T - 64) if T >= 64 else self.rest_a

    def attention(self, path, s):
        kv = KV_BYTES_PER_POS_LAYER_FP8 if self.a.fp8_kv else KV_BYTES_PER_POS_LAYER_BF16
        if path == "tiled":
            return (s["prefix_tokens"] + s["suffix_tokens"]) * LAYERS * kv / (self.tiled_tbps * 1e12) * 1e3
        prefix_bytes = s["group_prefix_tokens"] * LAYERS * KV_BYTES_PER_POS_LAYER_BF16  # prefix pages are BF16
        prefix_flop = 4.0 * s["prefix_tokens"] * N_HEADS * HEAD_DIM * LAYERS  # QK^T and PV over each row's prefix
        prefix_ms = max(prefix_bytes / (self.a.prefix_tbps * 1e12), prefix_flop / (self.a.prefix_tflops * 1e12)) * 1e3
        suffix_ms = s["suffix_tokens"] * LAYERS * kv / (self.a.suffix_tbps * 1e12) * 1e3
        return prefix_ms + suffix_ms + self.a.merge_ms

    def step(self, path, s):
        T = s["T"]
        parts = {"gemm": self.gemm(T), "rest": self.rest(T), "attention": self.attention(path, s), "host": self.a.host_ms}
        return parts

    def prefill_ms(self, prompt_tokens, batched):
        if not batched:  # one prompt at a time, as measured: run3's prefill of a 512-token prompt
            d = self.m.tiled[64]
            return prompt_tokens * d["prefill_ms"] / d["prompt_len"]
        chunk = self.a.prefill_chunk
        chunks = max(1, -(-prompt_tokens // chunk))
        return chunks * (self.gemm(chunk) + self.rest(chunk))


def predict(model, trace, path, batched_prefill):
    steps = [e for e in trace if e["event"] == "step"]
    prompt_tokens = sum(e["tokens"] for e in trace if e["event"] == "prefill")
    totals = {"gemm": 0.0, "rest": 0.0, "attention": 0.0, "host": 0.0}
    for s in steps:
        for k, v in model.step(path, s).items():
            totals[k] += v
    prefill = model.prefill_ms(prompt_tokens, batched_prefill)
    decode_ms = sum(totals.values())
    tokens = sum(s["T"] for s in steps)
    seconds = (decode_ms + prefill) / 1e3
    return {"path": path, "batched_prefill": batched_prefill, "steps": len(steps), "generated_tokens": tokens,
            "prompt_tokens": prompt_tokens, "tok_per_s": tokens / seconds, "seconds": seconds,
            "prefill_s": prefill / 1e3, "decode_s": decode_ms / 1e3,
            "decode_split_s": {k: round(v / 1e3, 3) for k, v in totals.items()},
            "mean_step_ms": decode_ms / max(1, len(steps))}


def calibrate(model, meas, he8_trace):
    rows = []
    for n, d in sorted(meas.tiled.items()):
        s = {"T": n, "prefix_tokens": n * d["prompt_len"], "suffix_tokens": n * (d["steps"] + 1) / 2}
        p = model.step("tiled", s)
        rows.append({"what": f"bench n={n} prompt 512, 64 steps (run3, tiled, graphs)", "measured_ms": round(d["ms_per_step"], 2),
                     "predicted_ms": round(sum(p.values()) - model.a.host_ms, 2)})
    # 2026-11-30 run2: 164 HumanEval prompts x 8 candidates, 64 new tokens, --batch 1312, tiled:
    # decode 4.70 s over 63 steps; the prompts' mean length from this trace's prefills.
    if he8_trace:
        steps = [e for e in read_jsonl(he8_trace) if e["event"] == "step"]
        pred = sum(sum(model.step("tiled", s).values()) - model.a.host_ms for s in steps) / len(steps)
        rows.append({"what": "HumanEval x8, --batch 1312, 64 tokens (run2 humaneval_gen_tiled: decode 4.70 s, 63 steps)",
                     "measured_ms": round(4700 / 63, 2), "predicted_ms": round(pred, 2)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--results", default=os.path.join(os.path.dirname(__file__), "results", "2026-11-30-nvidia-h200"))
    ap.add_argument("--large-m-tflops", type=float, default=1300.0,
                    help="FP8 GEMM throughput reached at M >= 2048 (assumption; 8192^3 measured 1711)")
    ap.add_argument("--prefix-tbps", type=float, default=3.0, help="cascade: prefix page read bandwidth (assumption)")
    ap.add_argument("--prefix-tflops", type=float, default=300.0,
                    help="cascade: BF16 tensor-core attention throughput on the prefix (assumption: FA2-class kernel on H100/H200)")
    ap.add_argument("--suffix-tbps", type=float, default=None,
                    help="cascade: suffix read bandwidth (default: the tiled kernel's measured one)")
    ap.add_argument("--fast-suffix-tbps", type=float, default=3.0,
                    help="a paged decode kernel near the copy bandwidth (assumption: FlashInfer's batch decode on Hopper)")
    ap.add_argument("--merge-ms", type=float, default=0.3, help="cascade: the log-sum-exp merges of a step, all layers (assumption)")
    ap.add_argument("--host-ms", type=float, default=None, help="host time per step (default: the trace's summary)")
    ap.add_argument("--fp8-kv", action="store_true", help="--kv-cache fp8 for the suffixes")
    ap.add_argument("--fp8-lm-head", action="store_true", help="--quantize-lm-head")
    ap.add_argument("--prefill-chunk", type=int, default=8192, help="batched prefill: tokens per forward")
    ap.add_argument("--host-summary", default=None, help="batch_trace's summary JSON line (the scheduler's host ms per step)")
    ap.add_argument("--engine-prep-ms", type=float, default=0.25,
                    help="the engine's step preparation on the host (bench_step_plan's median at B = 2048)")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--calibration-trace", default=None,
                    help="batch_trace of the 2026-11-30 HumanEval run (--n 8 --max-new-tokens 64 --batch 1312)")
    args = ap.parse_args()

    meas = Measured(args.results)
    trace = read_jsonl(args.trace)
    if args.host_ms is None:  # the scheduler's measured time per step plus the engine's preparation
        scheduler_ms = 0.5  # without a summary: the bound
        if args.host_summary:
            with open(args.host_summary) as f:
                scheduler_ms = json.loads(f.read())["host_ms_per_step_median"]
        args.host_ms = scheduler_ms + args.engine_prep_ms
    model = Model(meas, args)
    if args.suffix_tbps is None:
        args.suffix_tbps = model.tiled_tbps
    out = {"model": "benchmarks/cost_model.py", "command": " ".join(sys.argv), "sources": meas.sources,
           "derived": {"tiled_attention_tbps": round(model.tiled_tbps, 3), "rest_ms_at_64": round(model.rest_a, 3),
                       "rest_ms_per_row": round(model.rest_b, 5), "copy_tbps": round(meas.copy_tbps, 3),
                       "gemm_ms_T1": round(model.gemm(1), 3), "gemm_ms_T2048": round(model.gemm(2048), 3)},
           "assumptions": {"large_m_tflops": args.large_m_tflops, "prefix_tbps": args.prefix_tbps,
                           "prefix_tflops": args.prefix_tflops, "suffix_tbps": round(args.suffix_tbps, 3),
                           "merge_ms": args.merge_ms, "host_ms": args.host_ms, "fp8_kv": args.fp8_kv,
                           "fp8_lm_head": args.fp8_lm_head, "prefill_chunk": args.prefill_chunk},
           "predictions": []}
    scenarios = [
        ("today: tiled attention, prompts prefilled one at a time", "tiled", False, {}),
        ("cascade prefix on tensor cores, suffixes by today's merge kernel, batched prefill", "cascade", True, {}),
        ("cascade, suffixes at the decode bandwidth of a FlashInfer-class paged kernel", "cascade", True,
         {"suffix_tbps": args.fast_suffix_tbps}),
        ("the same with --kv-cache fp8 suffixes", "cascade", True, {"suffix_tbps": args.fast_suffix_tbps, "fp8_kv": True}),
        ("the same with --quantize-lm-head", "cascade", True,
         {"suffix_tbps": args.fast_suffix_tbps, "fp8_kv": True, "fp8_lm_head": True}),
    ]
    base = dict(vars(args))
    for what, path, batched, overrides in scenarios:
        vars(args).update(base)
        vars(args).update(overrides)
        p = predict(model, trace, path, batched)
        p["scenario"] = what
        p["overrides"] = overrides
        out["predictions"].append(p)
    vars(args).update(base)
    # Issue 32's attention target: N = 256 on one 512-token prompt, 64 steps (mean suffix 32.5),
    # <= 2 ms per step (2026-11-30: 14.3 ms with the prefix GEMMs, 22.6 ms tiled).
    one = {"T": 256, "prefix_tokens": 256 * 512, "group_prefix_tokens": 512, "suffix_tokens": 256 * 32.5}
    out["attention_n256_prompt512_ms"] = {
        "tiled": round(model.attention("tiled", one), 2),
        "cascade, today's suffix kernel": round(model.attention("cascade", one), 2)}
    saved = args.suffix_tbps
    args.suffix_tbps = args.fast_suffix_tbps
    out["attention_n256_prompt512_ms"]["cascade, suffixes at fast_suffix_tbps"] = round(model.attention("cascade", one), 2)
    args.suffix_tbps = saved
    if args.calibrate:
        out["calibration"] = calibrate(model, meas, args.calibration_trace)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
