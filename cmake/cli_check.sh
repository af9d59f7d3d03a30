#!/bin/sh
# Checks a lesson binary's command line (see add_lesson): cli_check.sh BINARY [BAD_OPTION VALUE]
#   BINARY --help                exits 0 and lists --help (and BAD_OPTION)
#   BINARY --no-such-option      exits 2 and names --no-such-option on stderr
#   BINARY BAD_OPTION VALUE      exits 2 and names BAD_OPTION on stderr (VALUE is out of range)
# None of this needs a GPU: lesson_main parses before it looks for one (common/lesson_main.hpp).
# The wording of the messages is CLI11's and differs between its versions, so only the exit
# codes and the names are checked.
bin=$1
shift
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
failed=0

fail() {
  echo "FAILED: $*"
  echo "--- stdout:"; cat "$out"
  echo "--- stderr:"; cat "$err"
  failed=1
}

# expect CODE TEXT STREAM ARG...: runs BINARY ARG..., wants exit code CODE and TEXT in STREAM
# (stdout or stderr).
expect() {
  code=$1 text=$2 stream=$3
  shift 3
  "$bin" "$@" >"$out" 2>"$err"
  rc=$?
  if [ "$stream" = stdout ]; then file=$out; else file=$err; fi
  if [ "$rc" -ne "$code" ]; then
    fail "$bin $* exited $rc, expected $code"
  elif ! grep -q -F -e "$text" "$file"; then
    fail "$bin $*: '$text' is not in its $stream"
  else
    echo "ok: $bin $* exits $code, '$text' in its $stream"
  fi
}

expect 0 --help stdout --help
[ $# -ge 1 ] && expect 0 "$1" stdout --help
expect 2 --no-such-option stderr --no-such-option
[ $# -ge 1 ] && expect 2 "$1" stderr "$@"
exit $failed
