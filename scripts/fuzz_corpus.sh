#!/usr/bin/env bash
# Seeds the libFuzzer corpus of one fuzz target from real files:
#   scripts/fuzz_corpus.sh TARGET OUT_DIR BESTOFN_BINARY
# Sources: ../shared (BESTOFN_SHARED overrides: the llama-260k checkpoint and config, the Llama 3 and
# Mistral tokenizers, HumanEval, HumanEval+ and MBPP), the repository's fixtures, and synthetic
# checkpoints made by the binary under test. Large files are cut down (python3) to inputs of a few
# KB that keep their structure, so that mutations reach past the first bytes.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
target="$1"
out="$2"
bin="$3"
shared="${BESTOFN_SHARED:-$repo/../shared}"
rm -rf "$out"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# A sharded synthetic checkpoint (FP8, per-tensor scales, 2 shards with an index).
sharded() {
  "$bin" -q make-synthetic --shape tiny --dtype fp8 --fp8-scheme tensor --out "$1" --max-shard-size 100kB >/dev/null
}

case "$target" in
  safetensors)
    cp "$repo/tests/data/hf_writer.safetensors" "$out/hf_writer"
    head -c 4096 "$shared/models/llama-260k/model.safetensors" > "$out/llama260k_head"
    "$bin" -q make-synthetic --shape tiny --dtype f32 --out "$tmp/f32" >/dev/null
    sharded "$tmp/fp8"
    head -c 4096 "$tmp/f32/model.safetensors" > "$out/synthetic_f32_head"
    for f in "$tmp"/fp8/model-0000[12]-*.safetensors; do head -c 4096 "$f" > "$out/synthetic_fp8_$(basename "$f" .safetensors)"; done
    ;;
  safetensors_index)
    # The fuzz test links this model's shards beside each input (BESTOFN_FUZZ_MODEL).
    rm -rf "$out-model"
    sharded "$out-model"
    cp "$out-model/model.safetensors.index.json" "$out/synthetic_index"
    python3 - "$out-model/model.safetensors.index.json" "$out" <<'PY'
import json, sys
idx = json.load(open(sys.argv[1]))
names = sorted(idx["weight_map"])
small = {"weight_map": {n: idx["weight_map"][n] for n in names[:3] + names[-3:]}}
json.dump(small, open(sys.argv[2] + "/subset_index", "w"))
json.dump({"metadata": idx.get("metadata", {}), "weight_map": {n: idx["weight_map"][n] for n in names[-2:]}},
          open(sys.argv[2] + "/with_metadata", "w"), indent=2)
