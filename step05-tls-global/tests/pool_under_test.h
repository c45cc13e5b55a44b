// Which pool a test file checks. Every test file is built twice: as step05_test,
// step05_debug_test, step05_stress_test and step05_oom_test for ObjectPool<T>'s default (every
// rung of the ladder), and as step05_plain_test, step05_plain_debug_test,
// step05_plain_stress_test and step05_plain_oom_test for the plain design (STEP05_TEST_PLAIN). A
// test Traits that sizes the array of recent frees asks RecentOr(n), which leaves the array out
// of the plain pool; the checks of the array's and the unrolled list's own hardening run on the
// rungs that have them.
#pragma once

#include <cstddef>

#include "object_pool.h"

#if STEP05_TEST_PLAIN
using PoolTraits = step05::PlainPoolTraits;
#else
using PoolTraits = step05::DefaultPoolTraits;
#endif

constexpr std::size_t RecentOr(std::size_t size) {
  return PoolTraits::kRecentSize == 0 ? 0 : size;
}
