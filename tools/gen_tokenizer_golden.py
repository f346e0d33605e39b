#!/usr/bin/env python3
"""Golden token ids for bestofn's tokenizer, from an independent reference (HF `tokenizers`).

    pip install tokenizers==0.21.4                   # the version the golden was made with (0.23.3 gave the same)
    python3 tools/gen_tokenizer_golden.py            # writes tests/data/tokenizer_golden.json

tools/gen_tokenizer_constructs_golden.py (beside it) covers the other constructs: Digits, GPT-2's
ByteLevel split, missing byte tokens, Metaspace.

Inputs come from ../shared (override with BESTOFN_SHARED):
  tokenizers/{llama3,mistral}/tokenizer.json, data/humaneval/HumanEval.jsonl.gz,
  testvectors/llama3-bpe/ggml-vocab-llama-bpe.{inp,out}.

The golden holds ids only for HumanEval (the test reads the texts from ../shared and checks
`humaneval_sha256`). The corpus below is written for this project; it is encoded with
add_special_tokens=False, so special-token strings inside it are still matched as added tokens
(HF's default `split_special_tokens=False`).

`vectors_check` (llama3 only) records HF's ids for each case of llama.cpp's vector file, split as
llama.cpp's test-tokenizer-0 splits it, and whether they equal the .out line. It is a cross-check
of that file against HF; a mismatch is reported on stderr, not treated as an error.
"""
import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BESTOFN_SHARED", REPO.parent / "shared"))
OUT = REPO / "tests" / "data" / "tokenizer_golden.json"

VOCAB_SEP = "\n__ggml_vocab_test__\n"