PY
    ;;
  model_config)
    cp "$shared/models/llama-260k/config.json" "$out/llama260k"
    for d in "$repo"/tests/data/engine/*/; do cp "$d/config.json" "$out/engine_$(basename "$d")"; done
    for dtype in f32 fp8; do
      "$bin" -q make-synthetic --shape tiny --dtype "$dtype" --out "$tmp/tiny-$dtype" >/dev/null
      cp "$tmp/tiny-$dtype/config.json" "$out/synthetic_tiny_$dtype"
      cp "$tmp/tiny-$dtype/generation_config.json" "$out/generation_tiny_$dtype"
    done
    ;;
  tokenizer_json)
    # Each real tokenizer.json with its vocabulary cut to the byte tokens, the first ids and the
    # added tokens, and the merges among those.
    python3 - "$shared/tokenizers" "$out" <<'PY'
import json, sys
for name in ("llama3", "mistral"):
    t = json.load(open(f"{sys.argv[1]}/{name}/tokenizer.json"))
    vocab = t["model"]["vocab"]
    keep = {tok for tok, i in vocab.items() if i < 300 or (len(tok) == 1 and ord(tok) < 0x250)}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in keep and b in keep and a + b in keep:
            merges.append(m)
        if len(merges) >= 60:
            break
    for m in t["model"]["merges"][:40]:  # the first merges, with what they need
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        keep |= {a, b, a + b}
        if m not in merges:
            merges.append(m)
    ids = sorted(vocab[tok] for tok in keep)
    renum = {old: new for new, old in enumerate(ids)}
    t["model"]["vocab"] = {tok: renum[vocab[tok]] for tok in keep}
    t["model"]["merges"] = merges
    added = []
    for a in t["added_tokens"][:4]:
        a = dict(a)
        a["id"] = renum.get(a["id"], len(ids) + len(added))
        added.append(a)
    t["added_tokens"] = added
    if isinstance(t.get("post_processor"), dict):
        t["post_processor"] = None
    json.dump(t, open(f"{sys.argv[2]}/{name}", "w"), ensure_ascii=False)
    t["model"]["merges"] = [m.split(" ", 1) if isinstance(m, str) else m for m in merges]  # the pair form
    json.dump(t, open(f"{sys.argv[2]}/{name}_pairs", "w"), ensure_ascii=False)
    # The other pre-tokenizers and decoders (tests/test_tokenizer_constructs.cpp): SmolLM2's
    # Digits + GPT-2 ByteLevel with empty affixes, and Metaspace.
    if name == "llama3":
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                              {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}]}
        t["model"].update(continuing_subword_prefix="", end_of_word_suffix="", ignore_merges=False, unk_token=None)
        t["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
        json.dump(t, open(f"{sys.argv[2]}/{name}_digits_bytelevel", "w"), ensure_ascii=False)
    else:
        t["normalizer"] = None
        t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
        t["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]}
        json.dump(t, open(f"{sys.argv[2]}/{name}_metaspace", "w"), ensure_ascii=False)
PY
    ;;
  tokenizer)
    # Mode byte (bit 0: Mistral, bit 1: ids) + text: code, the llama.cpp vectors, multilingual text.
    python3 - "$shared" "$repo" "$out" <<'PY'
import gzip, json, sys, os
shared, repo, out = sys.argv[1:]
texts = []
for line in gzip.open(f"{shared}/data/humaneval/HumanEval.jsonl.gz", "rt"):
    p = json.loads(line)
    texts += [p["prompt"], p["canonical_solution"]]
    if len(texts) >= 12:
        break
texts += open(f"{shared}/testvectors/llama3-bpe/ggml-vocab-llama-bpe.inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
golden = json.load(open(f"{repo}/tests/data/tokenizer_golden.json"))
texts += [c["text"] for c in golden["llama3"]["corpus"] + golden["llama3"]["with_bos"]][:60]
for i, t in enumerate(t for t in texts if t and len(t.encode()) < 4000):
    b = t.encode("utf-8")
    for mode in (0, 1):
        open(f"{out}/text{mode}_{i}", "wb").write(bytes([mode]) + b)
for mode in (2, 3):  # id sequences: the first ids, and bytes of a prompt as ids
    open(f"{out}/ids{mode}_seq", "wb").write(bytes([mode]) + b"".join(i.to_bytes(3, "big") for i in range(0, 3000, 7)))
    open(f"{out}/ids{mode}_text", "wb").write(bytes([mode]) + texts[0].encode()[:900])
PY
    ;;
  datasets)
    # Mode byte (0: .jsonl, 1: .json, 2: .jsonl.gz) + the file.
    python3 - "$shared/data" "$out" <<'PY'
import gzip, json, sys
data, out = sys.argv[1:]
he = gzip.open(f"{data}/humaneval/HumanEval.jsonl.gz", "rt").read().splitlines()
for i in range(0, 40, 8):
    open(f"{out}/humaneval_{i}", "w").write("\x00" + "\n".join(he[i:i + 2]) + "\n")
plus = [l for l in gzip.open(f"{data}/humanevalplus/HumanEvalPlus-Mini.jsonl.gz", "rt").read().splitlines() if len(l) < 12000]
for i, l in enumerate(plus[:6]):
    open(f"{out}/humanevalplus_{i}", "w").write("\x00" + l + "\n")
mbpp = json.load(open(f"{data}/mbpp/sanitized-mbpp.json"))
for i in range(0, 30, 6):
    open(f"{out}/mbpp_{i}", "w").write("\x01" + json.dumps(mbpp[i:i + 2]))
open(f"{out}/humaneval_gz", "wb").write(b"\x02" + gzip.compress(("\n".join(he[:1]) + "\n").encode()))
PY
    ;;
  samples_jsonl)
    python3 - "$shared/data" "$out" <<'PY'
import gzip, json, sys
data, out = sys.argv[1:]
he = [json.loads(l) for l in gzip.open(f"{data}/humaneval/HumanEval.jsonl.gz", "rt")]
for i in range(0, 20, 4):
    rows = [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in he[i:i + 3]]
    open(f"{out}/samples_{i}", "w").write("\n".join(json.dumps(r) for r in rows) + "\n\n")
open(f"{out}/prompts", "w").write("\n".join(json.dumps({"id": p["task_id"], "prompt": p["prompt"], "stop": ["\ndef "], "n": 2}) for p in he[:2]) + "\n")
open(f"{out}/gz", "wb").write(gzip.compress(json.dumps({"task_id": he[0]["task_id"], "completion": "    pass\n"}).encode()))
PY
    ;;
  stop_strings)
    # Count byte (stops in the low bits, the split between the two lists above) + fields split by 0xFF:
    # HumanEval's stop strings on real solutions, cut into pieces as a tokenizer would.
    python3 - "$shared/data" "$out" <<'PY'
import gzip, json, sys
data, out = sys.argv[1:]
he = [json.loads(l) for l in gzip.open(f"{data}/humaneval/HumanEval.jsonl.gz", "rt")]
stops = [b"\ndef ", b"\nclass ", b"\nif __name__", b"\nprint("]
for i, p in enumerate(he[:16]):
    text = (p["canonical_solution"] + "\n\ndef helper():\n    pass\n").encode()
    pieces = [text[k:k + 3 + (k % 5)] for k in range(0, len(text), 3 + 0)]
    n = 1 + i % 4
    open(f"{out}/he_{i}", "wb").write(bytes([n | ((i % (n + 1)) << 3)]) + b"\xff".join(stops[:n] + pieces))
PY
    ;;
  utf8)
    # Cut seed byte + text: multilingual and emoji text from the tokenizer goldens, and broken UTF-8.
    python3 - "$repo" "$out" <<'PY'
import json, sys
repo, out = sys.argv[1:]
text = open(f"{repo}/tests/data/tokenizer_golden.json", encoding="utf-8").read()
wide = "".join(ch for ch in text if ord(ch) > 0x7f)
for i in range(0, min(len(wide), 2000), 250):
    open(f"{out}/golden_{i}", "wb").write(bytes([i % 251]) + wide[i:i + 250].encode())
bad = [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x99", b"\xe2\x82", b"\x80\xbf", b"\xff\xfe"]
open(f"{out}/malformed", "wb").write(b"\x07" + b"ok ".join(bad) + "é€😀".encode())
PY
    ;;
  *)
    echo "fuzz_corpus.sh: unknown target '$target'" >&2
    exit 2
    ;;
esac
n=$(find "$out" -type f | wc -l)
[ "$n" -gt 0 ] || { echo "fuzz_corpus.sh: no seeds for $target" >&2; exit 1; }
echo "fuzz_corpus.sh: $n seeds for $target in $out"
