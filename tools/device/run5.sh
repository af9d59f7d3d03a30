#!/usr/bin/env bash
# Last device call of 2026-12-01: every benchmark again (after the baseline-median fix), the
# wrong solutions of lessons 04, 05, 07 (and 03 with ncu), lesson 04's timeline.
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/r
bash .device/run.sh build-h200/lessons/04-streams/lesson04 --timeline $OUT/r/timeline.svg > $OUT/r/lesson04_timeline_run.txt 2>&1; echo "timeline rc=$?"
bash .device/run.sh tools/device/wrong_solutions.sh run 04 05 07 2>&1 | tail -40
COURSE_NCU=1 bash .device/run.sh tools/device/wrong_solutions.sh run 03 2>&1 | grep -E "^03|lesson ex"
tar -C build-h200 -czf $OUT/r/wrong-logs.tgz wrong-logs
tar -C $OUT -czf $OUT/results5.tgz r
bash tools/device/run_stage.sh bench 02 03 04 05 06 07 08
tar -C $OUT -czf $OUT/results5.tgz r
