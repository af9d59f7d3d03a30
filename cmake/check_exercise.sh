#!/bin/sh
# Checks a lesson's exercises the way `make check LESSON=NN` should:
#
#   cmake/check_exercise.sh BUILD NN [exK]
#
# BUILD is a build folder (the test binary is BUILD/lessons/NN-*/lessonNN_exercise_tests), or a
# folder that holds lessonNN_exercise_tests itself (tools/device/wrong_solutions.sh collects them
# so). With exK, only that exercise's tests run.
#
#   1. tests      the exercise tests, as they are (with no GPU, Catch2 leaves out the [gpu] ones)
#   2. memcheck   with a usable GPU and compute-sanitizer on PATH: the exercises' GPU tests under
#                 compute-sanitizer --tool memcheck
#   3. racecheck  the same under racecheck and synccheck, for the exercises whose kernels use
#      synccheck  shared memory, barriers or warp shuffles (the table below)
#   4. ncu        only with COURSE_NCU=1 and ncu on PATH: the counter checks of the table below
#
# Under the sanitizers, tests tagged [provokes-error] (they make CUDA fail on purpose) and [cupti]
# (CUPTI takes one subscriber per process, and the sanitizer is one) are left out, and so are
# [host-race] (a race between host threads and the copy engine: invisible to the sanitizers, and
# lesson 09's long engine would run 10-100x slower under them). Any finding
# fails the check, with the tool's report above it. Every stage prints one line
#   check_exercise: lesson NN STAGE: passed | FAILED | not run (why)
# and the last line is
#   check_exercise: lesson NN [exK]: passed | FAILED (STAGE ...)
# Exit status: 0 when every stage that ran passed, 1 otherwise, 2 for a usage error.
set -u

usage() {
  echo "usage: $0 BUILD NN [exK]" >&2
  exit 2
}
if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
build=$1
nn=$2
only=${3:-}
case $nn in [0-9][0-9]) ;; *) usage ;; esac
case $only in "" | ex[0-9] | ex[0-9][0-9]) ;; *) usage ;; esac

# ---------------------------------------------------------------------------------- the table
# Exercises whose kernels use shared memory or barriers (racecheck + synccheck), or only warp
# shuffles (synccheck: a lane that left before a full-mask shuffle). Every GPU exercise gets
# memcheck.
racecheck_table="02:ex3 05:ex1 05:ex2 07:ex1 07:ex2 07:ex3 08:ex4"
synccheck_table="02:ex3 03:ex2 05:ex1 05:ex2 05:ex4 07:ex1 07:ex2 07:ex3 08:ex4"
# Counter checks under Nsight Compute (opt-in): lesson:exercise:kernel-name-part:check
#   load-sectors-per-request<=8: coalesced loads of 32 neighbouring floats take 4 or 5 sectors
#   of 32 bytes per warp request; 32 lanes reading 32 rows take 32.
ncu_table="03:ex1:rgb_planar_to_bgr8:load-sectors-per-request<=8"
# ------------------------------------------------------------------------------------------

exe=$build/lesson${nn}_exercise_tests
if [ ! -x "$exe" ]; then
  for candidate in "$build"/lessons/"$nn"-*/lesson"${nn}"_exercise_tests; do
    exe=$candidate
  done
fi
if [ ! -x "$exe" ]; then
  echo "check_exercise: no lesson${nn}_exercise_tests under $build (build it first)" >&2
  exit 2
fi

# The lesson's exercises and those whose tests need a GPU (written by add_lesson beside the
# binary; absent for binaries collected elsewhere, which then skip these checks).
list_file=$(dirname "$exe")/lesson${nn}_exercises.txt
all_ex="" gpu_ex=""
if [ -f "$list_file" ]; then
  all_ex=$(sed -n 's/^exercises: *//p' "$list_file" | tr ';' ' ')
  gpu_ex=$(sed -n 's/^gpu_exercises: *//p' "$list_file" | tr ';' ' ')
  if [ -n "$only" ]; then
    case " $all_ex " in
      *" $only "*) ;;
      *) echo "check_exercise: lesson $nn has no exercise $only (its exercises: $all_ex)" >&2
         exit 2 ;;
    esac
  fi
fi

