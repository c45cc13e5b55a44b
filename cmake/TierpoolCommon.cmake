# Shared build rules for tierpool. Included by the top-level CMakeLists.txt and by every step's
# CMakeLists.txt when that step is configured on its own, so a learner can build one chapter alone:
#   cmake -S step01-rational-freelist -B build/step01 && cmake --build build/step01
include_guard(GLOBAL)

get_filename_component(TIERPOOL_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

option(TIERPOOL_WERROR "Treat warnings as errors" ON)
option(TIERPOOL_MEMCHECK "Also run every test under valgrind memcheck (ctest -L memcheck)" OFF)
option(TIERPOOL_BUILD_TESTS "Build the tests" ON)
option(TIERPOOL_BUILD_BENCHMARKS "Build the benchmarks" ON)
option(TIERPOOL_FUZZ "Build the libFuzzer targets (clang only; see tierpool_add_fuzzer)" OFF)
set(TIERPOOL_FUZZ_SECONDS 20 CACHE STRING "How long ctest runs each fuzz target")
set(TIERPOOL_SANITIZE "" CACHE STRING "Sanitizers: empty, address,undefined or thread")
set(TIERPOOL_TEST_SCALE "" CACHE STRING "Scale factor passed to stress tests (TIERPOOL_TEST_SCALE)")

add_compile_options(-Wall -Wextra -g)
if(TIERPOOL_WERROR)
  add_compile_options(-Werror)
endif()
if(TIERPOOL_SANITIZE)
  add_compile_options(-fsanitize=${TIERPOOL_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${TIERPOOL_SANITIZE})
  if(TIERPOOL_SANITIZE MATCHES "address")
    add_compile_definitions(TIERPOOL_ASAN=1)
  endif()
  if(TIERPOOL_SANITIZE MATCHES "thread")
    add_compile_definitions(TIERPOOL_TSAN=1)
  endif()
endif()
if(TIERPOOL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TIERPOOL_FUZZ needs clang's libFuzzer: configure with `cmake --preset fuzz`")
  endif()
  # Coverage for the fuzzer and ASan+UBSan for everything a target links (step06's library too);
  # libFuzzer's main() only for the targets themselves (tierpool_add_fuzzer). No TIERPOOL_ASAN:
  # step02/03's pools would then take their watched paths only, and it is the plain fast paths
  # that users run.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
# Frame pointers keep `perf record -g` call graphs readable in every build type.
add_compile_options(-fno-omit-frame-pointer)

enable_testing()

# --- Dependencies: Debian's packages first, FetchContent only for machines without them. ------
if(TIERPOOL_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    include(FetchContent)
    FetchContent_Declare(googletest URL
      https://github.com/google/googletest/archive/refs/tags/v1.14.0.tar.gz)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    FetchContent_MakeAvailable(googletest)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endif()
if(TIERPOOL_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    include(FetchContent)
    set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
    FetchContent_Declare(googlebenchmark URL
      https://github.com/google/benchmark/archive/refs/tags/v1.8.3.tar.gz)
    FetchContent_MakeAvailable(googlebenchmark)
  endif()
endif()

find_program(TIERPOOL_VALGRIND valgrind)
# memcheck as every memcheck.* test runs it: any error or definitely/indirectly lost byte fails.
# valgrind runs one thread at a time; by default a thread that loops on malloc/free can keep
# taking the turn back, and a thread waiting for one (after a read or a fork) may wait for many
# minutes. --fair-sched=yes hands the turn out in order.
set(TIERPOOL_MEMCHECK_COMMAND ${TIERPOOL_VALGRIND} --tool=memcheck --error-exitcode=99
    --leak-check=full --errors-for-leak-kinds=definite,indirect
    --show-leak-kinds=definite,indirect --fair-sched=yes --quiet)

# Headers the steps' libraries share: the encoded free-list link of the hardened modes.
add_library(tierpool_common_headers INTERFACE)
target_include_directories(tierpool_common_headers INTERFACE ${TIERPOOL_ROOT}/common/include)

# The shared benchmark harness lives once, in common/, and every step links it.
if(TIERPOOL_BUILD_BENCHMARKS AND NOT TARGET tierpool_bench_harness)
  add_subdirectory(${TIERPOOL_ROOT}/common ${CMAKE_BINARY_DIR}/common)
endif()

# tierpool_add_step(<dir>): add a step folder once (a later step may pull in an earlier one).
function(tierpool_add_step dir)
  get_property(added GLOBAL PROPERTY TIERPOOL_STEP_${dir})
  if(NOT added)
    set_property(GLOBAL PROPERTY TIERPOOL_STEP_${dir} TRUE)
    add_subdirectory(${TIERPOOL_ROOT}/${dir} ${CMAKE_BINARY_DIR}/${dir})
  endif()
endfunction()

# tierpool_add_test(<name> SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s] [NO_MEMCHECK]
#                   [ENV VAR=value ...])
# One executable, one ctest entry; with TIERPOOL_MEMCHECK also "memcheck.<name>" under valgrind.
function(tierpool_add_test name)
  cmake_parse_arguments(T "NO_MEMCHECK" "TIMEOUT" "SOURCES;LIBS;LABELS;ENV" ${ARGN})
  if(NOT TIERPOOL_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  # Test helpers every step may use (address_space_limit.h: out-of-memory tests).
  target_include_directories(${name} PRIVATE ${TIERPOOL_ROOT}/common/testing)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(env "TIERPOOL_TEST_SCALE=${TIERPOOL_TEST_SCALE}" ${T_ENV})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                                          ENVIRONMENT "${env}")
  if(TIERPOOL_MEMCHECK AND TIERPOOL_VALGRIND AND NOT T_NO_MEMCHECK)
    add_test(NAME memcheck.${name}
             COMMAND ${TIERPOOL_MEMCHECK_COMMAND} $<TARGET_FILE:${name}>)
    # Valgrind runs threads one at a time and ~30x slower: stress tests read this and shrink.
    set_tests_properties(memcheck.${name} PROPERTIES LABELS "memcheck;${T_LABELS}"
                         TIMEOUT 900 ENVIRONMENT "${env};TIERPOOL_UNDER_VALGRIND=1")
  endif()
endfunction()

# tierpool_add_benchmark(<step dir> SOURCES ... [LIBS ...])
# Builds <build>/bench/<step dir>, the step's benchmark on the shared harness, and a smoke test
# that runs every registered workload once, tiny, so a benchmark that crashes fails `make test`.
function(tierpool_add_benchmark step)
  cmake_parse_arguments(B "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT TIERPOOL_BUILD_BENCHMARKS)
    return()
  endif()
  set(target bench_${step})
  add_executable(${target} ${B_SOURCES})
  target_link_libraries(${target} PRIVATE ${B_LIBS} tierpool_bench_harness)
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${step}
                        RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  if(TIERPOOL_BUILD_TESTS)
    add_test(NAME ${step}.bench_smoke COMMAND ${target} --tierpool_smoke)
    set_tests_properties(${step}.bench_smoke PROPERTIES LABELS "unit;bench" TIMEOUT 600)
    if(TIERPOOL_MEMCHECK AND TIERPOOL_VALGRIND)
      add_test(NAME memcheck.${step}.bench_smoke
               COMMAND ${TIERPOOL_MEMCHECK_COMMAND} $<TARGET_FILE:${target}> --tierpool_smoke)
      set_tests_properties(memcheck.${step}.bench_smoke PROPERTIES LABELS "memcheck;bench"
                           TIMEOUT 900)
    endif()
  endif()
endfunction()

# tierpool_add_fuzzer(<name> SOURCES ... [LIBS ...])
# With TIERPOOL_FUZZ (clang; `cmake --preset fuzz`): <build>/fuzz/<name>, a libFuzzer target
# (-fsanitize=fuzzer,address,undefined) that drives one allocator API with its input and checks it
# against the shadow model of common/fuzz/fuzz_model.h; and the test "fuzz.<name>", which runs it
# for TIERPOOL_FUZZ_SECONDS on the corpus <build>/corpus/<name> (kept between runs). That
# short run is the `fuzz` stage of `make test` (scripts/test.sh). A longer one, on both cores:
#   cmake --preset fuzz && cmake --build --preset fuzz
#   build/fuzz/fuzz/<name> build/fuzz/corpus/<name> -max_total_time=3600 -jobs=2 -workers=2
# docs/fuzzing.md lists the targets and says how to reproduce a crash.
function(tierpool_add_fuzzer name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT TIERPOOL_FUZZ)
    return()
  endif()
  add_executable(${name} ${F_SOURCES})
  target_include_directories(${name} PRIVATE ${TIERPOOL_ROOT}/common/fuzz)
  target_link_libraries(${name} PRIVATE ${F_LIBS} Threads::Threads)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  if(NOT TARGET tierpool_fuzzers)
    add_custom_target(tierpool_fuzzers)
  endif()
  add_dependencies(tierpool_fuzzers ${name})
  set(corpus ${CMAKE_BINARY_DIR}/corpus/${name})
  file(MAKE_DIRECTORY ${corpus})
  add_test(NAME fuzz.${name}
           COMMAND ${name} ${corpus} -max_total_time=${TIERPOOL_FUZZ_SECONDS} -timeout=20
                   -rss_limit_mb=2048 -print_final_stats=1
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  math(EXPR timeout "${TIERPOOL_FUZZ_SECONDS} + 120")
  set_tests_properties(fuzz.${name} PROPERTIES LABELS "fuzz" TIMEOUT ${timeout})
endfunction()
