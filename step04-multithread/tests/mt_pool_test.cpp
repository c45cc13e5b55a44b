// The lock policies (mutual exclusion, RAII, layout) and MTMemoryPool around step02's pool:
// distinct blocks, frees from other threads, an exception that leaves no lock held, and the
// hardened pool's checks seen through the wrapper.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "locked_pools.h"

namespace {

template <class Lock>
class LockPolicyTest : public ::testing::Test {};
using ThreadSafeLocks = ::testing::Types<step04::MutexLock, step04::SpinLock>;
TYPED_TEST_SUITE(LockPolicyTest, ThreadSafeLocks);

TYPED_TEST(LockPolicyTest, OnlyOneThreadAtATimeIsInside) {
  TypeParam lock;
  long counter = 0;  // plain: a lost update (or TSan) would show a broken lock
  int inside = 0;
  const int kThreads = 4;
  const int kIterations = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        std::lock_guard<TypeParam> guard(lock);
        EXPECT_EQ(++inside, 1);
        ++counter;
        --inside;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(counter, long(kThreads) * kIterations);
}

TYPED_TEST(LockPolicyTest, TryLockFailsWhileHeld) {
  TypeParam lock;
  lock.lock();
  bool acquired = true;
  std::thread([&] { acquired = lock.try_lock(); }).join();
  EXPECT_FALSE(acquired);
  lock.unlock();
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(SpinLock, HasACacheLineOfItsOwn) {
  EXPECT_EQ(sizeof(step04::SpinLock), step04::kCacheLine);
  EXPECT_EQ(alignof(step04::SpinLock), step04::kCacheLine);
}

TEST(NullLock, CostsNothingAndAlwaysSucceeds) {
  step04::NullLock lock;
  lock.lock();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
  EXPECT_TRUE(std::is_empty_v<step04::NullLock>);
}

// A pool with the book's interface that throws when told to.
struct ThrowingPool {
  bool fail = false;
  void* alloc(std::size_t) {
    if (fail) throw std::bad_alloc();
    return &storage;
  }
  void free(void*) {}
  long storage = 0;
};

template <class Lock>
class WrapperTest : public ::testing::Test {};
TYPED_TEST_SUITE(WrapperTest, ThreadSafeLocks);

TYPED_TEST(WrapperTest, AnExceptionInTheWrappedPoolReleasesTheLock) {
  step04::MTMemoryPool<ThrowingPool, TypeParam> pool;
  pool.unlocked_pool().fail = true;
  EXPECT_THROW(pool.alloc(8), std::bad_alloc);
  pool.unlocked_pool().fail = false;
  // Another thread gets in: with the book's lock()/alloc()/unlock() it would wait forever.
  void* p = nullptr;
  std::thread([&] { p = pool.alloc(8); }).join();
  EXPECT_NE(p, nullptr);
}

TYPED_TEST(WrapperTest, BlocksAreDistinctAlignedAndComeBackFromAnyThread) {
  step04::LockedMemoryPool<64, TypeParam> pool;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::vector<void*>> blocks(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        void* p = pool.alloc(64);
        std::memset(p, t, 64);
        blocks[t].push_back(p);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  std::set<void*> distinct;
  for (int t = 0; t < kThreads; ++t) {
    for (void* p : blocks[t]) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u);
      EXPECT_TRUE(distinct.insert(p).second);
      const auto* bytes = static_cast<const unsigned char*>(p);
      for (int b = 0; b < 64; ++b)
        ASSERT_EQ(bytes[b], t);
    }
  }
  // Every thread frees another thread's blocks.
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (void* p : blocks[(t + 1) % kThreads])
        pool.free(p);
    });
  }
  for (auto& t : threads)
    t.join();
  // All of them are free again: as many allocations get exactly the same blocks back.
  std::set<void*> again;
  for (int i = 0; i < kThreads * kPerThread; ++i)
    again.insert(pool.alloc(64));
  EXPECT_EQ(again, distinct);
  for (void* p : again)
    pool.free(p);
}

TEST(Wrapper, NullptrFreeIsANoOpAndOversizeThrows) {
  step04::LockedMemoryPool<64, step04::SpinLock> pool;
  pool.free(nullptr);
  EXPECT_THROW(pool.alloc(65), std::bad_alloc);
  void* p = pool.alloc(0);  // size 0: a unique block
  EXPECT_NE(p, nullptr);
  pool.free(p);
}

TEST(Wrapper, WrapsStep03sSizeClassPoolForMixedSizesFromManyThreads) {
  step04::MTMemoryPool<step03::SizeClassPool<>, step04::SpinLock> pool;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < 3000; ++i) {
        const std::size_t size = 1 + std::size_t((i * 37 + t * 11) % 2048);
        auto* p = static_cast<unsigned char*>(pool.alloc(size));
        std::memset(p, t + 1, size);
        mine.emplace_back(p, size);
      }
      for (auto [p, size] : mine) {
        for (std::size_t b = 0; b < size; ++b)
          if (p[b] != t + 1) bad.fetch_add(1);
        pool.free(p);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Wrapper, NullLockWrapsForOneThread) {
  step04::LockedMemoryPool<64, step04::NullLock> pool;
  void* a = pool.alloc(64);
  pool.free(a);
  EXPECT_EQ(pool.alloc(64), a);  // the wrapped pool is LIFO
  pool.free(a);
}

// The wrapper adds no checks of its own: the hardened policy of the wrapped pool catches the bug,
// the lock keeps the check itself race-free.
TEST(WrapperDeathTest, TheHardenedPoolCatchesADoubleFreeThroughTheWrapper) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  step04::MTMemoryPool<step02::MemoryPool<step04::Bytes<64>, 0, step02::Hardened>, step04::SpinLock>
      pool;
  void* p = pool.alloc(64);
  pool.free(p);
  EXPECT_DEATH(pool.free(p), "double free of 0x[0-9a-f]+");
  step04::Bytes<64> on_stack{};
  EXPECT_DEATH(pool.free(&on_stack), "not from this pool");
}

// A freed block's link overwritten while the lock is not held (a stray write needs no lock): the
// wrapped hardened pool decodes the forged word to an address its list never held and aborts,
// naming the block and the step, instead of handing out what the write pointed at.
TEST(WrapperDeathTest, TheHardenedPoolCatchesAnOverwrittenLinkThroughTheWrapper) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  step04::MTMemoryPool<step03::SizeClassPool<step02::Hardened>, step04::MutexLock> pool;
  void* live = pool.alloc(64);
  void* a = pool.alloc(64);
  void* b = pool.alloc(64);
  pool.free(a);
  pool.free(b);
  EXPECT_DEATH(
      {
        std::memcpy(b, &live, sizeof(live));
        std::thread([&] { (void)pool.alloc(64); }).join();
      },
      step02::debug::kAsan
          ? "use-after-poison"
          : "tierpool step03-variable-size: SizeClassPool: free-list link overwritten in freed "
            "block 0x[0-9a-f]+");
  pool.free(live);
}

}  // namespace
