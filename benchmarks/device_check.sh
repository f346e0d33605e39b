#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (H100 / H200): every gpu test, then the 8B
# benchmarks by CUDA path, the A/Bs and a best-of-100 run, in at most 8 minutes of script
# (DEVICE_CHECK_BUDGET_S, default 480 s; the session has 15 minutes of device time, the machine's
# start of ~2-3 minutes included, and one quick re-run must still fit after it).
#
# Before the call, on the dev machine (no GPU needed):
#   bash benchmarks/device_bundle.sh    # stages .deps/ if needed, builds build-device/ for sm_90a and
#                                       # packs the binaries into .deps/device-bin.tar.xz (~4.5 min from
#                                       # scratch on 2 cores, ~1 min after a small change)
# Then, with the device tool, from the repo root (write the commit literally: the device copy of the
# tree may have no .git):
#   run(command="BESTOFN_COMMIT=<git rev-parse --short=12 HEAD> bash benchmarks/device_check.sh \"$OUT\"",
#       carry=[".deps"], timeout_s=540)
# A quick re-check (~2-3 min: op table, engine tests, the graphs and cascade benches): the same with
# DEVICE_CHECK_QUICK=1 and timeout_s=300. DEVICE_CHECK_PLAN=extra runs the A/Bs that do not fit in
# the full plan (a later session's run). DEVICE_CHECK_PLAN_ONLY=1 prints the plan and stops (no GPU).
#
# The run, in order (benchmarks/GPU_TODO.md; the estimate behind each step's expected time and limit:
# docs/development.md, "The device check"):
#   1. the bundle: unpacked into build-device/, each binary started (--gtest_list_tests, --version,
#      the loader's list); if the bundle is missing, stale (another commit or other sources) or a
#      binary does not start, configure + build here instead (90-150 s: the end of the plan is then
#      skipped, and recorded as skipped);
#   2. correctness: the op table (every row), the engine tests by what changed since 2026-11-30
#      (the default decode path, cascade, small-m, --speculate, Qwen2/3, the rest), the other gpu
#      tests and test_cublas_loader, compute-sanitizer on the op table's new rows;
#   3. the headline: a synthetic Llama-3.1-8B FP8, one bench per CUDA path (reference, graphs,
#      prefix-gemm, cascade, small-m) at N = 1, 64, 256, 1024, HumanEval 164 prompts x 8 (64 tokens)
#      on graphs and cascade;
#   4. the A/Bs (small-m's split layer and PDL, cascade with FP8 KV and with the row kernel's
#      suffixes, --speculate's cost side), then best-of-100 last (20 HumanEval prompts x 100, 200
#      tokens: one batch of 2,000 rows, the steady state of the 164-prompt run; 10 on an H100).
# Each step has its own time limit and records its program's own exit status (output to a file,
# its tail shown; a loop records each configuration); a skipped gpu test (no device seen) is a
# failure. The plan's limits add up to at most the budget; a step that no longer fits is skipped
# and recorded as skipped.
#
# Results (at most 8 files come back): $OUT/summary.json (the plan, every step's record, and the
# paths/winners that benchmarks/device_summary.py adds), summary.md (that page), device_check.log
# (this console, the device's description at its head), ctest_gpu.xml (every test's JUnit record),
# gemm_fp8.json, bench_cuda_8b.jsonl, bench_misc.jsonl, step_logs.tar.gz (each step's whole output:
# memcheck, the generate logs). Commit them under benchmarks/results/<date>-<device>/.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
# shellcheck source=benchmarks/device_check_lib.sh
source benchmarks/device_check_lib.sh

OUT=${1:-${OUT:-$PWD/device-out}}  # the output folder: the first argument, else $OUT
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH

PLAN=${DEVICE_CHECK_PLAN:-full}
[[ ${DEVICE_CHECK_QUICK:-0} == 1 ]] && PLAN=quick
case $PLAN in
  quick) default_budget=240 ;;
  *) default_budget=480 ;;
esac
BUDGET_S=${DEVICE_CHECK_BUDGET_S:-$default_budget}
BUILD=${DEVICE_CHECK_BUILD:-build-device}  # another folder: a try of the fallback here, beside the bundle's
BIN=$ROOT/$BUILD
BUNDLE=${DEVICE_CHECK_BUNDLE:-$ROOT/.deps/device-bin.tar.xz}
SYNTH=/tmp/bestofn-synth-8b
export OUT BIN SYNTH ROOT BUILD BUNDLE
export BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json  # --gemm-autotune's choices, shared by the benches

