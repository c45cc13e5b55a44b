// What real programs do with big blocks and with memory they are done with, each checked the way
// a user would see it: how often a growing buffer moves, what a big calloc makes resident, when
// freed memory leaves the resident set, what errno says after a call that worked, and whether
// freed address space can serve a big block under an address-space limit.
#include <errno.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "allocator.h"
#include "config.h"
#include "core_test_util.h"
#include "tierpool/tierpool.h"

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

bool ToolsWatchMemory() {
  return core_test::UnderValgrind() || core_test::UnderSanitizer();
}

// A buffer grown by realloc in 64 KiB steps, each step writing its new bytes (Python's bytearray,
// a growing std::string): a realloc that cannot grow in place copies everything so far, so a
// buffer that moved at every step costs time quadratic in its size.
TEST(CoreBigBlock, AGrowingBufferMovesLogarithmicallyOften) {
  const std::size_t final_size = core_test::Scaled(256, 64, 32) * kMiB;
  constexpr std::size_t kStep = 64 * kKiB;
  unsigned char* buffer = nullptr;
  int moves = 0;
  for (std::size_t size = kStep; size <= final_size; size += kStep) {
    auto* grown = static_cast<unsigned char*>(tierpool_realloc(buffer, size));
    ASSERT_NE(grown, nullptr);
    if (buffer != nullptr && grown != buffer) ++moves;
    buffer = grown;
    // The first byte of every 4 KiB page of the new step: the old ones must have come along.
    for (std::size_t at = size - kStep; at < size; at += 4096)
      buffer[at] = static_cast<unsigned char>(at >> 12);
  }
  for (std::size_t at = 0; at < final_size; at += 4096)
    ASSERT_EQ(buffer[at], static_cast<unsigned char>(at >> 12)) << "offset " << at;
  // Three moves through the classes above 64 KiB, then about one per doubling (log2 of
  // 256 MiB / 320 KiB is under 10); every step was a move before blocks grew in place.
  EXPECT_LE(moves, 20) << "moves for " << final_size / kStep << " steps";
  tierpool_free(buffer);
}

// SPEC: a realloc that cannot be served returns NULL with ENOMEM and leaves the block as it was.
// For a large block the refusal comes from the OS (32 TiB: within what the allocator would try),
// after the in-place growth and the move with room have both been tried.
TEST(CoreBigBlock, AGrowthTheOsRefusesLeavesTheLargeBlockAlone) {
  auto* p = static_cast<unsigned char*>(tierpool_malloc(3 * kMiB));
  ASSERT_NE(p, nullptr);
  for (std::size_t at = 0; at < 3 * kMiB; at += 4096)
    p[at] = static_cast<unsigned char>(at >> 12);
  errno = 0;
  EXPECT_EQ(tierpool_realloc(p, std::size_t{1} << 45), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(tierpool_usable_size(p), 3 * kMiB);
  for (std::size_t at = 0; at < 3 * kMiB; at += 4096)
    ASSERT_EQ(p[at], static_cast<unsigned char>(at >> 12)) << "offset " << at;
  // And the block still grows and moves as usual afterwards.
  auto* q = static_cast<unsigned char*>(tierpool_realloc(p, 40 * kMiB));
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q[2 * kMiB], static_cast<unsigned char>((2 * kMiB) >> 12));
  tierpool_free(q);
}

