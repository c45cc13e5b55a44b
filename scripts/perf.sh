#!/usr/bin/env bash
# `make perf` and `make perf-diff`: where the time of a step's allocator goes, and how it moved
# from one step to the next.
#   scripts/perf.sh record STEP [FILTER]   perf record -e cpu-clock on the step's benchmark,
#                                          then the flat profile and the call graph
#   scripts/perf.sh diff A B               both steps recorded, their flat profiles side by side,
#                                          then `perf diff` (B's change per symbol against A)
#   scripts/perf.sh record all             every profile the book shows, and every perf-diff it shows
# FILTER is a Google Benchmark filter regex over entry names `workload/allocator/threads:T/`;
# without it each step profiles the entry its chapter is about (the table below). The recordings
# are kept in build/perf/<step>.data and the reports in build/perf/<step>.txt (with a FILTER:
# build/perf/<step>.<filter>.data, so a before/after pair of one step keeps both).
#
# A profile that a page of the book shows (scripts/perf_excerpt.py lists them, by STEP and FILTER)
# also writes its excerpt, docs/results/perf/<name>.txt: a stamp (machine, commit, date, this
# command) and the heaviest rows. scripts/check_docs.py --write copies the excerpts into the
# pages; `make perf STEP=all` records them all again (and the perf-diff pairs the pages show).
#
# Call graphs are unwound from DWARF (--call-graph dwarf): the steps keep frame pointers, but
# Debian's libc and libstdc++ do not, so `-g` (frame pointers) loses every caller of malloc.
# DWARF unwinding also names the inlined frames, which is where a pool's fast path lives.
#
# cpu-clock is a software event: the kernel samples on a timer, so it works in VMs and containers
# without hardware counters (this machine has none). On a machine with a PMU, add
# `-e cycles,instructions,cache-misses` (PERF_EVENTS below) to see why a hot line is hot.
set -euo pipefail
cd "$(dirname "$0")/.."
PERF_EVENTS=${PERF_EVENTS:-cpu-clock}
PYTHON=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
MIN_TIME=${MIN_TIME:-1}
out_dir=build/perf
# Frames of the benchmark harness and of thread start-up: the same in every step, so left out of
# the call graphs (and the unnamed bottoms of stacks, 0x...).
HARNESS_NAMES='(std::__invoke|__invoke|std::thread::_|operator\(\) \(inlined\)|_M_invoke|_M_run|tierpool::bench::RunOnThreads|tierpool::bench::[A-Za-z0-9]+Workload::Run<|start_thread|clone3|0x[0-9a-f]+( |$))'
HARNESS_FRAMES="^[ |]*(--[0-9.]+%--|---)?$HARNESS_NAMES"

default_filter() {  # the entry each chapter's perf section is about
  case $1 in
    step01-*) echo '^rational/step01-freelist/' ;;
    step02-*) echo '^rational/step02-mempool/' ;;
    step03-*) echo '^sizes/step03-sizeclass/' ;;
    step04-*) echo '^shuffle64/step04-mutex/threads:4/' ;;
    step05-*) echo '^shuffle64/step05-objectpool/threads:4/' ;;
    step06-*) echo '^sizes/step06-tierpool/threads:2/' ;;
    *) echo "perf.sh: no default entry for $1; give FILTER=<regex>" >&2; return 1 ;;
  esac
}

need_perf() {
  if ! command -v perf >/dev/null; then
    echo "perf.sh: perf is not installed (apt-get install linux-perf); make deps-bench installs it" >&2
    exit 1
  fi
}

check_step() {
  local step=${1%/}
  if [ -z "$step" ] || [ ! -d "$step" ]; then
    echo "perf.sh: name a step folder, e.g. STEP=step01-rational-freelist" >&2
    exit 2
  fi
  local binary="build/release/bench/$step"
  if [ ! -x "$binary" ]; then
    echo "perf.sh: $binary is missing: run make release" >&2
    exit 1
  fi
}

flat_report() {  # one line per symbol: self time, binary, symbol
  perf report -i "$1" --stdio --no-children --sort dso,symbol -g none --percent-limit 0.5 \
    2>/dev/null | grep -E '^ +[0-9.]+%' | cut -c1-"${2:-110}" | sed -E 's/ +$//'
}

inclusive_report() {  # "children% self% symbol", the 0x bottoms of stacks left out
  perf report -i "$1" --stdio --children --sort symbol -g none --percent-limit 3 2>/dev/null |
    grep -E '^ +[0-9.]+%' | sed -E 's/^ +([0-9.]+%) +[0-9.]+% +\[[.k]\] /\1  /' |
    grep -Ev "^[0-9.]+%  $HARNESS_NAMES" |
    cut -c1-"$2" | sed -E 's/ +$//' | sed -n '1,18p'
}

