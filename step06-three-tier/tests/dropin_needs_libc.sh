#!/usr/bin/env bash
# dropin_needs_libc.sh LIBTIERPOOL C_PROGRAM [CXX_PLUGIN]
#
# libtierpool.so must need libc alone: every preloaded program loads what it needs, and a C
# program (sh, ls, cat) that got libstdc++, libm and libgcc_s with it would start slower and use
# more memory for nothing. Passes when
#   - its dynamic section needs nothing but libc (and the loader),
#   - every symbol it needs for certain (not weak) is libc's (one of libstdc++'s left strong would
#     fail where it is absent: at load time, or at its first call),
#   - C_PROGRAM (tests/dropin_c_program.c), a C program run with LD_PRELOAD=LIBTIERPOOL, is served
#     by it and finds no C++ runtime in its process; then it dlopens CXX_PLUGIN
#     (tests/dropin_cxx_plugin.cpp), whose operator new, out of memory, must still throw.
set -euo pipefail
lib=$1
program=$2

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: ${needed//$'\n'/ }"
others=$(echo "$needed" | grep -Ev '^(libc\.so\.[0-9]+|ld-linux[-_a-z0-9.]*\.so\.[0-9]+)$' || true)
if [ -n "$others" ]; then
  echo "FAILED: $lib needs more than libc: ${others//$'\n'/ }"
  exit 1
fi

# readelf --dyn-syms: Num Value Size Type Bind Vis Ndx Name; libc's names carry @GLIBC_x.y.
strong=$(readelf --dyn-syms -W "$lib" |
         awk '$7 == "UND" && $5 == "GLOBAL" && $8 !~ /@GLIBC_/ { print $8 }')
if [ -n "$strong" ]; then
  echo "FAILED: $lib needs symbols from outside libc: ${strong//$'\n'/ }"
  exit 1
fi

LD_PRELOAD=$lib "$program" ${3:+"$3"}
