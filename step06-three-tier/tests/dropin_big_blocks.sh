#!/usr/bin/env bash
# dropin_big_blocks.sh LIBTIERPOOL PROGRAM
#
# Runs PROGRAM (tests/dropin_big_blocks.c) in each of its modes on glibc and preloaded with
# LIBTIERPOOL, and passes when tierpool does at least as well as glibc where a user would notice
# (counts and resident memory, never times: this machine is shared):
#   grow     moves of a buffer grown step by step: at most twice glibc's, and at most 20
#   calloc   resident after a sparse 1 GiB calloc: within 1.2x glibc's + 4 MiB
#   release  resident 300 ms after 2 GiB was freed: within 1.2x glibc's + 20 MiB (the thread's
#            cache may keep its byte budget, 16 MiB)
#   trim     resident after malloc_trim(0): within 1.2x glibc's + 20 MiB
#   errno    successful calls that changed errno: none
#   aslimit  a 400 MiB block after freeing 900 MiB under a 1 GiB address-space limit: works
#   threads  500 threads that allocated and freed and now wait: at most twice glibc's resident
#            growth + 64 MiB (the thread caches' overall budget); after they exit, within 1.2x
#            glibc's + 20 MiB
#   startup  anonymous memory resident at the end of a short program (the allocator's set-up,
#            the first span of each size class touched): at most glibc's + 184 KiB. Measured on
#            the Intel Xeon: glibc 484-488 KiB, tierpool +168-172, mimalloc +156-160, jemalloc
#            +416-420; when each class's first array took room for a whole batch, +184-192. (Page
#            faults, counted before, moved by 20 between runs with the libraries' pages cached.)
#   idle     KiB of the library's read-only data resident in a program that never calls malloc:
#            at most 8 (the page the loader relocates). Measured: 4; when the stats variable's name
#            was a constant, 68 (one read of it made the kernel map the class tables around it)
set -euo pipefail
lib=$1
program=$2
failed=0

for mode in grow calloc release trim errno aslimit threads startup idle; do
  glibc=$("$program" "$mode")
  ours=$(LD_PRELOAD=$lib "$program" "$mode")
  case $mode in
    grow) limit=$(( glibc * 2 > 20 ? glibc * 2 : 20 )); (( ours <= limit )) && ok=1 || ok=0 ;;
    calloc) (( ours <= glibc * 12 / 10 + 4096 )) && ok=1 || ok=0 ;;
    release|trim) (( ours <= glibc * 12 / 10 + 20480 )) && ok=1 || ok=0 ;;
    errno) (( ours == 0 )) && ok=1 || ok=0 ;;
    aslimit) (( ours == 1 || glibc == 0 )) && ok=1 || ok=0 ;;
    threads)
      (( ${ours%,*} <= ${glibc%,*} * 2 + 65536 && ${ours#*,} <= ${glibc#*,} * 12 / 10 + 20480 )) &&
        ok=1 || ok=0 ;;
    startup) (( ours <= glibc + 184 )) && ok=1 || ok=0 ;;
    idle) (( ours <= 8 )) && ok=1 || ok=0 ;;
  esac
  printf '%-8s glibc %-8s tierpool %-8s %s\n' "$mode" "$glibc" "$ours" \
    "$( ((ok)) && echo ok || echo FAILED)"
  ((ok)) || failed=1
done
exit $failed
