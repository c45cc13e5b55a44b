#!/usr/bin/env bash
# dropin_install_test.sh REPO_ROOT EXAMPLE_DIR
# What a user does with the package: `make install PREFIX=...` (scripts/install.sh, here with a
# build directory of its own) into a fresh prefix, which must build the two libraries and nothing
# else; then the example consumer project built against it with find_package(tierpool) and its
# tests run (linked shared and static, the C API, and LD_PRELOAD through tierpool::preload), then
# its C and C++ programs built with pkg-config alone, with an rpath and without one.
set -euo pipefail
root=$1
example=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/tierpool-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

TIERPOOL_INSTALL_BUILD=$work/build bash "$root/scripts/install.sh" "$prefix" 2 >"$work/install.log" \
  2>&1 || { cat "$work/install.log"; exit 1; }
for file in include/tierpool/tierpool.h libtierpool.so libtierpool.a tierpoolConfig.cmake \
            tierpoolConfigVersion.cmake tierpoolTargets.cmake tierpool.pc; do
  if [ -z "$(find "$prefix" -path "*$file" -print -quit)" ]; then
    echo "FAILED: the install has no $file:"
    cat "$work/install.log"
    exit 1
  fi
done
# Only what is installed was built: no test, benchmark or tool (CMake's own probes aside).
built=$(find "$work/build" -path '*/CMakeFiles' -prune -o -type f -executable ! -name '*.so*' -print)
if [ -n "$built" ]; then
  echo "FAILED: make install built more than the libraries: $built"
  exit 1
fi
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

cmake -S "$example" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" -j 2 >"$work/build.log" || { cat "$work/build.log"; exit 1; }
ctest --test-dir "$work/consumer" --output-on-failure

export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name tierpool.pc -print -quit)")
libdir=$(pkg-config --variable=libdir tierpool)
flags=$(pkg-config --cflags --libs tierpool)
echo "pkg-config: $flags"
# Plain paths: absolute, nothing to resolve, the directory that holds the library.
if [[ $libdir != /* || $flags =~ /\.\.?/|// || ! -f $libdir/libtierpool.so ]]; then
  echo "FAILED: pkg-config's paths are not plain: libdir=$libdir, flags: $flags"
  exit 1
fi
# shellcheck disable=SC2086  # pkg-config's flags are meant to be split
{
  # With an rpath, as the chapter shows; in C and in C++.
  cc -o "$work/c_via_pkg_config" "$example/main.c" $flags -Wl,-rpath,"$libdir"
  c++ -std=c++17 -o "$work/cxx_via_pkg_config" "$example/main.cpp" $flags -Wl,-rpath,"$libdir"
  # Without one: the loader finds the library through LD_LIBRARY_PATH (or ldconfig's cache).
  cc -o "$work/c_no_rpath" "$example/main.c" $flags
}
"$work/c_via_pkg_config" >"$work/c_via_pkg_config.out"
head -n 1 "$work/c_via_pkg_config.out"
"$work/cxx_via_pkg_config"
# Into a file, then its first line: piped into head, the program's later lines may meet a closed
# pipe (SIGPIPE), and pipefail would fail the test for it.
LD_LIBRARY_PATH=$libdir "$work/c_no_rpath" >"$work/c_no_rpath.out"
head -n 1 "$work/c_no_rpath.out"
preload=$(pkg-config --variable=preload_library tierpool)
LD_PRELOAD=$preload "$work/consumer/unaware" | grep libtierpool
echo "the installed package works with CMake, pkg-config and LD_PRELOAD"