// A string appended to a few bytes at a time, each append a realloc (naive C code does it): past
// 256 KiB the block is a span of whole pages, and every realloc that stays within them must cost a
// compare, not a trip to the page heap. The test holds the page heap's lock meanwhile: a realloc
// that took it would wait, and the appends would not finish.
TEST(CoreBigBlock, AReallocWithinALargeBlocksPagesLeavesThePageHeapAlone) {
  using tierpool::internal::G;
  using tierpool::internal::kPageSize;
  constexpr std::size_t kStart = kMiB + 1;  // a span of 1 MiB and one page more
  auto* first = static_cast<char*>(tierpool_malloc(kStart));
  ASSERT_NE(first, nullptr);
  first[0] = 'a';
  std::atomic<bool> done{false};
  char* last = first;
  G().page_heap.lock().Lock();
  std::thread appender([&] {
    for (std::size_t size = kStart + 7; size <= kMiB + kPageSize; size += 7) {
      last = static_cast<char*>(tierpool_realloc(last, size));
      last[size - 1] = 'z';
    }
    done.store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool finished_under_the_lock = done.load();
  G().page_heap.lock().Unlock();
  appender.join();
  EXPECT_TRUE(finished_under_the_lock) << "a realloc within the block's pages took the lock";
  EXPECT_EQ(last, first);
  EXPECT_EQ(last[0], 'a');
  // One byte past the pages: the block grows in place or moves, through the page heap.
  last = static_cast<char*>(tierpool_realloc(last, kMiB + kPageSize + 1));
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last[0], 'a');
  tierpool_free(last);
}

// Shrinking a large block keeps it where it is and gives its tail back to the page heap.
TEST(CoreBigBlock, ShrinkingALargeBlockGivesItsTailBack) {
  const std::size_t big = core_test::Scaled(256, 64, 64) * kMiB;
  auto* p = static_cast<char*>(tierpool_malloc(big));
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, big);
  const tierpool::Stats before = tierpool::GetStats();
  void* q = tierpool_realloc(p, big / 2 + kMiB);
  ASSERT_EQ(q, p) << "a shrink in place";
  const tierpool::Stats after = tierpool::GetStats();
  EXPECT_EQ(before.large_bytes_in_use - after.large_bytes_in_use, big / 2 - kMiB);
  EXPECT_EQ(p[0], 7);
  EXPECT_EQ(p[big / 2 + kMiB - 1], 7);
  // And the tail's pages leave the resident set by themselves, after the release delay: no call
  // asks for it, and the thread only takes fast paths meanwhile.
  if (!ToolsWatchMemory()) {
    const std::size_t bound = before.mapped_bytes - big / 2 + 64 * kMiB;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (core_test::ResidentBytes() >= bound && std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 1000; ++i)
        tierpool_free(tierpool_malloc(48));
    }
    EXPECT_LT(core_test::ResidentBytes(), bound);
  }
  tierpool_free(q);
}

// calloc of a big block clears nothing the OS has already cleared: a sparse table costs only the
// pages it writes. Memory that was written and freed is cleared, though.
TEST(CoreBigBlock, CallocOfABigBlockMakesOnlyTouchedPagesResident) {
  const std::size_t table = core_test::Scaled(1024, 128, 64) * kMiB;
  tierpool_release_free_memory();
  const std::size_t rss_before = core_test::ResidentBytes();
  auto* p = static_cast<unsigned char*>(tierpool_calloc(table / 4096, 4096));
  ASSERT_NE(p, nullptr);
  for (std::size_t at = 0; at < table; at += 4 * kMiB) {  // a sparse table: a few entries set
    ASSERT_EQ(p[at], 0);
    p[at] = 1;
  }
  const std::size_t rss_after = core_test::ResidentBytes();
  if (!ToolsWatchMemory()) {
    EXPECT_LT(rss_after, rss_before + 16 * kMiB) << "calloc made the whole table resident";
  }
  // Dirty the memory, free it, and calloc it again: now the allocator must clear it.
  std::memset(p, 0xab, table);
  tierpool_free(p);
  auto* again = static_cast<unsigned char*>(tierpool_calloc(1, table));
  ASSERT_NE(again, nullptr);
  for (std::size_t at = 0; at < table; at += 4093)
    ASSERT_EQ(again[at], 0) << "offset " << at;
  tierpool_free(again);
}

// Freed memory goes back to the OS within a fraction of a second even when the program stops
// calling the allocator (or calls only its fast paths): the release thread keeps the clock.
TEST(CoreBigBlock, FreedMemoryGoesBackWithoutFurtherCalls) {
  const std::size_t total = core_test::Scaled(512, 128, 64) * kMiB;
  for (const std::size_t block : {1 * kMiB, 64 * kKiB}) {
    tierpool_release_free_memory();
    const std::size_t rss_before = core_test::ResidentBytes();
    std::vector<void*> blocks;
    for (std::size_t done = 0; done < total; done += block) {
      void* p = tierpool_malloc(block);
      ASSERT_NE(p, nullptr);
      std::memset(p, 1, block);
      blocks.push_back(p);
    }
    for (void* p : blocks)
      tierpool_free(p);
    // Fast paths only from here: one small block allocated and freed again and again.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(core_test::Scaled(300, 600, 3000));
    while (std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 1000; ++i)
        tierpool_free(tierpool_malloc(48));
    }
    const tierpool::Stats stats = tierpool::GetStats();
    // What may stay: this thread's cache (its byte budget, 16 MiB at most), a central list's
    // batches (about 1 MiB per class), and the few spans freed since the last look.
    EXPECT_LT(stats.page_heap_free_bytes, 4 * kMiB) << "block " << block;
    if (!ToolsWatchMemory()) {
      EXPECT_LT(core_test::ResidentBytes(), rss_before + 24 * kMiB) << "block " << block;
    }
  }
}

