// ByteMemoryPool (the arena): alignment, no overlap, contents kept, oversize chunks, geometric
// growth, reset() reuse, release(), the initial buffer, bad input, and the pmr resource.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory_resource>
#include <random>
#include <string>
#include <vector>

#include "byte_memory_pool.h"
#include "pool_resource.h"
#include "test_support.h"  // step 02's: operator new counting and failure injection

using Arena = step03::ByteMemoryPool<>;

namespace {

bool Aligned(const void* p, std::size_t align) {
  return reinterpret_cast<std::uintptr_t>(p) % align == 0;
}

TEST(ByteMemoryPoolTest, BlocksAreAlignedToMaxAlignOrTheRequest) {
  Arena arena(256);
  for (std::size_t size : {1, 3, 7, 8, 13, 100, 1000}) {
    EXPECT_TRUE(Aligned(arena.alloc(size), alignof(std::max_align_t)));
    for (std::size_t align = 1; align <= 4096; align *= 2) {
      void* p = arena.alloc(size, align);
      EXPECT_TRUE(Aligned(p, align)) << size << " bytes at " << align;
      std::memset(p, 0xAB, size);  // ASan: the whole block is addressable
    }
  }
}

// Live blocks never overlap and keep their contents, over random sizes and alignments, across
// chunks and across reset().
TEST(ByteMemoryPoolTest, LiveBlocksNeverOverlapAndKeepTheirContents) {
  Arena arena(512);
  std::mt19937 rng(5);
  const int rounds = tierpool_test::Scaled(20);
  for (int round = 0; round < rounds; ++round) {
    std::map<std::uintptr_t, std::pair<std::size_t, unsigned char>> live;
    for (int i = 0; i < 500; ++i) {
      const std::size_t size = rng() % 3 == 0 ? rng() % 3000 : rng() % 64;
      const std::size_t align = std::size_t{1} << (rng() % 7);
      auto* p = static_cast<unsigned char*>(arena.alloc(size, align));
      ASSERT_TRUE(Aligned(p, align));
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      const std::size_t extent = size == 0 ? 1 : size;
      auto next = live.lower_bound(a);
      ASSERT_TRUE(next == live.end() || next->first >= a + extent);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + std::max<std::size_t>(prev->second.first, 1), a);
      }
      const auto tag = static_cast<unsigned char>(rng());
      std::memset(p, tag, size);
      live.emplace(a, std::make_pair(size, tag));
    }
    for (auto& [a, block] : live) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(a);
      for (std::size_t k = 0; k < block.first; ++k)
        ASSERT_EQ(bytes[k], block.second);
    }
    arena.reset();
  }
}

TEST(ByteMemoryPoolTest, ChunksGrowGeometrically) {
  Arena arena(1024);
  EXPECT_EQ(arena.next_chunk_size(), 1024u);
  (void)arena.alloc(8);
  EXPECT_EQ(arena.next_chunk_size(), 2048u);
  std::size_t chunks = arena.chunk_count();
  for (int i = 0; i < 1000; ++i)
    (void)arena.alloc(100);  // 100 KB in chunks of 1, 2, 4, ... KiB: about 7 of them
  EXPECT_LE(arena.chunk_count() - chunks, 8u);
  EXPECT_GE(arena.next_chunk_size(), 64u * 1024);
}

TEST(ByteMemoryPoolTest, OversizeRequestGetsItsOwnChunkAndTheCurrentOneKeepsServing) {
  Arena arena(4096);
  char* a = static_cast<char*>(arena.alloc(16));
  const std::size_t next = arena.next_chunk_size();
  char* big = static_cast<char*>(arena.alloc(100000));
  std::memset(big, 1, 100000);
  EXPECT_EQ(arena.chunk_count(), 2u);
  EXPECT_EQ(arena.next_chunk_size(), next) << "an oversize chunk does not count as growth";
  char* b = static_cast<char*>(arena.alloc(16));
  EXPECT_EQ(b, a + 16) << "the small chunk still serves";
}

