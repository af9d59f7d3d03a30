#!/usr/bin/env bash
# Third device call of 2026-12-01: ctest, sanitizers on the kernels that changed, the FMA-host
# build's bit-exact GPU tests, the write-combined probe.
S="bash tools/device/run_stage.sh"
$S ctest
$S sanitize memcheck build-h200/tests/common_tests "[timing]"
for t in memcheck racecheck initcheck; do $S sanitize $t build-h200/lessons/06-affine-warp/lesson06_tests "[gpu]~[provokes-error]"; done
$S sanitize memcheck build-h200/lessons/02-memory-types/lesson02_tests "[stream-ordered]"
mkdir -p $OUT/r
for t in tests/common_tests lessons/06-affine-warp/lesson06_tests lessons/08-postprocess/lesson08_tests; do
  bash .device/run.sh build-h200/fma/$t --require-gpu > $OUT/r/fma_$(basename $t).txt 2>&1; echo "fma $t rc=$? $(grep -E 'test cases' $OUT/r/fma_$(basename $t).txt | tail -1)"
done
bash .device/run.sh build-h200/wc_probe > $OUT/r/wc_probe.txt 2>&1; echo "wc_probe rc=$?"; tail -25 $OUT/r/wc_probe.txt
lscpu | grep -iE "model name|flags" | cut -c1-200 > $OUT/r/lscpu.txt
tar -C $OUT -czf $OUT/results3.tgz r