# The CUDA paths (include/bestofn/backends/cuda_paths.h), each written as its switches on top of
# `--cuda-path reference` (no switch: part 1), so every bench and generate line names its path's
# flags and runs exactly them: without --cuda-path the engine would choose a path per run
# (--cuda-path auto) and add the switches to it. benchmarks/device_summary.py matches a line's
# flags (or its cuda_path field) to these sets exactly. --gemm-autotune rides along on every path
# but reference.
REF="--cuda-path reference"
GRAPHS="$REF --split-attention --fused-qkv --device-sampling --cuda-graphs"
PREFIX_GEMM="$GRAPHS --cuda-prefix-gemm --paged-kv"
CASCADE="$REF --cascade-attention --paged-kv --fused-qkv --device-sampling --cuda-graphs"
SMALL_M="$GRAPHS --small-m-linear"
export REF GRAPHS PREFIX_GEMM CASCADE SMALL_M

# ---- the steps (each runs under dc_step: pipefail, output to its log) ----

# x CMD...: prints the command, then runs it (the logs name every program they ran).
x() {
  echo "+ $*" >&2
  "$@"
}

# to FILE CMD...: CMD's output appended to FILE (its status kept).
to() {
  local file=$1
  shift
  x "$@" >> "$file"
}

device_info() {
  local rc=0
  echo "# nvidia-smi --query-gpu"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv || rc=1
  echo
  echo "# nvcc --version / cmake --version / c++ --version / compute-sanitizer --version"
  nvcc --version | tail -2
  cmake --version | head -1
  c++ --version | head -1
  compute-sanitizer --version | tail -1
  echo "# nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo)"
  echo
  echo "# nvidia-smi -q (head)"
  nvidia-smi -q > "$DC_WORK/nvidia-smi-q.txt" || rc=1
  head -60 "$DC_WORK/nvidia-smi-q.txt"
  return "$rc"
}

bundle() { dc_bundle_prepare "$BUNDLE" "$BUILD" benchmarks/device_targets.txt; }

# The fallback, only when the bundle cannot be used: the same configuration as device_bundle.sh.
device_configure() {
  # g++ 13 there warns where g++ 12 here does not (-Werror): CXXFLAGS is read at configure.
  CXXFLAGS=${CXXFLAGS:--Wno-dangling-reference} x cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DBESTOFN_STAGED_DEPS="$ROOT/.deps" -DBESTOFN_NATIVE=OFF -DBESTOFN_FUZZ=OFF
}
device_build() {
  # shellcheck disable=SC2046  # the target list, one word each
  x cmake --build "$BUILD" -j 16 --target $(grep -v '^#' benchmarks/device_targets.txt | cut -f1)
}

# The op table: every launcher against its CPU twin, one ctest test per row.
gpu_ops() { dc_ctest --test-dir "$BUILD" --timeout 60 -R '^(Table/GpuOp\.|GpuOps\.)'; }

# The engine tests, by what changed since the 2026-11-30 run: the default decode path (step t+1
# prepared during step t, the multi-block device sampler), then --cascade-attention,
# --small-m-linear and its tensor-core form, --speculate on CUDA (runs), Qwen2/3, the rest.
ENGINE_DEFAULT='^GpuEngine\.(NoAllocation|GraphsReplay|DeviceSampling|PrefillMany|Llama260k|Synthetic|Part2|Fp8KvCache|PagedKv)'
ENGINE_CASCADE='^GpuEngine\.Cascade'
ENGINE_SMALL_M='^GpuEngine\.SmallM'
ENGINE_SPECULATE='^GpuEngine\.(Runs|Speculate)'
ENGINE_QWEN='^GpuEngine\.Qwen'
export ENGINE_DEFAULT ENGINE_CASCADE ENGINE_SMALL_M ENGINE_SPECULATE ENGINE_QWEN
gpu_engine() {
  local t=(--test-dir "$BUILD" --timeout 60)
  each default dc_ctest "${t[@]}" -R "$ENGINE_DEFAULT"
  each cascade dc_ctest "${t[@]}" -R "$ENGINE_CASCADE"
  each small-m dc_ctest "${t[@]}" -R "$ENGINE_SMALL_M"
  each speculate dc_ctest "${t[@]}" -R "$ENGINE_SPECULATE"
  each qwen dc_ctest "${t[@]}" -R "$ENGINE_QWEN"
  each rest dc_ctest "${t[@]}" -R '^GpuEngine\.' \
    -E "$ENGINE_DEFAULT|$ENGINE_CASCADE|$ENGINE_SMALL_M|$ENGINE_SPECULATE|$ENGINE_QWEN"
}

