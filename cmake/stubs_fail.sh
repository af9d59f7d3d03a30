#!/bin/sh
# Runs a stubs-fail check (see add_lesson): "$@" is the exercise test binary and its arguments.
# Once you have edited exercise.cu, the stubs are gone and the check no longer means anything:
# it is then reported as skipped (exit 77), so that `make test` stays green while you work.
#
# "Edited" means: its SHA-256 differs from the course's stubs, recorded in
# cmake/exercise_stubs.sha256. No git involved, so committed, pushed or downloaded solutions
# count as edited too. Whoever changes a stub regenerates that file (from the project root:
# sha256sum lessons/*/exercise.cu > cmake/exercise_stubs.sha256); .ci/run checks it is current.
src=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
rel=lessons/$(basename "$(dirname "$src")")/$(basename "$src")
recorded=$(awk -v f="$rel" '$2 == f { print $1 }' "$root/cmake/exercise_stubs.sha256")
actual=$(sha256sum "$src" | cut -d' ' -f1)
if [ -z "$recorded" ]; then
  echo "stubs check: $rel has no hash in cmake/exercise_stubs.sha256 (regenerate it)"
  exit 1
fi
if [ "$actual" != "$recorded" ]; then
  echo "SKIPPED: $rel differs from the course's stubs (your solutions); the stubs check runs on the unmodified stubs only"
  exit 77
fi
exec "$@"