// A program that churns big blocks with a few MiB free all the time (the free memory waits for its
// release delay) does not wake the release thread on every call: the thread sleeps until the
// oldest free span is due, and what is freed meanwhile is due later. Each wake is a futex call for
// the caller and two context switches; woken on every slow path, the `large` workload (blocks of
// 64 KiB to 1 MiB in churn) spent a fifth of its time there. The release thread's sleeps are the
// process's voluntary context switches: about one a release delay (10 ms) is its due.
TEST(CoreBigBlock, ChurnWithFreeMemoryWaitingDoesNotWakeTheReleaseThreadEachCall) {
  tierpool_release_free_memory();
  std::vector<void*> kept;
  for (int i = 0; i < 8; ++i) {  // 8 MiB freed: more than the 2 MiB that wake the release thread
    kept.push_back(tierpool_malloc(kMiB));
    ASSERT_NE(kept.back(), nullptr);
  }
  for (void* p : kept)
    tierpool_free(p);
  const auto voluntary_switches = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_nvcsw;
  };
  const long switches_before = voluntary_switches();
  const auto start = std::chrono::steady_clock::now();
  const int pairs = core_test::Scaled(20000, 5000, 2000);
  for (int i = 0; i < pairs; ++i) {
    auto* p = static_cast<char*>(tierpool_malloc(kMiB + 4096 * (i % 4)));
    ASSERT_NE(p, nullptr);
    p[0] = 1;
    tierpool_free(p);
  }
  const long elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
  const long switches = voluntary_switches() - switches_before;
  std::printf("%d pairs in %ld ms: %ld voluntary context switches\n", pairs, elapsed_ms, switches);
  // Five times the due rate, and some: the coarse clock and a sanitizer's own threads.
  EXPECT_LE(switches, 20 + elapsed_ms / 2);
}

// Frees the block in `slot` and puts a new one of `bytes` there, every page of it written (so
// resident); false when the allocation failed.
bool ReplaceAndTouch(char*& slot, std::size_t bytes) {
  tierpool_free(slot);
  slot = static_cast<char*>(tierpool_malloc(bytes));
  if (slot == nullptr) return false;
  for (std::size_t offset = 0; offset < bytes; offset += 4096)
    slot[offset] = 1;
  return true;
}

// A program that keeps replacing blocks of several MiB (images, buffers, a request's arena)
// reuses the memory it just freed: it stays backed, so the new blocks cost no page faults. Two
// rules make it so: a request takes a backed free span before a released one, and free memory
// that the program keeps reusing outlives the release delay. Before them, each replacement
// faulted most of its pages in again (78x glibc's time on the `huge` stress workload; here
// 375 000 faults for 1 014 504 pages written, now 72 000).
TEST(CoreBigBlock, ChurnOfBigBlocksReusesWarmMemory) {
  if (ToolsWatchMemory()) GTEST_SKIP() << "memory tools: pages are not the allocator's to keep";
  tierpool_release_free_memory();
  const auto minor_faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
  };
  // Each round is a task on a thread of its own: four slots filled, 32 replacements, all freed.
  std::mt19937 rng(2900);
  std::uniform_int_distribution<std::size_t> size(kMiB, 32 * kMiB);
  long faults = 0;
  std::size_t pages_written = 0;
  for (int round = 0; round < 8; ++round) {
    const long before = minor_faults();
    std::size_t written = 0;
    std::thread task([&] {
      char* slots[4] = {};
      for (int step = 0; step < 36; ++step) {
        const int slot = step < 4 ? step : static_cast<int>(rng() % 4);
        const std::size_t bytes = size(rng);
        ASSERT_TRUE(ReplaceAndTouch(slots[slot], bytes));
        written += bytes / 4096;
      }
      for (char* p : slots)
        tierpool_free(p);
    });
    task.join();
    if (round == 0) continue;  // the heap grows to the pattern's peak
    faults += minor_faults() - before;
    pages_written += written;
  }
  EXPECT_LT(static_cast<std::size_t>(faults), pages_written / 4)
      << faults << " page faults for " << pages_written << " pages written";
  tierpool_release_free_memory();
}

// The process's mappings: lines of /proc/self/maps.
int Mappings() {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return -1;
  int lines = 0;
  for (int c; (c = std::fgetc(maps)) != EOF;)
    lines += c == '\n';
  std::fclose(maps);
  return lines;
}