# The other gpu test binaries (attention, GEMM, quantization, elementwise, devices) and the cuBLAS
# loader (label cuda-host: it needs the libraries, not the device).
gpu_other() {
  each gpu-rest dc_ctest --test-dir "$BUILD" --timeout 60 -L gpu -E '^(Table/GpuOp\.|GpuOps\.|GpuEngine\.)'
  each cuda-host dc_ctest --test-dir "$BUILD" --timeout 60 -L cuda-host
}

# compute-sanitizer on the op table's rows new since 2026-11-30, in three groups.
memcheck_rows() {
  x compute-sanitizer --tool memcheck --leak-check no --error-exitcode 1 "$BIN/tests/test_gpu_ops" --gtest_filter="$1"
}
memcheck() {
  each -t 15 small-m memcheck_rows '*/linear_fp8_small_m*:*/linear_fp8_mma*'
  each -t 20 cascade+steps memcheck_rows \
    '*/cascade*:*/gather_queries*:*/expand_step*:*/prefill_attention_segments*:*/decode_merge*:*/bias_add*'
  each -t 20 sampler memcheck_rows '*/sample_token*'
}

synth_8b() { x "$BIN/bestofn" make-synthetic --shape llama-3.1-8b --dtype fp8 --seed 0 --out "$SYNTH"; }

gemm_fp8() { x "$BIN/benchmarks/gemm_fp8" --out "$OUT/gemm_fp8.json"; }

# bench_line N_LIST FLAGS...: one bench of the synthetic 8B, prompt 512, 64 timed steps, one JSON
# line per N appended to bench_cuda_8b.jsonl (the line's command names its path's flags).
bench_line() {
  local n=$1
  shift
  x "$BIN/bestofn" bench --model "$SYNTH" --device cuda --n "$n" --prompt-len 512 --steps "${BENCH_STEPS:-64}" "$@" --json \
    >> "$OUT/bench_cuda_8b.jsonl"
}

# The headline: one bench per CUDA path. small-m at its own range (1-64 rows; above it the same
# cuBLASLt GEMMs as graphs); reference (part 1, host sampling) to 256.
# shellcheck disable=SC2086  # the path's flags, one word each
bench_8b() {
  each -t 25 reference bench_line 1,64,256 $REF
  each -t 35 graphs bench_line 1,64,256,1024 --gemm-autotune $GRAPHS
  each -t 25 prefix-gemm bench_line 1,64,256,1024 --gemm-autotune $PREFIX_GEMM
  each -t 25 cascade bench_line 1,64,256,1024 --gemm-autotune $CASCADE
  each -t 20 small-m bench_line 1,8,64 --gemm-autotune $SMALL_M
}
# shellcheck disable=SC2086
bench_8b_quick() {
  each -t 35 graphs bench_line 1,64,256,1024 --gemm-autotune $GRAPHS
  each -t 25 cascade bench_line 1,64,256,1024 --gemm-autotune $CASCADE
}

# generate_he PROMPTS N TOKENS BATCH FLAGS...: the HumanEval prompts through generate on the
# synthetic 8B; its last log line gives output tok/s (benchmarks/device_summary.py reads it).
generate_he() {
  local prompts=$1 n=$2 tokens=$3 batch=$4
  shift 4
  x "$BIN/bestofn" -v generate --model "$SYNTH" --device cuda --tokenizer "$BESTOFN_SHARED/tokenizers/llama3" \
    --prompts "$prompts" -n "$n" --max-new-tokens "$tokens" --batch "$batch" --temperature 1 --gemm-autotune "$@" \
    --out /tmp/bestofn-generate.jsonl
}
HE=${BESTOFN_SHARED:-$ROOT/.deps/shared}/data/humaneval/HumanEval.jsonl.gz
export HE
# The 2026-11-30 throughput run: 164 prompts x 8, 64 new tokens, one batch of 1312.
# shellcheck disable=SC2086
humaneval_8() {
  each -t 22 graphs generate_he "$HE" 8 64 1312 $GRAPHS
  each -t 22 cascade generate_he "$HE" 8 64 1312 $CASCADE
}

