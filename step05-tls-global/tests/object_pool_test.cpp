// ObjectPool<T>: the article's behaviour (New/Delete, Allocate/Free, reuse first, growth on demand,
// everything freed when the pool dies) and what the article leaves out (frees from another
// thread, thread exit, short-lived threads, throwing constructors, out of memory).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "object_pool.h"
#include "pool_under_test.h"

namespace {

bool UnderValgrind() {
  const char* v = std::getenv("TIERPOOL_UNDER_VALGRIND");
  return v != nullptr && v[0] == '1';
}

// Small tunables so that a test crosses every boundary (list full, block used up, chunk used up)
// with a few dozen objects.
struct TinyTraits : PoolTraits {
  static constexpr std::size_t kBlockSize = 8;
  static constexpr std::size_t kBlockChunkSize = 2;
  static constexpr std::size_t kFreeSlotsSize = 4;
  static constexpr std::size_t kRecentSize = RecentOr(2);
  static constexpr std::size_t kGlobalPoolNum = 3;
};

// Chunk source that counts what is mapped and can be told to fail.
std::atomic<long> g_mapped_chunks{0};
std::atomic<int> g_maps_until_failure{-1};  // -1: never fail

struct CountingTraits : TinyTraits {
  static void* MapChunk(std::size_t bytes) noexcept {
    if (g_maps_until_failure.load() == 0) return nullptr;
    if (g_maps_until_failure.load() > 0) g_maps_until_failure.fetch_sub(1);
    void* p = PoolTraits::MapChunk(bytes);
    if (p != nullptr) g_mapped_chunks.fetch_add(1);
    return p;
  }
  static void UnmapChunk(void* p, std::size_t bytes) noexcept {
    g_mapped_chunks.fetch_sub(1);
    PoolTraits::UnmapChunk(p, bytes);
  }
};

struct Counted {
  static inline std::atomic<int> alive{0};
  explicit Counted(int v) : value(v) { alive.fetch_add(1); }
  ~Counted() { alive.fetch_sub(1); }
  int value;
  char pad[20] = {};
};

TEST(ObjectPool, NewConstructsWithForwardedArgumentsAndDeleteDestroys) {
  step05::ObjectPool<Counted> pool;
  Counted* c = pool.New(42);
  EXPECT_EQ(c->value, 42);
  EXPECT_EQ(Counted::alive.load(), 1);
  pool.Delete(c);
  EXPECT_EQ(Counted::alive.load(), 0);

  // Perfect forwarding: a move-only argument arrives moved, not copied.
  struct Owner {
    explicit Owner(std::unique_ptr<int> p) : held(std::move(p)) {}
    std::unique_ptr<int> held;
  };
  step05::ObjectPool<Owner> owners;
  Owner* o = owners.New(std::make_unique<int>(7));
  EXPECT_EQ(*o->held, 7);
  owners.Delete(o);
}

TEST(ObjectPool, NullIsANoOp) {
  step05::ObjectPool<Counted> pool;
  pool.Free(nullptr);
  pool.Delete(nullptr);
  EXPECT_EQ(pool.Stats().chunks, 0u);
}

template <class T>
void ExpectDistinctAlignedNonOverlapping(std::size_t count) {
  step05::ObjectPool<T, TinyTraits> pool;
  std::vector<T*> objects;
  std::set<std::uintptr_t> addresses;
  for (std::size_t i = 0; i < count; ++i) {
    T* p = static_cast<T*>(pool.Allocate());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(T), 0u);
    EXPECT_TRUE(addresses.insert(reinterpret_cast<std::uintptr_t>(p)).second);
    std::memset(static_cast<void*>(p), int(i & 0xff), sizeof(T));
    objects.push_back(p);
  }
  std::uintptr_t previous = 0;
  for (std::uintptr_t a : addresses) {
    if (previous != 0) {
      EXPECT_GE(a - previous, sizeof(T));
    }
    previous = a;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(objects[i]);
    for (std::size_t b = 0; b < sizeof(T); ++b)
      ASSERT_EQ(bytes[b], i & 0xff);
  }
  for (T* p : objects)
    pool.Free(p);
}

struct alignas(64) CacheLineObject {
  char c;
};
struct ThreeWords {
  void* a;
  void* b;
  void* c;
};

