// The thread cache's memory: the shared empty cache is read-only. And what a thread cache is
// handed: never a cache line another thread's first objects are on.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <thread>

#include "allocator.h"
#include "tierpool/tierpool.h"

namespace {

using namespace tierpool::internal;

// The shared empty cache is in read-only memory: a write to it by mistake faults at once instead
// of changing the state every thread without a cache reads.
TEST(ThreadCacheEmpty, TheSharedEmptyCacheIsReadOnly) {
  const auto address = reinterpret_cast<std::uintptr_t>(&empty_cache);
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  ASSERT_NE(maps, nullptr);
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long begin = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &begin, &end, perms) != 3) continue;
    if (address < begin || address + sizeof(ThreadCache) > end) continue;
    found = true;
    EXPECT_EQ(perms[1], '-') << line;
  }
  std::fclose(maps);
  EXPECT_TRUE(found) << "no mapping holds the empty cache";
}

// Hoard's "active false sharing": two threads that start using a class one after the other must
// not be handed objects of one cache line, or every write of one takes the line from the other.
// Sizes of classes no other test of this binary uses, so each starts from a fresh span; both
// threads take their first object of the class, the second after the first.
TEST(ThreadCacheSharing, TwoThreadsNeverStartOnOneCacheLine) {
  for (std::size_t size : {24, 40, 56, 72, 88, 104, 120}) {
    void* first = nullptr;
    void* second = nullptr;
    std::thread a([&] { first = tierpool::ConcurrentAlloc(size); });
    a.join();
    std::thread b([&] { second = tierpool::ConcurrentAlloc(size); });
    b.join();
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    const auto line = [](const void* p, std::size_t offset) {
      return (reinterpret_cast<std::uintptr_t>(p) + offset) / kCacheLineSize;
    };
    // No line holds bytes of both objects.
    EXPECT_TRUE(line(first, size - 1) < line(second, 0) || line(second, size - 1) < line(first, 0))
        << size << "-byte objects " << first << " and " << second << " share a cache line";
    tierpool::ConcurrentFree(first);
    tierpool::ConcurrentFree(second);
  }
}

}  // namespace
