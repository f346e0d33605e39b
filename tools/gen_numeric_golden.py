#!/usr/bin/env python3
"""Golden values for bestofn's scalar conversions, from an independent reference (ml_dtypes, numpy).

    pip install numpy ml_dtypes
    python3 tools/gen_numeric_golden.py > tests/data/numeric_golden.json

ml_dtypes' float8_e4m3fn rounds to nearest even like CUDA, but turns overflow into NaN where
CUDA's __NV_SATFINITE saturates to 448. So the encode cases here stay below 464 (the first value
that would round past 448); saturation is tested against CUDA's documented rule in the C++ test.
"""
import json
import sys

import ml_dtypes
import numpy as np

rng = np.random.default_rng(20261129)


def f32_bits(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def e4m3_values():
    return [float(v) for v in np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)]


def e4m3_encode_cases():
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    finite = np.sort(np.unique(codes[np.isfinite(codes)]))
    mids = (finite[:-1].astype(np.float64) + finite[1:].astype(np.float64)) / 2  # exact ties
    xs = [finite, mids.astype(np.float32),
          np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
          np.nextafter(mids.astype(np.float32), np.float32(-np.inf)),
          rng.standard_normal(2000).astype(np.float32) * np.float32(4.0),
          (rng.standard_normal(500) * 1e-3).astype(np.float32),
          np.float32([2.0**-10, 2.0**-11, 3 * 2.0**-11, 2.0**-12, 1e-30, -1e-30, 1.5e-45, 0.0, -0.0, 463.9])]
    x = np.concatenate(xs).astype(np.float32)
    x = x[np.abs(x) < 464]
    q = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return [[f32_bits(a), int(b)] for a, b in zip(x, q)]


def bf16_cases():
    x = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 100,
                        np.float32([1.00390625, 1.01171875, 3.0e38, -3.4e38, 1e-40, 0.0, -0.0])]).astype(np.float32)
    # Exact ties between two bf16 values: odd and even lower halves.
    ties = (np.arange(64, dtype=np.uint32) << 16 | 0x8000) + (0x3f80 << 16)
    x = np.concatenate([x, ties.view(np.float32)])
    q = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    return [[f32_bits(a), int(b)] for a, b in zip(x, q)]


def f16_cases():
    x = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 1000,
                        (rng.standard_normal(300) * 1e-5).astype(np.float32),
                        np.float32([65504.0, 65519.0, 65520.0, 1e6, -1e6, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 0.0, -0.0])])
    with np.errstate(over="ignore"):
        q = x.astype(np.float16).view(np.uint16)
    return [[f32_bits(a), int(b)] for a, b in zip(x, q)]


def enc(vals):
    """JSON has no inf or NaN: NaN -> null, inf -> "inf" / "-inf"."""
    return [None if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else v) for v in vals]


json.dump({
    "source": "ml_dtypes %s, numpy %s (tools/gen_numeric_golden.py)" % (ml_dtypes.__version__, np.__version__),
    "e4m3_values": enc(e4m3_values()),
    "e5m2_values": enc(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float64).tolist()),
    "e4m3_encode": e4m3_encode_cases(),
    "bf16_encode": bf16_cases(),
    "f16_encode": f16_cases(),
    "f16_values": enc(np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64).tolist()),
}, sys.stdout, separators=(",", ":"), allow_nan=False)
