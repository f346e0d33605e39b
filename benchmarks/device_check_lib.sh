# shellcheck shell=bash
# The step machinery of benchmarks/device_check.sh, sourced by it and by the harness test
# (tests/device_check/test_device_check.sh), which drives it with stand-in programs and no GPU.
#
#   dc_init OUT BUDGET_S                      the output folder, the run's deadline in seconds
#   dc_plan NAME EXPECTED_S LIMIT_S CMD...    adds a step to the plan (CMD: a program or a function)
#   dc_plan_show                              prints the plan (expected and limit per step, the sums);
#                                             returns 1 when the limits add up to more than the budget
#   dc_run_plan                               runs every planned step in order (dc_step)
#   dc_step NAME EXPECTED_S LIMIT_S CMD...    runs one step now
#   each [-t S] LABEL CMD...                  inside a step: one configuration of a loop, its status kept
#   dc_ctest ARGS...                          inside a step: ctest with a JUnit file per step, skips = failures
#   dc_bundle_prepare BUNDLE BUILD TARGETS    inside a step: unpacks the prebuilt binaries, checks that each
#                                             starts; a verdict other than "ok" makes dc_run_plan run the
#                                             fallback steps (DC_FALLBACK: configure and build on the device)
#   dc_finish                                 writes OUT/summary.json; returns 1 if any step failed
#
# A step's output goes to DC_WORK/logs/NAME.log; the console (device_check.log) gets its last lines
# (DC_TAIL_LINES, or the step's own DC_TAIL_<NAME>). Its exit status is the program's own: no pipe
# stands between the program and the status (the step functions run with pipefail). A step that
# passes its time limit is killed with its process group (timeout) and recorded as timed out; a step
# that does not fit in what is left of the budget is skipped and recorded as skipped, never run with
# a limit cut below its expected time. A loop's configurations (each) are recorded one by one: the
# step fails if any of them failed, did not finish, or timed out, and its note names them.

# dc_init OUT BUDGET_S
dc_init() {
  DC_OUT=$1
  DC_BUDGET_S=$2
  DC_WORK=${DEVICE_CHECK_WORK:-$DC_OUT/.work}
  DC_START=$(date +%s)
  DC_STEPS_JSON=""
  DC_FAILED=0
  DC_PLAN_NAMES=()
  DC_PLAN_EXPECTED=()
  DC_PLAN_LIMITS=()
  DC_PLAN_CMDS=()
  DC_FALLBACK=()
  mkdir -p "$DC_OUT" "$DC_WORK/logs" "$DC_WORK/junit"
  export DC_OUT DC_WORK
}

dc_now() { date +%s; }
dc_elapsed() { echo $(($(dc_now) - DC_START)); }

# dc_json_str TEXT: TEXT as a JSON string (quotes included).
dc_json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/}
  printf '"%s"' "$s"
}

# dc_plan NAME EXPECTED_S LIMIT_S CMD...
dc_plan() {
  local name=$1 expected=$2 limit=$3
  shift 3
  # DEVICE_CHECK_ONLY="step step ...": a plan of those steps alone (a check of the bundle here, say).
  if [[ -n ${DEVICE_CHECK_ONLY:-} && " $DEVICE_CHECK_ONLY " != *" $name "* ]]; then
    return 0
  fi
  DC_PLAN_NAMES+=("$name")
  DC_PLAN_EXPECTED+=("$expected")
  DC_PLAN_LIMITS+=("$limit")
  DC_PLAN_CMDS+=("$(printf '%q ' "$@")")
}

# dc_plan_show: the plan as a table and as DC_WORK/plan.json; 1 when its limits exceed the budget.
dc_plan_show() {
  local i sum_e=0 sum_l=0 json=""
  printf '%-24s %10s %8s\n' "plan: step" "expected_s" "limit_s"
  for i in "${!DC_PLAN_NAMES[@]}"; do
    printf '%-24s %10s %8s\n' "${DC_PLAN_NAMES[$i]}" "${DC_PLAN_EXPECTED[$i]}" "${DC_PLAN_LIMITS[$i]}"
    sum_e=$((sum_e + DC_PLAN_EXPECTED[i]))
    sum_l=$((sum_l + DC_PLAN_LIMITS[i]))
    json+="${json:+,}{\"step\":$(dc_json_str "${DC_PLAN_NAMES[$i]}"),\"expected_s\":${DC_PLAN_EXPECTED[$i]},\"limit_s\":${DC_PLAN_LIMITS[$i]}}"
  done
  printf '%-24s %10s %8s   (budget %ss)\n' "sum" "$sum_e" "$sum_l" "$DC_BUDGET_S"
  DC_PLAN_JSON="{\"budget_s\":$DC_BUDGET_S,\"expected_s\":$sum_e,\"limit_s\":$sum_l,\"steps\":[$json]}"
  echo "$DC_PLAN_JSON" > "$DC_WORK/plan.json"
  if ((sum_l > DC_BUDGET_S)); then
    echo "plan: the limits add up to ${sum_l}s, more than the budget of ${DC_BUDGET_S}s: a step at the end could not run"
    return 1
  fi
  return 0
}

