#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (H200): builds, runs the gpu-labelled tests and
# the benchmarks, and leaves everything under $OUT. It must stay under ~9.5 minutes in all (the
# session's device time is 15 minutes, machine start included): every step has a time limit and
# the whole run a deadline (DEVICE_CHECK_BUDGET_S, default 560 s); a step past the deadline is
# skipped and recorded, a failed step is recorded and the next one still runs.
#
# Before the call, on the dev machine: scripts/stage_deps.sh   (fills .deps/, which is gitignored;
# the GPU machine has a compiler, CUDA and CMake but no Debian dev packages and no network).
# Then, with the device tool, from the repo root:
#   run(command="CXXFLAGS=-Wno-dangling-reference BESTOFN_COMMIT=<12 hex> bash benchmarks/device_check.sh \"$OUT\"",
#       carry=[".deps"], timeout_s=590)
# (write the commit into the command literally: the device copy of the tree may have no .git).
# On 2026-11-30 the full check took ~270 s of script on the H200 (~300 s with the machine's
# start); DEVICE_CHECK_QUICK=1 (the function quick below) ~140 s.
# Results: $OUT/summary.json, device.txt, device_check.log, ctest_gpu.xml, gemm_fp8.json,
# bench_cuda_8b.jsonl, bench_misc.jsonl (llama-260k, the samplers, prefill), memcheck.log (at most 8 files come back); commit
# them under benchmarks/results/<date>-<device>/ (see benchmarks/GPU_TODO.md).
# Future benchmarks: add a `step` line below, with a time limit, and their file under $OUT.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${1:-${OUT:-$PWD/device-out}}  # the output folder: the first argument, else $OUT
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH

BUDGET_S=${DEVICE_CHECK_BUDGET_S:-560}
START_S=$SECONDS
STEPS_JSON=""
FAILED=0

# step NAME MAX_SECONDS COMMAND...: runs COMMAND under a time limit, records its exit status.
step() {
  local name=$1 max_s=$2
  shift 2
  local left=$((BUDGET_S - (SECONDS - START_S)))
  local limit=$((max_s < left ? max_s : left))
  local t0=$SECONDS rc note=""
  echo
  echo "=== [$name] $(date -u +%H:%M:%S) limit ${limit}s: $*"
  if ((limit < 10)); then
    rc=-1
    note="skipped: out of time"
  else
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    ((rc == 124 || rc == 137)) && note="timed out after ${limit}s"
  fi
  ((rc != 0)) && FAILED=1
  echo "=== [$name] rc=$rc $note ($((SECONDS - t0))s)"
  STEPS_JSON+="${STEPS_JSON:+,}{\"step\":\"$name\",\"rc\":$rc,\"seconds\":$((SECONDS - t0)),\"note\":\"$note\"}"
}

# shellcheck disable=SC2317  # run through `bash -c` by step
device_info() {
  local rc=0
  {
    echo "# nvidia-smi --query-gpu"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv || rc=1
    echo
    echo "# nvcc --version"
    nvcc --version
    echo
    echo "# cmake --version / c++ --version"
    cmake --version | head -1
    c++ --version | head -1
    echo
    echo "# nvidia-smi -q (head)"
    nvidia-smi -q | head -80
  } > "$OUT/device.txt" 2>&1
  head -3 "$OUT/device.txt"
  return "$rc"
}

# ctest of the gpu label (and cuda-host: the cuBLAS loader). On the GPU machine a skipped test means the device was not seen: a failure.
# shellcheck disable=SC2317  # run through `bash -c` by step
ctest_gpu() {
  ctest --test-dir build-device -L 'gpu|cuda-host' --output-on-failure --output-junit "$OUT/ctest_gpu.xml"
  local rc=$?
  if grep -qE 'skipped="[1-9]' "$OUT/ctest_gpu.xml" 2>/dev/null; then
    echo "ctest_gpu: gpu tests were skipped (no device seen): counted as a failure"
    rc=1
  fi
  return "$rc"
}

