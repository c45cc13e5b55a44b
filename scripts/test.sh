#!/usr/bin/env bash
# `make test`: every test of every step, in every build that can find a different bug.
#   release   the tests as users build them, plus the drop-in/preload tests and the doc checks
#   asan      AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan      ThreadSanitizer
#   memcheck  every test again under valgrind memcheck (0 errors, nothing definitely lost)
#   fuzz      every libFuzzer target (one per allocator API) for TIERPOOL_FUZZ_SECONDS (20 s) each,
#             built with clang; skipped where clang or its libFuzzer runtime is missing
#   alone     every step configured and built on its own, as a learner builds one chapter
# TIERPOOL_TEST_STAGES="release asan" limits the stages (all by default).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
stages=${TIERPOOL_TEST_STAGES:-release asan tsan memcheck fuzz alone}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

failed=()
stage() {
  local name=$1; shift
  local start=$SECONDS
  echo "=== make test: $name"
  if "$@"; then
    echo "=== make test: $name passed in $((SECONDS - start)) s"
  else
    echo "=== make test: $name FAILED after $((SECONDS - start)) s"
    failed+=("$name")
  fi
}

preset() {  # configure, build and run the tests of one CMake preset
  local name=$1
  local log="build/$name.build.log"
  mkdir -p build
  if ! { cmake --preset "$name" >"$log" 2>&1 && cmake --build --preset "$name" -j "$jobs" >>"$log" 2>&1; }; then
    grep -E -B2 -A8 'error|Error' "$log" | head -80
    return 1
  fi
  ctest --preset "$name" -j "$jobs" --timeout 900
}

fuzz() {  # the libFuzzer targets, a fixed short time each (a longer run: docs/fuzzing.md)
  if ! command -v clang++ >/dev/null; then
    echo "skipped: clang not installed"
    return 0
  fi
  local probe
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' \
    >"$probe/probe.cpp"
  if ! clang++ -fsanitize=fuzzer "$probe/probe.cpp" -o "$probe/probe" >/dev/null 2>&1; then
    rm -rf "$probe"
    echo "skipped: clang's libFuzzer runtime not installed (libclang-rt-14-dev)"
    return 0
  fi
  rm -rf "$probe"
  preset fuzz
}

alone() {  # each step folder is a project of its own
  local ok=0
  for dir in step0*/; do
    dir=${dir%/}
    [ -f "$dir/CMakeLists.txt" ] || continue
    echo "--- $dir on its own"
    local log="build/alone/$dir.log"
    mkdir -p build/alone
    if ! { cmake -S "$dir" -B "build/alone/$dir" -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 &&
           cmake --build "build/alone/$dir" -j "$jobs" >>"$log" 2>&1; }; then
      echo "--- $dir does not build on its own:"
      grep -E -B2 -A8 'error|Error' "$log" | head -60
      ok=1
    fi
  done
  return $ok
}

for s in $stages; do
  case $s in
    release|asan|tsan|memcheck) stage "$s" preset "$s" ;;
    fuzz) stage fuzz fuzz ;;
    alone) stage alone alone ;;
    *) echo "unknown stage $s" >&2; exit 2 ;;
  esac
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "make test: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "make test: all stages passed ($stages)"
