#!/usr/bin/env bash
# dropin_show_stats.sh LIBTIERPOOL
#
# TIERPOOL_SHOW_STATS as a user checking the preload meets it: the report must come from programs
# that close stderr before they exit (ls does, in an atexit handler) or put something else on
# fd 2, and in its file form it must collect whole reports of many processes, each headed with
# its pid and name, even when they exit at the same time.
set -euo pipefail
lib=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/tierpool-show-stats.XXXXXX")
trap 'rm -rf "$work"' EXIT
report='^  mapped_bytes +[1-9]'

fail() {
  echo "FAILED: $1"
  shift
  for file in "$@"; do
    echo "--- $file"
    tail -n 30 "$file"
  done
  exit 1
}

run() {  # run VALUE COMMAND...: the command preloaded, with TIERPOOL_SHOW_STATS=VALUE
  local value=$1
  shift
  TIERPOOL_SHOW_STATS=$value LD_PRELOAD=$lib "$@"
}

run 1 ls / >/dev/null 2>"$work/ls.err"
grep -Eq "$report" "$work/ls.err" || fail "no report from ls, which closes stderr" "$work/ls.err"

# bash closes fd 2 and opens a file of its own there: the report goes to the stderr it started
# with, and the file keeps only what bash wrote to it.
# shellcheck disable=SC2016  # $1 is bash's
run 1 bash -c 'exec 2>&-; exec 2>"$1"; echo own >&2' - "$work/own" 2>"$work/bash.err"
grep -Eq "$report" "$work/bash.err" || fail "no report after fd 2 was reopened" "$work/bash.err"
[ "$(cat "$work/own")" = own ] || fail "the report went into the program's own file" "$work/own"

run 0 ls / >/dev/null 2>"$work/off.err"
! grep -q tierpool "$work/off.err" || fail "TIERPOOL_SHOW_STATS=0 printed a report" "$work/off.err"

# The file form: appended to, by each process (bash and the two it starts), nothing on stderr.
stats=$work/stats
run "$stats" bash -c 'ls / >/dev/null; cat /dev/null; exec 2>&-' 2>"$work/file.err"
[ ! -s "$work/file.err" ] || fail "the file form wrote to stderr" "$work/file.err"
for name in ls cat bash; do
  grep -Eq "^tierpool pid [0-9]+ \\($name\\)\$" "$stats" || fail "no report headed ($name)" "$stats"
done
run "$stats" ls / >/dev/null
for _ in 1 2 3 4 5 6 7 8; do
  run "$stats" ls / >/dev/null &
done
wait
# 12 reports, each a header and the ten lines of tierpool_print_stats, none cut by another.
if ! awk -v want=12 '
       /^tierpool pid / { if (lines % 11 != 0) exit 1; reports++ }
       { lines++ }
       /^tierpool bytes_in_use/ && lines % 11 != 2 { exit 1 }
       END { exit !(reports == want && lines == 11 * want) }' "$stats"; then
  fail "the file does not hold 12 whole reports" "$stats"
fi

run /nonexistent-dir/stats /bin/true 2>"$work/bad.err" || fail "a bad path stopped the program"
grep -q 'cannot open /nonexistent-dir/stats' "$work/bad.err" ||
  fail "a bad path was not reported" "$work/bad.err"

echo "the report survives a closed stderr; 12 processes appended whole reports to one file"
