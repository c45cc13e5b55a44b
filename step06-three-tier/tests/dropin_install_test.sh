#!/usr/bin/env bash
# dropin_install_test.sh BUILD_DIR EXAMPLE_DIR
# What a user does with the package: install the tierpool component of BUILD_DIR into a fresh
# prefix, build the example consumer project against it with find_package(tierpool) and run its
# tests (linked shared and static, the C API, and LD_PRELOAD through tierpool::preload), then build
# its C and C++ programs with pkg-config alone, with an rpath and without one.
set -euo pipefail
build=$1
example=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/tierpool-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" --component tierpool >"$work/install.log"
for file in include/tierpool/tierpool.h libtierpool.so libtierpool.a tierpoolConfig.cmake \
            tierpoolConfigVersion.cmake tierpoolTargets.cmake tierpool.pc; do
  if [ -z "$(find "$prefix" -path "*$file" -print -quit)" ]; then
    echo "FAILED: the install has no $file:"
    cat "$work/install.log"
    exit 1
  fi
done
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
