// The thread cache's memory: the shared empty cache is read-only. And what a thread cache is
// handed: never a cache line another thread's first objects are on.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allocator.h"
#include "core_test_util.h"
#include "os.h"
#include "tierpool/tierpool.h"

namespace {

using namespace tierpool::internal;

// The shared empty cache is in read-only memory: a write to it by mistake faults at once instead
// of changing the state every thread without a cache reads.
TEST(ThreadCacheEmpty, TheSharedEmptyCacheIsReadOnly) {
  const auto address = reinterpret_cast<std::uintptr_t>(&empty_cache);
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  ASSERT_NE(maps, nullptr);
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long begin = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &begin, &end, perms) != 3) continue;
    if (address < begin || address + sizeof(ThreadCache) > end) continue;
    found = true;
    EXPECT_EQ(perms[1], '-') << line;
  }
  std::fclose(maps);
  EXPECT_TRUE(found) << "no mapping holds the empty cache";
}

// Hoard's "active false sharing": two threads that start using a class one after the other must
// not be handed objects of one cache line, or every write of one takes the line from the other.
// Sizes of classes no other test of this binary uses, so each starts from a fresh span; both
// threads take their first object of the class, the second after the first, while the first
// lives on (a thread that exited writes nothing: the next thread may take over its cache).
// Two threads, both alive, take their first object of `size`, the second after the first.
std::pair<void*, void*> FirstObjectsOfTwoLiveThreads(std::size_t size) {
  std::atomic<void*> first{nullptr};
  std::atomic<bool> done{false};
  void* second = nullptr;
  std::thread a([&] {
    first = tierpool::ConcurrentAlloc(size);
    while (!done)
      std::this_thread::yield();
  });
  while (first == nullptr)
    std::this_thread::yield();
  std::thread b([&] { second = tierpool::ConcurrentAlloc(size); });
  b.join();
  done = true;
  a.join();
  return {first.load(), second};
}

TEST(ThreadCacheSharing, TwoThreadsNeverStartOnOneCacheLine) {
  for (std::size_t size : {24, 40, 56, 72, 88, 104, 120}) {
    const auto [first, second] = FirstObjectsOfTwoLiveThreads(size);
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    const auto line = [](const void* p, std::size_t offset) {
      return (reinterpret_cast<std::uintptr_t>(p) + offset) / kCacheLineSize;
    };
    // No line holds bytes of both objects.
    EXPECT_TRUE(line(first, size - 1) < line(second, 0) || line(second, size - 1) < line(first, 0))
        << size << "-byte objects " << first << " and " << second << " share a cache line";
    tierpool::ConcurrentFree(first);
    tierpool::ConcurrentFree(second);
  }
}

// The same for objects back on their span's list: a thread used a few of a class, freed them in
// address order and exited, so they went back to their span (kept by one still live). The next
// two threads each take one: a refill takes at least a line's worth of small objects, so the
// second thread's first object is no neighbour of the first's. (Sizes no test above uses.)
TEST(ThreadCacheSharing, TwoThreadsNeverStartOnOneLineOfFreedObjects) {
  for (std::size_t size : {8, 16, 32}) {
    void* kept = nullptr;
    std::thread user([size, &kept] {
      std::vector<void*> objects;
      for (int i = 0; i < 33; ++i)
        objects.push_back(tierpool::ConcurrentAlloc(size));
      std::sort(objects.begin(), objects.end());
      kept = objects.back();  // the span stays, with the others back on its list
      objects.pop_back();
      for (void* p : objects)
        tierpool::ConcurrentFree(p, size);
    });
    user.join();
    tierpool_release_free_memory();  // its cache, kept for the next thread, goes to the span too
    // Both threads live while they take theirs, as threads that write their objects do (an
    // exiting thread would give its cached line-mates back).
    const auto [first, second] = FirstObjectsOfTwoLiveThreads(size);
    ASSERT_NE(second, nullptr);
    EXPECT_NE(reinterpret_cast<std::uintptr_t>(first) / kCacheLineSize,
              reinterpret_cast<std::uintptr_t>(second) / kCacheLineSize)
        << size << "-byte objects " << first << " and " << second << " share a cache line";
    tierpool::ConcurrentFree(first);
    tierpool::ConcurrentFree(second);
    tierpool::ConcurrentFree(kept);
  }
}

// Passive false sharing (Hoard's cache-scratch): one thread allocates an object for each of two
// others, so the two share a cache line; each frees the one it was given and then allocates and
// writes its own. A freed object kept by the freeing thread would be the first it allocates, and
// the one it reuses from then on: the two threads would write one line for their whole lives.
// Each must start on a line of its own instead (and, from fresh spans, on the line of neither
// object handed over). The threads take turns (the second frees after the first has its object),
// both alive to the end.
void CheckThreadsStartApart(std::size_t size, const char* when, bool fresh_spans) {
  auto line = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) / kCacheLineSize; };
  // Two objects of one line, allocated one after the other (the ones before them stay live
  // until the end, so that the allocations go on from where they were).
  void* given[2] = {tierpool::ConcurrentAlloc(size), tierpool::ConcurrentAlloc(size)};
  std::vector<void*> skipped;
  while (line(given[0]) != line(given[1]) && skipped.size() < 64) {
    skipped.push_back(given[0]);
    given[0] = given[1];
    given[1] = tierpool::ConcurrentAlloc(size);
  }
  ASSERT_EQ(line(given[0]), line(given[1])) << when << ": the test needs two objects of one line";
  void* own[2] = {nullptr, nullptr};
  std::atomic<int> turn{0};
  std::atomic<bool> checked{false};
  auto worker = [&](int t) {
    while (turn != t)
      std::this_thread::yield();
    tierpool::ConcurrentFree(given[t], size);
    own[t] = tierpool::ConcurrentAlloc(size);
    tierpool::ConcurrentFree(own[t], size);  // reused from now on
    void* again = tierpool::ConcurrentAlloc(size);
    EXPECT_EQ(again, own[t]);
    ++turn;
    while (!checked)  // alive (and writing) while the other one starts, as in the real thing
      std::this_thread::yield();
    tierpool::ConcurrentFree(again, size);
  };
  std::thread first(worker, 0);
  std::thread second(worker, 1);
  while (turn < 2)
    std::this_thread::yield();
  EXPECT_NE(line(own[0]), line(own[1]))
      << size << "-byte objects, " << when << ": two threads on one line";
  for (int t = 0; t < 2 && fresh_spans; ++t)
    EXPECT_NE(line(own[t]), line(given[0])) << size << "-byte objects, " << when << ": thread " << t
                                            << " started on the line it was handed";
  checked = true;
  first.join();
  second.join();
  for (void* p : skipped)
    tierpool::ConcurrentFree(p, size);
}