TEST(ByteMemoryPoolTest, ResetKeepsTheLargestChunkSoARoundStopsGoingUpstream) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  Arena arena(1024);
  auto request = [&] {
    for (int i = 0; i < 300; ++i)
      std::memset(arena.alloc(200), 7, 200);  // 60 KB a round
  };
  request();
  arena.reset();
  request();
  arena.reset();
  EXPECT_EQ(arena.chunk_count(), 1u);
  tierpool_test::AllocationCounter counter;
  for (int round = 0; round < 10; ++round) {
    request();
    arena.reset();
  }
  EXPECT_EQ(counter.news(), 0u) << "the kept chunk holds a whole round";
}

TEST(ByteMemoryPoolTest, ReleaseGivesEverythingBack) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  tierpool_test::AllocationCounter counter;
  {
    Arena arena(1024);
    for (int i = 0; i < 100; ++i)
      (void)arena.alloc(500);
    arena.reset();
    (void)arena.alloc(5000);
    arena.release();
    EXPECT_EQ(arena.chunk_count(), 0u);
    EXPECT_EQ(counter.news(), counter.deletes());
    (void)arena.alloc(10);  // usable again; the destructor frees this chunk
  }
  EXPECT_EQ(counter.news(), counter.deletes());
}

TEST(ByteMemoryPoolTest, InitialBufferComesFirstAndIsNeverFreed) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  alignas(std::max_align_t) char buffer[1024];
  tierpool_test::AllocationCounter counter;
  {
    Arena arena(buffer, sizeof(buffer), 4096);
    for (int i = 0; i < 60; ++i) {
      char* p = static_cast<char*>(arena.alloc(16));
      EXPECT_TRUE(p >= buffer && p + 16 <= buffer + sizeof(buffer));
    }
    EXPECT_EQ(counter.news(), 0u);
    for (int i = 0; i < 10; ++i)
      (void)arena.alloc(16);  // the buffer is full: a chunk
    EXPECT_EQ(counter.news(), 1u);
    arena.reset();
    EXPECT_TRUE(static_cast<char*>(arena.alloc(16)) == buffer) << "reset rewinds to the buffer";
  }
  EXPECT_EQ(counter.news(), counter.deletes());
  std::memset(buffer, 0, sizeof(buffer));  // ASan: the buffer is ours again, unpoisoned
}

TEST(ByteMemoryPoolTest, ZeroSizeBadAlignmentAndHugeRequests) {
  Arena arena;
  void* a = arena.alloc(0);
  void* b = arena.alloc(0);
  EXPECT_NE(a, b);
  EXPECT_THROW((void)arena.alloc(8, 3), std::bad_alloc);
  EXPECT_THROW((void)arena.alloc(8, 0), std::bad_alloc);
  EXPECT_THROW((void)arena.alloc(std::size_t(-1) - 8), std::bad_alloc);
  arena.free(nullptr);
  arena.free(a);
  EXPECT_NE(arena.alloc(8), nullptr) << "still usable";
}

TEST(ByteMemoryPoolTest, FailedChunkThrowsAndLeavesTheArenaUsable) {
  SKIP_UNLESS_OPERATOR_NEW_IS_OURS();
  Arena arena(1024);
  (void)arena.alloc(1000);
  {
    tierpool_test::FailNextAllocations fail(1);
    EXPECT_THROW((void)arena.alloc(1000), std::bad_alloc);
  }
  EXPECT_EQ(arena.chunk_count(), 1u);
  EXPECT_NE(arena.alloc(1000), nullptr);
}

TEST(ArenaResourceTest, PmrContainersLiveInTheArena) {
  step03::ArenaResource arena;
  std::pmr::vector<std::pmr::string> names(&arena);
  for (int i = 0; i < 200; ++i)
    names.emplace_back("a name long enough to leave the small-string buffer #" + std::to_string(i));
  EXPECT_EQ(names[150], "a name long enough to leave the small-string buffer #150");
  EXPECT_TRUE(arena.pool().owns(names.data()));
  EXPECT_TRUE(arena.pool().owns(names[199].data()));
  step03::ArenaResource other;
  EXPECT_TRUE(arena.is_equal(arena));
  EXPECT_FALSE(arena.is_equal(other));
}

}  // namespace
