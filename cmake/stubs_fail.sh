#!/bin/sh
# Runs a stubs-fail check (see add_lesson): "$@" is the exercise test binary and its arguments.
# Once you have edited exercise.cu, the stubs are gone and the check no longer means anything:
# it is then reported as skipped (exit 77), so that `make test` stays green while you work.
#
# "Edited" means: different from the course as you cloned it. The file is compared with the
# branch you cloned (your branch's upstream, else origin/HEAD, else origin/main) and, if there is
# none, with HEAD. Comparing with HEAD alone would take committed solutions for stubs.
# Outside a git checkout the file is taken as unmodified.
src=$1
shift
dir=$(dirname "$src")
file=$(basename "$src")
base=HEAD
for ref in '@{upstream}' origin/HEAD origin/main; do
  if git -C "$dir" rev-parse --verify --quiet "$ref^{commit}" >/dev/null 2>&1; then
    base=$ref
    break
  fi
done
changed=0
if git -C "$dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$dir" diff --quiet "$base" -- "$file" 2>/dev/null || changed=$?
else
  base="itself (no git checkout to compare it with)"
fi
case $changed in
  1) echo "SKIPPED: $src differs from $base (your solutions); the stubs check runs on the unmodified stubs only"
     exit 77 ;;
esac
"$@"
rc=$?
if [ $rc -eq 0 ]; then
  # ctest fails this check (no "N failed" line). Say why that can happen.
  echo "stubs check: the tests passed on $src, taken as the unmodified stubs: it equals $base. Either a stub no" \
       "longer fails its tests, or your solutions are committed on a branch git compares as" \
       "unchanged; then run this lesson's checks with 'make check LESSON=NN' instead."
fi
exit $rc