// Blocks of MiB grown by realloc, moved when they cannot grow in place, some freed, all written
// at both ends. The kernel moves a block's pages (mremap) into a mapping of its own, which never
// merges back with the heap's by itself. Before the ranges left by moves were mapped anew, these
// 3 000 steps added 1 839 mappings, and the count kept growing with the steps (3 500 after a
// million): a bigger heap could have reached the kernel's limit (65 530), where every mmap fails.
// Now 350 to 360 (at most six a live block), and about 550 after a million steps.
TEST(CoreBigBlock, ReallocChurnOfBigBlocksLeavesFewMappings) {
  if (tierpool::internal::kToolsWatchMemory) GTEST_SKIP() << "blocks are copied, never moved";
  constexpr int kBlocks = 64;
  char* blocks[kBlocks] = {};
  std::size_t sizes[kBlocks] = {};
  std::mt19937 rng(1703);
  const int before = Mappings();
  ASSERT_GT(before, 0);
  for (int step = 0; step < 3000; ++step) {
    const auto i = static_cast<int>(rng() % kBlocks);
    if (sizes[i] > 8 * kMiB || rng() % 8 == 0) {
      tierpool_free(blocks[i]);
      blocks[i] = nullptr;
      sizes[i] = 0;
    }
    const std::size_t size =
        sizes[i] != 0 ? sizes[i] + sizes[i] / 4 + 4 * kKiB : kMiB + rng() % kMiB;
    auto* grown = static_cast<char*>(tierpool_realloc(blocks[i], size));
    ASSERT_NE(grown, nullptr);
    if (sizes[i] != 0) {
      ASSERT_EQ(grown[0], static_cast<char>(i)) << "step " << step;
      ASSERT_EQ(grown[sizes[i] - 1], static_cast<char>(i + 1)) << "step " << step;
    }
    grown[0] = static_cast<char>(i);
    grown[size - 1] = static_cast<char>(i + 1);
    blocks[i] = grown;
    sizes[i] = size;
  }
  EXPECT_LE(Mappings() - before, 8 * kBlocks) << "mappings before: " << before;
  for (char* p : blocks)
    tierpool_free(p);
}

// Locked memory of this process, from /proc/self/status (VmLck, KiB); -1 if unreadable.
long LockedKiB() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "VmLck: %ld kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib;
}

// In a program that locks its future mappings (mlockall with MCL_FUTURE), a range mapped anew
// after a move would be filled and locked at once, and never given back (madvise refuses locked
// pages): here the buffer's two moves left 56 MiB locked before the first fresh mapping that comes
// back resident stopped them. Run in a child, which alone locks its mappings; the heap grown
// first, so that the buffer's growth maps nothing new and what is locked is what the moves left.
// (Not under the tools: their own mappings would be locked and filled too.)
TEST(CoreBigBlock, AMoveInAProgramThatLocksItsFutureMappingsLocksNothing) {
  if (ToolsWatchMemory()) GTEST_SKIP() << "memory tools: their own mappings would be locked";
  EXPECT_TRUE(core_test::ChildAnswers([] {
    tierpool_free(tierpool_malloc(512 * kMiB));
    if (mlockall(MCL_FUTURE) != 0) return true;  // not allowed here: nothing to check
    char* buffer = nullptr;
    int moves = 0;
    for (std::size_t size = kMiB; size <= 64 * kMiB; size += kMiB / 2) {
      auto* grown = static_cast<char*>(tierpool_realloc(buffer, size));
      if (grown == nullptr) return false;
      moves += buffer != nullptr && grown != buffer;
      buffer = grown;
      buffer[size - 1] = 1;
      // Something after the buffer, so that it cannot always grow in place.
      if (size % (8 * kMiB) == 0) tierpool_malloc(2 * kMiB);
    }
    const long locked = LockedKiB();
    return moves > 0 && locked >= 0 && locked < 8 * 1024;
  }));
}

// Two threads churning big blocks side by side: each frees one of its four blocks and puts a new
// one of 1 to 32 MiB in its place, writing every page. At most 256 MiB are in use at once, so the
// heap needs little more. When backed and released free spans stayed apart, a request found
// neither kind big enough where the two lay side by side, and the heap grew instead: here by 512
// to 544 MiB (now 256), and in the `huge` stress workload to 1.7 GB mapped, 1.6 GB resident.
TEST(CoreBigBlock, TwoThreadsChurningBigBlocksDoNotGrowTheHeap) {
  if (ToolsWatchMemory()) GTEST_SKIP() << "memory tools: too slow for this many pages";
  tierpool_release_free_memory();
  const std::size_t mapped_before = tierpool::GetStats().mapped_bytes;
  auto churn = [](unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::size_t> size(kMiB, 32 * kMiB);
    char* slots[4] = {};
    for (int step = 0; step < 3000; ++step) {
      const std::size_t slot = rng() % 4;
      ASSERT_TRUE(ReplaceAndTouch(slots[slot], size(rng)));
    }
    for (char* p : slots)
      tierpool_free(p);
  };
  std::thread a(churn, 2900u);
  std::thread b(churn, 3000u);
  a.join();
  b.join();
  const std::size_t grown = tierpool::GetStats().mapped_bytes - mapped_before;
  EXPECT_LE(grown, 384 * kMiB) << "the heap grew by " << grown / kMiB << " MiB";
  tierpool_release_free_memory();
}

