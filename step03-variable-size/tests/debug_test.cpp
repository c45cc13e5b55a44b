// Step 03's pools under abuse: the Hardened policy catches double free, foreign pointers, a free
// with the wrong size, writes to freed blocks and overwritten free-list links; ASan (asan preset)
// and valgrind memcheck (memcheck preset) see a use-after-free inside the size-class pool and a use
// after reset() in the arena.
#include <gtest/gtest.h>

#include <cstring>

#include "byte_memory_pool.h"
#include "size_class_pool.h"
#include "test_support.h"

namespace {

using step03::Hardened;

using tierpool_test::ReadByte;

TEST(HardenedDeathTest, SizeClassPoolDoubleFreeAndForeignPointer) {
  step03::SizeClassPool<Hardened> pool;
  void* p = pool.alloc(40);
  pool.free(p);
  EXPECT_DEATH(pool.free(p), "tierpool step03-variable-size: SizeClassPool: double free of 0x");
  EXPECT_DEATH(pool.free(p, 40), "double free of 0x");
  long elsewhere[8] = {};
  EXPECT_DEATH(pool.free(elsewhere), "not from this pool: 0x");
  void* large = pool.alloc(10000);
  pool.free(large);  // a large block's memory goes straight back upstream, so a second free is
                     // reported as a pointer the pool does not know
  EXPECT_DEATH(pool.free(large), "not from this pool: 0x");
}

TEST(HardenedDeathTest, SizeClassPoolFreeWithTheWrongSize) {
  step03::SizeClassPool<Hardened> pool;
  void* p = pool.alloc(40);
  EXPECT_DEATH(pool.free(p, 400), "free with the wrong size: 0x");
  pool.free(p, 37);  // 37 and 40 share a class: harmless, accepted
}

TEST(HardenedDeathTest, SizeClassPoolWriteAfterFree) {
  step03::SizeClassPool<Hardened> pool;
  char* p = static_cast<char*>(pool.alloc(64));
  pool.free(p);
  EXPECT_DEATH(
      {
        p[40] = 1;
        (void)pool.alloc(64);
      },
      step02::debug::kAsan ? "use-after-poison" : "written after it was freed: 0x");
}

// The size classes share step 02's free list, encoded links included: a freed block whose link
// is overwritten with a plausible pointer aborts when the pool reads the link.
TEST(HardenedDeathTest, SizeClassPoolOverwrittenFreeListLink) {
  step03::SizeClassPool<Hardened> pool;
  void* live = pool.alloc(100);
  void* a = pool.alloc(100);
  void* b = pool.alloc(100);
  pool.free(a);
  pool.free(b, 100);
  EXPECT_DEATH(
      {
        std::memcpy(b, &live, sizeof(live));  // the bug: b's link now names a live block
        (void)pool.alloc(100);
      },
      step02::debug::kAsan ? "use-after-poison"
                           : "tierpool step03-variable-size: SizeClassPool: free-list link "
                             "overwritten in freed block 0x");
  pool.free(live);
}

TEST(HardenedDeathTest, ArenaDoubleFreeAndForeignPointer) {
  step03::ByteMemoryPool<Hardened> arena;
  void* p = arena.alloc(40);
  arena.free(p);
  EXPECT_DEATH(arena.free(p), "ByteMemoryPool: double free of 0x");
  long elsewhere[8] = {};
  EXPECT_DEATH(arena.free(elsewhere), "not from this pool: 0x");
  arena.reset();
  void* q = arena.alloc(40);
  arena.free(q, 40);
}

#if TIERPOOL_ASAN
TEST(AsanDeathTest, UseAfterFreeInTheSizeClassPoolIsReported) {
  step03::SizeClassPool<> pool;
  char* p = static_cast<char*>(pool.alloc(100));
  pool.free(p, 100);
  EXPECT_DEATH(ReadByte(p + 50), "AddressSanitizer: use-after-poison");
  char* q = static_cast<char*>(pool.alloc(100));  // p again: 100 bytes usable, not 104
  EXPECT_DEATH(ReadByte(q + 100), "AddressSanitizer: use-after-poison");
  pool.free(q);
}

TEST(AsanDeathTest, UseAfterResetInTheArenaIsReported) {
  step03::ByteMemoryPool<> arena;
  char* p = static_cast<char*>(arena.alloc(100));
  p[99] = 1;
  EXPECT_DEATH(ReadByte(p + 100), "use-after-poison") << "past the block, in the chunk";
  arena.reset();
  EXPECT_DEATH(ReadByte(p), "use-after-poison");
}
#endif

// Under memcheck both pools are valgrind mempools.
TEST(ValgrindDeathTest, UseAfterFreeAndAfterResetAreReported) {
  step03::SizeClassPool<> pool;
  char* p = static_cast<char*>(pool.alloc(100));
  pool.free(p);
  step03::ByteMemoryPool<> arena;
  char* q = static_cast<char*>(arena.alloc(100));
  arena.reset();
  tierpool_test::ExpectMemcheckErrors(
      [&] {
        ReadByte(p + 50);
        ReadByte(q + 10);
      },
      2);
}

}  // namespace
