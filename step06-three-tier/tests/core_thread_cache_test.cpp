// Where a thread cache sits: its thread's TLS slot (tls_cache) must never share its page offset
// with bytes the fast paths write (4K aliasing slows every call; see PlaceThreadCache). And what
// a thread cache is handed: never a cache line another thread's first objects are on.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>

#include "allocator.h"
#include "tierpool/tierpool.h"

namespace {

using namespace tierpool::internal;

std::size_t SlotOffsetIn(const ThreadCache* cache, const void* slot) {
  return (reinterpret_cast<std::uintptr_t>(slot) - reinterpret_cast<std::uintptr_t>(cache)) %
         kAliasingPeriod;
}

// Neither of the slot's two page-offset twins inside the cache is written by a fast path.
void ExpectQuiet(const ThreadCache* cache, const void* slot) {
  const std::size_t offset = SlotOffsetIn(cache, slot);
  EXPECT_EQ(offset, ThreadCache::kQuietOffset);
  for (std::size_t twin = offset; twin < sizeof(ThreadCache); twin += kAliasingPeriod)
    EXPECT_FALSE(cache->FastPathWrites(twin)) << "offset " << twin;
}

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

TEST(ThreadCachePlacement, FastPathWritesKnowsTheHotFields) {
  const ThreadCache& cache = empty_cache;
  EXPECT_FALSE(cache.FastPathWrites(0));  // heads_[0]: class 0 does not exist
  EXPECT_TRUE(cache.FastPathWrites(8));   // heads_[1]
  EXPECT_TRUE(cache.FastPathWrites(ThreadCache::kQuietOffset + 8));  // seconds_[1]
  EXPECT_FALSE(cache.FastPathWrites(ThreadCache::kQuietOffset));
  EXPECT_FALSE(cache.FastPathWrites(ThreadCache::kQuietOffset + kAliasingPeriod));
}

// Every 8-byte-aligned page offset a TLS slot can have, with memory at two different offsets of
// a page: the cache fits in its memory, and the slot falls on the quiet offset.
TEST(ThreadCachePlacement, TheSlotFallsOnTheQuietOffsetWhereverItIs) {
  auto memory = std::make_unique<ThreadCacheMemory[]>(2);
  alignas(4096) static unsigned char fake_slots[2 * kAliasingPeriod];
  for (ThreadCacheMemory* m : {&memory[0], &memory[1]}) {
    const auto* begin = m->bytes;
    const auto* end = m->bytes + sizeof(m->bytes);
    for (std::size_t page_offset = 0; page_offset < kAliasingPeriod; page_offset += 8) {
      const void* slot = fake_slots + kAliasingPeriod + page_offset;
      ThreadCache* cache = PlaceThreadCache(m, slot);
      ASSERT_EQ(cache->memory, m);
      ASSERT_GE(reinterpret_cast<const unsigned char*>(cache), begin);
      ASSERT_LE(reinterpret_cast<const unsigned char*>(cache + 1), end);
      ExpectQuiet(cache, slot);
      cache->~ThreadCache();
    }
  }
}

// The allocator places the caches of real threads that way, the main thread's and a new one's.
TEST(ThreadCachePlacement, RealThreadsGetQuietCaches) {
  auto check_this_thread = [] {
    tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(8));
    ASSERT_NE(tls_cache, &empty_cache);
    ExpectQuiet(tls_cache, &tls_cache);
  };
  check_this_thread();
  std::thread other(check_this_thread);
  other.join();
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
