// The page map: set/get anywhere in the 48-bit address space, leaves only where something is.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "page_map.h"
#include "span.h"
#include "tierpool/tierpool.h"

namespace {

using namespace tierpool::internal;

// 8 MiB of root in .bss: zero, and only the entries touched become resident.
PageMap map;

Span* Fake(std::uintptr_t page) {
  return reinterpret_cast<Span*>((page << 4) | 8);
}

TEST(PageMap, SetAndGetOverTheWholeAddressSpace) {
  const std::size_t before = map.LeavesAllocated();
  std::vector<std::uintptr_t> pages = {0, 1, PageMap::kLeafEntries - 1, PageMap::kLeafEntries,
                                       (std::uintptr_t{1} << kPageNumberBits) - 1};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 64; ++i)
    pages.push_back(rng() & ((std::uintptr_t{1} << kPageNumberBits) - 1));
  for (std::uintptr_t page : pages) {
    ASSERT_TRUE(map.Ensure(page, 1)) << page;
    map.Set(page, Fake(page));
    map.SetClass(page, static_cast<std::uint32_t>(page % 200 + 1));
  }
  for (std::uintptr_t page : pages) {
    EXPECT_EQ(map.Get(page), Fake(page)) << page;
    EXPECT_EQ(map.ClassOf(reinterpret_cast<void*>(page << kPageShift)), page % 200 + 1) << page;
  }
  // One leaf per distinct 256 MiB range touched, no more.
  std::vector<std::uintptr_t> leaves;
  for (std::uintptr_t page : pages)
    leaves.push_back(page >> PageMap::kLeafBits);
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  EXPECT_EQ(map.LeavesAllocated() - before, leaves.size());
}

TEST(PageMap, LeavesAreCreatedLazily) {
  const std::uintptr_t page = std::uintptr_t{123} << PageMap::kLeafBits;
  EXPECT_EQ(map.Get(page), nullptr);
  EXPECT_EQ(map.ClassOf(reinterpret_cast<void*>(page << kPageShift)), 0u);
  const std::size_t before = map.LeavesAllocated();
  ASSERT_TRUE(map.Ensure(page, 10));
  EXPECT_EQ(map.LeavesAllocated(), before + 1);
  ASSERT_TRUE(map.Ensure(page + 5, 1));  // same leaf: nothing new
  EXPECT_EQ(map.LeavesAllocated(), before + 1);
  EXPECT_EQ(map.Get(page + 3), nullptr);                         // a fresh leaf reads as empty
  ASSERT_TRUE(map.Ensure(page + PageMap::kLeafEntries - 1, 2));  // straddles into the next leaf
  EXPECT_EQ(map.LeavesAllocated(), before + 2);
}

TEST(PageMap, OutsideTheAddressSpaceIsEmptyNotACrash) {
  const std::uintptr_t beyond = std::uintptr_t{1} << kPageNumberBits;
  EXPECT_EQ(map.Get(beyond), nullptr);
  EXPECT_EQ(map.Get(~std::uintptr_t{0}), nullptr);
  EXPECT_FALSE(map.Ensure(beyond, 1));
  EXPECT_FALSE(map.Ensure(beyond - 1, 2));
  EXPECT_EQ(map.ClassOf(reinterpret_cast<void*>(~std::uintptr_t{0})), 0u);
  EXPECT_FALSE(map.Owns(reinterpret_cast<void*>(~std::uintptr_t{0})));
}

TEST(PageMap, OwnsIsExactToTheRegion) {
  const std::uintptr_t base = std::uintptr_t{0x300000000000};  // some 2 MiB-aligned address
  ASSERT_TRUE(map.Ensure(base >> kPageShift, (3 * kRegionSize) >> kPageShift));
  map.MarkMapped(base + kRegionSize, kRegionSize);
  EXPECT_FALSE(map.Owns(reinterpret_cast<void*>(base + kRegionSize - 1)));
  EXPECT_TRUE(map.Owns(reinterpret_cast<void*>(base + kRegionSize)));
  EXPECT_TRUE(map.Owns(reinterpret_cast<void*>(base + 2 * kRegionSize - 1)));
  EXPECT_FALSE(map.Owns(reinterpret_cast<void*>(base + 2 * kRegionSize)));
}

TEST(PageMap, TheAllocatorsMapKnowsEveryClassOfItsBlocks) {
  for (std::size_t size : {1u, 8u, 100u, 1024u, 5000u, 70000u, 262144u}) {
    void* p = tierpool_malloc(size);
    EXPECT_EQ(tierpool_owns(p), 1);
    EXPECT_GE(tierpool_usable_size(p), size);
    tierpool_free(p);
  }
}

}  // namespace
