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

TEST_F(CoreHardened, FreeListLinksAreNotPlainPointers) {
  if (kToolsWatchFreedMemory) GTEST_SKIP() << "reading freed memory is what the tools forbid";
  hardened::FlushThreadCache();  // empty lists: the two frees below stay in this thread's cache
  void* a = hardened::Allocate(32);
  void* b = hardened::Allocate(32);
  hardened::Free(a);
  hardened::Free(b);
  // b is the list's newest object: an item of the first node, or the first node itself. The
  // word a pop reads (the node's last item, or the node's link) holds no plain address.
  void* head = hardened::tls_cache->head(hardened::SizeToClass(32));
  std::uintptr_t stored;
  std::memcpy(&stored, hardened::LastWordOf(head), sizeof(stored));
  if (hardened::ItemsOf(head) != 0) {
    EXPECT_NE(stored, reinterpret_cast<std::uintptr_t>(b));
  } else {
    ASSERT_EQ(head, b);
    EXPECT_NE(stored, reinterpret_cast<std::uintptr_t>(
                          hardened::tls_cache->second(hardened::SizeToClass(32))));
  }
  EXPECT_EQ(hardened::Allocate(32), b);
  EXPECT_EQ(hardened::Allocate(32), a);
  hardened::Free(a);
  hardened::Free(b);
}

// The same for an item: a stray write of a live block's address into the word of a freed node
// that holds a free block's address. The allocator aborts naming the node's word before it hands
// the forged address out.
TEST_F(CoreHardened, AnOverwrittenItemAbortsNamingTheNode) {
  hardened::FlushThreadCache();
  void* live = hardened::Allocate(48);
  void* a = hardened::Allocate(48);
  void* b = hardened::Allocate(48);
  hardened::Free(a);
  hardened::Free(b);
  void* head = hardened::tls_cache->head(hardened::SizeToClass(48));
  ASSERT_NE(hardened::ItemsOf(head), 0u) << "b is an item of the first node";
  void* word = hardened::LastWordOf(head);  // holds b's address
  EXPECT_DEATH(
      {
        std::memcpy(word, &live, sizeof(live));  // the bug: a write through a dangling pointer
        void* again = hardened::Allocate(48);    // takes the node's last item
        hardened::Free(again);
      },
      TIERPOOL_ASAN ? "use-after-poison"
                    : "step06-three-tier\\): free-list item overwritten in a freed block: "
                      "pointer 0x[0-9a-f]+");
  hardened::Free(hardened::Allocate(48));
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
        hardened::Free(b);                     // the list's head; its first word is its link
        std::memcpy(b, &live, sizeof(live));   // the bug: a write through a dangling pointer
        void* again = hardened::Allocate(48);  // pops b and reads its link
        hardened::Free(again);
      },
      TIERPOOL_ASAN ? "use-after-poison"
                    : "step06-three-tier\\): free-list link overwritten in a freed block: "
                      "pointer 0x[0-9a-f]+");
}

}  // namespace