record() {
  local step=${1%/} filter=${2:-} name=${1%/}
  check_step "$step"
  local excerpt
  excerpt=$($PYTHON scripts/perf_excerpt.py name "$step" "$filter")
  if [ -n "$filter" ]; then  # a recording of its own, beside the default one: before/after pairs
    name="$step.$(echo "$filter" | tr -c 'a-zA-Z0-9\n' '-' | sed -E 's/-+/-/g; s/^-|-$//g')"
  else
    filter=$(default_filter "$step")
  fi
  mkdir -p "$out_dir"
  rm -f "$out_dir/$name.data.old"
  local data="$out_dir/$name.data" binary="build/release/bench/$step"
  if [ -z "$("$binary" --benchmark_list_tests --benchmark_filter="$filter" 2>/dev/null)" ]; then
    echo "perf.sh: the filter '$filter' matches no entry of $binary (--benchmark_list_tests)" >&2
    exit 1
  fi
  echo "\$ perf record -e $PERF_EVENTS -F 999 --call-graph dwarf,16384 -o $data $binary \\"
  echo "      --benchmark_filter='$filter' --benchmark_min_time=$MIN_TIME"
  perf record -e "$PERF_EVENTS" -F 999 --call-graph dwarf,16384 -o "$data" -- "$binary" --benchmark_filter="$filter" \
    --benchmark_min_time="$MIN_TIME" >"$out_dir/$name.bench.txt" 2>"$out_dir/$name.record.log" || {
    cat "$out_dir/$name.record.log" >&2
    exit 1
  }
  {
    echo "# $step: $filter ($PERF_EVENTS samples)"
    echo
    echo "## Self time per symbol"
    echo "\$ perf report -i $data --stdio --no-children --sort dso,symbol -g none --percent-limit 0.5"
    flat_report "$data"
    echo
    echo "## Who calls the hot symbols (each one's callers below it, the harness's frames left out)"
    echo "\$ perf report -i $data --stdio --no-children --sort symbol -g graph,2,callee --percent-limit 5"
    perf report -i "$data" --stdio --no-children --sort symbol -g graph,2,callee \
      --percent-limit 5 2>/dev/null | grep -v '^#' | grep -v '^$' | cut -c1-110 |
      sed -E 's/ +$//; s/ +- +-$//' | grep -Ev "$HARNESS_FRAMES" | grep -Ev '^ +\|$' |
      sed -n '1,60p'
  } >"$out_dir/$name.txt"
  cat "$out_dir/$name.txt"
  echo
  echo "(saved: $data, $out_dir/$name.txt; perf annotate -i $data --stdio -s '<symbol>' for lines)"
  if [ -n "$excerpt" ]; then
    $PYTHON scripts/perf_excerpt.py record "$excerpt" "$data" "$filter"
  fi
}

record_all() {  # every profile and every perf-diff pair the book shows, excerpts written
  local step filter a b
  # A perf-diff reuses the recordings of this run only, never one left from an earlier run.
  while IFS=$'\t' read -r a b; do
    rm -f "$out_dir/$a.data" "$out_dir/$b.data"
  done < <($PYTHON scripts/perf_excerpt.py diffs)
  while IFS=$'\t' read -r step filter; do
    record "$step" "$filter"
  done < <($PYTHON scripts/perf_excerpt.py list)
  while IFS=$'\t' read -r a b; do
    diff_steps "$a" "$b" reuse
  done < <($PYTHON scripts/perf_excerpt.py diffs)
}

diff_steps() {  # with a third argument, the recordings already in build/perf/ are used
  local a=${1%/} b=${2%/}
  check_step "$a"
  check_step "$b"
  for s in "$a" "$b"; do
    if [ -z "${3:-}" ] || [ ! -f "$out_dir/$s.data" ]; then
      record "$s" "" >/dev/null
    fi
  done
  # Inclusive time per frame, inlined frames included: a pool's fast path is inlined into the
  # benchmark loop, so only this view names it (the flat, self-time view shows the loop alone).
  local width=62
  echo "== time per frame, callees and inlined frames included (perf report --children)"
  # pr -m: two files as columns; expand: pr writes tabs.
  pr -m -t -S' | ' -W $((2 * width + 3)) <({ echo "$a"; inclusive_report "$out_dir/$a.data" $width; }) \
    <({ echo "$b"; inclusive_report "$out_dir/$b.data" $width; }) | expand | sed -E 's/ +$//'
  echo
  echo "== perf diff: each user-space symbol's self time in $a (Baseline) and its change in $b (Delta)"
  echo "\$ perf diff --sort symbol $out_dir/$a.data $out_dir/$b.data"
  # Symbols are matched by name: those of one step only show an empty Baseline or Delta column,
  # which is the point, the code that moved in or out between the steps.
  perf diff --sort symbol "$out_dir/$a.data" "$out_dir/$b.data" 2>/dev/null |
    grep -F '[.]' | cut -c1-110 | sed -E 's/ +$//' | sed -n '1,15p'
  $PYTHON scripts/perf_excerpt.py diff "$a" "$b" "$out_dir/$a.data" "$out_dir/$b.data"
}

need_perf
case ${1:-} in
  record)
    if [ "${2:-}" = all ]; then
      record_all
    else
      record "${2:-}" "${3:-}"
    fi ;;
  diff)
    if [ -z "${2:-}" ] || [ -z "${3:-}" ]; then
      echo "usage: make perf-diff A=<step dir> B=<step dir>" >&2
      exit 2
    fi
    diff_steps "$2" "$3" ;;
  *) echo "usage: $0 record STEP [FILTER] | diff A B" >&2; exit 2 ;;
esac
