#!/bin/sh
# Checks a lesson's exercises the way `make check LESSON=NN` should:
#
#   cmake/check_exercise.sh BUILD NN [exK]
#
# BUILD is a build folder (the test binary is BUILD/lessons/NN-*/lessonNN_exercise_tests), or a
# folder that holds lessonNN_exercise_tests itself (a script that checks several builds may
# collect them so). With exK, only that exercise's tests run.
#
#   1. tests      the exercise tests, as they are (with no GPU, Catch2 leaves out the [gpu] ones)
#   2. memcheck   with a usable GPU and compute-sanitizer on PATH: the exercises' GPU tests under
#                 compute-sanitizer --tool memcheck
#   3. racecheck  the same under racecheck and synccheck, for the exercises whose kernels use
#      synccheck  shared memory, barriers or warp shuffles (the table below)
#   4. ncu        only with COURSE_NCU=1 and ncu on PATH: the counter checks of the table below
#   5. grade      for a lesson with a speed grade (add_lesson(... GRADE ...): lessonNN_grade),
#                 with a usable GPU, once every stage before it passed: each graded exercise's
#                 kernel timed against the course's solution in the same run, and the library's
#                 version (CUB, cuBLAS) beside them for reference (common/grade_run.hpp says how,
#                 common/grade.cpp's table what each must reach). Its own line per exercise,
#                   check_exercise: lesson NN grade exK: your v3: 0.310 ms, the course's: 0.160 ms
#                                  (52%; medians of 21, L2 flushed): correct but slow; <hint>
#                 fast (80% of the course's speed or more) | correct but slow | too slow: FAILED
#                 (below the exercise's threshold, 50%) | refused (a time below the physical
#                 floor: a broken measurement), FAILED | FAILED (a result that differs from the
#                 course's). Only the exercises whose point is speed can fail on speed. With a
#                 build folder (CMakeCache.txt), the script builds lessonNN_grade first (`all`
#                 does not: CI never needs it). CHECK_EXERCISE_GRADE=0 leaves it out (a GPU
#                 shared with other work, say). With no usable GPU the grade is not measured,
#                 and the lines say so: a time is never guessed, and never passes unmeasured.
#
# Which exercises have GPU tests is read from the binary itself: the tags of the tests that
# `--list-tags "[gpu]"` lists (the course's test main lists every test, GPU or not). An exercise
# whose tests include [gpu] ones is checked only where a GPU ran them: without one, its CPU part
# alone ran, and it is reported so, never as checked.
#
# Under the sanitizers, tests tagged [provokes-error] (they make CUDA fail on purpose) and [cupti]
# (CUPTI takes one subscriber per process, and the sanitizer is one) are left out, and so are
# [host-race] (a race between host threads and the copy engine: invisible to the sanitizers, and
# lesson 09's long engine would run 10-100x slower under them) and [stream-gate] (a kernel holds a
# stream while the host works on: under a sanitizer the gate kernels run one at a time and slowly,
# and their guards fire before the host opens them). Any finding fails the check, with the tool's
# report above it. Every stage prints one line
#   check_exercise: lesson NN STAGE: passed | FAILED | not run (why)   (tests, with no GPU:
#   "CPU tests passed (...)")
# then, when nothing failed, one line per exercise
#   check_exercise: lesson NN exK: checked | CPU part only (...) | not checked (...)
#                                  | single-GPU part only (...)
# and the last line is one of
#   check_exercise: lesson NN [exK]: passed
#   check_exercise: lesson NN [exK]: passed, but the GPU checks did not run (why)
#   check_exercise: lesson NN [exK]: passed (the tests of exJ exK are CPU tests only, ...)
#   check_exercise: lesson NN [exK]: CPU parts passed; exJ exK not checked on a GPU
#   check_exercise: lesson NN [exK]: nothing checked (no usable GPU, and the tests of exK ...)
#   check_exercise: lesson NN [exK]: passed on 1 GPU; exK not checked on 2 GPUs
#   check_exercise: lesson NN [exK]: FAILED (STAGE ...)
# where a lesson with a speed grade adds to the passed lines
#   ...; grade: ex1 fast, ex2 correct but slow, ex4 fast
#   ...; speed grade not measured (why: no usable GPU, say)
# Exit status: 0 when every stage that ran passed (with no GPU too: then only the CPU parts ran,
# as the lines say), 1 otherwise, 2 for a usage error.
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
racecheck_table="02:ex3 05:ex1 05:ex2 07:ex1 07:ex2 07:ex3 08:ex4 10:ex1 10:ex2 10:ex3 13:ex3"
synccheck_table="02:ex3 03:ex2 05:ex1 05:ex2 05:ex4 07:ex1 07:ex2 07:ex3 08:ex4 10:ex1 10:ex2 10:ex3 13:ex3"
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

