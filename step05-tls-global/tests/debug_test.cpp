// Bugs in the code that uses the pool, caught: by the hardened mode (double free, foreign and
// interior pointers, writes after free, overwritten free-list addresses), by ASan (use after free
// inside the pool) and by valgrind (the same, through the mempool client requests). Each deliberate
// bug runs in a death test's child process, so this binary itself stays clean under every tool.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "pool_under_test.h"

#if STEP05_VALGRIND_HOOKS
#include <valgrind/memcheck.h>
#endif

namespace {

// Fork-and-exec style: the children start clean even if the parent has threads.
class ThreadsafeDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};
using HardenedDeathTest = ThreadsafeDeathTest;
using AsanDeathTest = ThreadsafeDeathTest;

struct Hardened : PoolTraits {
  static constexpr bool kHardened = true;
};

struct Payload {
  long words[6];  // 48 bytes: a node holds 5 items besides its link
};

using HardenedPool = step05::ObjectPool<Payload, Hardened>;
using Pool = step05::ObjectPool<Payload, PoolTraits>;

// Two recent frees kept in the array, so that a test's third free already reaches the list (the
// plain pool has no array: every free reaches it).
struct ShortArray : PoolTraits {
  static constexpr std::size_t kRecentSize = RecentOr(2);
};
struct HardenedShortArray : ShortArray {
  static constexpr bool kHardened = true;
};

// Under ASan every free slot is poisoned (node or item): ASan stops a stray write into it by
// itself, before the hardened checks could see it.
#if TIERPOOL_ASAN
constexpr bool kAsanPoisonsFreedSlots = true;
#else
constexpr bool kAsanPoisonsFreedSlots = false;
#endif

TEST_F(HardenedDeathTest, DoubleFreeAbortsNamingThePointerAndTheStep) {
  HardenedPool pool;
  void* p = pool.Allocate();
  pool.Free(p);
  EXPECT_DEATH(pool.Free(p), "step05-tls-global: double free .*of 0x[0-9a-f]+");
}

TEST_F(HardenedDeathTest, FreeOfAPointerNotFromThePoolAborts) {
  HardenedPool pool;
  pool.Free(pool.Allocate());  // the pool has a chunk
  Payload on_stack{};
  EXPECT_DEATH(pool.Free(&on_stack), "step05-tls-global: free of a pointer not from this pool");
  auto from_malloc = std::make_unique<Payload>();
  EXPECT_DEATH(pool.Free(from_malloc.get()), "not from this pool: 0x[0-9a-f]+");
  HardenedPool other;
  void* others = other.Allocate();
  EXPECT_DEATH(pool.Free(others), "not from this pool");
  other.Free(others);
}

TEST_F(HardenedDeathTest, FreeOfAPointerInsideAnObjectAborts) {
  HardenedPool pool;
  auto* p = static_cast<char*>(pool.Allocate());
  EXPECT_DEATH(pool.Free(p + 8), "inside an object, not its start");
  pool.Free(p);
}

// A rung's property: the array of recent frees and the list's items are filled with the pattern;
// the plain list's every free slot is a node, whose links take the pattern's place.
TEST_F(HardenedDeathTest, AWriteAfterFreeIsCaughtWhenTheSlotIsReused) {
  if (PoolTraits::kRecentSize == 0) GTEST_SKIP() << "no array of recent frees on this rung";
  HardenedPool pool;
  auto* a = static_cast<Payload*>(pool.Allocate());
  auto* b = static_cast<Payload*>(pool.Allocate());
  pool.Free(a);  // both wait in the array of recent frees, filled with the pattern
  pool.Free(b);
  EXPECT_DEATH(
      {
        b->words[3] = 42;  // the bug
        pool.Allocate();   // hands b out again: its fill pattern is broken
      },
      kAsanPoisonsFreedSlots ? "use-after-poison"
                             : "use after free: written after free: 0x[0-9a-f]+");
}