// Sizes of which two objects share a line, starting from fresh spans.
TEST(ThreadCacheSharing, AThreadDoesNotStartOnABlockAnotherThreadAllocated) {
  for (std::size_t size : {8, 48}) {
    tierpool_thread_flush();  // the class starts afresh: no object of it in a cache or a span
    tierpool_release_free_memory();
    CheckThreadsStartApart(size, "fresh spans", /*fresh_spans=*/true);
  }
  tierpool_thread_flush();  // nothing of these classes left for the tests after this one
  tierpool_release_free_memory();
}

// The same, over and over in one process (the benchmark's `false-share-passive`): from the
// second time on, the class's spans hold the objects of the times before, which a refill takes
// before it carves. An object freed by a thread that had no list for its class goes to the back
// of its span's list (at the head, the first thread to refill took the object the second had
// just freed, and the second the one the first had). The objects handed over may be taken again
// (neither of the threads they were handed to uses them), but never by both threads.
TEST(ThreadCacheSharing, AThreadDoesNotStartOnABlockAnotherThreadAllocatedTimeAfterTime) {
  for (std::size_t size : {8, 48}) {
    tierpool_thread_flush();
    tierpool_release_free_memory();
    for (int time = 1; time <= 6; ++time) {
      const std::string when = "time " + std::to_string(time);
      CheckThreadsStartApart(size, when.c_str(), /*fresh_spans=*/false);
    }
  }
  tierpool_thread_flush();
  tierpool_release_free_memory();
}

// The unrolled lists: objects of every shape of node (8-byte ones without items, 16-byte ones with
// one, 48- and 64-byte ones with five and seven, bigger ones with seven) freed in a shuffled order,
// part of them given back to the central cache (thread flush, so batches that end inside a node),
// and taken again, on this thread and on another one: every object comes back once, never two at
// one address, and a word written into each while it is live survives until it is freed.
TEST(ThreadCacheLists, EveryObjectComesBackOnceWhateverTheOrder) {
  std::minstd_rand rng(7);
  for (std::size_t size : {8, 16, 32, 48, 64, 200, 512, 4096}) {
    for (int round = 0; round < 4; ++round) {
      std::vector<void*> live;
      for (int i = 0; i < 3000 + round * 517; ++i)
        live.push_back(tierpool::ConcurrentAlloc(size));
      std::set<void*> distinct(live.begin(), live.end());
      ASSERT_EQ(distinct.size(), live.size()) << size << "-byte objects handed out twice";
      for (std::size_t i = 0; i < live.size(); ++i)
        std::memcpy(live[i], &i, sizeof(i));
      for (std::size_t i = 0; i < live.size(); ++i) {
        std::size_t stored;
        std::memcpy(&stored, live[i], sizeof(stored));
        ASSERT_EQ(stored, i);
      }
      std::shuffle(live.begin(), live.end(), rng);
      const std::size_t half = live.size() / 2 + static_cast<std::size_t>(round);
      for (std::size_t i = 0; i < half; ++i)
        tierpool::ConcurrentFree(live[i], size);
      if (round % 2 == 0) tierpool_thread_flush();
      // Another thread frees some (they reach this thread's class through the central cache).
      std::thread other([&] {
        for (std::size_t i = half; i < half + (live.size() - half) / 2; ++i)
          tierpool::ConcurrentFree(live[i], size);
      });
      other.join();
      for (std::size_t i = half + (live.size() - half) / 2; i < live.size(); ++i)
        tierpool::ConcurrentFree(live[i], size);
      if (round % 2 == 1) tierpool_thread_flush();
    }
  }
}

// The array of a class moves to a chunk twice as big each time its limit outgrows it (16
// addresses first). A thread that only frees grows its limit one object at a time up to a batch
// (slow start), so its array moves with objects in it: they come out last freed first.
TEST(ThreadCacheArrays, ObjectsComeBackLastFreedFirstAcrossChunkMoves) {
  const std::size_t size = 64;
  const std::size_t cl = SizeToClass(size);
  const std::size_t count = kClasses[cl].batch;
  ASSERT_GT(count, 64u) << "the array should move at least three times";
  std::vector<void*> blocks(count);
  for (void*& p : blocks)
    p = tierpool::ConcurrentAlloc(size);
  tierpool_release_free_memory();  // the thread below starts a cache, not an exited thread's
  std::thread([&] {
    for (void* p : blocks)  // the first goes to the central cache (a class new to this thread)
      tierpool::ConcurrentFree(p, size);
    ASSERT_EQ(tls_cache->length(cl), count - 1);
    for (std::size_t i = count - 1; i >= 1; --i) {
      void* p = tierpool::ConcurrentAlloc(size);
      ASSERT_EQ(p, blocks[i]) << "not the last freed first, " << i;
      blocks[i] = p;
    }
  }).join();
  for (std::size_t i = 1; i < count; ++i)  // (blocks[0] is free, in the central cache)
    tierpool::ConcurrentFree(blocks[i], size);
}

// A big chunk put back gives its pages back to the OS, but the one that holds its link. The
// chunks of a region start on a cache line, not on a page (the region's header comes first):
// a release from the chunk's own address plus a page was refused by the kernel (EINVAL), and
// every array that had grown past 64 KiB and moved on stayed resident.
TEST(ThreadCacheArrays, ABigChunkPutBackIsNoLongerResident) {
  const long page = sysconf(_SC_PAGESIZE);
  ASSERT_EQ(page, long(kOsPageSize));
  SlotArena arena;
  constexpr unsigned k = 15;  // 2^15 addresses: 256 KiB
  constexpr std::size_t bytes = sizeof(void*) << k;
  arena.Get(SlotArena::kMinLog);  // whatever the first chunk's place, this one follows it
  void** chunk = arena.Get(k);
  ASSERT_NE(chunk, nullptr);
  std::memset(chunk, 0xab, bytes);
  arena.Put(chunk, k);
  const auto start = reinterpret_cast<std::uintptr_t>(chunk);
  const std::uintptr_t first = (start + sizeof(void*) + page - 1) & ~std::uintptr_t(page - 1);
  const std::uintptr_t end = (start + bytes) & ~std::uintptr_t(page - 1);
  std::vector<unsigned char> resident((end - first) / page);
  ASSERT_EQ(mincore(reinterpret_cast<void*>(first), end - first, resident.data()), 0);
  const auto still =
      std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) != 0; });
  EXPECT_EQ(still, 0) << "of " << resident.size() << " pages";
  EXPECT_EQ(arena.Get(k), chunk) << "the chunk is reused";
  arena.Recycle();
}