# The exercise tags ([ex1] [ex2] ...) of the tests a spec matches (of all tests, without one),
# in numeric order. A listing runs nothing; the course's test main lists [gpu] tests with no GPU
# too. (Catch2 v2 exits with the number of tags listed: the status means nothing here.)
tags_of() {  # tags_of [SPEC]
  # shellcheck disable=SC2086
  "$exe" --list-tags ${1:+"$1"} 2>/dev/null | grep -o '\[ex[0-9][0-9]*\]' | tr -d '[]' |
    sort -u -t x -k 2,2n | tr '\n' ' '
}
# Words of list $1 that are in list $2, in $1's order.
intersect() {
  out=""
  for w in $1; do
    case " $2 " in *" $w "*) out="$out${out:+ }$w" ;; esac
  done
  echo "$out"
}

all_ex=$(tags_of)
if [ -z "$all_ex" ]; then
  echo "check_exercise: $exe lists no exercise tests (no [exK] tags): is it an exercise test binary? Run it with --list-tags to see" >&2
  exit 2
fi
if [ -n "$only" ]; then
  case " $all_ex " in
    *" $only "*) ;;
    *) echo "check_exercise: lesson $nn has no exercise $only (its exercises: ${all_ex% })" >&2
       exit 2 ;;
  esac
fi
exercises=${only:-$all_ex}
exercises=${exercises% }

failed=""
hung=no  # after a run that timed out, the later stages would only time out too
say() { echo "check_exercise: lesson $nn $1"; }
plural() {  # plural N WORD: "1 WORD" or "N WORDs"
  if [ "$1" = 1 ]; then echo "1 $2"; else echo "$1 $2s"; fi
}
# A barrier that not every thread reaches can hang a kernel: every run gets a time limit
# (CHECK_EXERCISE_TIMEOUT seconds, 600 unless set).
timeout_cmd=""
command -v timeout >/dev/null && timeout_cmd="timeout ${CHECK_EXERCISE_TIMEOUT:-600}"
# The test output goes through a pipe (tee, to read Catch2's totals): line-buffer it, so that a
# run the time limit kills still shows what it printed.
linebuf=""
command -v stdbuf >/dev/null && linebuf="stdbuf -oL"

# Is there a GPU, and are there two? The binary's --require-gpu(s) answers 77 when not.
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
two_gpus=no
if [ "$gpu" = yes ]; then
  "$exe" --require-gpus 2 --list-tags >/dev/null 2>&1
  [ $? = 77 ] || two_gpus=yes
fi

# The exercises with GPU tests (checked only where a GPU ran those), those with CPU tests, those
# with [multigpu] tests (checked only where 2 GPUs ran those), and those with GPU tests the
# sanitizers can run here.
gpu_ex=$(intersect "$exercises" "$(tags_of "[gpu]")")
cpu_ex=$(intersect "$exercises" "$(tags_of "~[gpu]")")
multi_ex=$(intersect "$exercises" "$(tags_of "[multigpu]")")
sanitizer_spec="[gpu]~[provokes-error]~[cupti]~[host-race]~[stream-gate]"
[ "$two_gpus" = yes ] || sanitizer_spec="$sanitizer_spec~[multigpu]"
sanitizer_ex=$(intersect "$exercises" "$(tags_of "$sanitizer_spec")")
in_table() {  # in_table TABLE EX
  for entry in $1; do [ "$entry" = "$nn:$2" ] && return 0; done
  return 1
}
# A Catch2 spec: the GPU tests of the given exercises, less the excluded tags.
gpu_spec() {
  spec=""
  for ex in "$@"; do
    spec="$spec${spec:+,}[gpu][$ex]~[provokes-error]~[cupti]~[host-race]~[stream-gate]"
  done
  echo "$spec"
}