# The whole check: every gpu test, the accuracy record, the GEMM sweep and the benchmarks. Ordered
# by what the open issues need most (benchmarks/GPU_TODO.md): issue 32's new paths and its target
# run first, the old paths beside them for the ratios, then the rest (a step past the deadline is
# skipped and recorded).
full() {
  # What the GPU steps need first; the rest of the tree after them, so a broken CPU-side target
  # cannot cost the GPU results.
  step build_gpu 300 cmake --build build-device -j 16 --target bestofn gemm_fp8 bench_sampler_gpu bench_prefill \
    test_gpu_quantize test_gpu_elementwise test_gpu_attention test_gpu_ops test_gpu_gemm test_gpu_engine test_gpu_devices
  step ctest_gpu 150 bash -c ctest_gpu
  # The measured deviations behind the tolerances (ctest shows a passing test's output only on failure).
  step accuracy 60 bash -c "build-device/tests/test_gpu_gemm | grep -E 'accuracy|OK|FAILED'; build-device/tests/test_gpu_engine \
    --gtest_filter='GpuEngine.Synthetic*:GpuEngine.Llama260k*:GpuEngine.SmallM*:GpuEngine.Runs*' | grep -E 'deviation|sensitivity|OK \]|FAILED'"
  # The FP8 GEMM curve to M = 2048 (benchmarks/cost_model.py reads its large-M throughput).
  step gemm_fp8 120 build-device/benchmarks/gemm_fp8 --out "$OUT/gemm_fp8.json"
  # The engine on a synthetic Llama-3.1-8B FP8 model made here (9 GB, not carried), then on
  # llama-260k (carried in .deps/shared by scripts/stage_deps.sh).
  step synth_8b 120 build-device/bestofn make-synthetic --shape llama-3.1-8b --dtype fp8 --seed 0 --out /tmp/bestofn-synth-8b
  # Issue 32: --cascade-attention (FlashInfer's prefix kernel, paged suffixes, graphs by bucket, the
  # multi-block sampler) at N = 1 .. 1024, prompt 512 (target: attention <= 2 ms at N = 256; the
  # per-kernel-group split is in split_detail_ms_per_step); then today's best path (tiled) on the
  # same points, for the ratios.
  step bench_8b_cascade 120 bash -c "BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json build-device/bestofn bench \
    --model /tmp/bestofn-synth-8b --device cuda --n 1,64,256,1024 --prompt-len 512 --steps 64 --cascade-attention --paged-kv \
    --fused-qkv --gemm-autotune --device-sampling --cuda-graphs --json > $OUT/bench_cuda_8b.jsonl"
  step bench_8b_graphs 120 bash -c "BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json build-device/bestofn bench \
    --model /tmp/bestofn-synth-8b --device cuda --n 1,64,256,1024 --prompt-len 512 --steps 64 --split-attention --fused-qkv \
    --gemm-autotune --device-sampling --cuda-graphs --json >> $OUT/bench_cuda_8b.jsonl"
  # Issue 32's target: best-of-100 over the 164 HumanEval prompts, 200 new tokens each (the log
  # line gives output tok/s; target 50k; benchmarks/cost_model.py predicted it before the run).
  step humaneval_best_of_100 240 bash -c "build-device/bestofn -v generate --model /tmp/bestofn-synth-8b --device cuda \
    --tokenizer $BESTOFN_SHARED/tokenizers/llama3 --prompts $BESTOFN_SHARED/data/humaneval/HumanEval.jsonl.gz -n 100 \
    --max-new-tokens 200 --batch 2048 --temperature 1 --cascade-attention --fused-qkv --gemm-autotune --paged-kv \
    --device-sampling --cuda-graphs --out /tmp/humaneval-100.jsonl 2>&1 | tail -5"
  # The 2026-11-30 throughput run (164 prompts x 8, 64 tokens, one batch of 1312), new path and old.
  step humaneval_gen_cascade 90 bash -c "build-device/bestofn -v generate --model /tmp/bestofn-synth-8b --device cuda \
    --tokenizer $BESTOFN_SHARED/tokenizers/llama3 --prompts $BESTOFN_SHARED/data/humaneval/HumanEval.jsonl.gz -n 8 \
    --max-new-tokens 64 --batch 1312 --temperature 1 --cascade-attention --fused-qkv --gemm-autotune --paged-kv \
    --device-sampling --cuda-graphs --out /tmp/humaneval-gen.jsonl 2>&1 | tail -5"
  step humaneval_gen_tiled 90 bash -c "build-device/bestofn -v generate --model /tmp/bestofn-synth-8b --device cuda \
    --tokenizer $BESTOFN_SHARED/tokenizers/llama3 --prompts $BESTOFN_SHARED/data/humaneval/HumanEval.jsonl.gz -n 8 \
    --max-new-tokens 64 --batch 1312 --temperature 1 --fused-qkv --gemm-autotune --paged-kv \
    --device-sampling --cuda-graphs --split-attention --out /tmp/humaneval-gen.jsonl 2>&1 | tail -5"
  # The new sampler against the one-block-per-row one (T = 1, 64, 1024; host_differ must be 0).
  step bench_sampler_gpu 90 bash -c "build-device/benchmarks/bench_sampler_gpu --seconds 0.2 > $OUT/bench_misc.jsonl"
  # Batched prefill against one prompt at a time, the 164 HumanEval prompts.
  step bench_prefill 120 bash -c "build-device/benchmarks/bench_prefill --model /tmp/bestofn-synth-8b --device cuda \
    --tokenizer $BESTOFN_SHARED/tokenizers/llama3 --data-dir $BESTOFN_SHARED/data --tokens 2048,8192 --repeat 2 \
    >> $OUT/bench_misc.jsonl"
  # The older shared-prefix path (cuBLAS GEMMs per group), and FP8 KV on the new one.
  step bench_8b_graphs_prefix 90 bash -c "BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json build-device/bestofn bench \
    --model /tmp/bestofn-synth-8b --device cuda --n 64,256 --prompt-len 512 --steps 64 --cuda-prefix-gemm --fused-qkv \
    --gemm-autotune --paged-kv --device-sampling --cuda-graphs --split-attention --json >> $OUT/bench_cuda_8b.jsonl"
  step bench_8b_cascade_fp8kv 90 bash -c "BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json build-device/bestofn bench \
    --model /tmp/bestofn-synth-8b --device cuda --n 256,1024 --prompt-len 512 --steps 64 --cascade-attention --paged-kv \
    --fused-qkv --gemm-autotune --device-sampling --cuda-graphs --kv-cache fp8 --json >> $OUT/bench_cuda_8b.jsonl"
  # The suffix side's A/B: bench_8b_cascade without --paged-kv, its suffixes by today's per-row
  # kernel instead of FlashInfer's paged decode (GPU_TODO.md, issue 32 item 5).
  step bench_8b_cascade_rowkernel 60 bash -c "BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json build-device/bestofn bench \
    --model /tmp/bestofn-synth-8b --device cuda --n 256,1024 --prompt-len 512 --steps 64 --cascade-attention \
    --fused-qkv --gemm-autotune --device-sampling --cuda-graphs --json >> $OUT/bench_cuda_8b.jsonl"
  # Issue 34's ratio, step(64) / step(1) over 256 tokens, on the best small-batch configuration.
  step bench_8b_graphs_256 60 bash -c "BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json build-device/bestofn bench \
    --model /tmp/bestofn-synth-8b --device cuda --n 1,64 --prompt-len 512 --steps 256 --split-attention --fused-qkv \
    --gemm-autotune --device-sampling --cuda-graphs --json >> $OUT/bench_cuda_8b.jsonl"
  # Issue 34: --small-m-linear against cuBLASLt side by side (N = 1, 4, 8 on CUDA cores, 16 and 64
  # on its tensor-core kernel; 128 steps over a 512-token prompt): ms per step,
  # gb_per_s_frac_of_copy, the split (gemm: the linear layers),
  # graph_nodes (the launches of a step); cuBLASLt, the split small-m layer (13 launches), the
  # fused one (6), the fused one's grid cap at 1 and 4 blocks per SM, with PDL and L2 prefetch, and
  # with the FP8 lm_head.
  step bench_8b_small_m 240 bash -c "for f in '' '--small-m-linear --small-m-split' --small-m-linear \
    '--small-m-linear --small-m-blocks-per-sm 1' '--small-m-linear --small-m-blocks-per-sm 4' '--small-m-linear --small-m-pdl' \
    '--small-m-linear --quantize-lm-head'; \
    do BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json \
    build-device/bestofn bench --model /tmp/bestofn-synth-8b --device cuda --n 1,4,8,16,64 --prompt-len 512 --steps 128 \
    --split-attention --fused-qkv --gemm-autotune --cuda-graphs \$f --json; done >> $OUT/bench_cuda_8b.jsonl"
  # Issue 35's cost side: steps of K + 1 positions per candidate (K = 0, 1, 3, 7) at N = 1, 8, 64.
  step bench_8b_speculate 120 bash -c "for k in 0 1 3 7; do BESTOFN_GEMM_CACHE=/tmp/bestofn-gemm-algos.json \
    build-device/bestofn bench --model /tmp/bestofn-synth-8b --device cuda --n 1,8,64 --prompt-len 512 --steps 32 \
    --split-attention --fused-qkv --gemm-autotune --cuda-graphs --speculate \$k --json; done >> $OUT/bench_cuda_8b.jsonl"
  # The new paths under compute-sanitizer.
  step memcheck 90 bash -c "compute-sanitizer --tool memcheck --error-exitcode 1 build-device/tests/test_gpu_ops \
    --gtest_filter='*/cascade*:*/gather_queries*:*/sample_token*:*/expand_step*:*/prefill_attention_segments*:*/linear_fp8_small_m*:*/linear_fp8_mma*:*/decode_merge*' > $OUT/memcheck.log 2>&1 && \
    compute-sanitizer --tool memcheck --error-exitcode 1 build-device/tests/test_gpu_engine \
    --gtest_filter='GpuEngine.Cascade*:GpuEngine.GraphsReplay*:GpuEngine.PrefillMany*:GpuEngine.Runs*:GpuEngine.SmallM*' >> $OUT/memcheck.log 2>&1"
  step bench_260k 30 bash -c "build-device/bestofn bench --model $BESTOFN_SHARED/models/llama-260k --device cuda --n 1,8,64 \
    --prompt-len 64 --steps 64 --json >> $OUT/bench_misc.jsonl"
  # Part 1 (no flags) for reference, as on 2026-11-30.
  step bench_8b_part1 90 bash -c "build-device/bestofn bench --model /tmp/bestofn-synth-8b --device cuda --n 1,64,256 \
    --prompt-len 512 --steps 64 --json >> $OUT/bench_cuda_8b.jsonl"
  step build_all 120 cmake --build build-device -j 16
  # The CPU GEMMs bit for bit on the device machine's CPU (likely AVX-512, which the dev VMs
  # may lack: GPU_TODO), and the host sampler there.
  step cpu_gemm 30 build-device/tests/test_cpu_gemm
  step bench_sampler 30 bash -c "build-device/benchmarks/bench_sampler --seconds 0.2 >> $OUT/bench_misc.jsonl"
}