// A refill hands the thread cache the addresses of fresh objects and writes none of them (a chain
// through them used to be written and read straight back, a page fault per object of a page or
// more): the pages of a class's new span stay untouched until the program writes its blocks.
TEST(ThreadCacheRefill, FreshObjectsReachTheCacheUntouched) {
  if constexpr (kHardened || !kSlotArrays) {
    GTEST_SKIP() << "hardened objects carry a mark; lists link through their objects";
  }
  std::uint32_t cl = 0;  // one no test has used: its spans are new
  for (std::uint32_t c = kNumClasses; c-- > 1 && cl == 0;) {
    if (!CentralFreeList::InUse(c) && Cached(c) && kClasses[c].size >= 2 * kOsPageSize &&
        kClasses[c].objects >= 4)
      cl = c;
  }
  if (cl == 0) GTEST_SKIP() << "every such class is in use already";
  tierpool_release_free_memory();  // whatever span the class gets, its pages are not resident
  long resident = -1;
  std::size_t pages = 0;
  std::thread([&] {
    void* blocks[4];
    for (void*& p : blocks)  // refills of 1, 2 and 3 objects: two are left in the cache
      p = tierpool_malloc(ClassSize(cl));
    const Span* span = page_map.Get(reinterpret_cast<std::uintptr_t>(blocks[0]) >> kPageShift);
    if (span != nullptr) {
      pages = span->bytes() / kOsPageSize;
      std::vector<unsigned char> in_core(pages);
      if (mincore(span->start(), span->bytes(), in_core.data()) == 0) {
        resident = std::count_if(in_core.begin(), in_core.end(),
                                 [](unsigned char r) { return (r & 1) != 0; });
      }
    }
    for (void* p : blocks)
      tierpool_free(p);
  }).join();
  EXPECT_EQ(resident, 0) << "of " << pages << " pages of class " << cl << "'s span";
}

// A thread that exits leaves its array region to the next thread: threads one after another
// map no more for their arrays than one thread does.
TEST(ThreadCacheArrays, ThreadsOneAfterAnotherReuseOneRegion) {
  auto one_thread = [] {
    std::thread([] {
      std::vector<void*> blocks;
      for (std::size_t size : {16, 48, 200, 1000})
        for (int i = 0; i < 500; ++i)
          blocks.push_back(tierpool_malloc(size));
      for (void* p : blocks)
        tierpool_free(p);
    }).join();
  };
  one_thread();
  tierpool_stats before;
  tierpool_get_stats(&before);
  for (int i = 0; i < 100; ++i)
    one_thread();
  tierpool_stats after;
  tierpool_get_stats(&after);
  EXPECT_LE(after.metadata_bytes, before.metadata_bytes + (std::size_t{256} << 10))
      << "each thread mapped arrays of its own";
}

// The central list's slow paths: batches taken apart onto their spans, and objects taken back
// from the spans' lists (a list whole, or cut) and carved. Every seventh object stays live, so
// the spans stay in use with the others back on their lists in random order. They must come out
// again once each, never one that is live, and fill the holes: as many again fit in the spans
// there are (a refill may carve at most a batch past them). Once everything is back, every span
// must be empty: an object counted twice or lost would keep a span (and its pages) for ever.
TEST(CentralSpans, ObjectsBackOnTheirSpansComeOutOnceAndEverySpanEmpties) {
  std::minstd_rand rng(11);
  tierpool_thread_flush();
  tierpool_release_free_memory();
  const tierpool::Stats before = tierpool::GetStats();
  for (std::size_t size : {16, 64, 256, 3000}) {
    const int count = size < 1000 ? 30000 : 3000;
    tierpool_thread_flush();  // the previous size's spans are gone: only this size's count
    tierpool_release_free_memory();
    std::vector<void*> all;
    for (int i = 0; i < count; ++i)
      all.push_back(tierpool::ConcurrentAlloc(size));
    const std::size_t spans = tierpool::GetStats().spans_in_use;
    std::vector<void*> kept, back;
    for (std::size_t i = 0; i < all.size(); ++i)
      (i % 7 == 0 ? kept : back).push_back(all[i]);
    std::shuffle(back.begin(), back.end(), rng);
    for (void* p : back)
      tierpool::ConcurrentFree(p, size);
    tierpool_thread_flush();         // the cache's batches go to the central list ...
    tierpool_release_free_memory();  // ... and every parked one onto its spans
    std::vector<void*> again;
    for (std::size_t i = 0; i < back.size(); ++i)
      again.push_back(tierpool::ConcurrentAlloc(size));
    EXPECT_LE(tierpool::GetStats().spans_in_use, spans + 2) << size << "-byte holes not reused";
    std::set<void*> distinct(again.begin(), again.end());
    ASSERT_EQ(distinct.size(), again.size()) << size << "-byte objects handed out twice";
    for (void* p : kept)
      ASSERT_EQ(distinct.count(p), 0u) << size << "-byte object handed out while live";
    for (void* p : again)
      tierpool::ConcurrentFree(p, size);
    for (void* p : kept)
      tierpool::ConcurrentFree(p, size);
  }
  tierpool_thread_flush();
  tierpool_release_free_memory();
  const tierpool::Stats after = tierpool::GetStats();
  EXPECT_EQ(after.spans_in_use, before.spans_in_use);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.central_cache_bytes, 0u);
}

// A parked batch is drained only when it stayed in its slot for a whole period between two
// looks: one parked just before a look (a thread that flushed its cache a moment earlier) is not
// taken apart at once, whatever the phase of the drain's clock; and of the batches parked, the
// ones that go are those nobody touched (the bottom of the slots' stack), not the last parked.
// (A look of the release thread's between two steps of the test moves its periods: a run that
// saw one is tried again; the rule broken fails every run.)
TEST(CentralSpans, OnlyBatchesParkedForAWholePeriodAreDrained) {
  constexpr std::size_t kSize = 256;
  CentralFreeList& central = G().central[SizeToClass(kSize)];
  const int batch = kClasses[SizeToClass(kSize)].batch;
  struct Taken {
    void* first = nullptr;
    void* second = nullptr;
  };
  std::string failure = "never run";
  for (int run = 0; run < 3 && !failure.empty(); ++run) {
    tierpool_release_free_memory();  // no batch parked: every look so far found none
    ASSERT_EQ(central.ParkedBatches(), 0);
    Taken a, b, c;
    for (Taken* t : {&a, &b, &c})
      ASSERT_EQ(central.RemoveRange(&t->first, &t->second, batch), batch);
    central.InsertRange(a.first, a.second, batch);
    central.InsertRange(b.first, b.second, batch);
    ASSERT_EQ(central.ParkedBatches(), 2) << "the batches were not parked";
    central.DrainIfIdle();  // parked a moment ago: both stay
    failure = central.ParkedBatches() == 2 ? "" : "the first look after the park drained";
    Taken took;
    void* parked_c = nullptr;
    if (failure.empty()) {
      ASSERT_EQ(central.RemoveRange(&took.first, &took.second, batch), batch);
      if (took.first != b.first) failure = "a take was not the last batch parked";
      central.InsertRange(c.first, c.second, batch);  // slots: a (untouched), c (new)
      parked_c = std::exchange(c, {}).first;
      central.DrainIfIdle();
      if (central.ParkedBatches() != 1) failure = "not exactly the one untouched batch drained";
    }
    if (failure.empty()) {
      Taken left;
      ASSERT_EQ(central.RemoveRange(&left.first, &left.second, batch), batch);
      if (left.first != parked_c) failure = "the batch parked since the previous look went";
      central.InsertRange(left.first, left.second, batch);
    }
    for (Taken* t : {&took, &c}) {  // back, whatever the run saw
      if (t->first != nullptr) central.InsertRange(t->first, t->second, batch);
    }
  }
  tierpool_release_free_memory();
  EXPECT_EQ(failure, "");
}

