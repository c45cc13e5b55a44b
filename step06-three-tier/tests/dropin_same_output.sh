#!/usr/bin/env bash
# dropin_same_output.sh LIBTIERPOOL NAME COMMAND [ARGS...]
#
# Runs COMMAND twice, first as it is and then with LD_PRELOAD=LIBTIERPOOL, and passes when both
# runs succeed with the same standard output, and the preloaded run really was served by tierpool
# (TIERPOOL_SHOW_STATS=1 makes the library print its stats to stderr at exit; they must show
# memory mapped, which only happens when its malloc was called).
#
# Each run gets the same, freshly emptied scratch directory in $DROPIN_SCRATCH (so paths printed by
# the command match) and a directory $DROPIN_SHARED that survives between the two runs (for a
# snapshot both runs must start from). Times ("12 ms", "(0.3s)") and addresses are masked before
# comparing; nothing else is.
set -euo pipefail

lib=$1
name=$2
shift 2

if [ ! -f "$lib" ]; then
  echo "no such library: $lib" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tierpool-dropin-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
export DROPIN_SHARED=$work/shared
export DROPIN_SCRATCH=$work/scratch
mkdir -p "$DROPIN_SHARED"

mask() {
  sed -E -e 's/0x[0-9a-fA-F]+/0x?/g' \
         -e 's/\(?[0-9]+(\.[0-9]+)? ?(ms|s)( total)?\)?//g'
}

run() {  # run <label> [env assignments...]: stdout to $work/<label>.out, stderr to .err
  local label=$1
  shift
  rm -rf "$DROPIN_SCRATCH"
  mkdir -p "$DROPIN_SCRATCH"
  local status=0
  (cd "$DROPIN_SCRATCH" && env "$@" "${command[@]}") >"$work/$label.out" 2>"$work/$label.err" ||
    status=$?
  if [ $status -ne 0 ]; then
    echo "FAILED ($label run): exit status $status: ${command[*]}"
    echo "--- stdout (last 30 lines)"
    tail -n 30 "$work/$label.out"
    echo "--- stderr (last 30 lines)"
    tail -n 30 "$work/$label.err"
    exit 1
  fi
}

command=("$@")
run plain TIERPOOL_SHOW_STATS=0
run preloaded "LD_PRELOAD=$lib" TIERPOOL_SHOW_STATS=1

if ! grep -Eq '^  mapped_bytes +[1-9]' "$work/preloaded.err"; then
  echo "FAILED: the preloaded run printed no tierpool stats with memory mapped:"
  echo "malloc was not tierpool's. stderr:"
  tail -n 30 "$work/preloaded.err"
  exit 1
fi

if ! diff -u <(mask <"$work/plain.out") <(mask <"$work/preloaded.out") >"$work/diff"; then
  echo "FAILED: the output differs with LD_PRELOAD=$lib (- glibc, + tierpool):"
  head -n 60 "$work/diff"
  exit 1
fi

lines=$(wc -l <"$work/plain.out")
processes=$(grep -c '^tierpool bytes_in_use' "$work/preloaded.err" || true)
echo "same output ($lines lines) with and without LD_PRELOAD=$lib;" \
     "tierpool served $processes process(es): ${command[*]}"
