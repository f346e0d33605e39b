#!/usr/bin/env python3
"""Convert a bestofn model directory (HF Llama layout) into a GGUF file that llama.cpp can run.

Used by benchmarks/cpu_bench.py so that llama.cpp runs the very same weights as bestofn.

Handles what `bestofn make-synthetic` writes (src/model/synthetic.cpp): config.json with the Llama
fields (llama3 rope scaling, GQA, tied or untied lm_head), safetensors shards holding F32, BF16,
F16 or compressed-tensors FP8 (F8_E4M3 weight + F32 `weight_scale` of shape [out, 1] or []).
FP8 is dequantized as weight * weight_scale in float32, then written as F16 or Q8_0.

The GGUF follows llama.cpp's convert_hf_to_gguf.py for the "llama" architecture:
  * q_proj / k_proj rows are permuted from HF's rotate_half layout to GGML's interleaved pairs;
  * llama3 rope scaling becomes a `rope_freqs.weight` tensor of per-frequency divisors;
  * 1-D tensors (norms, rope_freqs) stay F32.
The tokenizer is a placeholder SentencePiece-style vocabulary of vocab_size tokens: the benchmark
feeds token ids only, never text.

  python benchmarks/convert_gguf.py MODEL_DIR OUT.gguf --outtype q8_0
  python benchmarks/convert_gguf.py MODEL_DIR OUT.gguf --outtype f16 --self-check

--self-check runs llama.cpp (llama-cpp-python) on the GGUF and compares its logits with a plain
numpy forward of the HF model (rotate_half RoPE, HF llama3 inv_freq): this proves the q/k
permutation and the rope factors.
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------------------------------------
# Reading the HF directory


def e4m3_table() -> np.ndarray:
    """float32 value of each of the 256 FP8 E4M3 (OCP "fn": no inf, 0x7f/0xff NaN) codes."""
    t = np.empty(256, np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp = (code >> 3) & 0xF
        man = code & 0x7
        if exp == 0xF and man == 0x7:
            t[code] = np.nan
        elif exp == 0:
            t[code] = sign * (man / 8.0) * 2.0 ** -6  # subnormal
        else:
            t[code] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return t


def decode_e4m3(raw: np.ndarray) -> np.ndarray:
    try:
        import ml_dtypes  # exact reference when available

        return raw.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    except ImportError:
        return e4m3_table()[raw]


_RAW_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8,
               "U8": np.uint8, "I8": np.int8, "I32": np.int32, "I64": np.int64}


class Checkpoint:
    """All tensors of a (possibly sharded) safetensors checkpoint, read with np.memmap."""

    def __init__(self, model_dir: Path):
        self.entries: dict[str, tuple[Path, int, str, list[int]]] = {}
        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise SystemExit(f"{model_dir}: no *.safetensors files")
        for f in files:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            base = 8 + n
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                self.entries[name] = (f, base + begin, info["dtype"], list(info["shape"]))
                count = int(np.prod(info["shape"], dtype=np.int64))
                size = np.dtype(_RAW_DTYPES[info["dtype"]]).itemsize
                if end - begin != count * size:
                    raise SystemExit(f"{f}: tensor {name}: {end - begin} bytes, expected {count * size}")

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        path, offset, dtype, shape = self.entries[name]
        count = int(np.prod(shape, dtype=np.int64))
        arr = np.memmap(path, dtype=_RAW_DTYPES[dtype], mode="r", offset=offset, shape=(count,))
        return arr.reshape(shape), dtype

    def f32(self, name: str) -> np.ndarray:
        """The tensor in float32; FP8 weights are multiplied by their weight_scale."""
        arr, dtype = self.raw(name)
        if dtype == "BF16":
            out = (arr.astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F8_E4M3":
            out = decode_e4m3(np.ascontiguousarray(arr))
            scale_name = name[: -len("weight")] + "weight_scale"
            if scale_name not in self:
                raise SystemExit(f"{name}: FP8 weight without {scale_name}")
            scale = self.f32(scale_name)
            if scale.ndim == 1 and scale.shape[0] == out.shape[0]:
                scale = scale[:, None]
            out = out * scale  # [out, in] * ([out, 1] or [])
        else:
            out = arr.astype(np.float32)
        return np.ascontiguousarray(out, dtype=np.float32)


def read_config(model_dir: Path) -> dict:
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("model_type", "llama") != "llama":
        raise SystemExit(f"{model_dir}: model_type {cfg.get('model_type')!r}; only llama is supported")
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg.setdefault("rope_theta", 10000.0)
    cfg.setdefault("rms_norm_eps", 1e-5)
    cfg.setdefault("tie_word_embeddings", False)
    return cfg


def eos_id(cfg: dict) -> int | None:
    e = cfg.get("eos_token_id")
    return e[0] if isinstance(e, list) and e else e


# ---------------------------------------------------------------------------------------------
# Llama specifics, as llama.cpp's convert_hf_to_gguf.py does them


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF rotate_half row order -> GGML interleaved pairs, per head.

    HF pairs dimension i with i + head_dim/2 inside a head; GGML's "normal" RoPE pairs 2i with
    2i+1. Within each head the rows [first half | second half] become [a0 b0 a1 b1 ...].
    """
    out_dim = w.shape[0]
    half = out_dim // n_heads // 2
    return w.reshape(n_heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg: dict) -> np.ndarray | None:
    """Per-frequency divisors (original inv_freq / llama3-scaled inv_freq), head_dim/2 floats.

    llama.cpp divides each RoPE frequency by rope_freqs[i]: 1 for short wavelengths, `factor`
    for long ones, a smooth blend between them.
    """
    rs = cfg.get("rope_scaling") or {}
    if (rs.get("rope_type") or rs.get("type") or "").lower() != "llama3":
        if rs:
            raise SystemExit(f"rope_scaling {rs} is not supported (only llama3)")
        return None
    dim = cfg["head_dim"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factor = rs.get("factor", 8.0)
    lo, hi = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old_ctx = rs.get("original_max_position_embeddings", 8192)
    low_freq_wavelen, high_freq_wavelen = old_ctx / lo, old_ctx / hi
    factors = []
    for f in inv_freq:
        wavelen = 2 * math.pi / f
        if wavelen < high_freq_wavelen:
            factors.append(1.0)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def placeholder_vocab(n: int, bos: int | None, eos: int | None):
    """A SentencePiece-style ("llama") vocabulary of n tokens: <unk>, control bos/eos, byte
    tokens when there is room, the rest normal. Only ids matter to the benchmark."""
    import gguf

    T = gguf.TokenType
    tokens, types = [f"<tok_{i}>" for i in range(n)], [T.NORMAL] * n
    tokens[0], types[0] = "<unk>", T.UNKNOWN
    for tid, text in ((bos, "<s>"), (eos, "</s>")):
        if tid is not None and 0 < tid < n:
            tokens[tid], types[tid] = text, T.CONTROL
    free = [i for i in range(n) if types[i] == T.NORMAL]
    if len(free) >= 256 + 1:
        for b, i in zip(range(256), free):
            tokens[i], types[i] = f"<0x{b:02X}>", T.BYTE
    return tokens, [0.0] * n, [int(t) for t in types]


# ---------------------------------------------------------------------------------------------
# Writing the GGUF


def hf_tensor_plan(cfg: dict):
    """(gguf name, HF name, permute heads or None) for every tensor, in llama.cpp's order."""
    plan = [("token_embd.weight", "model.embed_tokens.weight", None)]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for i in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", p + "input_layernorm.weight", None),
            (b + "attn_q.weight", p + "self_attn.q_proj.weight", nh),
            (b + "attn_k.weight", p + "self_attn.k_proj.weight", nkv),
            (b + "attn_v.weight", p + "self_attn.v_proj.weight", None),
            (b + "attn_output.weight", p + "self_attn.o_proj.weight", None),
            (b + "ffn_norm.weight", p + "post_attention_layernorm.weight", None),
            (b + "ffn_gate.weight", p + "mlp.gate_proj.weight", None),
            (b + "ffn_up.weight", p + "mlp.up_proj.weight", None),
            (b + "ffn_down.weight", p + "mlp.down_proj.weight", None),
        ]
    plan.append(("output_norm.weight", "model.norm.weight", None))
    if not cfg["tie_word_embeddings"]:
        plan.append(("output.weight", "lm_head.weight", None))
    return plan


