#!/usr/bin/env bash
# Runs lesson binaries in order and ends with a summary table (make run calls this).
#   tools/run_lessons.sh BUILD_DIR lessons/01-name [lessons/02-name ...]
# Each binary's output is shown as it runs. A binary that fails with a single line of output
# (no driver, no GPU) stops the run at once: nothing after it could run either.
set -u
build=$1; shift
log=$(mktemp); trap 'rm -f "$log"' EXIT
names=(); results=(); times=(); heads=(); failed=0
for dir in "$@"; do
  name=$(basename "$dir"); n=${name:0:2}; exe="$build/$dir/lesson$n"
  echo "==================== $name ===================="
  if [ ! -x "$exe" ]; then echo "$exe is not built"; failed=1; continue; fi
  start=$(date +%s%N)
  "$exe" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if [ "$rc" -ne 0 ] && [ "$(grep -c . "$log")" -le 1 ]; then exit "$rc"; fi
  names+=("$name"); times+=("$(printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)))")
  if [ "$rc" -eq 0 ]; then results+=("passed"); else results+=("FAILED ($rc)"); failed=1; fi
  heads+=("$(sed -n 's/^Headline: //p' "$log" | tail -n 1)")
done
echo
echo "==================== summary ===================="
printf '%-28s %-12s %-8s %s\n' lesson result time headline
for i in "${!names[@]}"; do
  printf '%-28s %-12s %-8s %s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}" "${heads[$i]}"
done
exit "$failed"
