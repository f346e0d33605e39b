#!/usr/bin/env bash
# Seeds a libFuzzer corpus for the safetensors header parser from real files:
#   scripts/fuzz_corpus.sh OUT_DIR BESTOFN_BINARY
# the HF-written fixture, the head of ../shared's llama-260k checkpoint, and synthetic checkpoints
# (F32, FP8, sharded) made by the binary under test.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$1"
bin="$2"
rm -rf "$out"
mkdir -p "$out"
cp "$repo/tests/data/hf_writer.safetensors" "$out/hf_writer"
shared="${BESTOFN_SHARED:-$repo/../shared}"
head -c 4096 "$shared/models/llama-260k/model.safetensors" > "$out/llama260k_head"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin" -q make-synthetic --shape tiny --dtype f32 --out "$tmp/f32" >/dev/null
"$bin" -q make-synthetic --shape tiny --dtype fp8 --fp8-scheme tensor --out "$tmp/fp8" --max-shard-size 100kB >/dev/null
head -c 4096 "$tmp/f32/model.safetensors" > "$out/synthetic_f32_head"
for f in "$tmp"/fp8/model-0000[12]-*.safetensors; do head -c 4096 "$f" > "$out/synthetic_fp8_$(basename "$f" .safetensors)"; done
