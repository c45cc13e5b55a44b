// ASan sees inside the allocator: a use after free of a tierpool block is reported, because
// freed and never-handed-out memory is poisoned. (valgrind's side is core_uaf_program, run under
// memcheck by ctest in the memcheck build.)
#include <gtest/gtest.h>

#include <cstring>

#include "tierpool/tierpool.h"

namespace {

TEST(CoreTools, UseAfterFreeIsReportedByAsan) {
#if TIERPOOL_ASAN
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto* p = static_cast<volatile char*>(tierpool::ConcurrentAlloc(48));
        p[0] = 1;
        tierpool::ConcurrentFree(const_cast<char*>(p));
        std::printf("%d\n", p[5]);  // the bug
      },
      "use-after-poison");
  EXPECT_DEATH(
      {
        auto* p = static_cast<volatile char*>(tierpool::ConcurrentAlloc(1 << 20));
        tierpool::ConcurrentFree(const_cast<char*>(p));
        p[100000] = 1;  // the bug, in a large block
      },
      "use-after-poison");
#else
  GTEST_SKIP() << "an ASan build checks this (make test runs one)";
#endif
}

TEST(CoreTools, OverflowPastTheUsableSizeIsReportedByAsan) {
#if TIERPOOL_ASAN
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        // The neighbouring object of the same span has not been handed out: poisoned.
        auto* p = static_cast<volatile char*>(tierpool::ConcurrentAlloc(4096));
        p[tierpool::UsableSize(const_cast<char*>(p))] = 1;
      },
      "use-after-poison");
#else
  GTEST_SKIP() << "an ASan build checks this (make test runs one)";
#endif
}

TEST(CoreTools, UsableBytesAreAddressable) {
  for (std::size_t size : {1u, 17u, 1000u, 300000u}) {
    auto* p = static_cast<char*>(tierpool::ConcurrentAlloc(size));
    std::memset(p, 1, tierpool::UsableSize(p));
    tierpool::ConcurrentFree(p);
  }
}

}  // namespace
