#!/usr/bin/env python3
"""Golden outputs for bestofn's CPU engine, from Hugging Face transformers + torch.

    pip install torch "transformers==4.55.4" safetensors numpy
    python3 tools/gen_engine_golden.py               # writes tests/data/engine/, checks the reload (~30 s)
    python3 tools/gen_engine_golden.py --self-check  # checks the files against a numpy forward

Makes small random Llama, Qwen2 and Qwen3 models, saves them with save_pretrained (float32
safetensors), and writes tests/data/engine/golden.json: the prompt, the full-forward logits, the
greedy ids, and the logits with the weights rounded to bfloat16 (compute in float32).
tiny-qwen2 has q/k/v biases (drawn N(0, 0.2): enough to move every logit), tiny-qwen3 per-head
q/k RMSNorm weights (1 + 0.3 N(0, 1)) and a head_dim (16) unlike hidden / heads (8).
tiny-tied-as-lm-head is a tied Llama whose safetensors hold the shared matrix only as
lm_head.weight (no model.embed_tokens.weight), as some tied checkpoints are published; transformers
loads it (checked below) and uses the one tensor for both.

Why transformers 4.x: transformers 5 writes config.json with `rope_parameters` (rope_theta inside
it) and `dtype` instead of the `rope_scaling`, `rope_theta` and `torch_dtype` that real Llama 3.x
checkpoints have. The 4.x files look like the checkpoints users download. --self-check also runs
under transformers 5 (it reads 4.x configs) and then shows both versions agree.

--self-check is independent of the transformers modeling code: it reads config.json and
model.safetensors with its own parser and runs its own float64 numpy forward in the HF convention
(rotate_half RoPE, llama3/linear inv_freq scaling, repeat_kv GQA, RMSNorm, SiLU * up; the q/k/v
biases and per-head q/k RMSNorm where the tensors are present; a tied matrix under either name).
The goldens of the first three models are as committed before the Qwen ones were added: a rerun
reproduces their files bit for bit and their logits within 2e-6 (torch's threads sum in another
order), so those entries were kept.

The weights are re-drawn after construction: transformers' own init (std 0.02) gives nearly
uniform logits, which would test nothing. Linear weights ~ N(0, 1/in_features), embeddings ~ N(0, 1),
norm weights 1 + 0.1 N(0, 1). A tied embedding is drawn as the lm_head, N(0, 1/dim): with N(0, 1)
the logit of the current token (|e|^2 = dim) dwarfs the rest and greedy repeats one id forever.
"""
import argparse
import copy
import json
import math
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "engine")
PROMPT_LEN, N_NEW = 12, 24

COMMON = dict(hidden_act="silu", rms_norm_eps=1e-5, vocab_size=256, max_position_embeddings=256, bos_token_id=1,
              eos_token_id=2)
# What each architecture's config takes on top (Qwen2 has no switch for its q/k/v biases).
ARCH_EXTRA = {"llama": dict(attention_bias=False, mlp_bias=False), "qwen2": dict(use_sliding_window=False),
              "qwen3": dict(attention_bias=False, use_sliding_window=False)}

# original_max_position_embeddings is 192, not 32: with head_dim 8 and theta 5e5 the wavelengths
# are 6.3, 167, 4443 and 118000 positions. With 32 none falls in the smoothed band [32/4, 32], so
# the interpolation branch would go untested; with 192 they hit all three branches (keep, smooth, /8).
MODELS = {
    "tiny-gqa-llama3": dict(seed=1001, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                            num_attention_heads=8, num_key_value_heads=2, head_dim=8, rope_theta=500000.0,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 192},
                            tie_word_embeddings=False),
    "tiny-tied": dict(seed=1002, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=3, head_dim=16, rope_theta=10000.0,
                      rope_scaling=None, tie_word_embeddings=True),
    "tiny-linear-rope": dict(seed=1003, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=4, head_dim=8, rope_theta=10000.0,
                             rope_scaling={"rope_type": "linear", "factor": 4.0}, tie_word_embeddings=False),
    "tiny-qwen2": dict(arch="qwen2", seed=1007, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=1000000.0,
                       rope_scaling=None, tie_word_embeddings=True),
    "tiny-qwen3": dict(arch="qwen3", seed=1005, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1000000.0,
                       rope_scaling=None, tie_word_embeddings=False),
    "tiny-tied-as-lm-head": dict(seed=1008, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
                                 rope_scaling=None, tie_word_embeddings=True, store_tied_as="lm_head.weight"),
}
BF16_COPIES = ("tiny-gqa-llama3", "tiny-qwen2", "tiny-qwen3")
SPEC_ONLY = ("seed", "arch", "store_tied_as")  # not config.json fields