// An allocation without a thread cache (the thread's cache is gone, or no pthread key was left
// for one) takes exactly one object: carving fresh objects up to the end of a cache line is for
// a thread cache, which keeps the rest. Taken for a caller that keeps none, the rest were lost,
// counted out of the central list for good (their span never went back to the page heap).
TEST(CentralSpans, AnUncachedAllocationTakesExactlyOneObject) {
  constexpr std::size_t kSize = 80;  // not a multiple of a line: most objects end inside one
  tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(kSize));  // the allocator set up
  const std::uint32_t cl = static_cast<std::uint32_t>(SizeToClass(kSize));
  ASSERT_NE(ClassSize(cl) % kCacheLineSize, 0u);
  CentralFreeList& central = G().central[cl];
  // More than two spans' worth: whatever the list held before, most of these are carved.
  const int count = 2 * static_cast<int>(kClasses[cl].objects) + 8;
  std::vector<void*> taken;
  for (int i = 0; i < count; ++i) {
    const std::size_t out_before = central.OutObjects();
    void* object = central.RemoveOne();
    ASSERT_NE(object, nullptr);
    ASSERT_EQ(central.OutObjects(), out_before + 1) << "object " << i << " took others along";
    taken.push_back(object);
  }
  for (void* object : taken) {
    StoreNext(object, nullptr);
    central.InsertRange(object, nullptr, 1);
  }
}

// A batch of addresses given straight to the spans (a thread cache of arrays freeing what it
// built, InsertArrayToSpans) goes onto the spans' lists as if each object were pushed alone,
// from the last to the first: each span hands its objects out again in the array's order, even
// a span whose objects come in two runs apart, and the span of the array's first object is the
// first handed out from; an object of another class in the array goes home to its own class; and
// a span whose objects are all back goes to the page heap.
TEST(CentralSpans, AnArrayGivenToTheSpansComesOutInItsOrder) {
  constexpr std::size_t kSize = 512, kStraySize = 32;
  tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(kSize));  // the allocator set up
  tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(kStraySize));
  const auto cl = static_cast<std::uint32_t>(SizeToClass(kSize));
  const auto stray_cl = static_cast<std::uint32_t>(SizeToClass(kStraySize));
  CentralFreeList& central = G().central[cl];
  CentralFreeList& stray_central = G().central[stray_cl];
  const int per_span = static_cast<int>(kClasses[cl].objects);
  tierpool_thread_flush();
  tierpool_release_free_memory();  // no span of the class left in its list: both carved below
  const std::size_t spans_before = tierpool::GetStats().spans_in_use;
  const auto span_of = [](void* object) {
    return page_map.Get(reinterpret_cast<std::uintptr_t>(object) >> kPageShift);
  };
  // Two spans, taken one object at a time: A whole, then B.
  std::vector<void*> a, b;
  for (int i = 0; i < 2 * per_span; ++i) {
    void* object = central.RemoveOne();
    ASSERT_NE(object, nullptr);
    (i < per_span ? a : b).push_back(object);
  }
  ASSERT_EQ(span_of(a.front()), span_of(a.back()));
  ASSERT_EQ(span_of(b.front()), span_of(b.back()));
  ASSERT_NE(span_of(a.front()), span_of(b.front()));
  // Given back: A's second half, B's objects with a stray among them, A's first half but its
  // first object (A stays out of the page heap, its list to be looked at). B empties.
  const int half = per_span / 2;
  std::vector<void*> array(a.begin() + half, a.end());
  array.insert(array.end(), b.begin(), b.begin() + half);
  void* stray = stray_central.RemoveOne();
  ASSERT_NE(stray, nullptr);
  array.push_back(stray);
  array.insert(array.end(), b.begin() + half, b.end());
  array.insert(array.end(), a.begin() + 1, a.begin() + half);
  ASSERT_LE(array.size(), static_cast<std::size_t>(kMaxBatch));
  const std::size_t stray_out = stray_central.OutObjects();
  const std::size_t out_before = central.OutObjects();
  central.InsertArrayToSpans(array.data(), static_cast<int>(array.size()));
  EXPECT_EQ(central.OutObjects(), out_before - (array.size() - 1));
  EXPECT_EQ(stray_central.OutObjects(), stray_out - 1) << "the stray did not go home";
  EXPECT_EQ(tierpool::GetStats().spans_in_use, spans_before + 1) << "B did not go, or A did";
  // A's list: its second half, then its first half, as they lie in the array.
  std::vector<void*> expected(a.begin() + half, a.end());
  expected.insert(expected.end(), a.begin() + 1, a.begin() + half);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    void* again = central.RemoveOne();
    ASSERT_EQ(again, expected[i]) << "object " << i << " of A's list";
  }
  expected.push_back(a.front());
  for (void* object : expected) {
    StoreNext(object, nullptr);
    central.InsertRange(object, nullptr, 1);
  }
  tierpool_release_free_memory();
  EXPECT_EQ(tierpool::GetStats().spans_in_use, spans_before);
}

// Allocates twice `budget` bytes of `size`-byte objects, then frees them all, in order.
void ChurnTwiceTheBudget(std::size_t size, std::int64_t budget) {
  std::vector<void*> live(static_cast<std::size_t>(2 * budget) / size);
  for (void*& p : live)
    p = tierpool::ConcurrentAlloc(size);
  for (void* p : live)
    tierpool::ConcurrentFree(p, size);
}

// The byte budget bounds what a cache may hold (the sum of its lists' limits), not what it holds
// at each free, so the fast paths do not count bytes. A thread that churns one class up to the
// budget and then moves to another must neither hold more than its budget at any time nor keep
// the first class's share: the second class's list takes the capacity over (Steal).
TEST(ThreadCacheBudget, TheCapacityMovesToTheClassInUseAndNeverExceedsTheBudget) {
  std::thread worker([] {
    // The allocator set up and this thread's cache counted, whichever test ran before.
    tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(8), 8);
    const std::int64_t budget = ThreadBudget();
    ASSERT_GT(budget, 0);
    const auto churn = [&](std::size_t size) {
      for (int round = 0; round < 4; ++round) {
        ChurnTwiceTheBudget(size, budget);
        EXPECT_LE(static_cast<std::int64_t>(tls_cache->CachedBytes()), ThreadBudget())
            << size << "-byte objects, round " << round;
      }
    };
    const std::size_t small = 64;
    const std::size_t big = 256;
    churn(small);
    const std::size_t small_cl = SizeToClass(small);
    const std::size_t big_cl = SizeToClass(big);
    EXPECT_GE(static_cast<std::int64_t>(tls_cache->length(small_cl) * small), budget / 2);
    churn(big);
    EXPECT_GE(static_cast<std::int64_t>(tls_cache->length(big_cl) * big), budget / 2);
    EXPECT_LE(static_cast<std::int64_t>(tls_cache->length(small_cl) * small), budget / 2);
  });
  worker.join();
}

