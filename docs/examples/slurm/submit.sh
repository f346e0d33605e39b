#!/usr/bin/env bash
# Submits one `bestofn eval` as a SLURM job array of SHARDS tasks (one shard each, --shard
# $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT) and a merge job that starts only when every task
# succeeded (--dependency=afterok). Prints the two job ids.
#
#   MODEL=~/models/Llama-3.1-8B-Instruct-FP8 OUT=$PWD/runs/llama8b SHARDS=4 \
#     EVAL_ARGS="--dataset humaneval -n 100 --temperature 0.8 --k 1,10,100" docs/examples/slurm/submit.sh
#
# Environment (sbatch passes it on to the jobs):
#   MODEL      model directory, on a file system every node sees (required)
#   OUT        output directory on that file system: OUT/shard-I per task, OUT/merged at the end
#   SHARDS     number of array tasks (default 4)
#   EVAL_ARGS  the eval flags, the same for every shard (dataset, -n, sampling, --k, ...)
#   RESOURCES  sbatch resource flags per task (default: one GPU and 16 cores)
#   BESTOFN    the bestofn binary (default: bestofn on PATH)
set -euo pipefail
: "${MODEL:?set MODEL to the model directory}"
export MODEL OUT="${OUT:-$PWD/bestofn-eval}" EVAL_ARGS="${EVAL_ARGS:-}" BESTOFN="${BESTOFN:-bestofn}"
shards="${SHARDS:-4}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT/logs"  # SLURM does not create the directory of --output
# shellcheck disable=SC2086  # RESOURCES is a list of flags
array=$(sbatch --parsable --job-name=bestofn-eval --array="0-$((shards - 1))" ${RESOURCES---gres=gpu:1 --cpus-per-task=16} \
  --output="$OUT/logs/shard-%a.out" "$here/eval-shard.sbatch")
merge=$(sbatch --parsable --job-name=bestofn-merge --dependency="afterok:${array%%;*}" --ntasks=1 --cpus-per-task=1 \
  --output="$OUT/logs/merge.out" "$here/merge.sbatch")
echo "array job $array (shards 0..$((shards - 1))), merge job $merge"
