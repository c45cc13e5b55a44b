// MemoryPool<T>, MemoryPool<T, N> and the book's version 2: alignment, no overlap, contents kept,
// chunked growth (one upstream allocation per chunk), a full fixed pool, failure and edge cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <set>
#include <vector>

#include "book_memory_pool.h"
#include "memory_pool.h"
#include "test_support.h"

using step02::MemoryPool;

namespace {

template <std::size_t Align, std::size_t Size>
struct alignas(Align) Blob {
  unsigned char bytes[Size];
};

template <class T>
class AlignmentTest : public ::testing::Test {};
using AlignedTypes =
    ::testing::Types<char, short, Blob<1, 3>, Blob<2, 6>, Blob<4, 4>, Blob<8, 24>, Blob<16, 16>,
                     Blob<16, 48>, Blob<32, 32>, Blob<32, 96>, Blob<64, 64>, Blob<64, 192>>;
TYPED_TEST_SUITE(AlignmentTest, AlignedTypes);

TYPED_TEST(AlignmentTest, EveryBlockIsAlignedAndHoldsAT) {
  MemoryPool<TypeParam> pool(4);  // small chunks, so several chunks are checked
  static_assert(MemoryPool<TypeParam>::kBlockSize >= sizeof(TypeParam));
  static_assert(MemoryPool<TypeParam>::kBlockSize >= sizeof(void*));
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) {
    void* p = pool.alloc(sizeof(TypeParam));
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(TypeParam), 0u);
    ::new (p) TypeParam{};  // UBSan checks the alignment, ASan the size
    blocks.push_back(p);
  }
  EXPECT_GT(pool.chunk_count(), 1u);
  for (void* p : blocks)
    pool.free(p);
}

TYPED_TEST(AlignmentTest, FixedCapacityBlocksAreAligned) {
  MemoryPool<TypeParam, 8> pool;
  for (int i = 0; i < 8; ++i) {
    void* p = pool.alloc();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(TypeParam), 0u);
  }
}

// Blocks live at once never overlap and keep what was written into them, over a randomized
// sequence of allocations and frees checked against a shadow map.
template <class Pool>
void CheckAgainstShadow(Pool& pool, std::size_t block_size, int steps, std::uint32_t seed) {
  std::map<std::uintptr_t, std::uint32_t> live;  // address -> tag written into the block
  std::mt19937 rng(seed);
  auto fill = [&](void* p, std::uint32_t tag) { std::memset(p, int(tag & 0xFF), block_size); };
  auto intact = [&](std::uintptr_t a, std::uint32_t tag) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(a);
    for (std::size_t i = 0; i < block_size; ++i) {
      if (bytes[i] != (tag & 0xFF)) return false;
    }
    return true;
  };
  for (int step = 0; step < steps; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      void* p = pool.alloc(block_size);
      if (p == nullptr) continue;  // a full fixed pool
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      auto next = live.lower_bound(a);
      ASSERT_TRUE(next == live.end() || next->first >= a + block_size) << "overlaps the next";
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->first + block_size, a) << "overlaps the previous";
      }
      const std::uint32_t tag = rng();
      fill(p, tag);
      live.emplace(a, tag);
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(intact(it->first, it->second)) << "a live block was overwritten";
      pool.free(reinterpret_cast<void*>(it->first));
      live.erase(it);
    }
  }
  for (auto& [a, tag] : live) {
    ASSERT_TRUE(intact(a, tag));
    pool.free(reinterpret_cast<void*>(a));
  }
}

TEST(MemoryPoolTest, LiveBlocksNeverOverlapAndKeepTheirContents) {
  const int steps = tierpool_test::Scaled(20000);
  MemoryPool<Blob<8, 40>> pool;
  CheckAgainstShadow(pool, 40, steps, 1);
  MemoryPool<char> tiny;  // smaller than a pointer: the block still holds a link
  CheckAgainstShadow(tiny, 1, steps, 2);
  MemoryPool<Blob<64, 64>> wide;
  CheckAgainstShadow(wide, 64, steps, 3);
}

TEST(MemoryPoolTest, FixedCapacityBlocksNeverOverlap) {
  // The published fixed pool computed slot indices from typed-pointer differences, so slots
  // aliased; here every pair of live blocks is checked.
  MemoryPool<Blob<8, 24>, 64> pool;
  CheckAgainstShadow(pool, 24, tierpool_test::Scaled(5000), 4);
}

TEST(MemoryPoolTest, GrowsByChunksWithOneUpstreamAllocationEach) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  std::vector<void*> blocks;
  blocks.reserve(2000);
  tierpool_test::AllocationCounter counter;
  MemoryPool<Blob<8, 24>> pool(32);
  for (int i = 0; i < 32; ++i)
    blocks.push_back(pool.alloc());
  EXPECT_EQ(pool.chunk_count(), 1u);
  EXPECT_EQ(counter.news(), 1u) << "the first chunk should be one operator new";
  blocks.push_back(pool.alloc());  // the 33rd: a second chunk, twice as big
  EXPECT_EQ(pool.chunk_count(), 2u);
  for (int i = 0; i < 1000; ++i)
    blocks.push_back(pool.alloc());
  EXPECT_EQ(counter.news(), pool.chunk_count());
  EXPECT_LE(pool.chunk_count(), 6u);  // 32 + 64 + 128 + 256 + 512 + 1024 blocks
  // Freed blocks are reused before any new chunk.
  for (void* p : blocks)
    pool.free(p);
  const std::size_t chunks = pool.chunk_count();
  for (std::size_t i = 0; i < blocks.size(); ++i)
    blocks[i] = pool.alloc();
  EXPECT_EQ(pool.chunk_count(), chunks);
  for (void* p : blocks)
    pool.free(p);
  pool.release();
  EXPECT_EQ(counter.deletes(), counter.news()) << "release() gives every chunk back";
}