// A list's array is memory too: an address a free object, 8 bytes beside each 16-byte one. The
// budget counts both, so a thread that churns twice its budget of 16-byte objects keeps at most
// budget / 24 of them, not budget / 16 (half as much again in addresses, outside the budget).
TEST(ThreadCacheBudget, TheArraysAddressesCountAgainstTheBudget) {
  if constexpr (!kSlotArrays) GTEST_SKIP() << "lists through the objects: no array to count";
  std::thread worker([] {
    constexpr std::size_t kSize = 16;
    tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(kSize), kSize);
    for (int round = 0; round < 3; ++round)
      ChurnTwiceTheBudget(kSize, ThreadBudget());
    const std::int64_t held = tls_cache->length(SizeToClass(kSize));
    EXPECT_LE(held * std::int64_t{kSize + sizeof(void*)}, ThreadBudget());
    EXPECT_GE(held * std::int64_t{kSize + sizeof(void*)}, ThreadBudget() / 4)
        << "the list should have taken a good part of the budget";
  });
  worker.join();
}

// A list of page-sized objects holds kMaxListBytes at most (or one batch where that is more),
// whatever the budget: a thread that allocated and freed a thousand 64 KiB buffers, or a thousand
// of 8 KiB, keeps a few of them for its next ones, and the rest goes back to the central cache,
// whose spans can then go back to the page heap and the OS.
TEST(ThreadCacheBudget, AListOfPageSizedObjectsKeepsAFewOfThemOnly) {
  std::thread worker([] {
    for (const std::size_t size : {kMaxCachedSize, std::size_t{8} << 10}) {
      const std::uint32_t cl = SizeToClass(size);
      std::vector<void*> live(1000);
      for (int round = 0; round < 2; ++round) {
        for (void*& p : live) {
          p = tierpool::ConcurrentAlloc(size);
          ASSERT_NE(p, nullptr);
        }
        for (void* p : live)
          tierpool::ConcurrentFree(p, size);
        const std::size_t held = std::size_t{tls_cache->length(cl)} * kClasses[cl].size;
        const std::size_t batch_bytes = std::size_t{kClasses[cl].batch} * kClasses[cl].size;
        EXPECT_LE(held, std::max(kMaxListBytes, batch_bytes)) << size << "-byte objects";
        EXPECT_GT(held, 0u) << size << "-byte objects: the list keeps some for the next ones";
      }
    }
  });
  worker.join();
}

// Above kMaxCachedSize a thread keeps nothing: every block freed, with its size or without,
// goes back to its class's central list, and the next one comes from there. At kMaxCachedSize
// itself, the list keeps what is freed.
TEST(ThreadCacheBudget, ObjectsAboveTheCachedSizeSkipTheThreadCache) {
  std::thread worker([] {
    for (const std::size_t size : {kMaxCachedSize + 1, std::size_t{64} << 10, kMaxSmallSize}) {
      const std::uint32_t cl = SizeToClass(size);
      ASSERT_FALSE(Cached(cl)) << size;
      std::vector<void*> live(8);
      for (int round = 0; round < 2; ++round) {
        for (void*& p : live) {
          p = tierpool::ConcurrentAlloc(size);
          ASSERT_NE(p, nullptr);
        }
        for (std::size_t i = 0; i < live.size(); ++i) {
          if (i % 2 == 0) {
            tierpool::ConcurrentFree(live[i], size);
          } else {
            tierpool::ConcurrentFree(live[i]);
          }
        }
        EXPECT_EQ(tls_cache->length(cl), 0u) << size << "-byte objects";
        EXPECT_EQ(tls_cache->max_length(cl), 0u) << size << "-byte objects";
      }
    }
    const std::uint32_t edge = SizeToClass(kMaxCachedSize);
    ASSERT_TRUE(Cached(edge));
    void* p = tierpool::ConcurrentAlloc(kMaxCachedSize);
    const std::uint32_t before = tls_cache->length(edge);
    tierpool::ConcurrentFree(p, kMaxCachedSize);
    EXPECT_EQ(tls_cache->length(edge), before + 1);
  });
  worker.join();
}

// A thread that freed thousands of objects of one size keeps them in its list (its limit grew
// with them). When it then grows in another size, the refills that make the resident set grow
// start a look at its lists (ReleaseIdleLists): the idle one keeps a batch and sends the rest to
// its spans, which empty and go to the page heap, and the new size's spans are cut from them
// instead of from new pages (what sqlite3 does in the sqlite-index trace).
TEST(ThreadCacheIdle, AnIdleListGoesBackWhenTheResidentSetGrows) {
  std::thread worker([] {
    constexpr std::size_t kOld = 1152, kNew = 4608;
    const std::uint32_t old_cl = SizeToClass(kOld);
    const auto backed = [] {
      tierpool_stats stats;
      tierpool_get_stats(&stats);
      return static_cast<std::int64_t>(stats.mapped_bytes - stats.released_bytes);
    };
    tierpool_release_free_memory();  // no free backed pages: every new span is growth
    std::vector<void*> old_objects(4000);
    for (void*& p : old_objects) {
      p = tierpool::ConcurrentAlloc(kOld);
      ASSERT_NE(p, nullptr);
    }
    for (void* p : old_objects)
      tierpool::ConcurrentFree(p, kOld);
    ASSERT_GT(std::size_t{tls_cache->length(old_cl)} * kOld, std::size_t{3} << 20)
        << "the list keeps what was freed";
    const std::int64_t before = backed();
    std::vector<void*> new_objects(1000);  // 4.4 MiB
    for (void*& p : new_objects) {
      p = tierpool::ConcurrentAlloc(kNew);
      ASSERT_NE(p, nullptr);
    }
    const std::int64_t grown = backed() - before;
    EXPECT_LE(tls_cache->length(old_cl), kClasses[old_cl].batch) << "the idle list keeps a batch";
    EXPECT_LT(grown, static_cast<std::int64_t>(new_objects.size() * kNew / 2))
        << "the new objects took the pages of the old ones";
    for (void* p : new_objects)
      tierpool::ConcurrentFree(p, kNew);
  });
  worker.join();
}

