#!/usr/bin/env python3
"""Goldens for the safetensors reader, from the reference implementation (HF `safetensors`).

    pip install numpy safetensors
    python3 tools/gen_safetensors_golden.py

Writes:
  tests/data/llama260k_tensors.json   name, dtype, shape, sum and first values of every tensor in
                                      ../shared/models/llama-260k/model.safetensors, as HF reads them
  tests/data/hf_writer.safetensors    a small file written by safetensors.numpy.save_file (F32, F16,
                                      I64, a 0-d and an empty tensor), with tests/data/hf_writer.json
"""
import json
import os

import numpy as np
from safetensors.numpy import load_file, save_file

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
data = os.path.join(root, "tests", "data")
model = os.path.join(root, "..", "shared", "models", "llama-260k", "model.safetensors")

tensors = load_file(model)
out = {}
for name, t in sorted(tensors.items()):
    out[name] = {"dtype": str(t.dtype), "shape": list(t.shape), "sum": float(t.astype(np.float64).sum()),
                 "first": [float(x) for x in t.ravel()[:4]], "last": float(t.ravel()[-1])}
with open(os.path.join(data, "llama260k_tensors.json"), "w") as f:
    json.dump(out, f, indent=0, sort_keys=True)

rng = np.random.default_rng(7)
fixture = {
    "a.f32": rng.standard_normal((3, 5)).astype(np.float32),
    "b.f16": rng.standard_normal((7,)).astype(np.float16),
    "c.i64": np.arange(6, dtype=np.int64).reshape(2, 3) - 2,
    "d.scalar": np.array(3.25, dtype=np.float32),
    "e.empty": np.zeros((0, 4), dtype=np.float32),
}
save_file(fixture, os.path.join(data, "hf_writer.safetensors"), metadata={"format": "np", "note": "fixture"})
with open(os.path.join(data, "hf_writer.json"), "w") as f:
    json.dump({k: {"shape": list(v.shape), "values": [float(x) for x in v.ravel()]} for k, v in fixture.items()}, f)