# DEVICE_CHECK_QUICK=1: a short re-check after a kernel change, for a session's last minutes of
# device time: the attention and engine tests and the two main 8B configurations only.
quick() {
  step build_quick 200 cmake --build build-device -j 16 --target bestofn test_gpu_ops test_gpu_attention test_gpu_engine
  step tests_quick 90 bash -c "build-device/tests/test_gpu_ops && build-device/tests/test_gpu_attention && build-device/tests/test_gpu_engine \
    --gtest_filter='GpuEngine.Llama260k*:GpuEngine.GraphsReplay*:GpuEngine.Synthetic*:GpuEngine.Part2*:GpuEngine.Fp8Kv*:GpuEngine.Cascade*:GpuEngine.PrefillMany*'"
  step synth_8b 60 build-device/bestofn make-synthetic --shape llama-3.1-8b --dtype fp8 --seed 0 --out /tmp/bestofn-synth-8b
  step bench_8b_cascade 90 bash -c "build-device/bestofn bench --model /tmp/bestofn-synth-8b --device cuda --n 1,64,256,1024 \
    --prompt-len 512 --steps 64 --cascade-attention --paged-kv --fused-qkv --device-sampling --cuda-graphs --json > $OUT/bench_cuda_8b.jsonl"
  step bench_8b_graphs 90 bash -c "build-device/bestofn bench --model /tmp/bestofn-synth-8b --device cuda --n 1,64,256,1024 \
    --prompt-len 512 --steps 64 --split-attention --fused-qkv --device-sampling --cuda-graphs --json >> $OUT/bench_cuda_8b.jsonl"
}