def g7(x):
    return float("%.7g" % x)


def rows7(a):
    return [[g7(v) for v in row] for row in np.asarray(a, dtype=np.float32).tolist()]


# ---------------------------------------------------------------- generation (torch + transformers)

def classes(arch):
    import transformers
    prefix = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3"}[arch]
    return getattr(transformers, prefix + "Config"), getattr(transformers, prefix + "ForCausalLM")


def build(name, spec):
    import torch
    arch = spec.get("arch", "llama")
    config_cls, model_cls = classes(arch)
    cfg = config_cls(**COMMON, **ARCH_EXTRA[arch], **{k: v for k, v in spec.items() if k not in SPEC_ONLY},
                     torch_dtype="float32")
    torch.manual_seed(spec["seed"])
    model = model_cls(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    assert tied == spec["tie_word_embeddings"], name
    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight.normal_(0.0, 1.0 / math.sqrt(mod.in_features))
                if mod.bias is not None:
                    mod.bias.normal_(0.0, 0.2)
            elif isinstance(mod, torch.nn.Embedding) and not tied:
                mod.weight.normal_(0.0, 1.0)
            elif type(mod).__name__.endswith("RMSNorm"):
                per_head = mod_name.endswith(("q_norm", "k_norm"))
                mod.weight.copy_(1.0 + (0.3 if per_head else 0.1) * torch.randn_like(mod.weight))
    model.eval()
    gen = torch.Generator().manual_seed(spec["seed"] + 50000)
    prompt = [1] + torch.randint(3, 256, (PROMPT_LEN - 1,), generator=gen).tolist()
    return model, prompt


def forward(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].to(torch.float32).numpy()


def bf16_rounded(model):
    """The model with every parameter rounded to bf16 and back; buffers (inv_freq) stay fp32.

    model.to(bfloat16).to(float32) would also round the rotary inv_freq buffer to bf16, which
    changes the RoPE angles: not what an engine that reads BF16 weights does.
    """
    import torch
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return m


def greedy(model, prompt):
    import torch
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=N_NEW,
                             min_new_tokens=N_NEW, use_cache=True, pad_token_id=0)
    ids = out[0, len(prompt):].tolist()
    assert len(ids) == N_NEW
    full = forward(model, prompt + ids[:-1])
    path = full[len(prompt) - 1:]  # (N_NEW, vocab): the rows that chose each new id
    # min_new_tokens masks EOS; the golden is only honest if EOS never was the argmax.
    assert path.argmax(axis=1).tolist() == ids, "full-forward argmax disagrees with generate()"
    top2 = np.sort(path, axis=1)[:, -2:]
    margins = (top2[:, 1] - top2[:, 0]).astype(np.float64)
    return ids, full[-1], margins


def save(model, path, dtype_name, store_tied_as=None):
    import torch
    os.makedirs(path, exist_ok=True)
    m = model if dtype_name == "float32" else copy.deepcopy(model).to(torch.bfloat16)
    m.config.torch_dtype = dtype_name
    m.save_pretrained(path, safe_serialization=True)
    if store_tied_as:  # the shared matrix under the other name, as some tied checkpoints have it
        from safetensors.torch import load_file, save_file
        f = os.path.join(path, "model.safetensors")
        tensors = load_file(f)
        tensors[store_tied_as] = tensors.pop("model.embed_tokens.weight")
        save_file(tensors, f, metadata={"format": "pt"})


