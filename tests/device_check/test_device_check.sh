#!/usr/bin/env bash
# The device check's machinery without a GPU (ctest: device_check_harness, label unit): the step
# runner of benchmarks/device_check_lib.sh against stand-in programs (one that fails, one that
# hangs, a pipe whose first program fails, a loop with one failing configuration, a step past the
# deadline, ctest reporting a skip), the bundle's fallback (a binary that does not start, a stale or
# missing bundle: the build step runs, done by a stand-in), device_check.sh's plans (their limits
# within the budget), and benchmarks/device_summary.py on the committed fixture run.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
export work  # the stand-ins run in the steps' own shells
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...: COMMAND must succeed
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAILED: $what"
    failures=$((failures + 1))
  fi
}
# json_is FILE PYTHON_EXPRESSION: the expression, over the JSON document d, is true.
json_is() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {"d": d})
if not ok:
    print(f"  not true: {sys.argv[2]}")
sys.exit(0 if ok else 1)
EOF
}

# shellcheck source=benchmarks/device_check_lib.sh
source "$root/benchmarks/device_check_lib.sh"

# ---- 1. the steps ----
export DEVICE_CHECK_WORK=$work/w1
dc_init "$work/out" 60
DC_TAIL_LINES=3

fails_with_3() {
  echo "about to fail"
  return 3
}
hangs() { sleep 30; }
piped() {  # the first program of the pipe fails, the last succeeds
  bash -c 'echo partial; exit 5' | cat
}
loop() {
  each first true
  each second bash -c 'echo second fails; exit 2'
  each third true
}
loop_hang() {
  each -t 1 slow sleep 20
  each after true
}
fake_ctest() {  # a ctest whose JUnit file says FAKE_SKIPPED tests were skipped (no device seen)
  local xml=""
  while (($#)); do
    [[ $1 == --output-junit ]] && xml=$2
    shift
  done
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="(empty)" tests="1" failures="0" disabled="0" skipped="%s">\n<testcase name="C.D" classname="C.D" status="run"/>\n</testsuite>\n' \
    "$FAKE_SKIPPED" > "$xml"
  return 0
}
ctest_skip_step() { FAKE_SKIPPED=2 DC_CTEST=fake_ctest dc_ctest -L gpu; }
ctest_pass_step() { FAKE_SKIPPED=0 DC_CTEST=fake_ctest each group dc_ctest -L gpu; }

dc_step ok 1 10 true
dc_step failing 1 10 fails_with_3
t0=$(date +%s)
dc_step hanging 1 2 hangs
hang_s=$(($(date +%s) - t0))
dc_step piped 1 10 piped
dc_step loop 1 10 loop
dc_step loop_hang 1 10 loop_hang
dc_step ctest_skip 1 10 ctest_skip_step
dc_step ctest_pass 1 10 ctest_pass_step
DC_START=$(($(date +%s) - 55))  # 5 s of the 60 left: a step expecting 20 s does not start
dc_step late 20 30 true
DC_START=$(($(date +%s) - 45))  # 15 s left: a step expecting 5 s runs, its limit cut to what is left
dc_step cut 5 30 true
dc_merge_junit "$DC_OUT/ctest_gpu.xml"
dc_finish
finish_rc=$?

check "dc_finish returns 1 when a step failed" test "$finish_rc" = 1
s=$DC_OUT/summary.json
check "summary.json: ok false, every step recorded in order" json_is "$s" \
  "d['ok'] is False and [x['step'] for x in d['steps']] == ['ok','failing','hanging','piped','loop','loop_hang','ctest_skip','ctest_pass','late','cut']"
check "a passing step: rc 0" json_is "$s" "d['steps'][0]['rc'] == 0 and d['steps'][0]['note'] == ''"
check "a failing program: its own exit status" json_is "$s" "d['steps'][1]['rc'] == 3"
check "a hanging program: killed at its limit, recorded as timed out" json_is "$s" \
  "d['steps'][2]['rc'] == 124 and 'timed out after 2s' in d['steps'][2]['note']"
check "the hanging step took its limit, not its sleep" test "$hang_s" -lt 10
check "a pipe whose first program fails: a failure" json_is "$s" "d['steps'][3]['rc'] == 5"
check "a loop: each configuration's status, the failing one named" json_is "$s" \
  "d['steps'][4]['rc'] == 1 and [(c['config'], c['rc']) for c in d['steps'][4]['configs']] == [('first',0),('second',2),('third',0)] and d['steps'][4]['note'] == 'failed: second (rc=2)'"
check "a loop's configuration past its own limit: timed out, and the loop goes on" json_is "$s" \
  "d['steps'][5]['rc'] == 1 and [(c['config'], c['rc']) for c in d['steps'][5]['configs']] == [('slow',124),('after',0)] and 'slow (rc=124, timed out)' in d['steps'][5]['note']"
check "a skipped gpu test: a failure" json_is "$s" "d['steps'][6]['rc'] == 1"
check "ctest passing: rc 0" json_is "$s" "d['steps'][7]['rc'] == 0"
check "a step past the deadline: skipped and recorded" json_is "$s" \
  "d['steps'][8]['rc'] == -1 and d['steps'][8]['note'].startswith('skipped: past the deadline')"
check "a step that still fits: run with its limit cut" json_is "$s" \
  "d['steps'][9]['rc'] == 0 and 'limit cut to' in d['steps'][9]['note']"
check "the merged JUnit file names each suite by its step" \
  grep -q '<testsuite name="ctest_pass/group"' "$DC_OUT/ctest_gpu.xml"
check "the merged JUnit file holds both suites" test "$(grep -c '<testsuite ' "$DC_OUT/ctest_gpu.xml")" = 2
check "a step's whole output is in its log" grep -q 'about to fail' "$DC_WORK/logs/failing.log"

# A plan whose limits exceed the budget is refused; one within it is shown with its sums.
dc_init "$work/out" 100
dc_plan a 10 60 true
dc_plan b 10 50 true
plan_refused() { ! dc_plan_show > /dev/null; }
check "dc_plan_show refuses limits over the budget" plan_refused
dc_init "$work/out" 100
dc_plan a 10 60 true
dc_plan b 10 40 true
check "dc_plan_show takes limits within the budget" dc_plan_show
check "the plan's record" json_is "$DC_WORK/plan.json" "d['expected_s'] == 20 and d['limit_s'] == 100"

# ---- 2. the bundle and its fallback ----
make_bundle() {  # make_bundle DIR COMMIT: two stand-in binaries, "good" starts and "bad" (if BAD=1) does not
  local dir=$1
  mkdir -p "$dir/bin"
  # shellcheck disable=SC2016  # the stand-in's own $1
  printf '#!/bin/sh\n[ "$1" = --check ] && exit 0\nexit 9\n' > "$dir/bin/good"
  if [[ ${BAD:-0} == 1 ]]; then
    printf '#!/bin/sh\necho "error while loading shared libraries: libfoo.so" >&2\nexit 127\n' > "$dir/bin/bad"
  else
    cp "$dir/bin/good" "$dir/bin/bad"
  fi
  chmod +x "$dir/bin/good" "$dir/bin/bad"
  printf 'made now\ncommit %s\nsources %s\n' "$2" "${DIGEST:-abc}" > "$dir/BUNDLE"
  tar -C "$dir" -cJf "$work/bundle.tar.xz" BUNDLE bin
}
printf '# target\tpath\tcheck\ngood\tbin/good\t--check\nbad\tbin/bad\t--check\ntrue\tbin/good\t@loader\n' > "$work/targets.txt"
stand_in_configure() { echo configured >> "$work/fallback"; }
stand_in_build() { echo built >> "$work/fallback"; }
run_bundle_plan() {  # a plan of the bundle step and one more; the fallback's steps are stand-ins
  rm -f "$work/fallback"
  export DEVICE_CHECK_WORK=$work/w2
  rm -rf "$DEVICE_CHECK_WORK"
  dc_init "$work/out" 100
  DC_FALLBACK=("configure 1 10 stand_in_configure" "build 1 10 stand_in_build")
  dc_plan bundle 1 20 dc_bundle_prepare "$work/bundle.tar.xz" "$work/build" "$work/targets.txt"
  dc_plan after 1 10 true
  dc_run_plan > "$work/bundle_run.log" 2>&1
  dc_finish
}
export DC_COMMIT=0123456789ab DC_SOURCE_DIGEST=abc
rm -rf "$work/b1" && make_bundle "$work/b1" 0123456789ab-dirty && run_bundle_plan
check "a good bundle: no fallback" test ! -e "$work/fallback"
check "a good bundle: bundle, after" json_is "$work/out/summary.json" "[x['step'] for x in d['steps']] == ['bundle','after'] and d['ok']"
check "a good bundle: its binaries are unpacked" test -x "$work/build/bin/good"
echo "an object file the build left" > "$work/build/kept.o"
run_bundle_plan
check "the same bundle again: not unpacked again (a build folder's objects stay)" \
  grep -q 'holds this bundle already' "$work/w2/logs/bundle.log"
check "the same bundle again: the build folder kept" test -f "$work/build/kept.o"
rm -rf "$work/b2" && BAD=1 make_bundle "$work/b2" 0123456789ab && run_bundle_plan
check "a binary that does not start: the fallback configures and builds" test "$(tr '\n' ' ' < "$work/fallback")" = "configured built "
check "a binary that does not start: recorded, then configure, build, and the rest of the plan" json_is "$work/out/summary.json" \
  "[x['step'] for x in d['steps']] == ['bundle','configure','build','after'] and d['ok']"
check "a binary that does not start: the log says which" grep -q 'verdict: does not start: .*bin/bad' "$work/bundle_run.log"
rm -rf "$work/b3" && make_bundle "$work/b3" fedcba987654 && run_bundle_plan
check "a bundle of another commit: stale, built here" grep -q 'verdict: stale: built at fedcba987654' "$work/bundle_run.log"
check "a bundle of another commit: the fallback ran" test -e "$work/fallback"
rm -rf "$work/b4" && DIGEST=def make_bundle "$work/b4" 0123456789ab && run_bundle_plan
check "a bundle of other sources: stale, built here" grep -q 'verdict: stale: built from sources def' "$work/bundle_run.log"
rm -f "$work/bundle.tar.xz" && run_bundle_plan
check "no bundle: the fallback ran" grep -q 'verdict: missing' "$work/bundle_run.log"
check "no bundle: configure and build recorded" json_is "$work/out/summary.json" \
  "[x['step'] for x in d['steps']] == ['bundle','configure','build','after']"
unset DC_COMMIT DC_SOURCE_DIGEST

# ---- 3. device_check.sh's plans fit their budgets ----
for plan in full quick extra; do
  out=$(DEVICE_CHECK_WORK=$work/w3 DEVICE_CHECK_PLAN=$plan DEVICE_CHECK_PLAN_ONLY=1 bash "$root/benchmarks/device_check.sh" "$work/plan-out" 2>&1)
  rc=$?
  check "device_check.sh's $plan plan: limits within the budget" test "$rc" = 0
  sum=$(echo "$out" | awk '$1 == "sum" {print $3}')
  budget=$(echo "$out" | sed -n 's/.*(budget \([0-9]*\)s).*/\1/p')
  check "device_check.sh's $plan plan: the sum line ($sum of $budget)" test -n "$sum" -a "${sum:-999999}" -le "${budget:-0}"
done
check "the full plan is at most 480 s" bash -c "DEVICE_CHECK_WORK=$work/w3 DEVICE_CHECK_PLAN_ONLY=1 bash '$root/benchmarks/device_check.sh' '$work/plan-out' | grep -q '(budget 480s)'"

# ---- 4. the summary on the committed fixture run ----
cp -r "$root/tests/device_check/fixture/run" "$work/run"
check "device_summary.py runs" python3 "$root/benchmarks/device_summary.py" "$work/run"
s=$work/run/summary.json
check "paths: the tests of each path (a failed op row, a failed memcheck group)" json_is "$s" \
  "{k: v['tests'] for k, v in d['paths'].items()} == {'reference': 'passed', 'graphs': 'passed', 'prefix-gemm': 'passed', 'small-m': 'failed', 'cascade': 'failed'}"
check "paths: ms per step by N (the --cuda-path line counted, the 256-step line not)" json_is "$s" \
  "d['paths']['graphs']['ms_per_step'] == {'1': 5.2, '8': 6.5, '64': 15.4, '256': 46.4, '1024': 170.0}"
check "paths: HumanEval tok/s from the generate logs" json_is "$s" \
  "d['paths']['graphs']['humaneval_tok_s'] == 9310.3 and d['paths']['cascade']['humaneval_tok_s'] == 13994.7 and d['paths']['reference']['humaneval_tok_s'] is None"
check "winners: the fastest path whose tests passed (cascade and small-m are faster but failed)" json_is "$s" \
  "d['winners'] == {'1': 'graphs', '8': 'graphs', '64': 'prefix-gemm', '256': 'prefix-gemm', '1024': 'prefix-gemm'}"
check "A/B rows: other flag sets under their flags (a cuda_path field with a switch added too)" json_is "$s" \
  "d['ab'] == {'cascade + --kv-cache=fp8': {'256': 11.0}, 'graphs (--steps 256)': {'1': 5.6}, 'graphs + --paged-kv': {'8': 7.1}}"
check "summary.json keeps the run's own records" json_is "$s" "d['commit'] == '0123456789ab' and len(d['steps']) == 7"
md=$work/run/summary.md
# shellcheck disable=SC2016  # the page's backquotes, literally
check "summary.md: the paths table, the winner in bold" grep -qF '| graphs | `--split-attention --fused-qkv --device-sampling --cuda-graphs` | passed | **5.20** | **6.50** | 15.40 | 46.40 | 170.00 | 9,310.3 |' "$md"
check "summary.md: the winners" grep -qF '| 1024 | prefix-gemm | 50.00 | graphs 170.00 (3.40x) |' "$md"
check "summary.md: why a path failed" grep -qF '| cascade | failed | shared 2/2, graphs 2/2, cascade 1/1 | run: memcheck/cascade+steps rc=1 |' "$md"
check "summary.md: the cost model's prediction beside the measurement" grep -qF '| best-of-100 tok/s | cascade | 20,307 | 16,000 (20 prompts) |' "$md"
check "summary.md: a skipped step is shown as skipped" grep -qF '| best_of_100 | -1 | 0 | 38 | 56 | skipped: past the deadline' "$md"
# Several runs, one summary: a later run's result overrides an earlier one's.
mkdir -p "$work/later"
cp "$root/tests/device_check/fixture/run/bench_cuda_8b.jsonl" "$work/later/"
echo '{"n":1,"ms_per_step":4.0,"steps":64,"command":"bestofn bench --n 1 --prefix-flag-free --split-attention --fused-qkv --device-sampling --cuda-graphs --cuda-prefix-gemm --paged-kv --json"}' > "$work/later/bench_cuda_8b.jsonl"
echo '{"n":1,"ms_per_step":4.5,"steps":64,"command":"bestofn bench --n 1 --split-attention --fused-qkv --device-sampling --cuda-graphs --cuda-prefix-gemm --paged-kv --json"}' >> "$work/later/bench_cuda_8b.jsonl"
check "device_summary.py: several runs into one folder" python3 "$root/benchmarks/device_summary.py" "$work/run" "$work/later" --out "$work/combined"
check "several runs: the later line wins, an unknown flag is an A/B row" json_is "$work/combined/paths.json" \
  "d['paths']['prefix-gemm']['ms_per_step']['1'] == 4.5 and d['winners']['1'] == 'prefix-gemm' and 'prefix-gemm + --prefix-flag-free' in d['ab']"

echo
if ((failures > 0)); then
  echo "test_device_check.sh: $failures check(s) failed"
  exit 1
fi
echo "test_device_check.sh: all checks passed"