TEST(ObjectPool, SlotsAreDistinctAlignedAndKeepTheirBytesForAnyType) {
  ExpectDistinctAlignedNonOverlapping<char>(100);  // smaller than a link: slot of 8 bytes
  ExpectDistinctAlignedNonOverlapping<ThreeWords>(100);
  ExpectDistinctAlignedNonOverlapping<CacheLineObject>(100);
  ExpectDistinctAlignedNonOverlapping<std::string>(100);
  EXPECT_EQ((step05::ObjectPool<char>::slot_size()), sizeof(void*));
  EXPECT_EQ((step05::ObjectPool<CacheLineObject>::slot_size()), 64u);
}

TEST(ObjectPool, ReuseFirstTheLastFreedIsTheNextHandedOut) {
  step05::ObjectPool<ThreeWords, TinyTraits> pool;
  void* a = pool.Allocate();
  pool.Free(a);
  EXPECT_EQ(pool.Allocate(), a);
  // LIFO across the list's boundaries too.
  std::vector<void*> objects;
  for (int i = 0; i < 50; ++i)
    objects.push_back(pool.Allocate());
  for (void* p : objects)
    pool.Free(p);
  for (int i = 49; i >= 40; --i)
    EXPECT_EQ(pool.Allocate(), objects[i]) << i;
}

// The same over every layer a free passes through with the default lists: the array of recent
// frees, the moves of its older half into the list (items and nodes on all eight chains) and the
// lists parked in the GlobalPool (the plain pool: its list and the GlobalPool). 2000 frees come
// back exactly reversed.
struct SmallArray : PoolTraits {
  // Moves of 3: runs that cross node boundaries.
  static constexpr std::size_t kRecentSize = RecentOr(6);
};

TEST(ObjectPool, ReuseFirstHoldsThroughTheArrayTheChainsAndTheGlobalPool) {
  step05::ObjectPool<ThreeWords, SmallArray> pool;
  std::vector<void*> objects;
  for (int i = 0; i < 2000; ++i)
    objects.push_back(pool.Allocate());
  for (void* p : objects)
    pool.Free(p);
  EXPECT_GE(pool.Stats().global_lists, 1u) << "some lists went through the GlobalPool";
  for (int i = 1999; i >= 0; --i)
    ASSERT_EQ(pool.Allocate(), objects[i]) << i;
  EXPECT_EQ(pool.Stats().blocks_carved, 4u) << "2000 objects, Blocks of 512: no Block more";
}

TEST(ObjectPool, GrowsOnlyOnDemand) {
  step05::ObjectPool<ThreeWords, TinyTraits> pool;
  EXPECT_EQ(pool.Stats().chunks, 0u) << "nothing is mapped before the first allocation";
  std::vector<void*> objects(100);
  for (int round = 0; round < 20; ++round) {
    for (void*& p : objects)
      p = pool.Allocate();
    for (void* p : objects)
      pool.Free(p);
  }
  // 100 live objects need 13 Blocks of 8; reuse keeps it there (one Block more at most, which
  // the thread may hold partly carved).
  const auto stats = pool.Stats();
  EXPECT_LE(stats.blocks_carved, 100u / TinyTraits::kBlockSize + 2);
  EXPECT_LE(stats.chunks, stats.blocks_carved / TinyTraits::kBlockChunkSize + 1);
}

TEST(ObjectPool, EveryChunkIsUnmappedWhenThePoolDiesEvenWithLiveObjects) {
  g_mapped_chunks = 0;
  {
    step05::ObjectPool<ThreeWords, CountingTraits> pool;
    for (int i = 0; i < 1000; ++i)
      pool.Allocate();  // never freed
    EXPECT_GT(g_mapped_chunks.load(), 0);
    EXPECT_EQ(pool.Stats().chunks, std::size_t(g_mapped_chunks.load()));
  }
  EXPECT_EQ(g_mapped_chunks.load(), 0);
}

struct ThrowsOnThree {
  static inline int constructed = 0;
  explicit ThrowsOnThree(int v) : value(v) {
    if (v == 3) throw std::runtime_error("three");
    ++constructed;
  }
  int value;
  char pad[40];
};