#if !TIERPOOL_HARDENED
// The same look when the idle list holds blocks of another class, freed with a wrong size
// (undefined behaviour the hardened build aborts on; a release build must still lose nothing): the
// list goes past the transfer slots to the spans (InsertToSpans; a cache of arrays,
// InsertArrayToSpans), each block to its own span, and
// once everything is freed and given back every count is where it was.
TEST(ThreadCacheIdle, WrongSizedBlocksInAnIdleListGoHomeCountedOnce) {
  tierpool_thread_flush();  // the counts below are of every cache: this thread's is empty
  std::thread worker([] {
    constexpr std::size_t kListed = 1024, kReal = 1152, kNew = 4608;
    const std::uint32_t listed_cl = SizeToClass(kListed);
    tierpool_thread_flush();
    tierpool_release_free_memory();
    const tierpool::Stats before = tierpool::GetStats();
    std::vector<void*> listed(4000), real(4000), fresh(1000);
    for (void*& p : listed) {  // the 1024-byte list's limit grows with these refills
      p = tierpool::ConcurrentAlloc(kListed);
      ASSERT_NE(p, nullptr);
    }
    for (void*& p : real) {  // growth: the looks clear the 1024-byte class's refill bit
      p = tierpool::ConcurrentAlloc(kReal);
      ASSERT_NE(p, nullptr);
    }
    for (void* p : real)
      tierpool::ConcurrentFree(p, kListed);  // wrong: 1152-byte blocks into the 1024-byte list
    ASSERT_GT(tls_cache->length(listed_cl), 2u * kClasses[listed_cl].batch)
        << "the list keeps the wrongly freed blocks";
    for (void*& p : fresh) {
      p = tierpool::ConcurrentAlloc(kNew);
      ASSERT_NE(p, nullptr);
    }
    EXPECT_LE(tls_cache->length(listed_cl), kClasses[listed_cl].batch)
        << "the idle list keeps a batch";
    for (void* p : fresh)
      tierpool::ConcurrentFree(p, kNew);
    for (void* p : listed)
      tierpool::ConcurrentFree(p, kListed);
    tierpool_thread_flush();
    tierpool_release_free_memory();
    const tierpool::Stats after = tierpool::GetStats();
    EXPECT_EQ(after.thread_cache_bytes, 0u);
    EXPECT_EQ(after.central_cache_bytes, 0u);
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
    EXPECT_EQ(after.spans_in_use, before.spans_in_use);
  });
  worker.join();
}
#endif

// A thread that frees what it built, in the order it built it, sends what its list cannot hold to
// the objects' spans, not to the transfer slots: nobody waits for those objects, and parked they
// pinned their spans while the program's next phase took new pages (`teardown`'s peak). On their
// spans, the spans empty one after another and leave the central list.
TEST(ThreadCacheRelease, AThreadFreeingWhatItBuiltInOrderParksNothing) {
  if constexpr (!kSlotArrays) GTEST_SKIP() << "lists through the objects: every batch is parked";
  constexpr std::size_t kSize = 1024, kCount = 24000;  // 23 MiB: more than a thread's budget
  const std::uint32_t cl = SizeToClass(kSize);
  std::thread worker([cl] {
    tierpool_release_free_memory();  // nothing parked
    ASSERT_EQ(G().central[cl].ParkedBatches(), 0);
    std::vector<void*> built(kCount);
    for (void*& p : built) {
      p = tierpool::ConcurrentAlloc(kSize);
      ASSERT_NE(p, nullptr);
    }
    const std::size_t central_before = tierpool::GetStats().central_cache_bytes;
    for (void* p : built)
      tierpool::ConcurrentFree(p, kSize);
    EXPECT_EQ(G().central[cl].ParkedBatches(), 0) << "batches of neighbours were parked";
    const std::size_t central_after = tierpool::GetStats().central_cache_bytes;
    EXPECT_LT(central_after, central_before + kCount * kSize / 8)
        << "the spans behind the freed objects stayed in the central list";
  });
  worker.join();
  tierpool_release_free_memory();
}

// ... but a thread that frees, in order, what another thread allocated (a consumer; it allocates
// none of that class itself) parks its batches: its producer's next refill takes each whole.
TEST(ThreadCacheRelease, AConsumerFreeingInOrderParksItsBatches) {
  constexpr std::size_t kSize = 1024, kCount = 24000;
  const std::uint32_t cl = SizeToClass(kSize);
  std::vector<void*> built(kCount);
  std::atomic<bool> consumed{false};
  std::atomic<bool> produced{false};
  std::thread producer([&] {  // alive until the consumer is done: its cache stays its own
    for (void*& p : built)
      p = tierpool::ConcurrentAlloc(kSize);
    produced = true;
    while (!consumed)
      std::this_thread::yield();
  });
  while (!produced)
    std::this_thread::yield();
  if (std::count(built.begin(), built.end(), nullptr) != 0) {
    consumed = true;
    producer.join();
    FAIL() << "the producer's allocations failed";
  }
  int parked = -1;
  std::thread consumer([&] {
    tierpool_release_free_memory();
    for (void* p : built)
      tierpool::ConcurrentFree(p, kSize);
    parked = G().central[cl].ParkedBatches();
  });
  consumer.join();
  consumed = true;
  producer.join();
  EXPECT_GT(parked, 0) << "a consumer's batches went to their spans";
  tierpool_release_free_memory();
}

// The share shrinks when threads come: a thread that cached its whole share gives back what is
// above its new one at its next slow path (AdoptBudget), even one that raises no limit, while
// the new threads are still alive.
TEST(ThreadCacheBudget, ACacheGivesBackWhatIsAboveItsShareWhenThreadsCome) {
  std::thread worker([] {
    const std::size_t size = 64;
    tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(size), size);  // as above
    std::vector<void*> live(static_cast<std::size_t>(2 * ThreadBudget()) / size);
    for (int round = 0; round < 3; ++round) {
      for (void*& p : live)
        p = tierpool::ConcurrentAlloc(size);
      for (void* p : live)
        tierpool::ConcurrentFree(p, size);
    }
    const std::int64_t before = ThreadBudget();
    ASSERT_GT(static_cast<std::int64_t>(tls_cache->CachedBytes()), before / 2);

    constexpr int kNewThreads = 31;
    std::atomic<int> started{0};
    std::atomic<bool> done{false};
    // Enough objects from another thread to fill this thread's list, and one more.
    const auto room = static_cast<std::size_t>(tls_cache->room(SizeToClass(size)));
    std::vector<void*> foreign(room + 1);
    std::vector<std::thread> idle;
    for (int i = 0; i < kNewThreads; ++i) {
      idle.emplace_back([&, i] {
        tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(size), size);  // registers a cache
        if (i == 0) {
          for (void*& p : foreign)
            p = tierpool::ConcurrentAlloc(size);
        }
        started.fetch_add(1);
        while (!done.load())
          std::this_thread::yield();
      });
    }
    while (started.load() < kNewThreads)
      std::this_thread::yield();
    const std::int64_t after = ThreadBudget();
    ASSERT_LT(after, before);
    // A slow path of this thread that raises no limit: a free into its full list (MakeRoom).
    for (void* p : foreign)
      tierpool::ConcurrentFree(p, size);
    EXPECT_LE(static_cast<std::int64_t>(tls_cache->CachedBytes()), after);
    done.store(true);
    for (std::thread& t : idle)
      t.join();
  });
  worker.join();
}