main() {
  # The command names the commit: the device copy may hold no .git, or an unrelated one above it.
  COMMIT=${BESTOFN_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
  export BESTOFN_COMMIT=$COMMIT  # gemm_fp8 reports it when CMake found no git
  echo "device_check.sh: commit $COMMIT, out $OUT, budget ${BUDGET_S}s"

  # ../shared does not travel to the device: the files the gpu tests read are staged in .deps/shared.
  export BESTOFN_SHARED=${BESTOFN_SHARED:-$PWD/.deps/shared}
  export OUT
  export -f device_info ctest_gpu
  step device_info 30 bash -c device_info
  step configure 90 cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DBESTOFN_STAGED_DEPS="$PWD/.deps"
  if [[ ${DEVICE_CHECK_QUICK:-0} == 1 ]]; then quick; else full; fi

  local device
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  printf '{"date":"%s","device":"%s","commit":"%s","ok":%s,"seconds":%d,"steps":[%s]}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${device:-none}" "$COMMIT" "$([[ $FAILED == 0 ]] && echo true || echo false)" \
    $((SECONDS - START_S)) "$STEPS_JSON" > "$OUT/summary.json"
  echo
  cat "$OUT/summary.json"
  return $FAILED
}

main 2>&1 | tee "$OUT/device_check.log"
exit "${PIPESTATUS[0]}"
