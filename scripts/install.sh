#!/usr/bin/env bash
# `make install`: step06's libtierpool (.so, .a), its header, CMake package and pkg-config file.
#   scripts/install.sh PREFIX [JOBS]
# It configures step06-three-tier on its own in build/install, without tests and benchmarks, and
# builds only the two libraries: what is installed and nothing else, in well under a minute. It
# installs no packages: a missing tool is named, with the Debian package that has it. Warnings
# are not errors here: a newer compiler's new warning must not stop an install (make test keeps
# -Werror).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:?usage: scripts/install.sh PREFIX [JOBS]}
jobs=${2:-$(nproc)}
build=${TIERPOOL_INSTALL_BUILD:-build/install}  # the test of the install builds elsewhere

missing() {  # missing WHAT PACKAGE
  echo "make install: $1 not found; on Debian or Ubuntu: sudo apt-get install $2" >&2
  exit 1
}

command -v cmake >/dev/null || missing "cmake (3.20 or newer)" cmake
cmake_version=$(cmake --version | sed -n '1s/[^0-9]*\([0-9][0-9.]*\).*/\1/p')
if ! printf '3.20\n%s\n' "$cmake_version" | sort -V -C; then
  echo "make install: cmake $cmake_version is too old: 3.20 or newer is needed" >&2
  exit 1
fi
# CMake takes CC and CXX when they are set, and otherwise looks for these names.
found_any() {
  for name in "$@"; do
    command -v "$name" >/dev/null && return 0
  done
  return 1
}
# shellcheck disable=SC2086  # a list of names when CC or CXX is not set
found_any ${CC:-cc gcc clang} || missing "a C compiler (${CC:-cc})" gcc
# shellcheck disable=SC2086
found_any ${CXX:-c++ g++ clang++} || missing "a C++ compiler with C++20 (${CXX:-c++})" g++

mkdir -p "$(dirname "$build")"
if ! cmake -S step06-three-tier -B "$build" -DCMAKE_BUILD_TYPE=Release -DTIERPOOL_WERROR=OFF \
       -DTIERPOOL_BUILD_TESTS=OFF -DTIERPOOL_BUILD_BENCHMARKS=OFF >"$build.log" 2>&1; then
  cat "$build.log" >&2
  echo "make install: configuring $build failed (the log is above and in $build.log)" >&2
  exit 1
fi
cmake --build "$build" -j "$jobs" --target tierpool tierpool_static
cmake --install "$build" --prefix "$prefix" --component tierpool

libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
case $libdir in
  /*) ;;
  *) libdir=$(cd "$prefix" && pwd)/$libdir ;;
esac
echo "tierpool is installed in $prefix; libtierpool.so is in $libdir."
# A program linked to it must find it when it starts: the loader looks in the program's rpath,
# in LD_LIBRARY_PATH, and in the cache that ldconfig builds from /etc/ld.so.conf.
if cat /etc/ld.so.conf /etc/ld.so.conf.d/*.conf 2>/dev/null | grep -qxF "$libdir"; then
  echo "Run \`sudo ldconfig\` once, so that programs linked to it find it there."
else
  echo "Programs linked to it find it by their rpath (-Wl,-rpath,$libdir) or with"
  echo "LD_LIBRARY_PATH=$libdir; or list $libdir in /etc/ld.so.conf.d/ and run ldconfig."
fi