def convert(model_dir: Path, out: Path, outtype: str = "q8_0", verbose: bool = True) -> dict:
    """Writes OUT; returns a summary (tensor types, bytes)."""
    import gguf

    Q = gguf.GGMLQuantizationType
    cfg = read_config(model_dir)
    ck = Checkpoint(model_dir)
    want = {"f16": Q.F16, "q8_0": Q.Q8_0, "f32": Q.F32}[outtype]
    ftype = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "f32": gguf.LlamaFileType.ALL_F32}[outtype]

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"bestofn-{model_dir.name}")
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(ftype)

    bos, eos = cfg.get("bos_token_id"), eos_id(cfg)
    tokens, scores, types = placeholder_vocab(cfg["vocab_size"], bos, eos)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    summary = {"outtype": outtype, "types": {}}
    factors = llama3_rope_factors(cfg)
    if factors is not None:
        w.add_tensor("rope_freqs.weight", factors)
        summary["types"]["rope_freqs.weight"] = "F32"
    for gname, hname, heads in hf_tensor_plan(cfg):
        if hname not in ck:
            raise SystemExit(f"{model_dir}: tensor {hname} is missing")
        t = ck.f32(hname)
        if heads is not None:
            t = permute_qk(t, heads)
        qtype = want if t.ndim == 2 else Q.F32
        if qtype == Q.Q8_0 and t.shape[-1] % 32 != 0:
            qtype = Q.F16  # Q8_0 blocks are 32 wide; llama.cpp's converter falls back likewise
        data = gguf.quants.quantize(t, qtype)
        # Quantized data is uint8 (rows, bytes per row); the writer derives the logical shape.
        w.add_tensor(gname, data, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
        summary["types"][gname] = qtype.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    summary["bytes"] = out.stat().st_size
    if verbose:
        counts: dict[str, int] = {}
        for v in summary["types"].values():
            counts[v] = counts.get(v, 0) + 1
        print(f"wrote {out}: {summary['bytes']} bytes, tensor types {counts}", file=sys.stderr)
    return summary


# ---------------------------------------------------------------------------------------------
# Self-check: numpy HF forward vs llama.cpp


def hf_inv_freq(cfg: dict) -> np.ndarray:
    """HF transformers' llama3 inv_freq (the scaled frequencies themselves, not divisors)."""
    dim = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    rs = cfg.get("rope_scaling") or {}
    if (rs.get("rope_type") or rs.get("type")) != "llama3":
        return inv
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / hi) & (wavelen <= old / lo)
    return np.where(medium, blended, scaled)