// malloc_trim's job: every free byte back now, with no delay.
TEST(CoreBigBlock, ReleaseFreeMemoryGivesEverythingBackAtOnce) {
  std::vector<void*> blocks;
  for (int i = 0; i < 2000; ++i) {
    blocks.push_back(tierpool_malloc(static_cast<std::size_t>(16 + (i * 97) % 300000)));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), 2, 16);
  }
  for (void* p : blocks)
    tierpool_free(p);
  EXPECT_GT(tierpool_release_free_memory(), 0u);
  const tierpool::Stats stats = tierpool::GetStats();
  EXPECT_EQ(stats.thread_cache_bytes, 0u);
  EXPECT_EQ(stats.central_cache_bytes, 0u);
  EXPECT_EQ(stats.page_heap_free_bytes, 0u);
}

// Address space given back is the OS's again: after release_free_memory() the range of a freed
// region can be mapped by anyone (here with MAP_FIXED_NOREPLACE, which fails on a range still
// mapped), and written with no mark of the allocator's left on it (under ASan, the poison of its
// free memory would report the first write into the new mapping).
TEST(CoreBigBlock, UnmappedMemoryIsAnyonesAgain) {
  tierpool_release_free_memory();
  std::vector<void*> blocks;
  for (int i = 0; i < 4096; ++i) {  // 16 MiB of 4 KiB blocks: whole 2 MiB regions
    blocks.push_back(tierpool_malloc(4096));
    ASSERT_NE(blocks.back(), nullptr);
  }
  for (void* p : blocks)
    tierpool_free(p);
  tierpool_thread_flush();
  ASSERT_GT(tierpool_release_free_memory(), 0u);
  const std::uintptr_t region = std::uintptr_t{2} << 20;
  bool remapped = false;
  for (void* p : blocks) {
    void* start = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) & ~(region - 1));
    void* q = mmap(start, region, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (q == MAP_FAILED) continue;
    ASSERT_EQ(q, start);
    std::memset(q, 7, region);  // ASan: use-after-poison here if the marks stayed
    munmap(q, region);
    remapped = true;
    break;
  }
  EXPECT_TRUE(remapped) << "no freed region went back to the OS";
}

// Free batches parked in the central cache's transfer slots are bounded for all classes
// together: a program that frees 4 MiB of each of 28 sizes from 1 to 8 KiB (each class may keep
// 16 MiB of batches ready, all it freed) leaves at most kMaxParkedBytes (64 MiB) parked, plus the
// rest of the spans they pin, not the 112 MiB it freed.
TEST(CoreBigBlock, ParkedBatchesAreBoundedAcrossClasses) {
  tierpool_release_free_memory();
  std::size_t freed = 0;
  for (std::size_t size = 1024; size < 8 * kKiB; size += 256) {
    std::vector<void*> blocks(4 * kMiB / size);
    for (void*& p : blocks) {
      p = tierpool_malloc(size);
      ASSERT_NE(p, nullptr);
      std::memset(p, 5, 64);
    }
    for (void* p : blocks)
      tierpool_free(p);
    freed += blocks.size() * size;
    tierpool_thread_flush();  // the cache's lists go to the central lists, as batches
  }
  const std::size_t bound = tierpool::internal::kMaxParkedBytes + 8 * kMiB;
  ASSERT_GT(freed, bound + 16 * kMiB) << "the test frees too little to reach the bound";
  EXPECT_LT(tierpool::GetStats().central_cache_bytes, bound);
  tierpool_release_free_memory();
}

