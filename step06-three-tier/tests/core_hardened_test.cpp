// The hardened build (TIERPOOL_HARDENED=1, here the `hardened` variant of the core): misuse that
// silently corrupts a release build aborts with a message naming the pointer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "allocator.h"
#include "core_test_util.h"

namespace {

namespace hardened = tierpool::hardened;

// Hides where a pointer came from, so the compiler does not warn about the bug we commit on
// purpose (freeing a stack address) while inlining the free path.
void* Opaque(void* p) {
  asm volatile("" : "+r"(p));
  return p;
}

class CoreHardened : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

#if TIERPOOL_ASAN || TIERPOOL_VALGRIND
constexpr bool kToolsWatchFreedMemory = true;  // the test may not peek into freed blocks
#else
constexpr bool kToolsWatchFreedMemory = false;
#endif

TEST_F(CoreHardened, OrdinaryUseWorks) {
  std::mt19937 rng(3);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (int i = 0; i < core_test::Scaled(50000, 20000, 3000); ++i) {
    if (blocks.empty() || rng() % 3) {
      const std::size_t size = rng() % 3 == 0 ? rng() % 300000 : rng() % 2000;
      void* p = hardened::Allocate(size);
      ASSERT_NE(p, nullptr);
      std::memset(p, 0x11, size);
      blocks.emplace_back(p, size);
    } else {
      const std::size_t i2 = rng() % blocks.size();
      if (rng() % 2) {
        hardened::FreeSized(blocks[i2].first, blocks[i2].second);
      } else {
        hardened::Free(blocks[i2].first);
      }
      blocks[i2] = blocks.back();
      blocks.pop_back();
    }
  }
  std::thread([&] {  // freed by another thread
    for (auto [p, size] : blocks)
      hardened::FreeSized(p, size);
  })
      .join();
}

TEST_F(CoreHardened, DoubleFreeOfASmallBlockAborts) {
  EXPECT_DEATH(
      {
        void* p = hardened::Allocate(40);
        hardened::Free(p);
        hardened::Free(p);
      },
      "step06-three-tier\\): double free: pointer 0x[0-9a-f]+");
}

TEST_F(CoreHardened, DoubleFreeAcrossThreadsAborts) {
  EXPECT_DEATH(
      {
        void* p = hardened::Allocate(100);
        std::thread([p] { hardened::FreeSized(p, 100); }).join();
        hardened::FreeSized(p, 100);
      },
      // The other thread's exit may have given the whole span back: then it is no block at all.
      "double free.*: pointer 0x");
}

TEST_F(CoreHardened, DoubleFreeOfALargeBlockAborts) {
  EXPECT_DEATH(
      {
        void* p = hardened::Allocate(1 << 20);
        hardened::Free(p);
        hardened::Free(p);
      },
      "double free.*: pointer 0x");
}

// A block over 32 KiB skips the thread cache: its first free goes straight to its span (which may
// go back to the page heap), so the second is caught there, sized or not.
TEST_F(CoreHardened, DoubleFreeOfABlockPastTheThreadCacheAborts) {
  EXPECT_DEATH(
      {
        void* p = hardened::Allocate(64 << 10);
        hardened::Free(p);
        hardened::Free(p);
      },
      "double free.*: pointer 0x");
  EXPECT_DEATH(
      {
        void* keep = hardened::Allocate(100 << 10);
        void* p = hardened::Allocate(100 << 10);
        hardened::FreeSized(p, 100 << 10);
        hardened::FreeSized(p, 100 << 10);
        hardened::Free(keep);
      },
      "double free.*: pointer 0x");
}

TEST_F(CoreHardened, FreeOfAForeignPointerAborts) {
  EXPECT_DEATH(
      {
        int on_stack = 0;
        hardened::Free(Opaque(&on_stack));
      },
      "never returned: pointer 0x");
  EXPECT_DEATH(
      {
        void* from_libc = std::malloc(64);
        hardened::FreeSized(Opaque(from_libc), 64);
      },
      "never returned: pointer 0x");
}

TEST_F(CoreHardened, FreeOfAnInteriorPointerAborts) {
  EXPECT_DEATH(
      {
        char* p = static_cast<char*>(hardened::Allocate(256));
        hardened::Free(p + 16);
      },
      "inside a block, not at its start: pointer 0x");
  EXPECT_DEATH(
      {
        char* p = static_cast<char*>(hardened::Allocate(1 << 20));
        hardened::Free(p + 8192);
      },
      "not the start of a block: pointer 0x");
}

TEST_F(CoreHardened, SizedFreeWithTheWrongSizeAborts) {
  EXPECT_DEATH(
      {
        void* p = hardened::Allocate(100);
        hardened::FreeSized(p, 1000);
      },
      "does not match the allocation: pointer 0x");
}

// Sizes above the fine table leave the fast path (allocator.h): the check must come along.
TEST_F(CoreHardened, SizedFreeWithTheWrongSizeAbortsAboveTheFineTable) {
  EXPECT_DEATH(
      {
        void* p = hardened::Allocate(100);
        hardened::FreeSized(p, 40000);
      },
      "does not match the allocation: pointer 0x");
}

TEST_F(CoreHardened, WriteAfterFreeIsCaughtWhenTheBlockIsReused) {
  if (kToolsWatchFreedMemory) GTEST_SKIP() << "ASan/valgrind report the write itself";
  EXPECT_DEATH(
      {
        auto* p = static_cast<unsigned char*>(hardened::Allocate(64));
        hardened::Free(p);
        p[20] = 0;                             // the bug
        void* again = hardened::Allocate(64);  // the same block, last in, first out
        hardened::Free(again);
      },
      "written after it was freed: pointer 0x");
}

// A freed block on its thread cache's array keeps no address: its first word holds an encoded
// null, the mark PopTop checks, and no plain value (neither null nor a neighbour's address).
TEST_F(CoreHardened, AFreedBlockInTheThreadCacheHoldsOnlyAnEncodedMark) {
  if (kToolsWatchFreedMemory) GTEST_SKIP() << "reading freed memory is what the tools forbid";
  hardened::FlushThreadCache();
  void* a = hardened::Allocate(32);
  void* b = hardened::Allocate(32);
  std::memset(b, 0x5a, 32);  // the program's data: the free must overwrite its first word
  hardened::Free(a);
  hardened::Free(b);
  const std::size_t cl = hardened::SizeToClass(32);
  ASSERT_EQ(hardened::tls_cache->top(cl)[-1], b) << "the last freed is on top";
  std::uintptr_t stored;
  std::memcpy(&stored, b, sizeof(stored));
  EXPECT_EQ(stored, hardened::EncodeLink(nullptr)) << "the mark PopTop checks";
  EXPECT_NE(stored, std::uintptr_t{0});
  EXPECT_NE(stored, reinterpret_cast<std::uintptr_t>(a));
  EXPECT_EQ(hardened::Allocate(32), b);
  EXPECT_EQ(hardened::Allocate(32), a);
  hardened::Free(a);
  hardened::Free(b);
}

// Between the tiers, blocks travel as unrolled lists: a node holds its items' addresses, encoded.
// A stray write of a live block's address into such a word of a parked batch: the allocator
// aborts naming the node before it hands the forged address out.
TEST_F(CoreHardened, AnOverwrittenItemAbortsNamingTheNode) {
  const std::size_t cl = hardened::SizeToClass(48);
  const std::size_t batch = hardened::kClasses[cl].batch;
  const std::size_t group = hardened::ItemsPerNode(48) + 1;  // a node and its items
  void* live = hardened::Allocate(1000);                     // a block of another class
  std::vector<void*> blocks(batch + 1);
  for (void*& p : blocks)
    p = hardened::Allocate(48);
  // After a flush the array's limit is 0: the first free goes to the central cache, and each
  // later one raises the limit by one (slow start), so the array ends holding exactly `batch`.
  // Freed every other one first: a batch of neighbours would go to its spans, not to a slot.
  hardened::FlushThreadCache();
  core_test::FreeEveryOtherFirst(blocks, [](void* p) { hardened::Free(p); });
  ASSERT_EQ(hardened::tls_cache->length(cl), batch);
  // The next flush sends them as one batch, parked whole. Its first node is the bottom of the
  // array's top group, and that node's last item is the top.
  void* node = hardened::tls_cache->top(cl)[-static_cast<std::ptrdiff_t>(group)];
  hardened::FlushThreadCache();
  void* word = static_cast<void**>(node) + (group - 1);  // holds the top's address
  EXPECT_DEATH(
      {
        std::memcpy(word, &live, sizeof(live));  // the bug: a write through a dangling pointer
        void* again = hardened::Allocate(48);    // the refill takes the parked batch
        hardened::Free(again);
      },
      TIERPOOL_ASAN ? "use-after-poison"
                    : "step06-three-tier\\): free-list item overwritten in a freed block: "
                      "pointer 0x[0-9a-f]+");
  hardened::Free(live);
}

// A stray write puts a plausible address (a live block's) into a freed block's link. Stored
// encoded, the forged word decodes to an address that is no block of the class, and the allocator
// aborts naming the freed block before it hands anything out.
TEST_F(CoreHardened, AnOverwrittenFreeListLinkAbortsNamingTheBlock) {
  EXPECT_DEATH(
      {
        void* live = hardened::Allocate(48);
        void* a = hardened::Allocate(48);
        void* b = hardened::Allocate(48);
        hardened::Free(a);
        hardened::Free(b);                     // on top of the array; its first word a mark
        std::memcpy(b, &live, sizeof(live));   // the bug: a write through a dangling pointer
        void* again = hardened::Allocate(48);  // pops b and checks its mark
        hardened::Free(again);
      },
      TIERPOOL_ASAN ? "use-after-poison"
                    : "step06-three-tier\\): free-list link overwritten in a freed block: "
                      "pointer 0x[0-9a-f]+");
}

}  // namespace
