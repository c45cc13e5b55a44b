// The public API: the C functions and the C++ names, and SPEC §6's bad inputs.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "core_test_util.h"
#include "size_class.h"
#include "tierpool/tierpool.h"

extern "C" int tierpool_c_roundtrip(void);

namespace {

using tierpool::internal::kClasses;
using tierpool::internal::kMaxIndexedSize;
using tierpool::internal::kMaxSmallSize;
using tierpool::internal::kNumClasses;

bool Aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

TEST(CoreApi, HeaderWorksFromC) {
  EXPECT_EQ(tierpool_c_roundtrip(), 0);
}

TEST(CoreApi, EverySizeGetsAWritableBlockOfAtLeastThatSize) {
  std::vector<std::pair<char*, std::size_t>> blocks;
  for (std::size_t size = 0; size <= 3 * kMaxSmallSize; size += size < 4096 ? 1 : 4093) {
    auto* p = static_cast<char*>(tierpool::ConcurrentAlloc(size));
    ASSERT_NE(p, nullptr) << size;
    ASSERT_GE(tierpool::UsableSize(p), size);
    ASSERT_TRUE(Aligned(p, 8));
    // tierpool.h: 16-aligned what a 16-aligned object could need (its size a multiple of 16),
    // and everything above 128 bytes.
    if (size > 128 || (size > 0 && size % 16 == 0)) {
      ASSERT_TRUE(Aligned(p, 16)) << size;
    }
    std::memset(p, static_cast<int>(size & 0xff), size);
    blocks.emplace_back(p, size);
  }
  for (auto [p, size] : blocks) {
    for (std::size_t i = 0; i < size; i += 511)
      ASSERT_EQ(static_cast<unsigned char>(p[i]), size & 0xff);
    if (size % 2) {
      tierpool::ConcurrentFree(p, size);
    } else {
      tierpool::ConcurrentFree(p);
    }
  }
}

TEST(CoreApi, SizeZeroGivesUniqueFreeablePointers) {
  std::set<void*> seen;
  for (int i = 0; i < 1000; ++i) {
    void* p = tierpool_malloc(0);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(seen.insert(p).second);
  }
  for (void* p : seen)
    tierpool_free(p);
}

TEST(CoreApi, FreeNullIsANoOp) {
  tierpool_free(nullptr);
  tierpool_free_sized(nullptr, 16);
  // Every path a sized free can take: the fine table, the coarse one, a large block, no size.
  for (std::size_t size : {kMaxIndexedSize + 1, kMaxSmallSize, kMaxSmallSize + 1, SIZE_MAX}) {
    tierpool_free_sized(nullptr, size);
    tierpool::ConcurrentFree(nullptr, size);
  }
  tierpool::ConcurrentFree(nullptr);
  tierpool::ConcurrentFree(nullptr, 0);
  EXPECT_EQ(tierpool_usable_size(nullptr), 0u);
}

TEST(CoreApi, ImpossibleSizesGiveNullAndEnomem) {
  for (std::size_t size :
       {std::numeric_limits<std::size_t>::max(), std::numeric_limits<std::size_t>::max() - 4096,
        std::size_t{1} << 62, std::size_t{1} << 47}) {
    errno = 0;
    EXPECT_EQ(tierpool_malloc(size), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(tierpool_aligned_alloc(4096, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
}

TEST(CoreApi, CallocOverflowGivesNullAndEnomem) {
  errno = 0;
  EXPECT_EQ(tierpool_calloc(std::size_t{1} << 33, std::size_t{1} << 33), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(tierpool_calloc(std::numeric_limits<std::size_t>::max(), 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(CoreApi, CallocZeroesReusedMemory) {
  for (std::size_t size : {24u, 1000u, 70000u, 600000u}) {
    auto* dirty = static_cast<unsigned char*>(tierpool_malloc(size));
    std::memset(dirty, 0xab, size);
    tierpool_free(dirty);
    auto* clean = static_cast<unsigned char*>(tierpool_calloc(1, size));
    ASSERT_NE(clean, nullptr);
    for (std::size_t i = 0; i < size; ++i)
      ASSERT_EQ(clean[i], 0) << size << " at " << i;
    tierpool_free(clean);
  }
}

TEST(CoreApi, AlignedAllocationForEveryPowerOfTwo) {
  for (std::size_t alignment = 1; alignment <= (std::size_t{1} << 24); alignment *= 2) {
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{24}, std::size_t{100},
                             alignment, alignment + 1, std::size_t{300000}}) {
      errno = 0;
      void* p = tierpool::ConcurrentAlignedAlloc(size, alignment);
      ASSERT_NE(p, nullptr) << alignment << " " << size;
      ASSERT_TRUE(Aligned(p, alignment)) << alignment << " " << size;
      ASSERT_GE(tierpool_usable_size(p), size);
      std::memset(p, 1, size);
      tierpool_free(p);
    }
  }
}

// A small aligned block wastes no more than it must: it takes the smallest class at or above its
// size whose size is a multiple of the alignment (spans start on page boundaries, so all of such
// a class's objects are aligned), found here by trying every class from the size's own up.
TEST(CoreApi, ASmallAlignedBlockTakesTheFirstClassItsAlignmentDivides) {
  for (std::size_t alignment = 16; alignment <= tierpool::internal::kPageSize; alignment *= 2) {
    for (std::size_t size = 1; size <= kMaxSmallSize; size += size / 8 + 7) {
      std::uint32_t expected = 0;
      for (std::uint32_t cl = 1; cl < kNumClasses && expected == 0; ++cl) {
        if (kClasses[cl].size >= size && kClasses[cl].size % alignment == 0) expected = cl;
      }
      void* p = tierpool::ConcurrentAlignedAlloc(size, alignment);
      ASSERT_NE(p, nullptr) << alignment << " " << size;
      ASSERT_TRUE(Aligned(p, alignment)) << alignment << " " << size;
      if (expected != 0) {
        EXPECT_EQ(tierpool_usable_size(p), kClasses[expected].size) << alignment << " " << size;
      } else {
        EXPECT_GE(tierpool_usable_size(p), size) << alignment << " " << size;
      }
      tierpool_free(p);
    }
  }
}

TEST(CoreApi, AlignmentBeyondTheAddressSpaceIsEnomem) {
  for (int shift : {47, 50, 63}) {
    errno = 0;
    EXPECT_EQ(tierpool_aligned_alloc(std::size_t{1} << shift, 64), nullptr) << shift;
    EXPECT_EQ(errno, ENOMEM);
  }
}

TEST(CoreApi, AlignmentNotAPowerOfTwoIsEinval) {
  for (std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{4097},
                                std::numeric_limits<std::size_t>::max()}) {
    errno = 0;
    EXPECT_EQ(tierpool_aligned_alloc(alignment, 64), nullptr) << alignment;
    EXPECT_EQ(errno, EINVAL);
  }
}

TEST(CoreApi, ReallocKeepsContentsAcrossClassesAndTiers) {
  char* p = static_cast<char*>(tierpool_realloc(nullptr, 10));
  ASSERT_NE(p, nullptr);
  std::memcpy(p, "0123456789", 10);
  for (std::size_t size : {20u, 200u, 5000u, 100000u, 1000000u, 300000u, 12u}) {
    p = static_cast<char*>(tierpool_realloc(p, size));
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(std::memcmp(p, "0123456789", 10), 0) << size;
    ASSERT_GE(tierpool_usable_size(p), size);
  }
  void* same = tierpool_realloc(p, 13);  // same class: stays in place
  EXPECT_EQ(same, p);
  void* zero = tierpool_realloc(same, 0);  // a fresh size-0 block
  ASSERT_NE(zero, nullptr);
  tierpool_free(zero);
}

TEST(CoreApi, ReallocFailureLeavesTheBlockAlone) {
  char* p = static_cast<char*>(tierpool_malloc(64));
  std::memset(p, 5, 64);
  errno = 0;
  EXPECT_EQ(tierpool_realloc(p, std::numeric_limits<std::size_t>::max() / 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(p[63], 5);
  tierpool_free(p);
}

TEST(CoreApi, OwnsOnlyOurMemory) {
  void* small = tierpool_malloc(32);
  void* large = tierpool_malloc(5 << 20);
  int on_stack = 0;
  void* from_libc = std::malloc(32);
  EXPECT_EQ(tierpool_owns(small), 1);
  EXPECT_EQ(tierpool_owns(large), 1);
  EXPECT_EQ(tierpool_owns(static_cast<char*>(large) + (4 << 20)), 1);
  EXPECT_EQ(tierpool_owns(&on_stack), 0);
  EXPECT_EQ(tierpool_owns(from_libc), 0);
  EXPECT_EQ(tierpool_owns(nullptr), 0);
  EXPECT_EQ(tierpool_owns(reinterpret_cast<void*>(~std::uintptr_t{0})), 0);
  std::free(from_libc);
  tierpool_free(small);
  tierpool_free(large);
}

TEST(CoreApi, UsableSizeIsTheClassSize) {
  for (int cl = 1; cl < kNumClasses; ++cl) {
    void* p = tierpool_malloc(kClasses[cl].size);
    EXPECT_EQ(tierpool_usable_size(p), kClasses[cl].size);
    tierpool_free_sized(p, kClasses[cl].size);
  }
  void* big = tierpool_malloc(kMaxSmallSize + 1);
  EXPECT_EQ(tierpool_usable_size(big), kMaxSmallSize + 8192);
  tierpool_free(big);
}

// The fast paths read the fine table up to kMaxIndexedSize and send bigger sizes to the slow
// path: those up to kMaxSmallSize must still get their class's block, not a span of their own.
TEST(CoreApi, SizesAboveTheFineTableAreStillSmallBlocks) {
  const std::size_t large_before = tierpool::GetStats().large_bytes_in_use;
  for (std::size_t size = kMaxIndexedSize - 1; size <= kMaxSmallSize; size += 4093) {
    void* p = tierpool_malloc(size);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_EQ(tierpool_usable_size(p), kClasses[tierpool::internal::SizeToClass(size)].size);
    EXPECT_EQ(tierpool::GetStats().large_bytes_in_use, large_before) << size;
    std::memset(p, 1, size);
    if (size % 2) {
      tierpool_free_sized(p, size);
    } else {
      tierpool::ConcurrentFree(p, size);
    }
  }
}

TEST(CoreApi, StatsAccountForWhatIsInUse) {
  tierpool_thread_flush();
  const tierpool::Stats before = tierpool::GetStats();
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i)
    blocks.push_back(tierpool_malloc(1000));  // class 1008... or exactly 1008? 1000 -> 1008
  void* large = tierpool_malloc(1 << 20);
  const tierpool::Stats during = tierpool::GetStats();
  EXPECT_GE(during.bytes_in_use, before.bytes_in_use + 1000 * 1000 + (1 << 20));
  EXPECT_GE(during.large_bytes_in_use, before.large_bytes_in_use + (1 << 20));
  EXPECT_GE(during.mapped_bytes, during.bytes_in_use);
  EXPECT_GE(during.thread_caches, 1u);
  for (void* p : blocks)
    tierpool_free(p);
  tierpool_free(large);
  const tierpool::Stats after = tierpool::GetStats();
  EXPECT_LE(after.bytes_in_use, during.bytes_in_use - 1000 * 1000);
  EXPECT_GT(after.thread_cache_bytes + after.central_cache_bytes, 0u);
  tierpool_thread_flush();
  EXPECT_EQ(tierpool::GetStats().thread_cache_bytes, 0u);
}

TEST(CoreApi, PrintStatsWritesAReport) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  tierpool_print_stats(fds[1]);
  close(fds[1]);
  char text[2048] = {};
  ASSERT_GT(read(fds[0], text, sizeof(text) - 1), 0);
  close(fds[0]);
  EXPECT_NE(std::strstr(text, "mapped_bytes"), nullptr);
  EXPECT_NE(std::strstr(text, "released_bytes"), nullptr);
}

// The child of a fork runs `work` and leaves: true if it got to the end and exited normally (a
// child that hangs is ended by an alarm it set itself).
bool ChildRan(const auto& work) {
  return core_test::ChildAnswers([&] {
    work();
    return true;
  });
}

// A cache an exited thread left for the next one is not being changed at the fork (the registry
// lock, held across it, guards it): the child keeps it in its registry, counted, and hands it to
// its own threads; tierpool_release_free_memory takes it apart there too.
TEST(CoreApi, AForkChildKeepsTheCachesExitedThreadsLeft) {
  tierpool_release_free_memory();
  std::thread([] {
    void* blocks[32];
    for (void*& p : blocks)
      p = tierpool_malloc(64);
    for (void* p : blocks)
      tierpool_free(p);
  }).join();
  EXPECT_TRUE(ChildRan([] {
    tierpool_thread_flush();
    if (tierpool::GetStats().thread_cache_bytes < 31 * 64) _exit(3);  // the kept cache counted
#if !defined(TIERPOOL_TSAN)  // (TSan refuses new threads in the child of a threaded process)
    std::thread([] {
      void* p = tierpool_malloc(64);
      std::memset(p, 1, 64);
      tierpool_free(p);
    }).join();
#endif
    tierpool_release_free_memory();
    const tierpool::Stats stats = tierpool::GetStats();
    if (stats.thread_cache_bytes != 0 || stats.thread_caches > 1) _exit(4);
  }));
  tierpool_release_free_memory();
}

TEST(CoreApi, ForkChildCanAllocateWhileOtherThreadsDo) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    busy.emplace_back([&] {
      while (!stop.load()) {
        void* p = tierpool_malloc(100 + 1000 * (rand() % 300));
        tierpool_free(p);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(ChildRan([] {
      for (int j = 0; j < 1000; ++j)
        tierpool_free(tierpool_malloc(static_cast<std::size_t>(j) * 97));
    }));
  }
  stop = true;
  for (auto& t : busy)
    t.join();
}

// A fork while another thread gives pages back to the OS (the madvise runs without the page
// heap's lock): that thread does not exist in the child, and the span it held out of the lists
// must not be waited for there. The child's trim returns (an alarm ends it otherwise).
TEST(CoreApi, ForkChildCanTrimWhileAnotherThreadWasReleasing) {
  const std::size_t big = static_cast<std::size_t>(core_test::Scaled(64, 32, 8)) << 20;  // MiB
  std::atomic<bool> stop{false};
  std::thread releaser([&] {
    while (!stop.load()) {
      auto* p = static_cast<unsigned char*>(tierpool_malloc(big));
      if (p == nullptr) continue;
      for (std::size_t at = 0; at < big; at += 4096)
        p[at] = 1;  // resident, so that giving it back takes the kernel a while
      tierpool_free(p);
      tierpool_release_free_memory();
    }
  });
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(ChildRan([] {
      alarm(20);
      tierpool_release_free_memory();
    })) << "the child's trim never returned";
  }
  stop = true;
  releaser.join();
}

}  // namespace
