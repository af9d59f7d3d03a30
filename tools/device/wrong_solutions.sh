#!/bin/sh
# Proves that the exercise checks fail on plausible wrong solutions, not only on the stubs.
#
#   tools/device/wrong_solutions.sh build [NN ...]   here, no GPU needed: build every wrong solution
#   tools/device/wrong_solutions.sh run [NN ...]     on the GPU host: check each, print a table
#
# Input (not committed): .wrong/lessonNN/*.cu, each a complete exercise.cu: control.cu (the
# solutions, which must pass) and exK_<bug>.cu (the control with one bug; its first line says
# which, and which check should catch it).
#
# build: one build folder per lesson, build-wrong/lessonNN, configured once with
#   -DLESSON_EXERCISE_SOURCE_NN=build-wrong/lessonNN/variant.cu (see cmake/AddLesson.cmake), so
#   that for each wrong solution only variant.cu is compiled again and lessonNN_exercise_tests
#   linked again. Each executable goes to build-h200/wrong/lessonNN_<name>/ with a file `about`
#   (its first line). Then build-h200/wrong.tar.xz packs them all (the binaries differ by a few
#   kilobytes: xz's 64 MiB window makes them one copy), small enough to carry to the GPU host.
# run: unpacks build-h200/wrong.tar.xz when build-h200/wrong is missing, runs
#   cmake/check_exercise.sh on each (the control on all its exercises, a wrong solution on its
#   own exercise), and prints: lesson, exercise, bug, expected catcher, result, caught by. The
#   logs go to build-h200/wrong-logs/. A wrong solution that passes is the finding.
#   CHECK_EXERCISE_TIMEOUT (seconds, default 120 here) limits each run: a divergent barrier can
#   hang.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
mode=${1:-}
[ $# -gt 0 ] && shift
lessons=${*:-$(cd .wrong 2>/dev/null && for d in lesson[0-9][0-9]; do [ -d "$d" ] && echo "${d#lesson}"; done)}
out=build-h200/wrong

case $mode in
  build)
    [ -d .wrong ] || { echo "no .wrong/ folder: nothing to build" >&2; exit 2; }
    mkdir -p "$out"
    for nn in $lessons; do
      dir=build-wrong/lesson$nn
      mkdir -p "$dir"
      [ -f "$dir/variant.cu" ] || cp ".wrong/lesson$nn/control.cu" "$dir/variant.cu"
      if [ ! -f "$dir/CMakeCache.txt" ]; then
        cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCOURSE_LESSONS=$nn \
          "-DLESSON_EXERCISE_SOURCE_$nn=$root/$dir/variant.cu" >"$dir/configure.log" 2>&1 ||
          { cat "$dir/configure.log"; exit 1; }
      fi
      for src in ".wrong/lesson$nn"/*.cu; do
        name=lesson${nn}_$(basename "$src" .cu)
        # cp only when the content changes, so that ninja rebuilds only what differs.
        cmp -s "$src" "$dir/variant.cu" || cp "$src" "$dir/variant.cu"
        printf '%-48s ' "$name"
        if cmake --build "$dir" --target "lesson${nn}_exercise_tests" >"$dir/$name.log" 2>&1; then
          mkdir -p "$out/$name"
          cp "$(ls "$dir"/lessons/"$nn"-*/lesson"${nn}"_exercise_tests)" "$out/$name/"
          head -1 "$src" >"$out/$name/about"
          echo built
        else
          echo "BUILD FAILED (see $dir/$name.log)"
        fi
      done
    done
    tar -C build-h200 -cf - wrong | xz -9 -T2 >build-h200/wrong.tar.xz
    echo "packed: build-h200/wrong.tar.xz ($(du -h build-h200/wrong.tar.xz | cut -f1)); carry it to the GPU host"
    ;;
  run)
    if [ ! -d "$out" ]; then
      [ -f build-h200/wrong.tar.xz ] || { echo "no $out and no build-h200/wrong.tar.xz: build first" >&2; exit 2; }
      xz -dc build-h200/wrong.tar.xz | tar -C build-h200 -xf -
    fi
    logs=build-h200/wrong-logs
    mkdir -p "$logs"
    export CHECK_EXERCISE_TIMEOUT="${CHECK_EXERCISE_TIMEOUT:-120}"
    printf '%-6s %-4s %-36s %-22s %-8s %5s %s\n' lesson ex bug expected result secs "caught by"
    for nn in $lessons; do
      for folder in "$out"/lesson"$nn"_*; do
        [ -d "$folder" ] || continue
        bug=${folder##*/lesson"${nn}"_}
        ex=${bug%%_*}
        expected=$(sed -n 's/.*Expected to be caught by: \(.*\)\.$/\1/p' "$folder/about")
        t0=$(date +%s)
        if [ "$bug" = control ]; then
          ex=all
          expected="nothing"
          sh cmake/check_exercise.sh "$folder" "$nn" >"$logs/lesson${nn}_$bug.log" 2>&1
        else
          sh cmake/check_exercise.sh "$folder" "$nn" "$ex" >"$logs/lesson${nn}_$bug.log" 2>&1
        fi
        rc=$?
        secs=$(( $(date +%s) - t0 ))
        by=$(sed -n 's/^check_exercise: lesson [0-9]* \([a-z]*\): FAILED.*/\1/p' "$logs/lesson${nn}_$bug.log" | tr '\n' ' ')
        notrun=$(grep -c ': not run (' "$logs/lesson${nn}_$bug.log")
        if [ $rc != 0 ]; then
          result=FAILED
        elif grep -q 'GPU checks did not run' "$logs/lesson${nn}_$bug.log"; then
          result=cpu-only  # passed, but with no GPU the [gpu] tests and sanitizers did not run
        else
          result=passed
        fi
        [ "$notrun" -gt 0 ] && by="$by(${notrun} stage(s) not run)"
        printf '%-6s %-4s %-36s %-22s %-8s %5s %s\n' "$nn" "$ex" "$bug" "$expected" "$result" "$secs" "$by"
      done
    done
    echo "logs: $logs/ (a wrong solution that PASSED was not caught: read its log)"
    ;;
  *)
    echo "usage: $0 build|run [NN ...]" >&2
    exit 2
    ;;
esac