# The A/Bs, each against its path in bench_8b: small-m's split layer (13 launches) and PDL; cascade
# with FP8 KV and with its suffixes by the per-row kernel (no --paged-kv); --speculate's cost side
# (K + 1 positions per candidate, host sampling, as generate --speculate runs).
# shellcheck disable=SC2086
ab_8b() {
  each -t 12 small-m-split bench_line 1,8,64 --gemm-autotune $SMALL_M --small-m-split
  each -t 12 small-m-pdl bench_line 1,8,64 --gemm-autotune $SMALL_M --small-m-pdl
  each -t 13 cascade-fp8-kv bench_line 256,1024 --gemm-autotune $CASCADE --kv-cache fp8
  each -t 13 cascade-row-suffix bench_line 256,1024 --gemm-autotune $REF --cascade-attention --fused-qkv --device-sampling \
    --cuda-graphs
  BENCH_STEPS=32 each -t 11 speculate-0 bench_line 1,8,64 --gemm-autotune $REF --split-attention --fused-qkv --cuda-graphs
  BENCH_STEPS=32 each -t 12 speculate-3 bench_line 1,8,64 --gemm-autotune $REF --split-attention --fused-qkv --cuda-graphs \
    --speculate 3
}

# best_of_100 [PROMPTS]: the first PROMPTS HumanEval prompts x 100 candidates, 200 new tokens,
# steps of up to 2,048 rows (issue 32's target run is all 164 prompts: 3.3 M tokens, 160-280 s at
# the cost model's 11.7-20.3k tok/s, more than the budget holds). The full plan runs 20 prompts on
# an H200: one batch of 2,000 rows over 20 prompts, the steady state of the 164-prompt run (2,048
# rows over ~21 prompts a step); their suffixes take 52 GB of BF16 KV, more than --paged-kv's pool
# (half the free memory) holds on an 80 GB H100, which runs 10 prompts (1,000 rows, 26 GB).
# shellcheck disable=SC2086
best_of_100() {
  local prompts=${1:-}
  if [[ -z $prompts ]]; then
    local mib
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null | head -1)
    prompts=$((${mib:-0} >= 120000 ? 20 : 10))
  fi
  gzip -dc "$HE" > /tmp/bestofn-he.jsonl || return 1
  head -n "$prompts" /tmp/bestofn-he.jsonl > /tmp/bestofn-he-part.jsonl || return 1
  each cascade generate_he /tmp/bestofn-he-part.jsonl 100 200 2048 $CASCADE
}

# ---- DEVICE_CHECK_PLAN=extra: what the full plan leaves out, for a later session ----
# shellcheck disable=SC2086
ab_8b_extra() {
  each -t 12 small-m-blocks-1 bench_line 1,8,64 --gemm-autotune $SMALL_M --small-m-blocks-per-sm 1
  each -t 12 small-m-blocks-4 bench_line 1,8,64 --gemm-autotune $SMALL_M --small-m-blocks-per-sm 4
  each -t 12 small-m-fp8-lm-head bench_line 1,8,64 --gemm-autotune $SMALL_M --quantize-lm-head
  BENCH_STEPS=32 each -t 12 speculate-1 bench_line 1,8,64 --gemm-autotune $REF --split-attention --fused-qkv --cuda-graphs \
    --speculate 1
  BENCH_STEPS=32 each -t 14 speculate-7 bench_line 1,8,64 --gemm-autotune $REF --split-attention --fused-qkv --cuda-graphs \
    --speculate 7
  # Issue 34's ratio step(64) / step(1) over 256 tokens.
  BENCH_STEPS=256 each -t 16 graphs-256 bench_line 1,64 --gemm-autotune $GRAPHS
  BENCH_STEPS=256 each -t 16 small-m-256 bench_line 1,64 --gemm-autotune $SMALL_M
}
# shellcheck disable=SC2086
humaneval_8_extra() {
  each -t 30 prefix-gemm generate_he "$HE" 8 64 1312 $PREFIX_GEMM
  each -t 30 small-m generate_he "$HE" 8 64 1312 $SMALL_M
}
misc() {
  local misc=$OUT/bench_misc.jsonl
  each -t 15 sampler-gpu to "$misc" "$BIN/benchmarks/bench_sampler_gpu" --seconds 0.2
  each -t 40 prefill to "$misc" "$BIN/benchmarks/bench_prefill" --model "$SYNTH" --device cuda \
    --tokenizer "$BESTOFN_SHARED/tokenizers/llama3" --data-dir "$BESTOFN_SHARED/data" --tokens 2048,8192 --repeat 2
  each -t 15 llama-260k to "$misc" "$BIN/bestofn" bench --model "$BESTOFN_SHARED/models/llama-260k" --device cuda \
    --n 1,8,64 --prompt-len 64 --steps 64 --json  # --cuda-path auto: the defaults' choice per N
  # The CPU GEMMs bit for bit on the device machine's CPU (its AVX-512 paths, dispatched at run
  # time), and the host sampler there.
  each -t 30 cpu-gemm x "$BIN/tests/test_cpu_gemm"
  each -t 15 sampler-host to "$misc" "$BIN/benchmarks/bench_sampler" --seconds 0.2
}

