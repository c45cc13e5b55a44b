// Which pool a test file checks. object_pool_test.cpp and stress_test.cpp are built twice: as
// step05_test and step05_stress_test for ObjectPool<T>'s default (every rung of the ladder), and
// as step05_plain_test and step05_plain_stress_test for the plain design (STEP05_TEST_PLAIN). A
// test Traits that sizes the array of recent frees asks RecentOr(n), which leaves the array out
// of the plain pool.
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
