// SizeClassPool: the class table, alignment, no overlap, contents kept, free with and without a
// size, large blocks, teardown, bad input, and the pmr resource.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory_resource>
#include <random>
#include <string>
#include <vector>

#include "pool_resource.h"
#include "size_class_pool.h"
#include "test_support.h"  // step 02's: operator new counting

using step03::SizeClasses;
using Pool = step03::SizeClassPool<>;

namespace {

std::size_t LowestBit(std::size_t n) {
  return n & (~n + 1);
}

TEST(SizeClassesTest, EverySizeGetsTheSmallestClassThatHoldsIt) {
  for (unsigned c = 1; c < SizeClasses::kCount; ++c)
    ASSERT_LT(SizeClasses::Size(c - 1), SizeClasses::Size(c));
  for (std::size_t size = 0; size <= SizeClasses::kMaxSize; ++size) {
    const unsigned c = SizeClasses::IndexOf(size);
    ASSERT_GE(SizeClasses::Size(c), size);
    if (c > 0) {
      ASSERT_LT(SizeClasses::Size(c - 1), size) << "a smaller class would do";
    }
    if (size == 0) continue;  // 0 gets the 8-byte class
    if (size <= 128) {
      EXPECT_LE(SizeClasses::Size(c) - size, 7u);
    } else {
      EXPECT_LT(double(SizeClasses::Size(c) - size) / double(size), 0.25);
    }
  }
}

TEST(SizeClassPoolTest, BlocksAreAlignedForAnyObjectOfTheirSize) {
  Pool pool;
  for (std::size_t size = 1; size <= 5000; ++size) {
    void* p = pool.alloc(size);
    const std::size_t natural = std::min<std::size_t>(LowestBit(size), 16);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % natural, 0u) << size;
    std::memset(p, 0x5A, size);  // ASan: exactly `size` bytes are addressable
    pool.free(p, size);
  }
}

TEST(SizeClassPoolTest, RequestedAlignmentsUpToAPage) {
  Pool pool;
  std::vector<std::pair<void*, std::pair<std::size_t, std::size_t>>> blocks;
  for (std::size_t align = 1; align <= Pool::kMaxAlign; align *= 2) {
    // Size 0 too: the fuzz target found alloc(0, 64) served from the 8-byte class.
    for (std::size_t size : {0, 1, 24, 100, 129, 1000, 4000, 9000}) {
      void* p = pool.alloc(size, align);
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << size << " at " << align;
      blocks.push_back({p, {size, align}});
    }
  }
  for (auto& [p, sa] : blocks)
    pool.free(p, sa.first, sa.second);
  EXPECT_THROW((void)pool.alloc(8, 3), std::bad_alloc);
  EXPECT_THROW((void)pool.alloc(8, Pool::kMaxAlign * 2), std::bad_alloc);
}

// Random sizes (small and large), random frees, sized and unsized, checked against a shadow map.
TEST(SizeClassPoolTest, LiveBlocksNeverOverlapAndKeepTheirContents) {
  Pool pool;
  std::mt19937 rng(9);
  struct Block {
    std::size_t size;
    unsigned char tag;
  };
  std::map<std::uintptr_t, Block> live;
  auto intact = [](std::uintptr_t a, const Block& b) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(a);
    for (std::size_t k = 0; k < b.size; ++k) {
      if (bytes[k] != b.tag) return false;
    }
    return true;
  };
  const int steps = tierpool_test::Scaled(30000);
  for (int step = 0; step < steps; ++step) {
    if (live.empty() || rng() % 5 < 3) {
      const std::size_t size = rng() % 50 == 0 ? 4097 + rng() % 20000 : rng() % 2049;
      void* p = pool.alloc(size);
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      const std::size_t extent = std::max<std::size_t>(size, 1);
      auto next = live.lower_bound(a);
      ASSERT_TRUE(next == live.end() || next->first >= a + extent);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + std::max<std::size_t>(prev->second.size, 1), a);
      }
      const Block block{size, static_cast<unsigned char>(rng())};
      std::memset(p, block.tag, size);
      live.emplace(a, block);
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(intact(it->first, it->second));
      if (rng() % 2 == 0) {
        pool.free(reinterpret_cast<void*>(it->first), it->second.size);
      } else {
        pool.free(reinterpret_cast<void*>(it->first));
      }
      live.erase(it);
    }
  }
  for (auto& [a, block] : live) {
    ASSERT_TRUE(intact(a, block));
    pool.free(reinterpret_cast<void*>(a));
  }
  EXPECT_EQ(pool.large_count(), 0u);
}