# 1. the tests as they are. Catch2's own totals say how many test cases and assertions failed
# (its exit status is the failed-assertion count in v2, 42 in v3).
if [ "$gpu" = no ] && [ -n "$only" ] && [ -z "$cpu_ex" ]; then
  # Nothing would run: with no GPU the test main leaves out the [gpu] tests, all this one has.
  say "tests: not run (no usable GPU, and the tests of $exercises are all [gpu] tests)"
else
  echo "==================== lesson $nn: $(basename "$exe") ${only:+[$only]} ===================="
  log=$(mktemp)
  status=$(mktemp)
  # shellcheck disable=SC2086  # timeout_cmd and linebuf are a command and its arguments, or nothing
  { $timeout_cmd $linebuf "$exe" ${only:+"[$only]"} 2>&1; echo $? >"$status"; } | tee "$log"
  rc=$(cat "$status")
  # "TC TCF AS ASF": test cases and assertions, and how many failed ("- - - -" without totals).
  # Catch2 ends with "test cases: 12 | 9 passed | 3 failed" and "assertions: ..." (v3 may add
  # "| 1 skipped"), with "All tests passed (189 assertions in 12 test cases)", or with "No tests
  # ran".
  totals=$(awk '
    function count(line,   n, i, f, parts, total, failed) {
      sub(/^[a-z ]*: */, "", line)
      n = split(line, parts, "|")
      total = 0; failed = 0
      for (i = 1; i <= n; i++) {
        f = parts[i]; gsub(/^ +| +$/, "", f)
        if (f ~ /^[0-9]+$/) total = f
        else if (f ~ /^[0-9]+ failed$/) { sub(/ failed$/, "", f); failed = f }
      }
      return total " " failed
    }
    /^test cases:/ { tc = count($0) }
    /^assertions:/ { as = count($0) }
    /^All tests passed \(/ {
      line = $0; gsub(/[^0-9]+/, " ", line); split(line, v, " ")
      all = v[2] " 0 " v[1] " 0"
    }
    /^No tests ran/ { all = "0 0 0 0" }
    END {
      if (tc != "" && as != "") print tc, as
      else if (all != "") print all
      else print "- - - -"
    }' "$log")
  rm -f "$log" "$status"
  # shellcheck disable=SC2086  # four words
  set -- $totals
  tc=$1 tc_failed=$2 as_failed=$4
  not_ran=""
  [ "$gpu" = no ] && not_ran="; the [gpu] tests did not run: no usable GPU"
  [ "$gpu" = yes ] && [ "$two_gpus" = no ] && [ -n "$multi_ex" ] &&
    not_ran="; the [multigpu] tests did not run: they need 2 GPUs"
  case $rc in
    0) if [ "$tc" = 0 ] || [ "$tc" = - ]; then
         say "tests: FAILED (no test ran: see above)"
         failed="$failed tests"
       elif [ "$gpu" = no ]; then
         say "tests: CPU tests passed ($(plural "$tc" "test case")$not_ran)"
       else
         say "tests: passed ($(plural "$tc" "test case")$not_ran)"
       fi ;;
    124) say "tests: FAILED (timed out: a barrier that not every thread reaches can hang)"
         failed="$failed tests"
         hung=yes ;;
    *) if [ "$tc" = - ]; then
         say "tests: FAILED (exit status $rc before Catch2's totals: the run crashed or stopped; see above)"
       elif [ "$tc_failed" = 0 ]; then
         say "tests: FAILED (exit status $rc, and no test case failed: did any test run? See above)"
       else
         say "tests: FAILED ($tc_failed of $(plural "$tc" "test case") failed, $(plural "$as_failed" "failed assertion"); see above)"
       fi
       failed="$failed tests" ;;
  esac
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
  finding=no
  grep -Eq '(RACECHECK|ERROR) SUMMARY: [1-9]' "$log" && finding=yes
  grep -Eq '(RACECHECK|ERROR) SUMMARY:' "$log" || finding=unknown
  if [ $rc = 0 ] && [ $finding = yes ]; then rc=1; fi
  rm -f "$log"
  case $rc in
    0) say "$tool: passed ($*)" ;;
    124) say "$tool: FAILED (timed out: a barrier that not every thread reaches can hang)"
         failed="$failed $tool"
         hung=yes ;;
    *) if [ $finding = yes ]; then
         say "$tool: FAILED ($tool found errors or hazards: its report is above)"
       elif [ $finding = no ]; then
         # No finding in the tool's summary: the tests themselves failed (their exit status).
         say "$tool: FAILED (no $tool finding, but the tests failed under it, exit $rc: see above)"
       else
         say "$tool: FAILED (exit $rc, and no summary from $tool: see above)"
       fi
       failed="$failed $tool" ;;
  esac
}
# memcheck for every exercise with GPU tests the sanitizers can run here; racecheck and synccheck
# for those of the tables.
memcheck_list=$sanitizer_ex race_list="" sync_list=""
for ex in $sanitizer_ex; do
  in_table "$racecheck_table" "$ex" && race_list="$race_list $ex"
  in_table "$synccheck_table" "$ex" && sync_list="$sync_list $ex"