failed=""
hung=no  # after a run that timed out, the later stages would only time out too
say() { echo "check_exercise: lesson $nn $1"; }
# A barrier that not every thread reaches can hang a kernel: every run gets a time limit
# (CHECK_EXERCISE_TIMEOUT seconds, 600 unless set).
timeout_cmd=""
command -v timeout >/dev/null && timeout_cmd="timeout ${CHECK_EXERCISE_TIMEOUT:-600}"

# The exercise tags the binary knows ([ex1] [ex2] ...), or only the one asked for. With no GPU
# the binary lists only its CPU tests' tags, which is all that can run then.
if [ -n "$only" ]; then
  exercises=$only
else
  exercises=$("$exe" --list-tags 2>/dev/null | grep -o '\[ex[0-9]*\]' | tr -d '[]' | sort -u)
fi
in_table() {  # in_table TABLE EX
  for entry in $1; do [ "$entry" = "$nn:$2" ] && return 0; done
  return 1
}
# A Catch2 spec: the GPU tests of the given exercises, less the two excluded tags.
gpu_spec() {
  spec=""
  for ex in "$@"; do
    spec="$spec${spec:+,}[gpu][$ex]~[provokes-error]~[cupti]~[host-race]"
  done
  echo "$spec"
}

# 1. the tests as they are
echo "==================== lesson $nn: $(basename "$exe") ${only:+[$only]} ===================="
# shellcheck disable=SC2086  # timeout_cmd is a command and its argument, or nothing
if [ -n "$only" ]; then $timeout_cmd "$exe" "[$only]"; else $timeout_cmd "$exe"; fi
rc=$?
case $rc in
  0) say "tests: passed" ;;
  124) say "tests: FAILED (timed out: a barrier that not every thread reaches can hang)"
       failed="$failed tests"
       hung=yes ;;
  *) say "tests: FAILED ($rc test case(s) failed, or the run stopped: see above)"
     failed="$failed tests" ;;
esac

# Is there a GPU? The binary's --require-gpu answers 77 without one.
"$exe" --require-gpu --list-tags >/dev/null 2>&1
if [ $? = 77 ]; then
  gpu=no
  why_not="no usable GPU"
elif ! command -v compute-sanitizer >/dev/null; then
  gpu=yes
  why_not="compute-sanitizer not on PATH (it ships with the CUDA toolkit, <cuda>/bin)"
else
  gpu=yes
  why_not=""
fi

# 2 and 3. the sanitizers
sanitize() {  # sanitize TOOL EX...
  tool=$1
  shift
  if [ $# = 0 ]; then
    say "$tool: not run (no exercise checked here needs it)"
    return
  fi
  if [ -n "$why_not" ]; then
    say "$tool: not run ($why_not): $*"
    return
  fi
  if [ "$hung" = yes ]; then
    say "$tool: not run (an earlier run timed out): $*"
    return
  fi
  echo "==================== compute-sanitizer --tool $tool: $* ===================="
  log=$(mktemp)
  # shellcheck disable=SC2086  # timeout_cmd is a command and its argument, or nothing
  $timeout_cmd compute-sanitizer --tool "$tool" --error-exitcode 1 --report-api-errors no \
    "$exe" --require-gpu "$(gpu_spec "$@")" >"$log" 2>&1
  rc=$?
  cat "$log"
  # Racecheck may count a hazard as a warning, which --error-exitcode does not see: any hazard
  # or error in the summaries is a finding.
  if [ $rc = 0 ] && grep -Eq '(RACECHECK|ERROR) SUMMARY: [1-9]' "$log"; then rc=1; fi
  rm -f "$log"
  case $rc in
    0) say "$tool: passed ($*)" ;;
    124) say "$tool: FAILED (timed out: a barrier that not every thread reaches can hang)"
         failed="$failed $tool"
         hung=yes ;;
    *) say "$tool: FAILED (exit $rc; the report is above)"; failed="$failed $tool" ;;
  esac
}
memcheck_list="" race_list="" sync_list=""
if [ "$gpu" = yes ]; then
  for ex in $exercises; do
    # Only exercises with GPU tests: a spec that matches no test is an error for Catch2 v3.
    if "$exe" --list-tests "[gpu][$ex]" 2>/dev/null | grep -q '\[gpu\]'; then
      memcheck_list="$memcheck_list $ex"
      in_table "$racecheck_table" "$ex" && race_list="$race_list $ex"
      in_table "$synccheck_table" "$ex" && sync_list="$sync_list $ex"
    fi
  done