// --- Caches kept for the next thread (kMaxKeptCaches) -------------------------------------------

// What this thread and the kept caches hold, after this thread gave its own back.
std::size_t CachedAfterFlush() {
  tierpool_thread_flush();
  return tierpool::GetStats().thread_cache_bytes;
}

// A thread that exits leaves its cache, objects and all, to the next thread: the bytes stay
// counted as a thread cache's (not the central lists'), no live thread is counted for it, and
// the next thread is handed the same objects, last freed first, without a refill.
TEST(ThreadCacheKept, AThreadThatExitsLeavesItsCacheToTheNext) {
  tierpool_release_free_memory();  // no kept cache from an earlier test
  const std::size_t size = 64;
  const std::size_t cl = SizeToClass(size);
  const tierpool::Stats before = tierpool::GetStats();
  const std::size_t cached_before = CachedAfterFlush();
  std::vector<void*> freed;
  ThreadCache* left = nullptr;
  std::thread([&] {
    for (int i = 0; i < 32; ++i)
      freed.push_back(tierpool::ConcurrentAlloc(size));
    for (void* p : freed)
      tierpool::ConcurrentFree(p, size);
    left = tls_cache;
    ASSERT_GE(left->length(cl), 31u);
  }).join();
  const std::size_t kept = CachedAfterFlush() - cached_before;
  EXPECT_GE(kept, 31 * size) << "the exited thread's objects left the thread caches";
  EXPECT_EQ(G().kept_bytes.load(), kept) << "the kept caches' count of their bytes";
  EXPECT_EQ(tierpool::GetStats().thread_caches, before.thread_caches);
  std::thread([&] {
    void* first = tierpool::ConcurrentAlloc(size);
    EXPECT_EQ(tls_cache, left) << "the next thread made a cache of its own";
    EXPECT_EQ(first, freed.back()) << "not the object the exited thread freed last";
    std::set<void*> known(freed.begin(), freed.end());
    std::vector<void*> again{first};
    for (int i = 1; i < 31; ++i) {
      again.push_back(tierpool::ConcurrentAlloc(size));
      EXPECT_TRUE(known.count(again.back()) == 1)
          << "object " << i << " did not come from the cache";
    }
    for (void* p : again)
      tierpool::ConcurrentFree(p, size);
  }).join();
  // tierpool_release_free_memory gives a kept cache back at once.
  tierpool_release_free_memory();
  EXPECT_EQ(CachedAfterFlush(), cached_before);
}

// A kept cache is a thread cache still: the kept caches and the live ones' shares stay within
// kOverallThreadCacheBudget together. While the live threads' shares fill the budget, an exiting
// thread's cache is taken apart into the central lists, however little it holds; once they are
// gone, the same exit leaves it whole.
TEST(ThreadCacheKept, KeptCachesAndLiveOnesStayWithinTheOverallBudget) {
  tierpool_release_free_memory();
  const std::size_t size = 64;
  const auto exit_holding_a_little = [&] {
    std::thread([&] {
      std::vector<void*> blocks(32);
      for (void*& p : blocks)
        p = tierpool::ConcurrentAlloc(size);
      for (void* p : blocks)
        tierpool::ConcurrentFree(p, size);
    }).join();
  };
  tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(size), size);  // this thread has a cache
  // Live caches until their shares fill the budget (each share is the budget over the count,
  // at most kMaxThreadCacheBudget).
  const int live = int(kOverallThreadCacheBudget / kMaxThreadCacheBudget);
  std::atomic<int> started{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 1; t < live; ++t) {
    threads.emplace_back([&] {
      tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(size), size);
      started.fetch_add(1);
      while (!done)
        std::this_thread::yield();
    });
  }
  while (started.load() < live - 1)
    std::this_thread::yield();
  const std::size_t cached_before = CachedAfterFlush();
  exit_holding_a_little();
  EXPECT_EQ(G().kept_caches.load(), 0) << "kept while the live caches' shares fill the budget";
  EXPECT_EQ(CachedAfterFlush(), cached_before);
  done = true;
  for (std::thread& t : threads)
    t.join();
  exit_holding_a_little();
  EXPECT_GE(G().kept_bytes.load(), 31 * size) << "not kept with the budget free";
  tierpool_release_free_memory();
  EXPECT_EQ(G().kept_caches.load(), 0);
}

// Nobody comes: the kept caches go back to the central lists at the second look of the clock
// that finds them waiting (looks come at least kDrainLookMs = 40 ms apart; a flush asks for one).
// And at most kMaxKeptCaches wait at any time, however many threads exit.
TEST(ThreadCacheKept, UnclaimedCachesGoBackAndFewWait) {
  tierpool_release_free_memory();
  const std::size_t cached_before = CachedAfterFlush();
  std::atomic<int> started{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kMaxKeptCaches; ++t) {
    threads.emplace_back([&] {
      tierpool::ConcurrentFree(tierpool::ConcurrentAlloc(256), 256);
      started.fetch_add(1);
      while (!done)  // all alive at once: each makes a cache of its own
        std::this_thread::yield();
    });
  }
  while (started.load() < 2 * kMaxKeptCaches)
    std::this_thread::yield();
  done = true;
  for (std::thread& t : threads)
    t.join();
  EXPECT_LE(G().kept_caches.load(), kMaxKeptCaches);
  EXPECT_GT(CachedAfterFlush(), cached_before);
  for (int look = 0; look < 50 && CachedAfterFlush() != cached_before; ++look)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(CachedAfterFlush(), cached_before) << "kept caches nobody took stayed";
  EXPECT_EQ(G().kept_caches.load(), 0);
}

// A thread that takes over a cache frees an object another thread allocated before it allocates
// any: that object goes to the central cache (as a fresh cache's first free of a class does), not
// onto the list, where it would be the first this thread allocates and writes, next to the
// objects of the thread that allocated it (Hoard's passive false sharing).
TEST(ThreadCacheKept, TheFirstFreeOfAForeignObjectAfterATakeOverIsNotKept) {
  tierpool_release_free_memory();
  const std::size_t size = 96;
  std::thread([&] {  // leaves a cache holding objects of the class
    std::vector<void*> blocks(8);
    for (void*& p : blocks)
      p = tierpool::ConcurrentAlloc(size);
    for (void* p : blocks)
      tierpool::ConcurrentFree(p, size);
  })
      .join();
  void* foreign = tierpool::ConcurrentAlloc(size);
  std::thread([&] {
    tierpool::ConcurrentFree(foreign, size);
    void* mine = tierpool::ConcurrentAlloc(size);
    EXPECT_NE(mine, foreign) << "the freed foreign object came straight back";
    tierpool::ConcurrentFree(mine, size);
  }).join();
}