// Batches parked in the transfer slots go back to their spans, and their pages to the OS, when
// nobody takes them, though no thread exits and the program takes only fast paths: a fixed pool
// of threads must not hold what it parked once for ever.
TEST(CoreBigBlock, ParkedBatchesNobodyTakesGoBackWithoutFurtherCalls) {
  // 1 MiB of each of three classes: what each class's slots hold, so that all of it may be
  // parked and little goes back to the page heap (whose free memory alone wakes the release
  // thread). Two looks of the clock's 40 ms apart while the frees park their batches (a run
  // stalled that long) drain some before the test sees them: such a run is tried again.
  bool parked = false;
  for (int run = 0; run < 3 && !parked; ++run) {
    tierpool_release_free_memory();
    std::vector<void*> blocks;
    for (const std::size_t size : {256, 512, 1024}) {
      for (std::size_t done = 0; done < kMiB; done += size) {
        blocks.push_back(tierpool_malloc(size));
        ASSERT_NE(blocks.back(), nullptr);
        std::memset(blocks.back(), 5, size);
      }
    }
    core_test::FreeEveryOtherFirst(blocks, tierpool_free);  // (neighbours would skip the slots)
    tierpool_thread_flush();  // the cache's lists go to the central lists: batches, parked
    parked = tierpool::GetStats().central_cache_bytes > 2 * kMiB;
  }
  ASSERT_TRUE(parked) << "no run saw its batches parked";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (tierpool::GetStats().central_cache_bytes >= 64 * kKiB &&
         std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 1000; ++i)
      tierpool_free(tierpool_malloc(48));  // fast paths only: another class, in the cache
  }
  EXPECT_LT(tierpool::GetStats().central_cache_bytes, 64 * kKiB);
}

// errno is the program's: no call that succeeds may change it (C and POSIX: a function may set
// errno only when it fails, as far as a program can tell; glibc's malloc never does).
TEST(CoreBigBlock, SuccessfulCallsLeaveErrnoAlone) {
  const int rounds = core_test::Scaled(64, 32, 8);
  for (int i = 0; i < rounds; ++i) {
    errno = 4242;
    // Not a multiple of any page, spread over many 256 MiB page-map leaves.
    void* p = tierpool_malloc(64 * kMiB + 1000 * static_cast<std::size_t>(i) + 1);
    ASSERT_NE(p, nullptr);
    void* q = tierpool_calloc(3, 100000 + static_cast<std::size_t>(i));
    ASSERT_NE(q, nullptr);
    void* r = tierpool_aligned_alloc(std::size_t{1} << 21, 3 * kMiB + 17);
    ASSERT_NE(r, nullptr);
    p = tierpool_realloc(p, 96 * kMiB + 3);
    ASSERT_NE(p, nullptr);
    tierpool_free(p);
    tierpool_free(q);
    tierpool_free(r);
    EXPECT_EQ(errno, 4242) << "round " << i;
  }
  errno = 4242;
  tierpool_release_free_memory();
  EXPECT_EQ(errno, 4242);
}

// tierpool.h: a size of 0 given to the sized free means "not known": the block goes back to
// its own class, found in the page map, whatever its size.
TEST(CoreBigBlock, SizedFreeWithSizeZeroIsAnUnsizedFree) {
  void* p = tierpool_malloc(400);
  ASSERT_NE(p, nullptr);
  tierpool_free_sized(p, 0);
  std::vector<void*> small;
  for (int i = 0; i < 100; ++i) {
    small.push_back(tierpool_malloc(8));
    EXPECT_NE(small.back(), p) << "a 400-byte block handed out as an 8-byte one";
  }
  for (void* s : small)
    tierpool_free(s);
  void* again = tierpool_malloc(400);
  EXPECT_EQ(again, p) << "the block went back to its own class's list";
  tierpool_free(again);
}

#if !TIERPOOL_HARDENED
// A sized free with a wrong size is undefined behaviour (the hardened build aborts on it); in a
// release build it must not corrupt the heap for everyone else: once the block leaves the thread
// cache, it goes back to its own span, and no span ever serves two classes.
TEST(CoreBigBlock, AWrongSizeInASizedFreeNeverMixesClassesInASpan) {
  void* p = tierpool_malloc(512);
  ASSERT_NE(p, nullptr);
  tierpool_free_sized(p, 8);  // wrong: it is a 512-byte block
  tierpool_thread_flush();    // to the central lists, where it meets the spans
  std::vector<void*> blocks;
  for (int i = 0; i < 5000; ++i) {
    void* q = tierpool_malloc(8);
    ASSERT_NE(q, nullptr);
    // p itself may come back once as an 8-byte block (bigger than asked: harmless); no other
    // block of its span may.
    if (q != p) {
      ASSERT_EQ(tierpool_usable_size(q), 8u) << "an 8-byte block from a 512-byte span";
    }
    blocks.push_back(q);
  }
  bool p_came_back = false;
  for (int i = 0; i < 64; ++i) {
    void* q = tierpool_malloc(512);
    ASSERT_EQ(tierpool_usable_size(q), 512u);
    p_came_back |= q == p;
    blocks.push_back(q);
  }
  int times_p = 0;
  for (void* q : blocks)
    times_p += q == p;
  EXPECT_TRUE(p_came_back || times_p == 1) << "the block was lost";
  EXPECT_EQ(times_p, 1) << "the block was handed out twice";
  for (void* q : blocks)
    tierpool_free(q);
  tierpool_thread_flush();
}