# dc_run_plan: every planned step in order; after a bundle step whose verdict is not "ok", the
# fallback steps (DC_FALLBACK: "NAME EXPECTED LIMIT CMD..." strings, eval'd) run next.
dc_run_plan() {
  local i
  for i in "${!DC_PLAN_NAMES[@]}"; do
    eval "dc_step $(printf '%q ' "${DC_PLAN_NAMES[$i]}" "${DC_PLAN_EXPECTED[$i]}" "${DC_PLAN_LIMITS[$i]}") ${DC_PLAN_CMDS[$i]}"
    if [[ -f $DC_WORK/bundle.verdict ]] && [[ $(cat "$DC_WORK/bundle.verdict") != ok ]]; then
      echo "bundle: $(cat "$DC_WORK/bundle.verdict"): configuring and building here instead"
      rm -f "$DC_WORK/bundle.verdict"
      local f
      for f in "${DC_FALLBACK[@]}"; do eval "dc_step $f"; done
    fi
  done
}

# dc_record NAME RC SECONDS NOTE EXPECTED LIMIT [CONFIGS_JSON]
dc_record() {
  local configs=${7:-}
  DC_STEPS_JSON+="${DC_STEPS_JSON:+,}{\"step\":$(dc_json_str "$1"),\"rc\":$2,\"seconds\":$3,\"note\":$(dc_json_str "$4"),\"expected_s\":$5,\"limit_s\":$6${configs:+,\"configs\":[$configs]}}"
}