done
# shellcheck disable=SC2086  # the lists are words
sanitize memcheck $memcheck_list
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

# 5. the speed grade: with a GPU, after everything else passed. A lesson has one when add_lesson
# wrote lessonNN_grade.target beside its exercise tests (or when the binary is there).
lesson_dir=$(dirname "$exe")
grade_exe=$lesson_dir/lesson${nn}_grade
grade_note=""  # what the final line adds about the grade
if [ -f "$lesson_dir/lesson${nn}_grade.target" ] || [ -x "$grade_exe" ]; then
  if [ -z "$gpu_ex" ]; then
    # Exercises without GPU tests have no kernel to time (lesson 05's float4 split).
    say "grade: none for $exercises (no kernel to time)"
  elif [ "$gpu" = no ]; then
    say "grade: not measured (no usable GPU: the speed grade times your kernels on one)"
    grade_note="; speed grade not measured (no usable GPU)"
  elif [ -n "$failed" ]; then
    say "grade: not measured (an earlier stage failed: a time means nothing until the checks pass)"
  elif [ "${CHECK_EXERCISE_GRADE:-1}" = 0 ]; then
    say "grade: not measured (CHECK_EXERCISE_GRADE=0)"
    grade_note="; speed grade not measured (CHECK_EXERCISE_GRADE=0)"
  else
    grade_why=""
    if [ -f "$build/CMakeCache.txt" ]; then
      # Built here, not by `all`: the grade compiles the lesson's code once more.
      echo "==================== building lesson${nn}_grade (the first time compiles the lesson's code once more) ===================="
      log=$(mktemp)
      if ! cmake --build "$build" --target "lesson${nn}_grade" >"$log" 2>&1; then
        cat "$log"
        grade_why="lesson${nn}_grade did not build: see above"
      fi
      rm -f "$log"
    fi
    if [ -z "$grade_why" ] && [ ! -x "$grade_exe" ]; then
      grade_why="no $grade_exe: build it with cmake --build BUILD --target lesson${nn}_grade"
    elif [ -z "$grade_why" ] && [ -n "$(find "$exe" -newer "$grade_exe" 2>/dev/null)" ]; then
      grade_why="$grade_exe is older than the exercise tests: build it again (cmake --build BUILD --target lesson${nn}_grade)"
    fi
    graded=""
    if [ -z "$grade_why" ]; then
      graded_all=$("$grade_exe" --list 2>/dev/null)
      if [ -z "$graded_all" ]; then
        grade_why="$grade_exe --list named no exercise"
      else
        graded=$(intersect "$exercises" "$graded_all")
      fi
    fi
    if [ -n "$grade_why" ]; then
      say "grade: not measured ($grade_why)"
      grade_note="; speed grade not measured ($grade_why)"
    elif [ -z "$graded" ]; then
      say "grade: none for $exercises (lesson $nn grades $graded_all)"
    else
      echo "==================== grade: $graded against the course's solutions ===================="
      log=$(mktemp)
      status=$(mktemp)
      # shellcheck disable=SC2086  # timeout_cmd, linebuf and graded are words, or nothing
      { $timeout_cmd $linebuf "$grade_exe" $graded 2>&1; echo $? >"$status"; } | tee "$log"
      rc=$(cat "$status")
      bad="" summary=""
      # 77: no usable GPU after all (the binary's own check); no exercise was timed.
      [ "$rc" = 77 ] && graded=""
      for ex in $graded; do
        line=$(sed -n "s/^grade $ex: //p" "$log" | head -n 1)
        if [ -z "$line" ]; then
          line="no verdict (the grade stopped before it: see above)"
          bad="$bad $ex"
          verdict="no verdict"
        else
          case $line in
            *FAILED*) bad="$bad $ex"; verdict="FAILED" ;;
            *": correct but slow"*) verdict="correct but slow" ;;
            *": fast") verdict="fast" ;;
            *) bad="$bad $ex"; verdict="no verdict" ;;
          esac
        fi
        say "grade $ex: $line"
        summary="$summary${summary:+, }$ex $verdict"
      done
      rm -f "$log" "$status"
      case $rc in
        0) if [ -z "$bad" ]; then
             say "grade: passed ($summary)"
             grade_note="; grade: $summary"
           else
             say "grade: FAILED (lesson${nn}_grade exited 0, but$bad got no verdict: see above)"
             failed="$failed grade"
           fi ;;
        124) say "grade: FAILED (timed out: a kernel that never ends? See above)"
             failed="$failed grade" ;;
        77) say "grade: not measured (lesson${nn}_grade found no usable GPU: see above)"
            grade_note="; speed grade not measured (lesson${nn}_grade found no usable GPU)" ;;
        *) if [ -n "$bad" ]; then
             say "grade: FAILED (${bad# }: see the lines above)"
           else
             say "grade: FAILED (lesson${nn}_grade exited $rc: see above)"
           fi
           failed="$failed grade" ;;
      esac
    fi
  fi