// The same mistake in bulk: 300 blocks of 512 bytes freed as 8-byte ones fill whole batches of
// the 8-byte class, which are parked in its transfer slots; draining the slots sends each block
// to its own class. Nothing may be counted twice or lost on the way: once everything is given
// back, the central lists hold nothing and every span is gone (the 8-byte class counted the
// blocks as its own when it parked them, and must uncount them when they leave). And the other
// way round, 16-byte blocks freed as 512-byte ones: they reach their own class after the release
// has drained it, and the span they empty there must go too.
TEST(CoreBigBlock, WrongSizedBlocksInParkedBatchesGoHomeCountedOnce) {
  for (const auto& [real, wrong] : {std::pair<std::size_t, std::size_t>{512, 8}, {16, 512}}) {
    tierpool_thread_flush();
    tierpool_release_free_memory();
    const tierpool::Stats before = tierpool::GetStats();
    std::vector<void*> blocks;
    for (int i = 0; i < 300; ++i) {
      blocks.push_back(tierpool_malloc(real));
      ASSERT_NE(blocks.back(), nullptr);
    }
    for (void* p : blocks)
      tierpool_free_sized(p, wrong);
    tierpool_thread_flush();  // full batches of the wrong class, parked
    tierpool_release_free_memory();
    const tierpool::Stats after = tierpool::GetStats();
    EXPECT_EQ(after.central_cache_bytes, 0u) << real << "-byte blocks freed as " << wrong;
    EXPECT_EQ(after.thread_cache_bytes, 0u) << real << "-byte blocks freed as " << wrong;
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << real << "-byte blocks freed as " << wrong;
    EXPECT_EQ(after.spans_in_use, before.spans_in_use) << real << "-byte blocks freed as " << wrong;
  }
}

// A large block freed with a small size goes on that class's list like any small block; when the
// central list finds it has no class of its own, it goes back to the page heap as a free would,
// and is neither lost nor counted in use for ever.
TEST(CoreBigBlock, ALargeBlockFreedWithASmallSizeIsNotLost) {
  tierpool_thread_flush();
  tierpool_release_free_memory();
  const tierpool::Stats before = tierpool::GetStats();
  void* big = tierpool_malloc(kMiB);
  ASSERT_NE(big, nullptr);
  tierpool_free_sized(big, 100);  // wrong: it is a 1 MiB block
  tierpool_thread_flush();        // to the central list of the 100-byte class, which looks
  tierpool_release_free_memory();
  const tierpool::Stats after = tierpool::GetStats();
  EXPECT_EQ(after.large_bytes_in_use, before.large_bytes_in_use);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.central_cache_bytes, 0u);
  void* again = tierpool_malloc(kMiB);  // its pages serve the next large block
  EXPECT_NE(again, nullptr);
  tierpool_free(again);
}

// The same, where the large block's span was a span of that very class before: the page heap
// keeps a span's record when its pages are handed out again, so the record of a large block
// still names the class its pages had. Taken at its word, the central list put the large block
// on its own span lists (its count of objects out wrapped below zero) and handed it and the
// record's stale objects out again, over blocks in use. What decides is the page map's class of
// the page, which a large block's pages do not have.
TEST(CoreBigBlock, ALargeBlockOnPagesOfTheWrongSizesClassIsNotTakenForOne) {
  constexpr std::size_t kSmall = 40 * 1024;  // over the thread cache: frees go to the spans
  tierpool_thread_flush();
  tierpool_release_free_memory();
  const tierpool::Stats before = tierpool::GetStats();
  std::vector<void*> smalls;
  for (int i = 0; i < 16; ++i)
    smalls.push_back(tierpool_malloc(kSmall));
  std::vector<void*> larges;
  for (void* p : smalls)
    tierpool_free(p);  // their spans empty and go back to the page heap, merged
  // A large block on the pages of one of those spans (the page heap serves the lowest fit).
  void* big = nullptr;
  for (int i = 0; i < 16 && big == nullptr; ++i) {
    void* p = tierpool_malloc(300000);
    ASSERT_NE(p, nullptr);
    if (std::find(smalls.begin(), smalls.end(), p) != smalls.end()) {
      big = p;
    } else {
      larges.push_back(p);
    }
  }
  for (void* p : larges)
    tierpool_free(p);
  if (big == nullptr) GTEST_SKIP() << "no large block started where a 40 KiB span had";
  tierpool_free_sized(big, kSmall);  // wrong: it is a 300 000-byte block
  tierpool_thread_flush();
  EXPECT_EQ(tierpool::GetStats().large_bytes_in_use, before.large_bytes_in_use)
      << "the large block is still counted in use";
  std::vector<char*> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(static_cast<char*>(tierpool_malloc(kSmall)));
    ASSERT_NE(blocks.back(), nullptr);
  }
  std::sort(blocks.begin(), blocks.end());
  for (std::size_t i = 1; i < blocks.size(); ++i)
    EXPECT_GE(blocks[i] - blocks[i - 1], static_cast<std::ptrdiff_t>(kSmall)) << "blocks overlap";
  for (char* q : blocks)
    tierpool_free(q);
  tierpool_release_free_memory();
  const tierpool::Stats after = tierpool::GetStats();
  EXPECT_EQ(after.large_bytes_in_use, before.large_bytes_in_use);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.central_cache_bytes, 0u);
  EXPECT_EQ(after.spans_in_use, before.spans_in_use);
}
#endif