# Hand-written cases, the same for both tokenizers. Each line is one string.
CORPUS = [
    # plain and multilingual
    "Hello world",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "我们今天去公园散步，天气很好。",
    "東京タワーは赤と白です。ひらがなとカタカナと漢字。",
    "안녕하세요, 만나서 반갑습니다!",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם, מה שלומך?",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "สวัสดีครับ ยินดีที่ได้รู้จัก",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "Größe, Straße, Fußgänger, ÄÖÜ äöü ẞ",
    "Où est l'hôpital ? Ça coûte 5 € — déjà vu, naïve façade.",
    # emoji: plain, ZWJ families, skin tones, flags, keycaps
    "I ❤️ 🦙 and 🐍!",
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 👍🏻👍🏿",
    "Flags: 🇺🇸🇯🇵🇩🇪 🏳️‍🌈 🏴󠁧󠁢󠁳󠁣󠁴󠁿 keycap 1️⃣",
    # combining marks, NFD vs NFC
    "cafe\u0301 vs caf\u00e9",
    "e\u0301\u0300\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u030b z\u0336\u0337\u0338a\u0315\u0321l\u0334g\u035co\u0360",
    "\u1100\u1161\u11a8 \uac01 A\u030a \u00c5 \u212b",
    # unusual whitespace
    "a\u00a0b\u00a0\u00a0c",
    "thin\u2009space and ideographic\u3000space\u3000\u3000x",
    "next\u0085line and line\u2028sep and para\u2029sep",
    "\u000b vertical tab \u000c form feed \u000c\n",
    "\tindented\twith\t\ttabs\t",
    "windows\r\nline\r\n\r\nendings\r\n",
    "trailing spaces   ",
    "     five spaces before word",
    "spaces before newline   \n   \n\n  end",
    " \t \n \u00a0 \u3000 ",
    "",
    "a\u0000b",
    # digits
    "1234567 12345678901234567890 0 00 007",
    "pi = 3.14159, eps = 3.14e-10, -42, +7, 1,000,000.50",
    "٠١٢٣٤٥٦٧٨٩ ١٢٣ and ０１２３４５６７８９ and ①②③ and ²³",
    # contractions in odd case
    "DON'T do it, She'LL say 'S and 's, WE'RE they'VE I'M you'D it'S",
    "'s 't 're 've 'm 'll 'd",
    # code
    "def f(x):\n    return x  # comment\n",
    "class Foo:\n\tdef bar(self) -> int:\n\t\tif self.x) == ':\n\t\t\treturn 1\n\t\treturn 0\n",
    "    for i in range(10):\n        print(f\"{i:>3}\", end='')\n\n\n",
    '{"name": "bestofn", "n": [1, 2, 3], "ok": true, "nested": {"k": null}}',
    r"^(?:[a-z0-9_.+-]+)@([a-z0-9-]+\.)+[a-z]{2,}$ \d{3}-\d{4} [^\s\p{L}]+",
    "template <typename T, std::size_t N>\nstd::array<std::vector<T>, N> f(const T& x) { return {}; }\n",
    "x<<=2; y>>=3; z->w; a&&b||!c; p::q<r<s>>;",
    # special-token strings inside text
    "<s>hello</s> and <unk> here",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "broken: <|eot_id <|eot_id| <|eot_id|<|end_of_text|>x",
    "< s> <<s>> <s><s> </ s>",
    "hello<s>world",
    " <s> ",
    "<|reserved_special_token_5|> and <|reserved_special_token_250|> and <|reserved_special_token_999|>",
    # characters the byte-fallback vocabulary lacks
    "rare CJK: 𠀀𠀁𪚥𰻞 end",
    "private use: \U000f0000 \U0010fffd \ue000",
    "music: 𝄞 𝄢 𝅘𝅥𝅮 math: 𝔸𝕓𝒸",
    # long repeats
    "a" * 200,
    "=" * 100,
    " " * 50,
    "\n" * 20,
    "ab" * 60 + " " + "!?" * 40,
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def need(path):
    if not path.is_file():
        sys.exit(f"gen_tokenizer_golden: missing {path}")
    return path


def humaneval_problems():
    path = need(SHARED / "data" / "humaneval" / "HumanEval.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    return path, problems


def ids(tok, text, special=False):
    return tok.encode(text, add_special_tokens=special).ids


def byte_ids_mistral(tok, data):
    return [tok.token_to_id(f"<0x{b:02X}>") for b in data]


def byte_ids_llama3(tok, data):
    # GPT-2 byte-to-unicode table, for single-byte tokens.
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [tok.token_to_id(table[b]) for b in data]


def decode_lists(name, tok):
    """Id lists to decode: real encodings, special tokens, raw bytes (valid and not)."""
    lists = [
        ids(tok, "Hello world"),
        ids(tok, " leading space and trailing space "),
        ids(tok, "multi\nline\n\n  indented\tcode"),
        ids(tok, "我们 👨‍👩‍👧 𠀀 ß é"),
    ]
    if name == "llama3":
        bos, eot = 128000, 128009
        hello = tok.token_to_id("Hello")
        lists += [
            [bos] + ids(tok, "Hello world") + [eot],
            [bos, 128006] + ids(tok, "user") + [128007] + ids(tok, "\n\nHi") + [eot, 128001],
            [128002, 128255, hello],
            byte_ids_llama3(tok, b"\xe4\xbd\xa0") + [hello],          # valid 3-byte char in pieces
            byte_ids_llama3(tok, b"\xf0\x9f") + [hello],              # truncated 4-byte sequence
            byte_ids_llama3(tok, b"\xff\xc3") + [hello] + byte_ids_llama3(tok, b"\xe2\x80"),
            byte_ids_llama3(tok, b"\x80\x80 \xc0\xaf"),               # stray continuations, overlong
            [tok.token_to_id("Ġ")] + [hello],
        ]
    else:
        bos, eos, unk = 1, 2, 0
        sp = tok.token_to_id("▁")
        hello = tok.token_to_id("▁Hello")
        lists += [
            [bos, hello, eos],
            [hello],
            [sp, hello],
            [bos, sp, hello],
            [sp, sp, hello],
            [sp],
            [tok.token_to_id("▁▁"), hello],
            [unk, bos, eos, sp, hello],
            [hello] + byte_ids_mistral(tok, b"\xe4\xbd\xa0") + [sp] + byte_ids_mistral(tok, b"\xff"),
            byte_ids_mistral(tok, b"\xf0\x9f\xa6\x99") + [hello],     # valid emoji from bytes
            byte_ids_mistral(tok, b"\xf0\x9f") + [hello],             # truncated 4-byte sequence
            byte_ids_mistral(tok, b"\x80\x80 \xc0\xaf\x0a"),          # stray continuations, overlong
            byte_ids_mistral(tok, b"a\xffbc") + [hello],              # ASCII bytes in an invalid run
            byte_ids_mistral(tok, b"\x20\x20") + [hello],             # space as a byte token
            byte_ids_mistral(tok, b"\xe2\x96\x81") + [hello],         # U+2581 as bytes
        ]
    for lst in lists:
        assert all(isinstance(i, int) for i in lst), (name, lst)
    return lists


WITH_BOS = ["", "hello", " hello", "Hello world\n", "<s>hello", "<|begin_of_text|>hello"]


def split_vocab_inp(raw):
    """Split a .inp file exactly as llama.cpp's tests/test-tokenizer-0.cpp does."""
    cases, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(VOCAB_SEP, pos)
        if nxt < 0:
            cases.append(raw[pos:])
            break
        cases.append(raw[pos:nxt])
        pos = nxt + len(VOCAB_SEP)
    return cases


def vectors_check(tok):
    base = SHARED / "testvectors" / "llama3-bpe" / "ggml-vocab-llama-bpe"
    inp, out = need(base.with_suffix(".inp")), need(base.with_suffix(".out"))
    cases = split_vocab_inp(inp.read_bytes().decode("utf-8"))
    expected = [[int(x) for x in line.split()] for line in out.read_text(encoding="utf-8").split("\n")]
    if expected and expected[-1] == [] and len(expected) == len(cases) + 1:
        expected.pop()  # the newline that ends the last line
    results, matched = [], 0
    for i, text in enumerate(cases):
        got = ids(tok, text)
        want = expected[i] if i < len(expected) else None
        ok = got == want
        matched += ok
        results.append({"index": i, "ids": got, "matches_out": ok})
        if not ok:
            print(f"  vectors case {i} {text[:60]!r}: HF {got[:20]} .out {want and want[:20]}", file=sys.stderr)
    print(f"vectors check (llama3, {inp.name}): {matched}/{len(cases)} cases equal the .out "
          f"({len(expected)} .out lines)", file=sys.stderr)
    return {"inp": str(inp.relative_to(SHARED)), "inp_sha256": sha256(inp), "out_sha256": sha256(out),
            "cases": len(cases), "out_lines": len(expected), "matched": matched, "results": results}


def section(name, tok, problems):
    sec = {
        "humaneval": [{"task_id": p["task_id"], "prompt": ids(tok, p["prompt"]),
                       "solution": ids(tok, p["canonical_solution"])} for p in problems],
        "corpus": [{"text": t, "ids": ids(tok, t)} for t in CORPUS],
        "with_bos": [{"text": t, "ids": ids(tok, t, special=True)} for t in WITH_BOS],
        "decode": [{"ids": lst, "text": tok.decode(lst, skip_special_tokens=False)}
                   for lst in decode_lists(name, tok)],
    }
    if name == "llama3":
        sec["vectors_check"] = vectors_check(tok)
    return sec


def main():
    he_path, problems = humaneval_problems()
    assert len(problems) == 164, len(problems)
    golden = {
        "source": f"tokenizers {tokenizers.__version__} (tools/gen_tokenizer_golden.py)",
        "humaneval_sha256": sha256(he_path),
    }
    for name in ("llama3", "mistral"):
        tok = Tokenizer.from_file(str(need(SHARED / "tokenizers" / name / "tokenizer.json")))
        golden[name] = section(name, tok, problems)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(golden, ensure_ascii=False, separators=(",", ":")) + "\n"
    tmp = OUT.with_suffix(".json.partial")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    size = OUT.stat().st_size
    counts = {n: {k: len(v) for k, v in golden[n].items() if isinstance(v, list)} for n in ("llama3", "mistral")}
    print(f"wrote {OUT.relative_to(REPO)}: {size} bytes ({size / 1e6:.2f} MB); {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