# dc_step NAME EXPECTED_S LIMIT_S CMD...
dc_step() {
  local name=$1 expected=$2 max_s=$3
  shift 3
  local left=$((DC_BUDGET_S - $(dc_elapsed)))
  local limit=$max_s note="" rc t0
  echo
  if ((left < max_s)); then
    # Cut to what is left only if the step's expected time still fits with a margin.
    if ((left >= expected + 5 && left >= 10)); then
      limit=$left
      note="limit cut to ${left}s (planned ${max_s}s)"
    else
      echo "=== [$name] $(date -u +%H:%M:%S) skipped: ${left}s left, expected ${expected}s, limit ${max_s}s"
      dc_record "$name" -1 0 "skipped: past the deadline (${left}s left of ${DC_BUDGET_S}s, expected ${expected}s)" "$expected" "$max_s"
      DC_FAILED=1
      return 0
    fi
  fi
  echo "=== [$name] $(date -u +%H:%M:%S) expected ${expected}s, limit ${limit}s: $*"
  local log=$DC_WORK/logs/$name.log configs_file=$DC_WORK/logs/$name.configs
  : > "$configs_file"
  # The step runs in a child bash under timeout (its process group is killed at the limit): the
  # functions defined so far go with it.
  # shellcheck disable=SC2046
  export -f $(compgen -A function)
  t0=$(dc_now)
  DC_STEP=$name DC_STEP_CONFIGS=$configs_file DC_STEP_DEADLINE=$((t0 + limit)) \
    timeout --kill-after=5 "$limit" bash -c 'set -o pipefail; "$@"' "$name" "$@" > "$log" 2>&1 < /dev/null
  rc=$?
  local secs=$(($(dc_now) - t0))
  ((rc == 124 || rc == 137)) && note="timed out after ${limit}s${note:+; $note}"
  # The loop's configurations: each one's status; any failed or unfinished one fails the step.
  # Lines "start<TAB>label" and "end<TAB>rc<TAB>seconds<TAB>label", written by each.
  local configs_json="" bad="" kind a b label started=""
  while IFS=$'\t' read -r kind a b label; do
    if [[ $kind == start ]]; then
      started=$a
    elif [[ $kind == end ]]; then
      started=""
      configs_json+="${configs_json:+,}{\"config\":$(dc_json_str "$label"),\"rc\":$a,\"seconds\":$b}"
      ((a != 0)) && bad+="${bad:+, }$label (rc=$a$( ((a == 124 || a == 137)) && echo ', timed out'))"
    fi
  done < "$configs_file"
  if [[ -n $started ]]; then
    configs_json+="${configs_json:+,}{\"config\":$(dc_json_str "$started"),\"rc\":-2,\"seconds\":null}"
    bad+="${bad:+, }$started (did not finish)"
  fi
  if [[ -n $bad ]]; then
    note="failed: $bad${note:+; $note}"
    ((rc == 0)) && rc=1
  fi
  local tail_var=DC_TAIL_${name//[^A-Za-z0-9_]/_}
  tail -n "${!tail_var:-${DC_TAIL_LINES:-25}}" "$log"
  ((rc != 0)) && DC_FAILED=1
  echo "=== [$name] rc=$rc ${note:+$note }(${secs}s)"
  dc_record "$name" "$rc" "$secs" "$note" "$expected" "$max_s" "$configs_json"
  return 0
}

# each [-t S] LABEL CMD...: one configuration of a step's loop (inside a step only). Its status
# goes to the step's record; -t S bounds it (never past the step's own limit). Returns CMD's status.
each() {
  local limit=""
  if [[ $1 == -t ]]; then
    limit=$2
    shift 2
  fi
  local label=$1
  shift
  local t0 rc left
  t0=$(date +%s)
  printf 'start\t%s\n' "$label" >> "${DC_STEP_CONFIGS:-/dev/null}"
  echo "--- [$label] $*"
  export DC_CONFIG=$label
  if [[ -n $limit ]]; then
    left=$((${DC_STEP_DEADLINE:-$((t0 + limit + 10))} - t0 - 2))
    ((left < limit)) && limit=$((left > 1 ? left : 1))
    timeout --kill-after=3 "$limit" bash -c 'set -o pipefail; "$@"' "$label" "$@" < /dev/null
  else
    "$@" < /dev/null
  fi
  rc=$?
  unset DC_CONFIG
  printf 'end\t%s\t%s\t%s\n' "$rc" "$(($(date +%s) - t0))" "$label" >> "${DC_STEP_CONFIGS:-/dev/null}"
  echo "--- [$label] rc=$rc ($(($(date +%s) - t0))s)"
  return "$rc"
}

# dc_ctest ARGS...: ctest (ARGS: the build folder, -L / -R / -E ...) writing DC_WORK/junit/STEP[.N].xml;
# no test selected is a failure, and so is a skipped test: on the device a skip means the GPU was
# not seen. DC_CTEST overrides the program (the harness test).
dc_ctest() {
  local n=0 xml suite=${DC_STEP:-ctest}${DC_CONFIG:+/$DC_CONFIG}
  local base=$DC_WORK/junit/${suite//[^A-Za-z0-9_.+-]/_}
  xml=$base.xml
  while [[ -e $xml ]]; do
    n=$((n + 1))
    xml=$base.$n.xml
  done
  printf '%s\t%s\n' "$xml" "$suite" >> "$DC_WORK/junit/order"
  ${DC_CTEST:-ctest} --no-tests=error --output-on-failure --output-junit "$xml" "$@"
  local rc=$?
  if grep -qE 'skipped="[1-9]' "$xml" 2>/dev/null; then
    echo "dc_ctest: $(grep -oE 'skipped="[0-9]+"' "$xml" | head -1) in $xml: a skipped gpu test (no device seen) counts as a failure"
    rc=1
  fi
  return "$rc"
}

# dc_merge_junit OUT_XML: the steps' JUnit files as one <testsuites> file, in the order they ran,
# each <testsuite> named by its step (and loop configuration): benchmarks/device_summary.py tells
# a step whose failures its tests explain from one that left no record (killed, crashed).
dc_merge_junit() {
  local out=$1 f suite any=0
  [[ -f $DC_WORK/junit/order ]] || return 0
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<testsuites>'
    while IFS=$'\t' read -r f suite; do
      [[ -f $f ]] || continue
      any=1
      grep -v '^<?xml' "$f" | sed "1,/<testsuite/ s#<testsuite name=\"[^\"]*\"#<testsuite name=\"$suite\"#"
    done < "$DC_WORK/junit/order"
    echo '</testsuites>'
  } > "$out.tmp"
  if ((any)); then mv "$out.tmp" "$out"; else rm -f "$out.tmp"; fi
}

# dc_bundle_prepare BUNDLE BUILD_DIR TARGETS: unpacks BUNDLE (made by benchmarks/device_bundle.sh)
# into BUILD_DIR and checks it: built at DC_COMMIT (when both name one) from the sources that are
# here (DC_SOURCE_DIGEST, when set), and every binary TARGETS lists (benchmarks/device_targets.txt:
# target, path, check) is there and starts (its check's arguments, run from here; @loader: the
# dynamic loader finds every library it needs). The verdict ("ok", or why not) goes to
# DC_WORK/bundle.verdict; dc_run_plan runs the fallback steps after a verdict other than "ok".
# Returns 0 either way: a bundle that cannot be used is no failure of the check (its build is).
dc_bundle_prepare() {
  local bundle=$1 build=$2 targets=$3 verdict=ok
  if [[ ! -f $bundle ]]; then
    verdict="missing: no $bundle"
  elif [[ -f $build/BUNDLE ]] && [[ $(tar -xJOf "$bundle" BUNDLE 2> /dev/null) == "$(cat "$build/BUNDLE")" ]]; then
    # Unpacked already (the dev machine's own build-device/, whose objects stay).
    echo "bundle: $build holds this bundle already"
  else
    rm -rf "$build"
    mkdir -p "$build"
    if ! tar -xJf "$bundle" -C "$build"; then
      verdict="broken: tar -xJf $bundle failed"
    elif [[ ! -f $build/BUNDLE ]]; then
      verdict="broken: no BUNDLE record in $bundle"
    fi
  fi
  if [[ $verdict == ok ]]; then
    local built_commit built_digest
    built_commit=$(sed -n 's/^commit //p' "$build/BUNDLE")
    built_digest=$(sed -n 's/^sources //p' "$build/BUNDLE")
    echo "bundle: $(sed -n 's/^made //p' "$build/BUNDLE"), commit $built_commit, sources $built_digest"
    local c=${built_commit%-dirty}
    if [[ -n ${DC_COMMIT:-} && $DC_COMMIT != unknown && $c != "$DC_COMMIT"* && $DC_COMMIT != "$c"* ]]; then
      verdict="stale: built at $built_commit, this run is $DC_COMMIT"
    elif [[ -n ${DC_SOURCE_DIGEST:-} && $built_digest != "$DC_SOURCE_DIGEST" ]]; then
      verdict="stale: built from sources $built_digest, these are $DC_SOURCE_DIGEST"
    fi
  fi
  if [[ $verdict == ok ]]; then
    local target path check out n=0
    while IFS=$'\t' read -r target path check; do
      [[ -z $target || $target == \#* ]] && continue
      n=$((n + 1))
      if [[ ! -x $build/$path ]]; then
        verdict="incomplete: no $build/$path (target $target)"
        break
      fi
      local ok=1
      if [[ $check == @loader ]]; then
        out=$(LD_TRACE_LOADED_OBJECTS=1 timeout 20 "$build/$path" 2>&1 < /dev/null) || ok=0
        [[ $out == *"not found"* ]] && ok=0
      else
        # shellcheck disable=SC2086  # the check's arguments, split as written in the list
        out=$(timeout 20 "$build/$path" $check 2>&1 < /dev/null) || ok=0
      fi
      if ((!ok)); then
        verdict="does not start: $build/$path $check: $(echo "$out" | grep -m2 'not found\|error' || echo "$out" | tail -2)"
        verdict=${verdict//$'\n'/ }
        break
      fi
      echo "bundle: starts: $path ${check}"
    done < "$targets"
    [[ $verdict == ok ]] && echo "bundle: all $n binaries start"
  fi
  echo "bundle: verdict: $verdict"
  echo "$verdict" > "$DC_WORK/bundle.verdict"
  return 0
}

# dc_source_digest ROOT: one sha256 over the files the build reads (the same list as
# benchmarks/device_bundle.sh records), so a bundle built from other sources is seen as stale
# with or without a .git on the device.
dc_source_digest() {
  local root=$1
  (
    cd "$root" || exit 1
    find CMakeLists.txt cmake include src kernels tests benchmarks tools -type f \
      \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cmake' \
      -o -name 'CMakeLists.txt' -o -name '*.in' \) -not -path 'tests/device_check/*' -print0 2>/dev/null \
      | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
  )
}

# dc_finish: OUT/summary.json (the run, the plan, every step's record); returns 1 if a step failed.
dc_finish() {
  local device=${DC_DEVICE:-none}
  printf '{"date":"%s","device":%s,"commit":%s,"ok":%s,"seconds":%d,"budget_s":%d,"plan":%s,"steps":[%s]}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(dc_json_str "$device")" "$(dc_json_str "${DC_COMMIT:-unknown}")" \
    "$([[ $DC_FAILED == 0 ]] && echo true || echo false)" "$(dc_elapsed)" "$DC_BUDGET_S" "${DC_PLAN_JSON:-null}" \
    "$DC_STEPS_JSON" > "$DC_OUT/summary.json"
  return "$DC_FAILED"
}
