#!/usr/bin/env bash
# On the GPU host (device tool), from the project root, with .device/ packed from build-h200:
#   bash tools/device/run_stage.sh cold|lessons|ctest|bench|sanitize [lessons...]
# Writes everything under $OUT. Used to produce the README outputs and benchmark tables.
set -u
B=build-h200
R="bash .device/run.sh"
stage=$1; shift
mkdir -p "$OUT"
# Only a few files come back from the device tool: everything goes into one archive after each
# stage (pack_out), and results are written under $OUT/r/.
pack_out() { tar -C "$OUT" -czf "$OUT/results.tgz" r 2>/dev/null; }
OUT_TOP=$OUT; OUT=$OUT/r; mkdir -p "$OUT"; trap 'OUT=$OUT_TOP; pack_out' EXIT
case $stage in
cold)
  # Lesson 01's first-call costs as the GPU host gives them: the first process on a GPU nobody
  # has open, then a decay curve of cudaGetDeviceCount in fresh processes after idle gaps, then
  # the same while another process holds the GPU open.
  L=$B/lessons/01-lazy-init-context/lesson01
  { date -u; nvidia-smi --query-gpu=name,pstate,clocks.sm,clocks.mem,persistence_mode,driver_version --format=csv; } > "$OUT/cold_state.txt" 2>&1
  $R $L > "$OUT/lesson01.txt" 2>&1; echo "lesson01 rc=$?" >> "$OUT/cold_state.txt"
  for gap in 0 0 2 5 10 30; do
    sleep $gap
    ms=$($R $L --child-first-call cudaGetDeviceCount 0 2>&1 | sed -n 's/^ms=//p')
    echo "idle gap ${gap} s before the process: cudaGetDeviceCount ${ms} ms" >> "$OUT/cold_decay.txt"
  done
  nvidia-smi --query-gpu=pstate,clocks.sm,clocks.mem --format=csv,noheader >> "$OUT/cold_decay.txt" 2>&1
  # a holder: a process with the driver initialised and the device open, sleeping
  $R python3 -c "import ctypes,time; c=ctypes.CDLL('libcuda.so.1'); assert c.cuInit(0)==0; d=ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d),0); ctx=ctypes.c_void_p(); c.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d); time.sleep(25)" &
  holder=$!; sleep 3
  for i in 1 2 3; do
    ms=$($R $L --child-first-call cudaGetDeviceCount 0 2>&1 | sed -n 's/^ms=//p')
    echo "while another process holds the GPU: cudaGetDeviceCount ${ms} ms" >> "$OUT/cold_decay.txt"
  done
  nvidia-smi --query-gpu=pstate,clocks.sm,clocks.mem --format=csv,noheader >> "$OUT/cold_decay.txt" 2>&1
  wait $holder
  sleep 5
  $R $L > "$OUT/lesson01_warm_rerun.txt" 2>&1
  cat "$OUT/cold_state.txt" "$OUT/cold_decay.txt"; grep Headline "$OUT"/lesson01*.txt
  ;;
lessons)
  for n in "$@"; do
    d=$(ls -d lessons/$n-*); $R $B/$d/lesson$n > "$OUT/lesson$n.txt" 2>&1; echo "lesson$n rc=$?"
    grep Headline "$OUT/lesson$n.txt"
  done
  ;;
ctest)
  $R ctest --test-dir $B --output-on-failure "$@" > "$OUT/ctest.txt" 2>&1; echo "ctest rc=$?"
  grep -E "tests passed|tests failed|Failed|\*\*\*|Not Run|Skipped" "$OUT/ctest.txt" | tail -25
  ;;
bench)
  mkdir -p "$OUT/bench"
  for n in "$@"; do
    d=$(ls -d lessons/$n-*); b=$B/$d/lesson${n}_bench
    $R $b --benchmark_min_time=0.05 --benchmark_out="$OUT/bench/lesson$n.json" --benchmark_out_format=json > "$OUT/bench/lesson$n.txt" 2>&1
    echo "bench $n rc=$? $(grep -c manual_time_median "$OUT/bench/lesson$n.txt") rows"
    (OUT=$OUT_TOP; pack_out)
    grep -iE "error|exception|skipped" "$OUT/bench/lesson$n.txt" | head -5
  done
  ;;
sanitize)
  # sanitize TOOL EXE FILTER...
  tool=$1; exe=$2; shift 2
  $R compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 1 "$exe" --require-gpu "$@" > "$OUT/sanitize_${tool}_$(basename "$exe").txt" 2>&1
  echo "sanitize $tool $(basename "$exe") rc=$?"; tail -3 "$OUT/sanitize_${tool}_$(basename "$exe").txt"
  ;;
*) ;;
esac
# wrong: run each build-h200/wrong/NAME/EXE with the filter given in tools/device/wrong.list
if [ "$stage" = wrong ]; then
  while IFS='|' read -r name exe filter; do
    [ -z "$name" ] && continue
    $R $B/wrong-c/$name/$exe --require-gpu "$filter" > "$OUT/wrong_$name.txt" 2>&1; rc=$?
    echo "wrong solution $name ($exe \"$filter\"): rc=$rc $(grep -E 'test cases' "$OUT/wrong_$name.txt" | tail -1)"
  done < tools/device/wrong.list
fi
