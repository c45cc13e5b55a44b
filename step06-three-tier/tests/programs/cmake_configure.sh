#!/usr/bin/env bash
# cmake_configure.sh SOURCE_DIR [TARGET]: configure SOURCE_DIR with cmake in a fresh build
# directory (compiler detection, try_compile checks, find_package), then build TARGET if given.
# Every compiler and linker cmake starts runs under the same LD_PRELOAD.
set -euo pipefail
src=$1
target=${2:-}
"${CMAKE:-cmake}" -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DTIERPOOL_BUILD_BENCHMARKS=OFF
if [ -n "$target" ]; then
  "${CMAKE:-cmake}" --build build --target "$target" -j 1
fi
