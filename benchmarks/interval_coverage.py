#!/usr/bin/env python3
"""What the 95% interval over problems (include/bestofn/eval/intervals.h) covers, by simulation.

A population of problems shaped like a real run (SmolLM2-135M-Instruct on HumanEval, n = 20: the
per-problem pass rates of benchmarks/results/2026-12-06-cpu-selection-smollm2-n20.jsonl's run,
jittered), P problems drawn from it, n samples each, pass@k per problem by the unbiased estimator,
and the percentile bootstrap over problems (numpy's draws; the method, not bestofn's stream):
  - coverage: how often the interval holds the population's mean pass@k (the number a benchmark of
    problems like these estimates), for k = 1 and 10;
  - rerun_sd: the spread of pass@1 over reruns on the same P problems (fresh samples only), against
    the interval's own standard deviation (width / 3.92): how much of the interval is sampling noise.
Prints one JSON line. Usage: interval_coverage.py [--trials T] [--problems P] [--seed S]
"""
import argparse
import json
import math
import subprocess
import sys

import numpy as np

N = 20
# Passes out of 20 per problem of the real run (146 problems with none).
PASSES = [0] * 146 + [6, 6, 15, 1, 12, 4, 3, 1, 1, 16, 3, 8, 6, 4, 13, 1, 2, 4]


def pass_at_k(c, k):
    return np.array([1 - math.comb(N - x, k) / math.comb(N, k) for x in c])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--problems", type=int, default=164)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=2024)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    rates = np.array(PASSES) / N

    def population(size):
        p = rng.choice(rates, size)
        return np.clip(p + (p > 0) * rng.normal(0, 0.05, size), 0, 1)

    big = population(400_000)
    truth = {k: float(pass_at_k(rng.binomial(N, big), k).mean()) for k in (1, 10)}
    hits, widths = {1: 0, 10: 0}, {1: [], 10: []}
    for _ in range(a.trials):
        c = rng.binomial(N, population(a.problems))
        for k in (1, 10):
            v = pass_at_k(c, k)
            means = v[rng.integers(0, a.problems, (a.resamples, a.problems))].mean(axis=1)
            lo, hi = np.quantile(means, [0.025, 0.975])
            hits[k] += lo <= truth[k] <= hi
            widths[k].append(hi - lo)
    fixed = population(a.problems)
    rerun_sd = float(np.std([rng.binomial(N, fixed).mean() / N for _ in range(4000)]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({
        "bench": "interval_coverage", "command": " ".join(["benchmarks/interval_coverage.py"] + sys.argv[1:]), "commit": commit,
        "problems": a.problems, "n": N, "trials": a.trials, "resamples": a.resamples, "level": 0.95,
        "population_pass_at_k": truth,
        "coverage": {str(k): hits[k] / a.trials for k in hits},
        "mean_width": {str(k): float(np.mean(widths[k])) for k in widths},
        "pass_at_1_rerun_sd_same_problems": rerun_sd,
        "pass_at_1_interval_sd": float(np.mean(widths[1]) / 3.92),
    }))


if __name__ == "__main__":
    main()