def numpy_forward(model_dir: Path, tokens: list[int]) -> np.ndarray:
    """Logits (T, vocab) of the HF model, float64, rotate_half RoPE."""
    cfg = read_config(model_dir)
    ck = Checkpoint(model_dir)
    W = lambda n: ck.f32(n).astype(np.float64)  # noqa: E731
    nh, nkv, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    T = len(tokens)

    def rmsnorm(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    ang = np.arange(T, dtype=np.float64)[:, None] * hf_inv_freq(cfg)[None, :]  # (T, hd/2)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], -1)[:, None, :]  # (T, 1, hd)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], -1)[:, None, :]

    def rope(x):  # (T, heads, hd)
        rot = np.concatenate([-x[..., hd // 2:], x[..., : hd // 2]], -1)
        return x * cos + rot * sin

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = W("model.embed_tokens.weight")[tokens]  # (T, dim)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, W(p + "input_layernorm.weight"))
        q = rope((h @ W(p + "self_attn.q_proj.weight").T).reshape(T, nh, hd))
        k = rope((h @ W(p + "self_attn.k_proj.weight").T).reshape(T, nkv, hd))
        v = (h @ W(p + "self_attn.v_proj.weight").T).reshape(T, nkv, hd)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        att = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd)
        x = x + att @ W(p + "self_attn.o_proj.weight").T
        h = rmsnorm(x, W(p + "post_attention_layernorm.weight"))
        g, u = h @ W(p + "mlp.gate_proj.weight").T, h @ W(p + "mlp.up_proj.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "mlp.down_proj.weight").T
    x = rmsnorm(x, W("model.norm.weight"))
    head = "model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"
    return x @ W(head).T


def llamacpp_logits(gguf_path: Path, tokens: list[int]) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf_path), n_ctx=max(64, len(tokens)), n_batch=512, n_threads=2,
                logits_all=True, verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    llm.close() if hasattr(llm, "close") else None
    return out


def self_check(model_dir: Path, gguf_path: Path, n_tokens: int = 64, seed: int = 0, tol: float = 1e-2) -> dict:
    cfg = read_config(model_dir)
    try:
        import ml_dtypes

        codes = np.arange(256, dtype=np.uint8)
        a, b = e4m3_table(), codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        if not np.array_equal(a, b, equal_nan=True):
            raise SystemExit("self-check: the E4M3 table disagrees with ml_dtypes")
    except ImportError:
        pass
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg["vocab_size"], size=n_tokens).tolist()
    ref = numpy_forward(model_dir, tokens)
    got = llamacpp_logits(gguf_path, tokens)
    diff = np.abs(got - ref)
    res = {"check": "gguf_vs_numpy", "tokens": n_tokens, "max_abs_diff": float(diff.max()),
           "max_abs_logit": float(np.abs(ref).max()), "argmax_agree": float(np.mean(got.argmax(-1) == ref.argmax(-1))),
           "tol": tol, "passed": bool(diff.max() <= tol)}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--outtype", choices=["f16", "q8_0", "f32"], default="q8_0")
    ap.add_argument("--self-check", action="store_true", help="compare llama.cpp logits with a numpy HF forward")
    ap.add_argument("--tol", type=float, help="self-check: max |logit diff| allowed (default by --outtype: "
                    "f32 1e-2, f16 2e-2, q8_0 0.25)")
    args = ap.parse_args()
    convert(args.model_dir, args.out, args.outtype)
    if args.self_check:
        # llama.cpp keeps a F16 KV cache and, with F16 weights, rounds activations to F16 before each
        # matmul; Q8_0 rounds them to 8 bits. Over 64 positions that is ~3e-3 (f32), ~1e-2 (f16),
        # ~0.17 (q8_0) on logits of magnitude ~4. A wrong q/k permutation or missing rope factors
        # gives 4-5.
        tol = args.tol if args.tol is not None else {"f32": 1e-2, "f16": 2e-2, "q8_0": 0.25}[args.outtype]
        res = self_check(args.model_dir, args.out, tol=tol)
        print(json.dumps(res))
        return 0 if res["passed"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