def reload_logits(path, prompt):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from safetensors.torch import load_file
    tensors = load_file(os.path.join(path, "model.safetensors"))
    if "model.embed_tokens.weight" not in tensors:
        # transformers 4.55.4's from_pretrained reports no missing key here but leaves the shared
        # matrix on the meta device (its tie_weights re-ties lm_head to the embedding it never
        # loaded). torch's load_state_dict into the tied model fills the one shared tensor, which
        # is what loading a tied checkpoint means.
        m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), torch_dtype=torch.float32,
                                             attn_implementation="eager")
        assert m.lm_head.weight is m.model.embed_tokens.weight
        result = m.load_state_dict(tensors, strict=False)
        assert result.unexpected_keys == [] and result.missing_keys in ([], ["model.embed_tokens.weight"]), result
        m.eval()
        return forward(m, prompt)
    m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return forward(m, prompt)


def generate_all():
    import torch
    import transformers
    torch.use_deterministic_algorithms(True)
    golden = {"source": {"script": "tools/gen_engine_golden.py", "transformers": transformers.__version__,
                         "torch": torch.__version__, "numpy": np.__version__, "attn_implementation": "eager",
                         "note": "logits rounded to 7 significant digits; inv_freq to 9 (exact float32)"}}
    for name, spec in MODELS.items():
        model, prompt = build(name, spec)
        logits = forward(model, prompt)
        ids, last, margins = greedy(model, prompt)
        bf16 = forward(bf16_rounded(model), prompt)
        path = os.path.join(OUT, name)
        save(model, path, "float32", spec.get("store_tied_as"))
        # (a) the saved files reproduce the logits bit for bit
        again = reload_logits(path, prompt)
        assert np.array_equal(again, logits), f"{name}: reloaded logits differ by {np.abs(again - logits).max()}"
        if name in BF16_COPIES:
            bpath = path + "-bf16"
            save(model, bpath, "bfloat16")
            again = reload_logits(bpath, prompt)
            assert np.array_equal(again, bf16), f"{name}-bf16: reloaded logits differ by {np.abs(again - bf16).max()}"
        inv_freq = model.model.rotary_emb.inv_freq.to(torch.float32).numpy()
        cfg = {k: v for k, v in spec.items()}
        cfg.update({k: COMMON[k] for k in ("vocab_size", "rms_norm_eps", "max_position_embeddings",
                                            "bos_token_id", "eos_token_id", "hidden_act")})
        golden[name] = {
            "config": cfg,
            "inv_freq": [float("%.9g" % v) for v in inv_freq.tolist()],
            "prompt": prompt,
            "logits": rows7(logits),
            "greedy": ids,
            "greedy_logits_last": [g7(v) for v in last.tolist()],
            "greedy_margins": [g7(v) for v in margins.tolist()],
            "greedy_margin_min": g7(margins.min()),
            "bf16": rows7(bf16),
        }
        if name in BF16_COPIES:
            golden[name]["bf16_dir"] = name + "-bf16"
        print(f"{name}: greedy {ids} margin_min {margins.min():.4g}; reload exact")
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")


# ---------------------------------------------------------------- independent check (numpy only)

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for key, t in header.items():
        if key == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[base + a:base + b]
        if t["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {key}: dtype {t['dtype']}")
        out[key] = (t["dtype"], arr.reshape(t["shape"]).astype(np.float64))
    return out