// --- A fork while memory moves between tiers ----------------------------------------------------

// Set on the thread whose next move of this kind is the moment to fork; `reached` tells the
// forking thread it is there. The hook then holds that thread there for 200 ms: a fork that does
// not wait for it forks with the memory between the tiers.
thread_local bool fork_armed = false;
std::atomic<Move> fork_at{Move::kSpanToCentral};
std::atomic<bool> fork_reached{false};

void HoldBetweenTiers(Move move) {
  if (!fork_armed || move != fork_at.load()) return;
  fork_armed = false;
  fork_reached.store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

// Runs `setup`, then `move` on a thread of its own; forks when that thread reaches BetweenTiers
// for a move of kind `at`, and runs `check` in the child: true if it held there. A move may find
// its work done by the release thread first (a kept cache given back on the clock): then all is
// tried again, up to five times.
bool ChildSeesWhatAForkMidMoveLeaves(Move at, void (*setup)(), void (*move)(), bool (*check)()) {
  SetBetweenTiersHook(HoldBetweenTiers);
  bool reached = false;
  bool answer = false;
  for (int attempt = 0; attempt < 5 && !reached; ++attempt) {
    setup();
    fork_reached.store(false);
    fork_at.store(at);
    std::atomic<bool> done{false};
    std::thread mover([move, &done] {
      fork_armed = true;
      move();
      fork_armed = false;
      done.store(true);
    });
    while (!fork_reached.load() && !done.load())
      std::this_thread::yield();
    reached = fork_reached.load();
    if (reached) answer = core_test::ChildAnswers(check);
    mover.join();
  }
  SetBetweenTiersHook(nullptr);
  EXPECT_TRUE(reached) << "the move never reached BetweenTiers";
  return answer;
}

// A span a central list emptied goes to the page heap after the list's lock is dropped. A fork
// just then used to leave it in the child in neither tier, counted in use for good; the fork now
// waits for it (ForkPrepare). The child finds the span given back: its pages have no class.
std::atomic<void*> moved_block{nullptr};

TEST(ThreadCacheFork, AForkWaitsForSpansOnTheirWayToThePageHeap) {
  tierpool_release_free_memory();
  EXPECT_TRUE(ChildSeesWhatAForkMidMoveLeaves(
      Move::kSpansToPageHeap, [] {},
      [] {
        // 3 000-byte blocks, a span's worth and more, all freed: drained from this thread's cache
        // through the central list, whose spans empty.
        std::vector<void*> blocks(64);
        for (void*& p : blocks)
          p = tierpool_malloc(3000);
        moved_block.store(blocks[0]);
        // (Not in order: a batch of neighbours would go to its spans at once, and the first span
        // emptied, not the release's, would be the one the fork waits for.)
        core_test::FreeEveryOtherFirst(blocks, tierpool_free);
        tierpool_release_free_memory();
      },
      [] { return page_map.ClassOf(moved_block.load()) == 0; }));
}

// A central list with no objects left asks the page heap for a span with its lock let go (the
// page heap may map memory). A fork just then used to leave the span in the child in neither
// tier; the fork now lets the lists' locks go until no list is growing. The class here is one no
// test has used, so the list's only objects are the new span's.
std::uint32_t fresh_class = 0;
void* fresh_block = nullptr;

TEST(ThreadCacheFork, AForkWaitsForASpanOnItsWayToACentralList) {
  for (std::uint32_t cl = kNumClasses; cl-- > 1 && fresh_class == 0;) {
    if (!CentralFreeList::InUse(cl)) fresh_class = cl;
  }
  if (fresh_class == 0) GTEST_SKIP() << "every class is in use already";
  EXPECT_TRUE(ChildSeesWhatAForkMidMoveLeaves(
      Move::kSpanToCentral, [] {},
      // The block stays allocated: freed, its span could go back to the page heap before the
      // fork, which waits only for the span to reach its list.
      [] { fresh_block = tierpool_malloc(ClassSize(fresh_class)); },
      [] {
        const CentralFreeList& list = G().central[fresh_class];
        return list.FreeObjects() + list.OutObjects() >= kClasses[fresh_class].objects;
      }));
  tierpool_free(fresh_block);
}

// A fork from within a move of the forking thread's own (a signal handler that interrupted it
// there and forks) must not wait for that move, which cannot go on until the fork returns: it
// waited for ever. The hook plays the handler; an alarm ends the process if the fork hangs.
std::atomic<bool> forked_from_within{false};

void ForkFromWithin(Move move) {
  if (!fork_armed || move != Move::kSpansToPageHeap) return;
  fork_armed = false;
  forked_from_within.store(core_test::ChildAnswers([] { return true; }));
}

TEST(ThreadCacheFork, AForkFromWithinItsOwnThreadsMoveDoesNotWaitForIt) {
  tierpool_release_free_memory();
  SetBetweenTiersHook(ForkFromWithin);
  alarm(120);
  std::thread([] {
    fork_armed = true;
    std::vector<void*> blocks(64);
    for (void*& p : blocks)
      p = tierpool_malloc(3000);
    for (void* p : blocks)
      tierpool_free(p);
    tierpool_release_free_memory();
    fork_armed = false;
  }).join();
  alarm(0);
  SetBetweenTiersHook(nullptr);
  EXPECT_TRUE(forked_from_within.load());
}

// A cache being taken apart (a thread's at its exit, or one kept for the next thread and given
// back) is in no list of the registry's while its objects go back to the central lists. A fork
// just then used to leave them in the child counted in use; the fork now waits for it.
std::size_t in_use_before_cache = 0;

TEST(ThreadCacheFork, AForkWaitsForACacheBeingTakenApart) {
  EXPECT_TRUE(ChildSeesWhatAForkMidMoveLeaves(
      Move::kCacheApart,
      [] {
        tierpool_release_free_memory();
        in_use_before_cache = tierpool::GetStats().bytes_in_use;
        std::thread([] {
          std::vector<void*> blocks(1000);
          for (void*& p : blocks)
            p = tierpool_malloc(1000);
          for (void* p : blocks)
            tierpool_free(p);
        }).join();
        EXPECT_GE(tierpool::GetStats().thread_cache_bytes, std::size_t{512} * 1024)
            << "the exited thread's cache, kept for the next";
      },
      [] { tierpool_release_free_memory(); },
      [] { return tierpool::GetStats().bytes_in_use < in_use_before_cache + 256 * 1024; }));
  tierpool_release_free_memory();
}

}  // namespace