TEST(ObjectPool, AThrowingConstructorLeaksNothing) {
  step05::ObjectPool<ThrowsOnThree, TinyTraits> pool;
  ThrowsOnThree* one = pool.New(1);
  pool.Delete(one);
  // The slot the failed New took goes back before the exception leaves New: the next
  // allocation gets it again.
  EXPECT_THROW(pool.New(3), std::runtime_error);
  EXPECT_EQ(static_cast<void*>(pool.New(2)), static_cast<void*>(one));
  for (int i = 0; i < 100; ++i)
    EXPECT_THROW(pool.New(3), std::runtime_error);
  EXPECT_EQ(pool.Stats().blocks_carved, 1u);
}

TEST(ObjectPool, OutOfMemoryIsNullOrBadAllocAndThePoolStaysUsable) {
  g_maps_until_failure = 1;  // one chunk, then the OS says no
  {
    step05::ObjectPool<ThreeWords, CountingTraits> pool;
    constexpr std::size_t kCapacity = TinyTraits::kBlockSize * TinyTraits::kBlockChunkSize;
    std::vector<void*> objects;
    for (std::size_t i = 0; i < kCapacity; ++i) {
      objects.push_back(pool.Allocate());
      ASSERT_NE(objects.back(), nullptr);
    }
    EXPECT_EQ(pool.Allocate(), nullptr);
    EXPECT_THROW(pool.New(), std::bad_alloc);
    pool.Free(objects.back());
    objects.pop_back();
    void* again = pool.Allocate();
    EXPECT_NE(again, nullptr);
    objects.push_back(again);
    for (void* p : objects)
      pool.Free(p);
  }
  g_maps_until_failure = -1;
}

TEST(ObjectPool, ObjectsFreedByAnotherThreadAreReused) {
  step05::ObjectPool<ThreeWords, TinyTraits> pool;
  std::vector<void*> objects(200);
  for (int round = 0; round < 30; ++round) {
    std::thread producer([&] {
      for (void*& p : objects)
        p = pool.Allocate();
    });
    producer.join();
    std::thread consumer([&] {
      for (void* p : objects)
        pool.Free(p);
    });
    consumer.join();
  }
  // Each round's objects come back through the GlobalPools, so memory stays at one round's
  // worth (plus the Block rests threads left behind).
  EXPECT_LE(pool.Stats().blocks_carved, 200u / TinyTraits::kBlockSize + 2 * 2 + 2);
  EXPECT_EQ(pool.Stats().local_pools, 0u) << "exited threads are detached";
}

TEST(ObjectPool, AProducerConsumerPairStaysBoundedWhileBothRun) {
  // The producer only allocates, the consumer only frees: without stealing between GlobalPools
  // the consumer's lists would pile up in its GlobalPool while the producer maps new memory.
  step05::ObjectPool<ThreeWords> pool;
  constexpr int kObjects = 200000;
  constexpr std::size_t kQueue = 1024;
  std::vector<std::atomic<void*>> ring(kQueue);
  std::atomic<std::size_t> head{0}, tail{0};
  std::thread producer([&] {
    for (int i = 0; i < kObjects; ++i) {
      while (tail.load() - head.load() == kQueue)
        std::this_thread::yield();
      ring[tail.load() % kQueue].store(pool.Allocate());
      tail.fetch_add(1);
    }
  });
  std::thread consumer([&] {
    for (int i = 0; i < kObjects; ++i) {
      while (head.load() == tail.load())
        std::this_thread::yield();
      pool.Free(ring[head.load() % kQueue].load());
      head.fetch_add(1);
    }
  });
  producer.join();
  consumer.join();
  // In flight at most: the queue, two lists and an array of recent frees per thread, a Block
  // per thread, one list parked.
  using Defaults = PoolTraits;
  const std::size_t bound =
      kQueue + 4 * Defaults::kFreeSlotsSize + 2 * Defaults::kRecentSize + 2 * Defaults::kBlockSize;
  EXPECT_LE(pool.Stats().blocks_carved * PoolTraits::kBlockSize, bound + 512);
}

