#!/usr/bin/env bash
# The CPU engine's outputs for a fixed set of commands, as one SHA-256 per command: run it before
# and after a change that must not change behaviour (an engine refactor) and compare the lines.
#
#   benchmarks/cpu_fingerprint.sh [BESTOFN] [MODEL_DIR] > before.txt
#
# BESTOFN: default build/bestofn; MODEL_DIR: default .models/smollm2-135m-instruct (scripts/setup.sh
# fetches it). Each line: the command's name, the SHA-256 of what it wrote, and the command. What is
# hashed: generate's JSONL (text, tokens, log-probabilities, finish reasons), eval's samples.jsonl
# and results.jsonl, sorted (the candidates and their verdicts; summary.json holds times and is left out),
# bench's JSON lines without its timings nor the CPU kernels the machine picked (the CPU engine's
# kernels give the same bits on every instruction set; the kernels are the first line, a comment,
# so that runs on two machines compare line for line). A run takes about a minute on 2 cores.
set -euo pipefail
bestofn=${1:-build/bestofn}
model=${2:-.models/smollm2-135m-instruct}
data=${BESTOFN_SHARED:-../shared}/data
[[ -x $bestofn ]] || { echo "cpu_fingerprint.sh: $bestofn: not an executable (build it first)" >&2; exit 1; }
[[ -f $model/config.json ]] || { echo "cpu_fingerprint.sh: $model: no config.json (scripts/fetch_smollm2.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

line() {  # name, file to hash, the command that wrote it
  local name=$1 file=$2
  shift 2
  printf '%s %s %s\n' "$name" "$(sha256sum <"$file" | cut -d' ' -f1)" "$*"
}

kernels=$("$bestofn" bench --synthetic tiny --n 1 --steps 1 --prompt-len 8 --threads 1 --json 2>/dev/null |
  python3 -c 'import json, sys; print(json.dumps(json.loads(sys.stdin.readline()).get("cpu_kernels"), sort_keys=True))')
echo "# cpu kernels on this machine: $kernels"

prompts=data/prompts/functions.jsonl
run_generate() {  # name, extra flags
  local name=$1
  shift
  local cmd=("$bestofn" generate --model "$model" --prompts "$prompts" --max-new-tokens 24 --seed 7 --threads 2 "$@")
  "${cmd[@]}" >"$work/$name.jsonl" 2>/dev/null
  line "$name" "$work/$name.jsonl" "${cmd[@]}"
}
sampled=(-n 6 --temperature 0.8)
run_generate generate-bf16 "${sampled[@]}" --batch 64
run_generate generate-bf16-batch-5 "${sampled[@]}" --batch 5
run_generate generate-fp8 "${sampled[@]}" --quantize fp8 --batch 64
run_generate generate-fp8-kv-fp8 "${sampled[@]}" --quantize fp8 --kv-cache fp8 --batch 64
run_generate generate-speculate-4 "${sampled[@]}" --quantize fp8 --speculate 4 --batch 64
run_generate generate-greedy --quantize fp8 --temperature 0 -n 2 --prefill-tokens 16

cmd=("$bestofn" eval --model "$model" --dataset humaneval --data-dir "$data" --limit 3 -n 3 --k 1,3 --temperature 0.8
     --max-new-tokens 64 --quantize fp8 --threads 2 --workers 1 --out-dir "$work/eval")
"${cmd[@]}" >/dev/null 2>&1
# Rows in the order they finished (verification overlaps generation): sorted before hashing.
sort "$work/eval/samples.jsonl" >"$work/samples.sorted"
sort "$work/eval/results.jsonl" >"$work/results.sorted"
line eval-samples "$work/samples.sorted" "${cmd[@]}"
line eval-results "$work/results.sorted" "${cmd[@]}"

# A bench run's shape (sizes, kernels, precision, N), not its times nor where and when it ran.
run_bench() {  # name, flags
  local name=$1
  shift
  local cmd=("$bestofn" bench --synthetic tiny --n 1,4 --steps 2 --prompt-len 32 --threads 2 --json "$@")
  "${cmd[@]}" 2>/dev/null | python3 -c '
import json, sys
drop = ("commit", "command", "model", "machine", "cpu_kernels")
for l in sys.stdin:
    r = json.loads(l)
    print(json.dumps({k: v for k, v in r.items() if k not in drop and not any(w in k for w in ("ms", "per_s", "_ns", "gb_", "tflop"))}, sort_keys=True))
' >"$work/$name.jsonl"
  [[ -s $work/$name.jsonl ]] || { echo "cpu_fingerprint.sh: bench wrote nothing: ${cmd[*]}" >&2; exit 1; }
  line "$name" "$work/$name.jsonl" "${cmd[@]}"
}
run_bench bench-shape
run_bench bench-speculate-shape --speculate 3
