#!/usr/bin/env python3
"""Goldens for tests/test_intervals.cpp: the percentile bootstrap over problems of
include/bestofn/eval/intervals.h, computed here independently (Python ints for Philox4x32-10,
math.comb for pass@k, numpy.quantile for the percentiles).

Usage: gen_bootstrap_golden.py RESULTS.jsonl [N]
  RESULTS.jsonl: an eval run's results (one row per sample: task_id, passed); N: its samples per
  problem. Prints JSON: the passes per problem (in the order of the run.json beside the file, as
  eval's summary has them; without one, in the order the rows first name the problems) and, for pass@1, pass@10, pass@N and the paired difference pass@N - pass@1, the interval under
  the settings listed.
"""
import json
import math
import os
import sys

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57  # Salmon et al. (SC'11), Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the key's Weyl increments
MASK = 0xFFFFFFFF
STREAM = 0x426F6F74  # "Boot"


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK, (p0 >> 32) ^ c3 ^ k1, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


# Random123's known-answer vector: the generator above is Philox4x32-10.
assert philox4x32_10((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == (
    0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def draws(p, b, seed):
    """The P problem indices of resample b."""
    key = (seed & MASK, seed >> 32)
    out = []
    for block in range((p + 3) // 4):
        words = philox4x32_10((block, b, STREAM, 0), key)
        out.extend((w * p) >> 32 for w in words)
    return out[:p]


def interval(values, resamples, seed, level):
    if len(values) < 2:
        return None
    means = []
    for b in range(resamples):
        s = 0.0
        for i in draws(len(values), b, seed):
            s += values[i]  # in draw order, as the C++ sums
        means.append(s / len(values))
    tail = (1 - level) / 2
    lo, hi = np.quantile(np.array(means), [tail, 1 - tail], method="linear")
    return [float(lo), float(hi)]


def pass_at_k(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def main():
    path = sys.argv[1]
    passes, seen = {}, []
    n = {}
    for line in open(path):
        row = json.loads(line)
        t = row["task_id"]
        if t not in passes:
            passes[t] = 0
            n[t] = 0
            seen.append(t)
        passes[t] += bool(row["passed"])
        n[t] += 1
    run_json = os.path.join(os.path.dirname(os.path.abspath(path)), "run.json")
    if os.path.exists(run_json):
        seen = [t for t in json.load(open(run_json))["tasks"] if t in passes]
    big_n = int(sys.argv[2]) if len(sys.argv) > 2 else max(n.values())
    assert all(n[t] == big_n for t in seen), "every problem needs N samples"
    c = [passes[t] for t in seen]
    out = {"command": " ".join(["python3"] + sys.argv), "n": big_n, "c": c, "intervals": []}
    for resamples, seed in [(2000, 47), (1000, 12345678901)]:
        per_k = {k: [pass_at_k(big_n, x, k) for x in c] for k in (1, 10, big_n)}
        row = {"resamples": resamples, "seed": seed, "level": 0.95}
        for k, v in per_k.items():
            row[f"pass@{k}"] = interval(v, resamples, seed, 0.95)
        diff = [b - a for a, b in zip(per_k[1], per_k[big_n])]
        row[f"pass@{big_n} - pass@1"] = interval(diff, resamples, seed, 0.95)
        out["intervals"].append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
