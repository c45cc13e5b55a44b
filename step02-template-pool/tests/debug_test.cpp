// The pools under abuse: the Hardened policy catches double free, foreign pointers, writes to
// freed blocks and overwritten free-list links; ASan (asan preset) and valgrind memcheck (memcheck
// preset) see a use-after-free inside a pool.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <list>
#include <vector>

#include "memory_pool.h"
#include "pool_allocator.h"
#include "test_support.h"

#if TIERPOOL_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace {

using step02::Hardened;
using step02::MemoryPool;

struct Node {
  long value[3];
};

using tierpool_test::ReadByte;

TEST(HardenedDeathTest, DoubleFreeAbortsNamingThePointerAndTheStep) {
  MemoryPool<Node, 0, Hardened> pool;
  void* p = pool.alloc();
  pool.free(p);
  EXPECT_DEATH(pool.free(p), "tierpool step02-template-pool: MemoryPool<T>: double free of 0x");
}

TEST(HardenedDeathTest, ForeignPointerAborts) {
  MemoryPool<Node, 0, Hardened> pool;
  void* mine = pool.alloc();
  Node elsewhere{};
  EXPECT_DEATH(pool.free(&elsewhere), "step02-template-pool.*not from this pool: 0x");
  EXPECT_DEATH(pool.free(static_cast<char*>(mine) + 8), "not from this pool");
  pool.free(mine);
}

TEST(HardenedDeathTest, WriteAfterFreeIsCaughtWhenTheBlockIsReused) {
  MemoryPool<Node, 0, Hardened> pool;
  void* p = pool.alloc();
  pool.free(p);
  EXPECT_DEATH(
      {
        static_cast<Node*>(p)->value[2] = 42;  // a stale pointer writes into the freed block
        (void)pool.alloc();
      },
      // Under ASan the freed block is poisoned, so ASan stops the write itself.
      step02::debug::kAsan ? "use-after-poison" : "written after it was freed: 0x");
}

// A stray write replaces a freed block's link with the address of a live block: a plain pool
// would hand that block out a second time. The hardened pool stores links encoded, so the forged
// word decodes to an address the list never held, and the pool stops before following it.
TEST(HardenedDeathTest, OverwrittenFreeListLinkAbortsNamingTheBlock) {
  MemoryPool<Node, 0, Hardened> pool;
  void* live = pool.alloc();
  void* a = pool.alloc();
  void* b = pool.alloc();
  pool.free(a);
  pool.free(b);  // b is the head; its link leads to a
  EXPECT_DEATH(
      {
        std::memcpy(b, &live, sizeof(live));  // the bug: a write through a dangling pointer
        (void)pool.alloc();                   // pops b, reads its link
      },
      step02::debug::kAsan
          ? "use-after-poison"
          : "tierpool step02-template-pool: MemoryPool<T>: free-list link overwritten in freed "
            "block 0x");
  pool.free(live);
}

TEST(HardenedDeathTest, OverwrittenLinkInAFixedCapacityPoolAborts) {
  MemoryPool<Node, 8, Hardened> pool;
  void* a = pool.alloc();
  void* b = pool.alloc();
  pool.free(a);
  pool.free(b);
  EXPECT_DEATH(
      {
        const std::uintptr_t forged = 0x4141414141414141;
        std::memcpy(b, &forged, sizeof(forged));
        (void)pool.alloc();
      },
      step02::debug::kAsan ? "use-after-poison"
                           : "MemoryPool<T, N>: free-list link overwritten in freed block 0x");
}

// Hardened links are not the plain next pointer, and an untouched list still works (LIFO order).
TEST(HardenedTest, FreeListLinksAreEncoded) {
  if (step02::debug::kAsan || std::getenv("TIERPOOL_UNDER_VALGRIND") != nullptr) {
    GTEST_SKIP() << "reading a freed block is what ASan and memcheck forbid";
  }
  MemoryPool<Node, 0, Hardened> pool;
  void* a = pool.alloc();
  void* b = pool.alloc();
  pool.free(a);
  pool.free(b);
  void* stored = nullptr;
  std::memcpy(&stored, b, sizeof(stored));
  EXPECT_NE(stored, a);
  EXPECT_EQ(pool.alloc(), b);
  EXPECT_EQ(pool.alloc(), a);
  pool.free(a);
  pool.free(b);
}

TEST(HardenedDeathTest, FixedCapacityPoolChecksToo) {
  MemoryPool<Node, 4, Hardened> pool;
  void* p = pool.alloc();
  pool.free(p);
  EXPECT_DEATH(pool.free(p), "MemoryPool<T, N>: double free of 0x");
  Node elsewhere{};
  EXPECT_DEATH(pool.free(&elsewhere), "not from this pool");
}

TEST(HardenedDeathTest, PoolAllocatorChecksToo) {
  step02::PoolAllocator<Node, Hardened> alloc;
  Node* p = alloc.allocate(1);
  alloc.deallocate(p, 1);
  EXPECT_DEATH(alloc.deallocate(p, 1), "PoolAllocator: double free of 0x");
}

TEST(HardenedTest, FreedBlocksHoldThePatternAndCorrectUseIsUntouched) {
  MemoryPool<Node, 0, Hardened> pool;
  std::vector<Node*> nodes;
  for (int i = 0; i < 100; ++i) {
    nodes.push_back(static_cast<Node*>(pool.alloc()));
    nodes.back()->value[0] = nodes.back()->value[1] = nodes.back()->value[2] = i;
  }
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(nodes[i]->value[2], i);
  for (Node* n : nodes)
    pool.free(n);
  std::list<int, step02::PoolAllocator<int, Hardened>> list;
  for (int i = 0; i < 1000; ++i)
    list.push_back(i);
  list.remove_if([](int v) { return v % 3 == 0; });
  EXPECT_EQ(list.size(), 666u);
}

#if TIERPOOL_ASAN
// The pool poisons a freed block, so ASan reports the read as a use-after-poison inside the
// pool's chunk (without poisoning the chunk is live memory to ASan, and the read goes unseen).
TEST(AsanDeathTest, UseAfterFreeInsideThePoolIsReported) {
  MemoryPool<Node> pool;
  void* keep = pool.alloc();
  void* p = pool.alloc();
  pool.free(p);
  EXPECT_DEATH(ReadByte(static_cast<char*>(p) + 8), "AddressSanitizer: use-after-poison");
  EXPECT_DEATH(ReadByte(static_cast<char*>(keep) + sizeof(Node) * 5),
               "AddressSanitizer: use-after-poison")
      << "memory not handed out yet is poisoned too";
  pool.free(keep);
}

TEST(AsanDeathTest, FixedPoolIsPoisonedWhileAliveAndCleanAfterwards) {
  using Pool = MemoryPool<Node, 8>;
  alignas(Pool) unsigned char storage[sizeof(Pool)];  // stands for the stack frame it lives in
  Pool* pool = ::new (storage) Pool;
  void* p = pool->alloc();
  pool->free(p);
  EXPECT_DEATH(ReadByte(p), "use-after-poison");
  pool->~Pool();
  EXPECT_EQ(__asan_region_is_poisoned(storage, sizeof(storage)), nullptr)
      << "the destructor must leave its memory as it found it";
}
#endif

// Under memcheck the pool is a valgrind mempool: reading a freed block is an "Invalid read".
TEST(ValgrindDeathTest, UseAfterFreeInsideThePoolIsReported) {
  MemoryPool<Node> pool;
  void* p = pool.alloc();
  pool.free(p);
  tierpool_test::ExpectMemcheckErrors([&] { ReadByte(static_cast<char*>(p) + 8); }, 1);
}

}  // namespace