TEST(ObjectPool, AnExitingThreadGivesBackItsListsAndTheRestOfItsBlock) {
  step05::ObjectPool<ThreeWords, TinyTraits> pool;
  std::thread([&] {
    std::vector<void*> objects;
    for (int i = 0; i < 13; ++i)  // 1 Block and 5 slots of another: 3 slots left to carve
      objects.push_back(pool.Allocate());
    for (void* p : objects)
      pool.Free(p);
  }).join();
  auto stats = pool.Stats();
  EXPECT_EQ(stats.local_pools, 0u);
  EXPECT_EQ(stats.blocks_carved, 2u);
  EXPECT_GE(stats.global_lists, 1u) << "the cached objects are in a GlobalPool now";
  // Another thread gets all 13 objects and the 3 uncarved slots without a new Block.
  std::thread([&] {
    std::vector<void*> objects;
    for (int i = 0; i < 16; ++i)
      objects.push_back(pool.Allocate());
    EXPECT_EQ(pool.Stats().blocks_carved, 2u);
    for (void* p : objects)
      pool.Free(p);
  }).join();
}

TEST(ObjectPool, TenThousandShortLivedThreadsDoNotGrowMemory) {
  step05::ObjectPool<ThreeWords> pool;
  const int threads = UnderValgrind() ? 300 : 10000;
  constexpr int kWorkingSet = 100;
  auto work = [&] {
    void* objects[kWorkingSet];
    for (void*& p : objects) {
      p = pool.Allocate();
      std::memset(p, 0x5a, sizeof(ThreeWords));
    }
    for (void* p : objects)
      pool.Free(p);
  };
  for (int i = 0; i < threads; i += 2) {
    std::thread a(work), b(work);
    a.join();
    b.join();
  }
  // Two threads at a time, each with one working set and at most one partly carved Block per
  // GlobalPool: a handful of Blocks, however many threads came and went.
  const auto stats = pool.Stats();
  EXPECT_LE(stats.blocks_carved, PoolTraits::kGlobalPoolNum + 2);
  EXPECT_LE(stats.bytes_mapped, PoolTraits::kGlobalPoolNum * pool.chunk_bytes());
  EXPECT_EQ(stats.local_pools, 0u);
}

TEST(ObjectPool, APoolMayDieBeforeTheThreadsThatUsedIt) {
  auto pool = std::make_unique<step05::ObjectPool<ThreeWords>>();
  std::atomic<int> phase{0};
  std::thread user([&] {
    pool->Free(pool->Allocate());
    phase = 1;
    while (phase.load() != 2)
      std::this_thread::yield();
    // The pool is gone; this thread's orphaned LocalPool is deleted at its exit. A new pool
    // (perhaps at the same address) must not see the old LocalPool.
    step05::ObjectPool<ThreeWords> other;
    void* p = other.Allocate();
    other.Free(p);
    EXPECT_EQ(other.Allocate(), p);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  pool.reset();
  phase = 2;
  user.join();
}

TEST(ObjectPool, SeveralPoolsOfOneTypeOnOneThreadKeepTheirObjectsApart) {
  step05::ObjectPool<ThreeWords, TinyTraits> a, b;
  for (int i = 0; i < 100; ++i) {
    void* pa = a.Allocate();
    void* pb = b.Allocate();
    a.Free(pa);
    b.Free(pb);
    EXPECT_EQ(a.Allocate(), pa);
    EXPECT_EQ(b.Allocate(), pb);
    a.Free(pa);
    b.Free(pb);
  }
  EXPECT_EQ(a.Stats().blocks_carved, 1u);
  EXPECT_EQ(b.Stats().blocks_carved, 1u);
}

// A thread_local whose destructor runs after the pool's per-thread registry is gone.
step05::ObjectPool<ThreeWords, TinyTraits>* g_late_pool = nullptr;
struct LateUser {
  void* kept = nullptr;
  ~LateUser() {
    g_late_pool->Free(kept);
    g_late_pool->Free(g_late_pool->Allocate());
  }
};

TEST(ObjectPool, WorksFromThreadLocalDestructorsAfterTheThreadLeftThePool) {
  step05::ObjectPool<ThreeWords, TinyTraits> pool;
  g_late_pool = &pool;
  std::thread([&] {
    thread_local LateUser late;  // constructed first, so destroyed after the registry
    late.kept = pool.Allocate();
  }).join();
  EXPECT_EQ(pool.Stats().local_pools, 0u);
  // The object freed after the registry died went back to a GlobalPool.
  EXPECT_GE(pool.Stats().global_lists, 1u);
  g_late_pool = nullptr;
}

}  // namespace