// Under an address-space limit, address space freed by small blocks must be able to serve a big
// block (glibc's heap trims and its big blocks are their own mappings; here free regions are
// unmapped when the OS refuses to map more).
void FreedAddressSpaceServesABigBlockUnderALimit(bool aligned) {
  tierpool_free(tierpool_malloc(16));  // initialized before the limit
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlim_t limit = core_test::VirtualBytes() + 1024 * kMiB;
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(10);
    std::vector<void*> kept;
    kept.reserve(300000);
    for (std::size_t total = 0; total < 900 * kMiB; total += 4000) {
      void* p = tierpool_malloc(4000);
      if (p == nullptr) _exit(11);
      std::memset(p, 5, 64);
      kept.push_back(p);
    }
    for (void* p : kept)
      tierpool_free(p);
    kept.clear();
    tierpool_thread_flush();
    void* big =
        aligned ? tierpool_aligned_alloc(2 * kMiB, 400 * kMiB) : tierpool_malloc(400 * kMiB);
    if (big == nullptr) _exit(12);
    std::memset(big, 1, 400 * kMiB);
    tierpool_free(big);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: setrlimit, 11: the fill, 12: the big block" << (aligned ? " (aligned)" : "");
}

TEST(CoreBigBlock, FreedAddressSpaceServesABigBlockUnderALimit) {
  if (const char* why = tierpool_testing::AddressSpaceLimitUnusable()) GTEST_SKIP() << why;
  FreedAddressSpaceServesABigBlockUnderALimit(false);
}

// The same with an alignment over a page (PageHeap::NewAligned): its own way to the OS, which
// must give free regions back as well before it gives up.
TEST(CoreBigBlock, FreedAddressSpaceServesAnAlignedBigBlockUnderALimit) {
  if (const char* why = tierpool_testing::AddressSpaceLimitUnusable()) GTEST_SKIP() << why;
  FreedAddressSpaceServesABigBlockUnderALimit(true);
}

// When the process has used up its pthread keys, the allocator works without thread caches
// rather than writing to key 0, someone else's. Run in a fresh process (a death-test child of
// the "threadsafe" style re-runs this binary), where the allocator has not started yet.
std::atomic<int> foreign_destructor_calls{0};
void ForeignKeyDestructor(void* value) {
  if (value != nullptr) foreign_destructor_calls.fetch_add(1);
}

void UseTheAllocatorWithNoKeyLeft() {
  pthread_key_t key;
  int created = 0;
  while (pthread_key_create(&key, ForeignKeyDestructor) == 0)
    ++created;
  if (created == 0) std::_Exit(20);
  const std::size_t in_use_before = tierpool::GetStats().bytes_in_use;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      std::vector<void*> blocks;
      for (int i = 0; i < 1000; ++i)
        blocks.push_back(tierpool_malloc(static_cast<std::size_t>(8 + i % 700)));
      for (void* p : blocks)
        tierpool_free(p);
    });
  }
  for (auto& t : threads)
    t.join();
  if (foreign_destructor_calls.load() != 0) std::_Exit(21);
  if (tierpool::GetStats().thread_caches != 0) std::_Exit(22);
  // Every block was freed: none may be left counted in use (an uncached allocation that took
  // more objects from its central list than the one it handed out lost the others).
  if (tierpool::GetStats().bytes_in_use != in_use_before) std::_Exit(23);
  std::_Exit(0);
}

TEST(CoreBigBlockDeathTest, NoPthreadKeyLeftMeansNoThreadCachesNotSomeoneElsesKey) {
  if (core_test::UnderValgrind()) GTEST_SKIP() << "a re-run of the binary under valgrind";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(UseTheAllocatorWithNoKeyLeft(), testing::ExitedWithCode(0), "")
      << "20: no key could be made, 21: a foreign key's destructor got a value, 22: caches made, "
         "23: blocks lost";
}

}  // namespace