def round_bf16(a):
    """float -> bfloat16 (round to nearest even) -> float64; the weights here are finite."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def np_inv_freq(cfg):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling")
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":
        f, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / f + smooth * inv
        inv = np.where(wavelen < old / hi, inv, np.where(wavelen > old / lo, inv / f, mid))
    elif kind != "default":
        raise ValueError(kind)
    return inv


def np_forward(cfg, w, ids):
    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + cfg["rms_norm_eps"]) * g

    def rot_half(x):
        h = x.shape[-1] // 2
        return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)

    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    T = len(ids)
    ang = np.arange(T, dtype=np.float64)[:, None] * np_inv_freq(cfg)[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))  # (T, hd)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    tied = cfg.get("tie_word_embeddings")
    embed = w["model.embed_tokens.weight"] if "model.embed_tokens.weight" in w or not tied else w["lm_head.weight"]
    x = embed[ids]  # (T, dim)

    def proj(h, name, heads):  # (heads, T, hd): h W^T (+ b, Qwen2), then the per-head norm (Qwen3)
        y = h @ w[name + ".weight"].T + w.get(name + ".bias", 0.0)
        return y.reshape(T, heads, hd).transpose(1, 0, 2)

    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = proj(h, p + "self_attn.q_proj", nh)
        k = proj(h, p + "self_attn.k_proj", nkv)
        v = proj(h, p + "self_attn.v_proj", nkv)
        if p + "self_attn.q_norm.weight" in w:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)  # repeat_kv
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v  # (nh, T, hd)
        x = x + a.transpose(1, 0, 2).reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", embed if tied else None)
    return rms(x, w["model.norm.weight"]) @ head.T


def load_dir(path):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(path, "model.safetensors"))
    return cfg, {k: a for k, (_, a) in tensors.items()}, {k: d for k, (d, _) in tensors.items()}


def self_check():
    with open(os.path.join(OUT, "golden.json")) as f:
        golden = json.load(f)
    print("golden from", golden["source"])
    worst = 0.0
    for name in MODELS:
        gd = golden[name]
        cfg, w, dtypes = load_dir(os.path.join(OUT, name))
        inv = np_inv_freq(cfg)
        d_inv = np.abs(inv - np.array(gd["inv_freq"])).max() / inv.max()
        ref = np.array(gd["logits"])
        d = np.abs(np_forward(cfg, w, gd["prompt"]) - ref).max()
        full = np_forward(cfg, w, gd["prompt"] + gd["greedy"][:-1])
        ids_ok = full[len(gd["prompt"]) - 1:].argmax(1).tolist() == gd["greedy"]
        d_last = np.abs(full[-1] - np.array(gd["greedy_logits_last"])).max()
        wb = {k: round_bf16(v) for k, v in w.items()}
        d_bf = np.abs(np_forward(cfg, wb, gd["prompt"]) - np.array(gd["bf16"])).max()
        print(f"{name}: |inv_freq| rel {d_inv:.2e}  |logits| {d:.2e}  greedy ids {'ok' if ids_ok else 'DIFFER'}"
              f"  |last| {d_last:.2e}  |bf16| {d_bf:.2e}  (logit range {ref.min():.2f}..{ref.max():.2f},"
              f" margin_min {gd['greedy_margin_min']:.4g})")
        if cfg.get("rope_scaling"):  # the golden must tell a scaled RoPE from a plain one
            d_plain = np.abs(np_forward(dict(cfg, rope_scaling=None), w, gd["prompt"]) - ref).max()
            print(f"  |logits with rope_scaling ignored - golden| {d_plain:.2e}")
            assert d_plain > 1e-3, name
        for part in (".bias", "_norm.weight"):  # the goldens must tell Qwen2's biases / Qwen3's norms apart
            if any(k.endswith(part) and "self_attn" in k for k in w):
                d_off = np.abs(np_forward(cfg, {k: a for k, a in w.items() if not (k.endswith(part) and "self_attn" in k)},
                                          gd["prompt"]) - ref).max()
                print(f"  |logits without the self_attn *{part} tensors - golden| {d_off:.2e}")
                assert d_off > 1e-2, name
        print(f"  tensors: {sorted(set(dtypes.values()))}, lm_head.weight {'present' if 'lm_head.weight' in w else 'absent'}")
        worst = max(worst, d, d_last, d_bf)
        assert ids_ok and d_inv < 1e-6, name
        if "bf16_dir" in gd:
            cfg_b, w_b, dt_b = load_dir(os.path.join(OUT, gd["bf16_dir"]))
            d_b = np.abs(np_forward(cfg_b, w_b, gd["prompt"]) - np.array(gd["bf16"])).max()
            print(f"  {gd['bf16_dir']}: torch_dtype {cfg_b.get('torch_dtype')}, tensors {sorted(set(dt_b.values()))},"
                  f" |numpy(bf16 file) - bf16| {d_b:.2e}")
            worst = max(worst, d_b)
        try:
            import torch  # noqa: F401
            import transformers
            r = reload_logits(os.path.join(OUT, name), gd["prompt"])
            print(f"  transformers {transformers.__version__} reload: |logits - golden| {np.abs(r - ref).max():.2e}")
        except ImportError:
            pass
    assert worst < 1e-4, f"numpy forward disagrees with the golden by {worst}"
    print(f"self-check passed: max |numpy - golden| {worst:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--self-check", action="store_true", help="check the written files with numpy, write nothing")
    args = ap.parse_args()
    if args.self_check:
        self_check()
    else:
        generate_all()


if __name__ == "__main__":
    sys.exit(main())
