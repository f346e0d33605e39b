#!/usr/bin/env bash
# The real SLURM test: a one-node cluster from Debian's packages (munged, slurmctld, slurmd) started
# here with a minimal slurm.conf in a temporary directory, the 4-task job array of
# docs/examples/slurm/submit.sh running `bestofn eval --shard` on a synthetic tiny model, its merge
# job (--dependency=afterok), and the merged output compared with an unsharded run's: samples by
# (task_id, index), results and pass@k. Everything it started is killed and its directory removed
# on every way out.
#
#   tests/slurm/run_slurm_test.sh BESTOFN_BINARY [SHARED_DIR]
#
# Exit 0 pass, 1 fail, 77 skipped (no slurm packages, or not root). Needs: apt-get install
# slurmctld slurmd slurm-client munge (scripts/setup.sh installs them).
set -euo pipefail
bestofn="$(realpath "$1")"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
shared="$(realpath -m "${2:-${BESTOFN_SHARED:-$repo/../shared}}")"
if [ ! -f "$shared/tokenizers/llama3/tokenizer.json" ] && [ "${BESTOFN_REQUIRE_TEST_DATA:-}" != 1 ]; then
  echo "SKIP: $shared/tokenizers/llama3/tokenizer.json is missing (the tests read ../shared beside the checkout)"
  exit 77
fi

for tool in munged slurmctld slurmd sbatch squeue sinfo; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not found (apt-get install slurmctld slurmd slurm-client munge)"
    exit 77
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: the test cluster's daemons run as root"
  exit 77
fi

tmp="$(mktemp -d /tmp/bestofn-slurm.XXXXXX)"
pids=()
cleanup() {
  local rc=$?
  # Cancel what is left of the jobs while the controller is up, then stop the daemons we started.
  [ -f "$tmp/slurm.conf" ] && SLURM_CONF="$tmp/slurm.conf" timeout 10 scancel --quiet --user=root 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    for log in "$tmp"/*.log "$tmp"/out/logs/*.out; do
      [ -f "$log" ] && { echo "---- $log"; tail -n 30 "$log"; }
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

wait_for() {  # wait_for SECONDS WHAT COMMAND...: polls until COMMAND succeeds
  local limit=$1 what=$2
  shift 2
  for _ in $(seq $((limit * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "FAIL: timed out after ${limit}s waiting for $what"
  return 1
}

# A model and the unsharded reference run.
"$bestofn" make-synthetic --shape tiny --dtype bf16 --seed 7 --out "$tmp/tiny" \
  --tokenizer "$shared/tokenizers/llama3/tokenizer.json" >/dev/null
eval_args="--dataset humaneval --data-dir $shared/data --device cpu --threads 1 --workers 1 -n 6 --limit 5 --k 1,2,6 \
--temperature 0.9 --seed 21 --max-new-tokens 24"
# shellcheck disable=SC2086
"$bestofn" eval --model "$tmp/tiny" $eval_args --out-dir "$tmp/whole" >/dev/null

# munge, on its own socket and key.
mkdir -p "$tmp/munge" && chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key" && chmod 600 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/socket" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/seed" --log-file="$tmp/munged.log" >>"$tmp/munged.log" 2>&1 &
pids+=($!)
wait_for 10 "munged's socket" test -S "$tmp/munge/socket"

# slurm.conf: this host, its cores, no accounting, state and logs in $tmp, ports of our own.
host="$(hostname -s)"
port=$((20000 + ($$ % 4000) * 2))
while ss -ltn 2>/dev/null | grep -qE ":($port|$((port + 1)))\b"; do port=$((port + 2)); done
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/out"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=bestofn-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SwitchType=switch/none
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
PlugStackConfig=$tmp/plugstack.conf
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
: >"$tmp/plugstack.conf"
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >>"$tmp/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >>"$tmp/slurmd.log" 2>&1 &
pids+=($!)
wait_for 60 "the node to be idle" bash -c "sinfo -h -N -o %T | grep -qx idle"

# The documented submission, as a user would run it: 4 array tasks, then the merge.
submitted=$(MODEL="$tmp/tiny" OUT="$tmp/out" SHARDS=4 BESTOFN="$bestofn" EVAL_ARGS="$eval_args" \
  RESOURCES="--ntasks=1 --cpus-per-task=1" "$repo/docs/examples/slurm/submit.sh")
echo "$submitted"
merge_job="${submitted##* }"
array_job=$(echo "$submitted" | awk '{print $3}')
# The merge waits for the array: while any array task is still queued or running, it must be pending.
if squeue -h -j "${array_job%%;*}" -o %i | grep -q .; then
  state=$(squeue -h -j "$merge_job" -o %T)
  [ "$state" = PENDING ] || { echo "FAIL: the merge job is $state while the array runs"; exit 1; }
fi
wait_for 300 "the jobs to finish" bash -c "! squeue -h -o %i | grep -q ."

for i in 0 1 2 3; do
  [ -f "$tmp/out/shard-$i/summary.json" ] || { echo "FAIL: shard $i did not finish"; exit 1; }
done
[ -f "$tmp/out/merged/summary.json" ] || { echo "FAIL: the merge job wrote no summary"; exit 1; }

python3 - "$tmp/whole" "$tmp/out" <<'EOF'
import json, sys
whole, out = sys.argv[1], sys.argv[2]
def rows(p):
    return {(r["task_id"], r["index"]): r for r in map(json.loads, open(p))}
for name, fields in (("samples.jsonl", ("completion", "finish_reason", "num_tokens", "logprob")), ("results.jsonl", ("result", "passed"))):
    a, b = rows(f"{whole}/{name}"), rows(f"{out}/merged/{name}")
    assert len(a) == 30 and a.keys() == b.keys(), (name, len(a), len(b))
    bad = [k for k in a for f in fields if a[k][f] != b[k][f]]
    assert not bad, (name, bad[:5])
for i in range(4):
    run = json.load(open(f"{out}/shard-{i}/run.json"))
    assert run["shard"] == {"index": i, "count": 4}, run["shard"]
sa, sb = json.load(open(f"{whole}/summary.json")), json.load(open(f"{out}/merged/summary.json"))
assert sa["pass_at_k"] == sb["pass_at_k"], (sa["pass_at_k"], sb["pass_at_k"])
assert sb["shards"] == 4 and sb["samples"] == 30, (sb["shards"], sb["samples"])
print("merged output of the 4-task array equals the unsharded run: 30 samples, pass@k", sb["pass_at_k"])
EOF
echo "PASS"