else
  # Say what would have run: every exercise's GPU tests, and the table's.
  memcheck_list="the GPU tests of every exercise"
  for entry in $racecheck_table; do
    [ "${entry%%:*}" = "$nn" ] && { [ -z "$only" ] || [ "${entry#*:}" = "$only" ]; } &&
      race_list="$race_list ${entry#*:}"
  done
  for entry in $synccheck_table; do
    [ "${entry%%:*}" = "$nn" ] && { [ -z "$only" ] || [ "${entry#*:}" = "$only" ]; } &&
      sync_list="$sync_list ${entry#*:}"
  done
fi
# shellcheck disable=SC2086  # the lists are words
if [ "$gpu" = no ]; then
  say "memcheck: not run ($why_not): $memcheck_list"
else
  sanitize memcheck $memcheck_list
fi
# shellcheck disable=SC2086
sanitize racecheck $race_list
# shellcheck disable=SC2086
sanitize synccheck $sync_list

# 4. counters under Nsight Compute, opt-in
for entry in $ncu_table; do
  lesson=${entry%%:*}
  rest=${entry#*:}
  ex=${rest%%:*}
  rest=${rest#*:}
  kernel=${rest%%:*}
  check=${rest#*:}
  [ "$lesson" = "$nn" ] || continue
  case " $exercises " in *" $ex "*) ;; *) continue ;; esac
  if [ "${COURSE_NCU:-0}" != 1 ]; then
    say "ncu: not run for $ex (opt-in: COURSE_NCU=1, with ncu on PATH and GPU counters allowed)"
    continue
  fi
  if [ "$gpu" = no ] || ! command -v ncu >/dev/null; then
    say "ncu: not run for $ex (no usable GPU, or ncu not on PATH)"
    continue
  fi
  echo "==================== ncu: $ex, kernels named *$kernel*, $check ===================="
  csv=$(mktemp)
  ncu --csv --print-units base --kernel-name "regex:$kernel" \
    --metrics l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum \
    "$exe" --require-gpu "[gpu][$ex]" >"$csv" 2>&1
  rc=$?
  # Sum both metrics over every profiled launch: the rows are "...","Metric Name","Metric
  # Unit","Metric Value".
  verdict=$(awk -F'","' '
    /l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum/ { v = $NF; gsub(/[",]/, "", v); s += v; n++ }
    /l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum/ { v = $NF; gsub(/[",]/, "", v); r += v }
    END {
      if (n == 0 || r == 0) { print "none"; exit }
      ratio = s / r
      printf "%s %.2f\n", (ratio <= 8 ? "ok" : "bad"), ratio
    }' "$csv")
  case $verdict in
    ok*) say "ncu: passed ($ex: ${verdict#ok } load sectors per request)" ;;
    bad*) say "ncu: FAILED ($ex: ${verdict#bad } load sectors per request, above 8: are the 32 lanes of a warp 32 neighbouring pixels of a row?)"
          failed="$failed ncu" ;;
    *) tail -20 "$csv"
       say "ncu: FAILED ($ex: no kernel whose name contains $kernel was profiled (ncu exit $rc): name the kernel so, and allow GPU counters)"
       failed="$failed ncu" ;;
  esac
  rm -f "$csv"
done

if [ -z "$failed" ]; then
  if [ "$gpu" = no ] && [ -n "$all_ex" ]; then
    # Without a GPU only the CPU tests ran: an exercise whose tests need a GPU is not checked.
    checked="" unchecked=""
    for ex in ${only:-$all_ex}; do
      case " $gpu_ex " in *" $ex "*) unchecked="$unchecked $ex" ;; *) checked="$checked $ex" ;; esac
    done
    echo "check_exercise: lesson $nn${only:+ [$only]}: CPU tests passed${checked:+ (checked:$checked)}${unchecked:+; NOT CHECKED here:$unchecked, whose tests need a GPU}"
  elif [ -n "$why_not" ]; then
    echo "check_exercise: lesson $nn${only:+ [$only]}: passed, but the GPU checks did not run ($why_not)"
  else
    echo "check_exercise: lesson $nn${only:+ [$only]}: passed"
  fi
  exit 0
fi
echo "check_exercise: lesson $nn${only:+ [$only]}: FAILED (${failed# })"
exit 1