# ---- the plans: NAME EXPECTED_S LIMIT_S STEP (the estimate: docs/development.md) ----
plan_common() {
  dc_plan device_info 1 5 device_info
  dc_plan bundle 3 10 bundle
}
plan_full() {
  plan_common
  dc_plan gpu_ops 30 45 gpu_ops
  dc_plan gpu_engine 35 48 gpu_engine
  dc_plan gpu_other 15 25 gpu_other
  dc_plan memcheck 25 40 memcheck
  dc_plan synth_8b 18 30 synth_8b
  dc_plan gemm_fp8 2 8 gemm_fp8
  dc_plan bench_8b 70 95 bench_8b
  dc_plan humaneval_8 32 45 humaneval_8
  dc_plan ab_8b 55 68 ab_8b
  dc_plan best_of_100 38 61 best_of_100
}
plan_quick() {
  plan_common
  dc_plan gpu_ops 30 45 gpu_ops
  dc_plan gpu_engine 35 48 gpu_engine
  dc_plan synth_8b 18 30 synth_8b
  dc_plan bench_8b_quick 37 55 bench_8b_quick
}
plan_extra() {
  plan_common
  dc_plan synth_8b 18 30 synth_8b
  dc_plan ab_8b_extra 75 95 ab_8b_extra
  dc_plan humaneval_8_extra 40 60 humaneval_8_extra
  dc_plan misc 45 70 misc
  dc_plan best_of_100_81 125 200 best_of_100 81
}

main() {
  # The command names the commit: the device copy may hold no .git, or an unrelated one above it.
  DC_COMMIT=${BESTOFN_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
  export BESTOFN_COMMIT=$DC_COMMIT  # gemm_fp8 reports it when CMake found no git
  export DC_COMMIT
  DC_SOURCE_DIGEST=$(dc_source_digest "$ROOT")
  export DC_SOURCE_DIGEST
  # ../shared does not travel to the device: the files the gpu tests read are staged in .deps/shared.
  export BESTOFN_SHARED=${BESTOFN_SHARED:-$ROOT/.deps/shared}
  export DC_TAIL_device_info=100 DC_TAIL_gpu_engine=40 DC_TAIL_humaneval_8=30 DC_TAIL_best_of_100=15
  dc_init "$OUT" "$BUDGET_S"
  DC_FALLBACK=("configure 10 60 device_configure" "build 120 ${DEVICE_CHECK_BUILD_LIMIT_S:-300} device_build")
  echo "device_check.sh: plan $PLAN, commit $DC_COMMIT, sources $DC_SOURCE_DIGEST, out $OUT, budget ${BUDGET_S}s"
  "plan_$PLAN"
  if ! dc_plan_show; then
    [[ ${DEVICE_CHECK_PLAN_ONLY:-0} == 1 ]] && return 1
  fi
  [[ ${DEVICE_CHECK_PLAN_ONLY:-0} == 1 ]] && return 0
  echo "fallback, only when the bundle cannot be used: configure (expected 10 s, limit 60 s), build (120 s, 300 s);"
  echo "the steps at the end are then skipped"
  dc_run_plan

  dc_merge_junit "$OUT/ctest_gpu.xml"
  tar -czf "$OUT/step_logs.tar.gz" -C "$DC_WORK" logs
  DC_DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  dc_finish
  local rc=$?
  # The page that decides (paths, winners): summary.md, and the paths section in summary.json.
  if command -v python3 > /dev/null; then
    python3 benchmarks/device_summary.py "$OUT" && cat "$OUT/summary.md"
  fi
  echo
  cat "$OUT/summary.json"
  return "$rc"
}

main 2>&1 | tee "$OUT/device_check.log"
exit "${PIPESTATUS[0]}"