fi

where="lesson $nn${only:+ [$only]}"
if [ -z "$failed" ]; then
  # One line per exercise: "checked" only when all its tests ran.
  unchecked="" single=""
  for ex in $exercises; do
    if [ "$gpu" = no ] && [ -n "$(intersect "$ex" "$gpu_ex")" ]; then
      if [ -n "$(intersect "$ex" "$cpu_ex")" ]; then
        say "$ex: CPU part only (its GPU tests did not run: no GPU)"
      else
        say "$ex: not checked (its tests are all GPU tests: no GPU)"
      fi
      unchecked="$unchecked $ex"
    elif [ "$gpu" = yes ] && [ "$two_gpus" = no ] && [ -n "$(intersect "$ex" "$multi_ex")" ]; then
      say "$ex: single-GPU part only (its [multigpu] tests did not run: they need 2 GPUs)"
      single="$single $ex"
    else
      say "$ex: checked"
    fi
  done
  if [ "$gpu" = no ] && [ -z "$cpu_ex" ]; then
    echo "check_exercise: $where: nothing checked (no usable GPU, and the tests of$unchecked all need one)$grade_note"
  elif [ "$gpu" = no ] && [ -n "$unchecked" ]; then
    echo "check_exercise: $where: CPU parts passed;$unchecked not checked on a GPU$grade_note"
  elif [ "$gpu" = no ]; then
    echo "check_exercise: $where: passed (the tests of $exercises are CPU tests only, and all ran; with no usable GPU the lesson's other [gpu] tests did not)$grade_note"
  elif [ -n "$single" ]; then
    echo "check_exercise: $where: passed on 1 GPU;$single not checked on 2 GPUs${why_not:+ (and the GPU checks did not run: $why_not)}$grade_note"
  elif [ -n "$why_not" ]; then
    echo "check_exercise: $where: passed, but the GPU checks did not run ($why_not)$grade_note"
  else
    echo "check_exercise: $where: passed$grade_note"
  fi
  exit 0
fi
[ "$gpu" = no ] && [ -n "$gpu_ex" ] && say "${only:+[$only] }not checked on a GPU either: $gpu_ex (no usable GPU)"
echo "check_exercise: $where: FAILED (${failed# })"
exit 1