// A freed object's first bytes hold addresses of the free list (its node links, or the other
// free objects it keeps). A stray write that puts a plausible address there (here: a live
// object's) must not make the pool hand that address out: the hardened pool stores them encoded,
// the forged word decodes to no slot of the pool, and the pool aborts naming the freed slot.
TEST_F(HardenedDeathTest, AnOverwrittenFreeListAddressAbortsNamingTheSlot) {
  // An array of two recent frees: the third and fourth frees move a, then b, into the list.
  step05::ObjectPool<Payload, HardenedShortArray> pool;
  auto* live = static_cast<Payload*>(pool.Allocate());
  Payload* freed[4];
  for (auto*& p : freed)
    p = static_cast<Payload*>(pool.Allocate());
  for (auto* p : freed)
    pool.Free(p);
  Payload* a = freed[0];  // the list's node: words[0] links on (unrolled: words[1] holds b)
  const char* expected = kAsanPoisonsFreedSlots
                             ? "use-after-poison"
                             : "step05-tls-global: free list corrupted: an address overwritten "
                               "in freed slot 0x[0-9a-f]+";
  if constexpr (PoolTraits::kUnrolledList) {
    EXPECT_DEATH(
        {
          a->words[1] = reinterpret_cast<long>(live);  // b's address replaced
          for (int i = 0; i < 3; ++i)                  // d and c from the array, then "b"
            pool.Allocate();
        },
        expected);
  }
  EXPECT_DEATH(
      {
        a->words[0] = reinterpret_cast<long>(live);  // the link to the next node replaced
        for (int i = 0; i < 4; ++i)                  // d, c, b, then a itself: its link is followed
          pool.Allocate();
      },
      expected);
  pool.Free(live);
}

TEST_F(HardenedDeathTest, CorrectUseDoesNotAbort) {
  HardenedPool pool;
  for (int round = 0; round < 3; ++round) {
    Payload* objects[1000];
    for (auto*& p : objects) {
      p = static_cast<Payload*>(pool.Allocate());
      std::memset(p, 0x11, sizeof(Payload));
    }
    for (auto* p : objects)
      pool.Free(p);
  }
  EXPECT_TRUE(HardenedPool::hardened());
}

TEST(ObjectPoolTools, TheDefaultModeFollowsTheBuildOption) {
  EXPECT_EQ((step05::ObjectPool<Payload>::hardened()), step05::kHardenedByDefault);
}

#if TIERPOOL_ASAN
TEST_F(AsanDeathTest, UseAfterFreeInsideThePoolIsReported) {
  Pool pool;
  auto* p = static_cast<Payload*>(pool.Allocate());
  p->words[2] = 1;
  pool.Free(p);
  EXPECT_DEATH({ [[maybe_unused]] volatile long v = p->words[2]; }, "use-after-poison");
}

// With an array of two recent frees, the first object freed becomes a node of the list and the
// second is only an address kept in it: it is poisoned all the same, as are the two in the array.
TEST_F(AsanDeathTest, UseAfterFreeOfAnItemSlotIsReported) {
  if (!PoolTraits::kUnrolledList)
    GTEST_SKIP() << "no items on this rung: every free slot is a node";
  step05::ObjectPool<Payload, ShortArray> pool;
  Payload* freed[4];
  for (auto*& p : freed)
    p = static_cast<Payload*>(pool.Allocate());
  for (auto* p : freed)
    pool.Free(p);
  EXPECT_DEATH({ freed[0]->words[2] = 1; }, "use-after-poison");  // node, past its link
  EXPECT_DEATH({ freed[1]->words[0] = 1; }, "use-after-poison");  // item
  EXPECT_DEATH({ freed[3]->words[0] = 1; }, "use-after-poison");  // in the array
}

TEST_F(AsanDeathTest, MemoryNeverHandedOutIsPoisonedToo) {
  Pool pool;
  auto* p = static_cast<Payload*>(pool.Allocate());
  Payload* next_in_block = p + 1;  // carved later, not yet handed out
  EXPECT_DEATH({ next_in_block->words[0] = 1; }, "use-after-poison");
  pool.Free(p);
}
#endif

#if STEP05_VALGRIND_HOOKS
// memcheck counts the errors it reports; a child that reads freed pool memory must see the count
// go up, and says so with its exit code (valgrind itself may turn it into --error-exitcode's 99,
// which says the same). The child is forked, not re-executed, so that it stays under valgrind.
TEST(ValgrindDeathTest, UseAfterFreeInsideThePoolIsReported) {
  if (!RUNNING_ON_VALGRIND) GTEST_SKIP() << "not running under valgrind";
  GTEST_FLAG_SET(death_test_style, "fast");
  Pool pool;
  auto* p = static_cast<Payload*>(pool.Allocate());
  p->words[2] = 1;
  pool.Free(p);
  EXPECT_EXIT(
      {
        const unsigned before = VALGRIND_COUNT_ERRORS;
        [[maybe_unused]] volatile long v = p->words[2];
        std::_Exit(VALGRIND_COUNT_ERRORS > before ? 7 : 0);
      },
      [](int status) {
        return WIFEXITED(status) && (WEXITSTATUS(status) == 7 || WEXITSTATUS(status) == 99);
      },
      "");
}
#endif

}  // namespace
