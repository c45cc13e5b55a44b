#!/usr/bin/env bash
# Installs the Debian packages tierpool needs that are missing. As root (or with passwordless sudo)
# it runs apt-get; otherwise it prints the one install line and carries on with what is there.
#   scripts/install-deps.sh build   compilers' companions: GoogleTest, Google Benchmark, Boost,
#                                   liblzma (the recorded traces are xz-compressed)
#   scripts/install-deps.sh test    + valgrind and the peer allocators (the preload tests use them),
#                                   clang and its libFuzzer runtime (the fuzz stage)
#   scripts/install-deps.sh bench   + the peers, perf and matplotlib
set -euo pipefail
what=${1:-bench}

packages=(cmake g++ make pkg-config libgtest-dev libbenchmark-dev libboost-dev liblzma-dev)
case "$what" in
  test)  packages+=(valgrind python3 git libjemalloc-dev libgoogle-perftools-dev libmimalloc-dev
                    libtbb-dev clang libclang-rt-14-dev) ;;
  bench) packages+=(valgrind python3 python3-matplotlib linux-perf libjemalloc-dev
                    libgoogle-perftools-dev libmimalloc-dev libtbb-dev) ;;
  build) ;;
  *) echo "usage: $0 build|test|bench" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "tierpool: missing packages; install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  echo "tierpool: going on with what is installed (missing peers are reported as skipped)" >&2
  exit 0
fi
echo "tierpool: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