TEST(SizeClassPoolTest, UnsizedFreeFindsTheClassFromTheChunk) {
  Pool pool;
  void* a = pool.alloc(100);
  void* b = pool.alloc(100);
  pool.free(a);  // no size: the chunk header says 104
  EXPECT_EQ(pool.alloc(97), a) << "same class (104), most recently freed first";
  EXPECT_NE(pool.alloc(200), a) << "another class, another chunk";
  pool.free(b, 100);
  EXPECT_TRUE(pool.owns(b));
  int elsewhere = 0;
  EXPECT_FALSE(pool.owns(&elsewhere));
}

TEST(SizeClassPoolTest, LargeBlocksGoUpstreamOneByOne) {
  Pool pool;
  void* big = pool.alloc(100000);
  void* bigger = pool.alloc(1 << 20);
  EXPECT_EQ(pool.large_count(), 2u);
  std::memset(big, 1, 100000);
  std::memset(bigger, 2, 1 << 20);
  pool.free(big);
  EXPECT_EQ(pool.large_count(), 1u);
  pool.free(bigger, 1 << 20);
  EXPECT_EQ(pool.large_count(), 0u);
  EXPECT_THROW((void)pool.alloc(std::size_t(-1) - 16), std::bad_alloc);
}

TEST(SizeClassPoolTest, TeardownFreesEveryChunkAndLargeBlock) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  tierpool_test::AllocationCounter counter;
  {
    Pool pool;
    for (std::size_t size = 1; size < 10000; size += 37)
      (void)pool.alloc(size);  // never freed: the pool still gives everything back
  }
  EXPECT_GT(counter.news(), 0u);
  EXPECT_EQ(counter.news(), counter.deletes());
}

TEST(SizeClassPoolTest, FailedChunkThrowsAndLeavesThePoolUsable) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  Pool pool;
  void* small = pool.alloc(24);
  {
    tierpool_test::FailNextAllocations fail(2);
    EXPECT_THROW((void)pool.alloc(1000), std::bad_alloc) << "a new class needs a new chunk";
    EXPECT_THROW((void)pool.alloc(100000), std::bad_alloc) << "a large block goes upstream";
  }
  EXPECT_EQ(pool.chunk_count(), 1u);
  void* again = pool.alloc(24);  // the 24-byte class's chunk still serves
  void* other = pool.alloc(1000);
  EXPECT_EQ(pool.chunk_count(), 2u);
  pool.free(small);
  pool.free(again);
  pool.free(other);
}

TEST(SizeClassPoolTest, ZeroSizeGivesDistinctBlocksAndNullptrIsANoOp) {
  Pool pool;
  void* a = pool.alloc(0);
  void* b = pool.alloc(0);
  EXPECT_NE(a, b);
  pool.free(nullptr);
  pool.free(nullptr, 8);
  pool.free(a, 0);
  pool.free(b);
}

TEST(SizeClassResourceTest, PmrContainersBehaveAsWithTheDefaultResource) {
  step03::SizeClassResource pool;
  std::pmr::vector<std::pmr::string> pooled(&pool);
  std::vector<std::string> plain;
  std::mt19937 rng(3);
  for (int i = 0; i < tierpool_test::Scaled(3000); ++i) {
    if (!plain.empty() && rng() % 4 == 0) {
      const std::size_t k = rng() % plain.size();
      pooled.erase(pooled.begin() + std::ptrdiff_t(k));
      plain.erase(plain.begin() + std::ptrdiff_t(k));
    } else {
      const std::string s(rng() % 300, char('a' + rng() % 26));
      pooled.emplace_back(s);
      plain.push_back(s);
    }
  }
  ASSERT_EQ(pooled.size(), plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i)
    ASSERT_EQ(std::string_view(pooled[i]), std::string_view(plain[i]));
}

}  // namespace