TEST(MemoryPoolTest, TeardownFreesChunksEvenWithBlocksInUse) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  tierpool_test::AllocationCounter counter;
  {
    MemoryPool<double> pool;
    for (int i = 0; i < 500; ++i)
      (void)pool.alloc();  // never freed: the pool still gives its chunks back (valgrind checks)
  }
  EXPECT_EQ(counter.deletes(), counter.news());
}

TEST(MemoryPoolTest, ReusesTheMostRecentlyFreedBlock) {
  MemoryPool<int> pool;
  void* a = pool.alloc();
  void* b = pool.alloc();
  pool.free(a);
  EXPECT_EQ(pool.alloc(), a);
  pool.free(a);
  pool.free(b);
}

TEST(MemoryPoolTest, ZeroSizeGivesDistinctBlocksAndOversizeThrows) {
  MemoryPool<Blob<8, 16>> pool;
  void* a = pool.alloc(0);
  void* b = pool.alloc(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  EXPECT_THROW((void)pool.alloc(MemoryPool<Blob<8, 16>>::kBlockSize + 1), std::bad_alloc);
  pool.free(nullptr);  // a no-op
  pool.free(a);
  pool.free(b);
}

TEST(MemoryPoolTest, FailedExpansionThrowsAndLeavesThePoolUsable) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  MemoryPool<long> pool(4);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i)
    blocks.push_back(pool.alloc());
  {
    tierpool_test::FailNextAllocations fail(1);
    EXPECT_THROW((void)pool.alloc(), std::bad_alloc);
  }
  EXPECT_EQ(pool.chunk_count(), 1u);
  pool.free(blocks.back());  // a free block: served without going upstream
  blocks.back() = pool.alloc();
  blocks.push_back(pool.alloc());  // upstream works again: a second chunk
  EXPECT_EQ(pool.chunk_count(), 2u);
  for (void* p : blocks)
    pool.free(p);
}

TEST(MemoryPoolTest, HugeObjectsOverflowCleanly) {
  struct Huge {
    unsigned char bytes[std::size_t{1} << 40];
  };
  MemoryPool<Huge> pool(std::size_t{1} << 30);  // 2^70 bytes: the size computation overflows
  EXPECT_THROW((void)pool.alloc(), std::bad_alloc);
}

TEST(FixedMemoryPoolTest, FullPoolReturnsNullptrUntilABlockIsFreed) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  void* blocks[16];
  tierpool_test::AllocationCounter counter;
  MemoryPool<Blob<8, 24>, 16> pool;
  for (void*& p : blocks)
    p = pool.alloc();
  EXPECT_EQ(pool.in_use(), 16u);
  EXPECT_EQ(pool.alloc(), nullptr);
  EXPECT_EQ(pool.alloc(), nullptr);
  pool.free(blocks[5]);
  EXPECT_EQ(pool.alloc(), blocks[5]);
  EXPECT_EQ(pool.alloc(), nullptr);
  EXPECT_EQ(counter.news(), 0u) << "a fixed pool never allocates";
  EXPECT_EQ(std::set<void*>(std::begin(blocks), std::end(blocks)).size(), 16u);
  for (void* p : blocks)
    pool.free(p);
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST(FixedMemoryPoolTest, OwnsOnlyItsHandedOutBlockStarts) {
  MemoryPool<Blob<8, 24>, 4> pool;
  void* a = pool.alloc();
  void* b = pool.alloc();
  EXPECT_TRUE(pool.owns(a));
  EXPECT_TRUE(pool.owns(b));
  EXPECT_FALSE(pool.owns(static_cast<char*>(a) + 8));   // inside a block
  EXPECT_FALSE(pool.owns(static_cast<char*>(b) + 24));  // never handed out yet
  int elsewhere = 0;
  EXPECT_FALSE(pool.owns(&elsewhere));
  EXPECT_EQ(pool.alloc(25), nullptr) << "bigger than a block";
  pool.free(a);
  pool.free(b);
}

TEST(BookMemoryPoolTest, HandsOutDistinctElementsAndReusesThem) {
  step02::book::MemoryPool<Blob<8, 16>> pool;
  std::set<void*> blocks;
  for (int i = 0; i < 100; ++i)
    blocks.insert(pool.alloc(16));
  EXPECT_EQ(blocks.size(), 100u);
  for (void* p : blocks)
    pool.free(p);
  pool.free(nullptr);
  void* again = pool.alloc(16);
  EXPECT_TRUE(blocks.count(again));
  pool.free(again);
  EXPECT_THROW((void)pool.alloc(17), std::bad_alloc);
}

}  // namespace
