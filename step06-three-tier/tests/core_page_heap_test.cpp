// The page heap on its own page map: best fit, split, coalesce, alignment, release to the OS.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "memory_tools.h"
#include "os.h"
#include "page_heap.h"

namespace {

using namespace tierpool::internal;

// The heap's memory is off limits to ASan and valgrind until someone hands it out: this test
// hands it out to itself.
void MarkUsable(Span* s) {
#if TIERPOOL_ASAN
  ASAN_UNPOISON_MEMORY_REGION(s->start(), s->bytes());
#endif
#if TIERPOOL_VALGRIND
  VALGRIND_MAKE_MEM_UNDEFINED(s->start(), s->bytes());
#endif
  (void)s;
}

// Each heap has a page map of its own: heaps that shared one would coalesce with each other's
// spans wherever the OS put their memory side by side. (The allocator has one heap.)
struct Heap {
  PageMap map;
  FixedPool<Span> spans;
  PageHeap heap{map, spans};
};

std::unique_ptr<Heap> NewHeap() {
  return std::make_unique<Heap>();
}

TEST(PageHeap, SplitsAndCoalescesAdjacentFreeSpans) {
  auto h = NewHeap();
  Span* a = h->heap.New(1, SpanState::kLarge);
  Span* b = h->heap.New(2, SpanState::kLarge);
  Span* c = h->heap.New(3, SpanState::kLarge);
  Span* guard = h->heap.New(1, SpanState::kLarge);
  ASSERT_TRUE(a && b && c && guard);
  // Best fit from one fresh region: consecutive pages.
  EXPECT_EQ(b->first_page, a->first_page + 1);
  EXPECT_EQ(c->first_page, b->first_page + 2);
  EXPECT_EQ(h->map.Get(a->first_page), a);
  EXPECT_EQ(h->map.Get(c->last_page()), c);

  h->heap.Delete(b);
  EXPECT_EQ(h->heap.FreeSpansOfLength(2, false), 1u);
  h->heap.Delete(a);  // merges with b
  EXPECT_EQ(h->heap.FreeSpansOfLength(2, false), 0u);
  EXPECT_EQ(h->heap.FreeSpansOfLength(3, false), 1u);
  h->heap.Delete(c);  // merges with a+b; `guard` keeps it from the untouched rest
  EXPECT_EQ(h->heap.FreeSpansOfLength(3, false), 0u);
  EXPECT_EQ(h->heap.FreeSpansOfLength(6, false), 1u);

  // The 6 pages are reused first (best fit among backed spans) and split.
  Span* d = h->heap.New(4, SpanState::kLarge);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->num_pages, 4u);
  EXPECT_EQ(h->heap.FreeSpansOfLength(2, false), 1u);
  h->heap.Delete(d);
  h->heap.Delete(guard);
  const PageHeapStats stats = h->heap.Stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.free_backed_bytes + stats.free_released_bytes, stats.mapped_bytes);
}

TEST(PageHeap, AlignedSpansStartOnTheBoundaryAndGiveTheRestBack) {
  auto h = NewHeap();
  Span* first = h->heap.New(1, SpanState::kLarge);  // make the next free page unaligned
  for (std::size_t align : {2u, 8u, 64u, 256u, 1024u}) {
    Span* s = h->heap.NewAligned(3, align, SpanState::kLarge);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->first_page % align, 0u) << align;
    EXPECT_EQ(s->num_pages, 3u);
    h->heap.Delete(s);
  }
  h->heap.Delete(first);
  EXPECT_EQ(h->heap.Stats().in_use_bytes, 0u);
}

// An aligned request asks for its pages and the alignment's slack (pages + align - 1): any span
// that long holds an aligned run. When the OS refuses more, a shorter span that holds one must
// serve it too: above all the block of the same size and alignment the program just freed (a
// pool's aligned chunks, released and asked for again while memory is short).
TEST(PageHeap, AnAlignedRequestTakesTheAlignedRunItFitsWhenTheOsRefusesMore) {
  auto h = NewHeap();
  constexpr std::size_t kPages = 25, kAlign = 8;
  {  // Span records in the pool for the splits below, which may not map metadata
    std::vector<Span*> warm;
    for (int i = 0; i < 64; ++i)
      warm.push_back(h->heap.New(1, SpanState::kLarge));
    for (Span* s : warm)
      h->heap.Delete(s);
  }
  Span* block = h->heap.NewAligned(kPages, kAlign, SpanState::kLarge);
  ASSERT_NE(block, nullptr);
  std::vector<Span*> others;
  SetMapFailureAfter(0);
  // Every other free page taken, the largest runs first (a few spans, so a few records): once
  // freed, the block is the only free span, kPages long.
  for (std::size_t n = std::size_t{1} << 20; n > 0; n /= 2) {
    while (Span* s = h->heap.New(n, SpanState::kLarge))
      others.push_back(s);
  }
  const std::size_t first_page = block->first_page;
  h->heap.Delete(block);
  Span* again = h->heap.NewAligned(kPages, kAlign, SpanState::kLarge);
  SetMapFailureAfter(-1);
  ASSERT_NE(again, nullptr) << "the freed aligned block did not serve the same request";
  EXPECT_EQ(again->first_page, first_page);
  EXPECT_EQ(again->num_pages, kPages);
  h->heap.Delete(again);
  for (Span* s : others)
    h->heap.Delete(s);
  EXPECT_EQ(h->heap.Stats().in_use_bytes, 0u);
}

TEST(PageHeap, LargeRequestsGrowTheHeap) {
  auto h = NewHeap();
  Span* big = h->heap.New(50000, SpanState::kLarge);  // ~390 MiB: more than one growth step
  ASSERT_NE(big, nullptr);
  EXPECT_GE(h->heap.Stats().mapped_bytes, 50000 * kPageSize);
  EXPECT_TRUE(h->map.Owns(big->start()));
  EXPECT_TRUE(h->map.Owns(big->start() + big->bytes() - 1));
  h->heap.Delete(big);
}

TEST(PageHeap, FreedMemoryStaysWarmForTheNextWave) {
  auto h = NewHeap();
  std::vector<Span*> spans;
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t wave_start = NowMs();
    for (int j = 0; j < 32; ++j) {  // 4 MiB, touched so it is really resident
      Span* s = h->heap.New(16, SpanState::kLarge);
      ASSERT_NE(s, nullptr);
      MarkUsable(s);
      for (std::size_t off = 0; off < s->bytes(); off += 4096)
        s->start()[off] = 1;
      spans.push_back(s);
    }
    for (Span* s : spans)
      h->heap.Delete(s);
    spans.clear();
    // Nothing went back to the OS: the next wave reuses the same pages (unless the wave itself
    // took longer than the release delay, as under valgrind).
    if (NowMs() - wave_start < kReleaseDelayMs / 2) {
      EXPECT_EQ(h->heap.Stats().free_backed_bytes, 32 * 16 * kPageSize) << "wave " << i;
    }
  }
  EXPECT_EQ(h->heap.Stats().mapped_bytes, kMinGrowBytes) << "every wave reused the first";
}

TEST(PageHeap, LargeRequestsTakeTheBestFitOfTheirBinOrAnySpanOfALargerOne) {
  auto h = NewHeap();
  // Free spans of 300, 200 and 700 pages, kept apart by spans in use.
  std::vector<Span*> guards;
  std::vector<Span*> frees;
  for (std::size_t pages : {300, 200, 700}) {
    frees.push_back(h->heap.New(pages, SpanState::kLarge));
    guards.push_back(h->heap.New(1, SpanState::kLarge));
  }
  Span* rest = h->heap.New(32 * 1024 * 1024 / kPageSize - 1206, SpanState::kLarge);
  for (Span* s : frees)
    h->heap.Delete(s);
  // 150 pages: bin 128..255 holds the 200 (the 300 is in the next bin up).
  Span* a = h->heap.New(150, SpanState::kLarge);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(h->heap.FreeSpansOfLength(50, false), 1u) << "the 200-page span was cut";
  // 260 pages: its own bin (256..511) has the 300.
  Span* b = h->heap.New(260, SpanState::kLarge);
  EXPECT_EQ(h->heap.FreeSpansOfLength(40, false), 1u) << "the 300-page span was cut";
  // 520 pages: nothing in 512..1023 but the 700.
  Span* c = h->heap.New(520, SpanState::kLarge);
  EXPECT_EQ(h->heap.FreeSpansOfLength(180, false), 1u) << "the 700-page span was cut";
  for (Span* s : {a, b, c, rest})
    h->heap.Delete(s);
  for (Span* s : guards)
    h->heap.Delete(s);
  EXPECT_EQ(h->heap.Stats().in_use_bytes, 0u);
}

TEST(PageHeap, ALargeSpanGrowsIntoTheFreeSpanAfterItAndShrinksInPlace) {
  auto h = NewHeap();
  Span* s = h->heap.New(200, SpanState::kLarge, /*room=*/200);
  ASSERT_NE(s, nullptr);
  const std::uintptr_t first = s->first_page;
  ASSERT_TRUE(h->heap.Resize(s, 400));  // the room left after it
  EXPECT_EQ(s->first_page, first);
  EXPECT_EQ(s->num_pages, 400u);
  EXPECT_EQ(h->heap.Stats().in_use_bytes, 400 * kPageSize);
  Span* after = h->heap.New(10, SpanState::kLarge);  // takes the pages that follow
  EXPECT_EQ(after->first_page, first + 400);
  EXPECT_FALSE(h->heap.Resize(s, 500)) << "the pages after it are in use";
  ASSERT_TRUE(h->heap.Resize(s, 100));  // the tail goes back
  EXPECT_EQ(s->num_pages, 100u);
  EXPECT_EQ(h->heap.FreeSpansOfLength(300, false), 1u);
  EXPECT_EQ(h->heap.Stats().in_use_bytes, 110 * kPageSize);
  h->heap.Delete(after);
  h->heap.Delete(s);
}

// A backed free span and a released one side by side stay two spans, each too short for a
// request that the two together can serve: the request takes them both (and as much of the
// second as it needs) instead of growing the heap. The rest keeps its kind.
TEST(PageHeap, BackedAndReleasedSpansSideBySideServeOneRequest) {
  auto h = NewHeap();
  const std::size_t region = kMinGrowBytes / kPageSize;
  Span* a = h->heap.New(region / 2, SpanState::kLarge);
  Span* b = h->heap.New(region / 2 - 8, SpanState::kLarge);
  Span* guard = h->heap.New(8, SpanState::kLarge);
  ASSERT_TRUE(a && b && guard);
  ASSERT_EQ(b->first_page, a->first_page + region / 2);
  const std::uintptr_t start = a->first_page;
  const std::size_t mapped = h->heap.Stats().mapped_bytes;
  h->heap.Delete(a, FreedPages::kRecent);  // backed
  h->heap.Delete(b, FreedPages::kZero);    // released
  EXPECT_EQ(h->heap.FreeSpansOfLength(region / 2, false), 1u);
  EXPECT_EQ(h->heap.FreeSpansOfLength(region / 2 - 8, true), 1u);

  Span* both = h->heap.New(region / 2 + 100, SpanState::kLarge);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(both->first_page, start);
  EXPECT_FALSE(both->zeroed);  // half of it was backed: calloc must clear it
  EXPECT_EQ(h->heap.Stats().mapped_bytes, mapped) << "the heap grew";
  EXPECT_EQ(h->heap.Stats().free_backed_bytes, 0u);
  EXPECT_EQ(h->heap.Stats().free_released_bytes, (region / 2 - 108) * kPageSize);
  EXPECT_EQ(h->heap.FreeSpansOfLength(region / 2 - 108, true), 1u);
  EXPECT_EQ(h->map.Get(both->last_page()), both);
  h->heap.Delete(both);
  h->heap.Delete(guard);
}

// The same with four pieces, backed and released in turn, starting with a backed one: the run is
// found (from its first released piece; met again from the second, it is not read twice) and
// serves a request as long as all four together, from the run's first page.
TEST(PageHeap, ARunOfBackedAndReleasedPiecesInTurnServesOneRequest) {
  auto h = NewHeap();
  const std::size_t region = kMinGrowBytes / kPageSize;
  const std::size_t piece = region / 4 - 2;
  Span* pieces[4];
  for (Span*& p : pieces) {
    p = h->heap.New(piece, SpanState::kLarge);
    ASSERT_NE(p, nullptr);
  }
  Span* guard = h->heap.New(8, SpanState::kLarge);
  ASSERT_NE(guard, nullptr);
  for (int i = 1; i < 4; ++i)
    ASSERT_EQ(pieces[i]->first_page, pieces[0]->first_page + i * piece);
  const std::uintptr_t start = pieces[0]->first_page;
  const std::size_t mapped = h->heap.Stats().mapped_bytes;
  for (int i = 0; i < 4; ++i)
    h->heap.Delete(pieces[i], i % 2 == 0 ? FreedPages::kRecent : FreedPages::kZero);
  EXPECT_EQ(h->heap.FreeSpansOfLength(piece, false), 2u);
  EXPECT_EQ(h->heap.FreeSpansOfLength(piece, true), 2u);

  Span* all = h->heap.New(4 * piece, SpanState::kLarge);
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->first_page, start);
  EXPECT_EQ(all->num_pages, 4 * piece);
  EXPECT_EQ(h->heap.Stats().mapped_bytes, mapped) << "the heap grew";
  EXPECT_EQ(h->map.Get(all->last_page()), all);
  h->heap.Delete(all);
  h->heap.Delete(guard);
}

TEST(PageHeap, TrimReleasesEveryFreePageAndUnmapsWholeFreeRegions) {
  auto h = NewHeap();
  Span* s = h->heap.New(4096, SpanState::kLarge);  // 32 MiB: the whole first growth
  ASSERT_NE(s, nullptr);
  MarkUsable(s);
  for (std::size_t off = 0; off < s->bytes(); off += 4096)
    s->start()[off] = 1;
  h->heap.Delete(s);
  EXPECT_EQ(h->heap.Stats().free_backed_bytes, 4096 * kPageSize);
  h->heap.Trim();
  const PageHeapStats stats = h->heap.Stats();
  EXPECT_EQ(stats.free_backed_bytes, 0u);
  EXPECT_EQ(stats.mapped_bytes, 0u) << "the whole region is free: its address space goes back";
  // And the heap grows again as if new.
  Span* again = h->heap.New(100, SpanState::kLarge);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->zeroed);
  h->heap.Delete(again);
}

TEST(PageHeap, FreeMemoryBeyondTheRecentPeakGoesBackAtOnce) {
  auto h = NewHeap();
  // 40 MiB stays in use, 100 MiB beside it is used and freed: within the recent peak, and no more
  // than what is in use plus the slack, so it stays, warm for the next wave.
  Span* kept = h->heap.New(5120, SpanState::kLarge);
  Span* first = h->heap.New(12800, SpanState::kLarge);
  ASSERT_TRUE(kept != nullptr && first != nullptr);
  h->heap.Delete(first);
  EXPECT_EQ(h->heap.Stats().free_backed_bytes, 12800 * kPageSize);
  // 150 MiB that does not fit in those 100: the heap grows, and keeping the 100 MiB free as
  // well would hold 290 MiB for a peak of 190. They go back at the next page-heap call.
  Span* second = h->heap.New(19200, SpanState::kLarge);
  ASSERT_NE(second, nullptr);
  Span* small = h->heap.New(1, SpanState::kLarge);
  h->heap.Delete(small);
  const PageHeapStats stats = h->heap.Stats();
  EXPECT_LE(stats.free_backed_bytes, kMaxBackedFreeSlack);
  EXPECT_GE(stats.free_released_bytes, 12800 * kPageSize);
  h->heap.Delete(second);
  h->heap.Delete(kept);
}

// Past its peak: a program that freed more than it still uses, by more than the slack, has it
// back at the page heap's next look, not a release delay later (and not on the release thread's
// time alone: on a busy machine that thread was late by hundreds of milliseconds).
TEST(PageHeap, FreeMemoryPastThePeakGoesBackWithoutTheDelay) {
  auto h = NewHeap();
  Span* s = h->heap.New(12800, SpanState::kLarge);  // 100 MiB
  ASSERT_NE(s, nullptr);
  Span* small = h->heap.New(1, SpanState::kLarge);
  ASSERT_NE(small, nullptr);
  h->heap.Delete(s);
  h->heap.ReleaseExpired();  // at once: no span has been free for the delay
  const PageHeapStats stats = h->heap.Stats();
  EXPECT_EQ(stats.free_backed_bytes, 0u);
  EXPECT_GE(stats.free_released_bytes, 12800 * kPageSize);
  h->heap.Delete(small);
}

// A release the program undoes counts as reuse: pages given back and taken again soon after
// were wanted, and the next wave of the same size stays backed past the delay. Without this, a
// program slowed down (a loaded machine) had its free spans go back before it reused them, took
// them back page fault by page fault, which slowed it down more: preloaded under a program that
// replaces thousands of 64 KiB-aligned blocks, two runs in thirty gave one span back per free
// (370 000 madvise calls) and took ten times as long.
TEST(PageHeap, AReleaseTheProgramUndoesKeepsTheNextWaveBacked) {
  auto h = NewHeap();
  Span* s = h->heap.New(1024, SpanState::kLarge);  // 8 MiB of new memory: growth, not reuse
  ASSERT_NE(s, nullptr);
  h->heap.Delete(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(kReleaseDelayMs + 300));
  h->heap.ReleaseExpired();
  ASSERT_EQ(h->heap.Stats().free_backed_bytes, 0u) << "nobody reused it: it went back";
  s = h->heap.New(1024, SpanState::kLarge);  // the same pages, taken back
  ASSERT_NE(s, nullptr);
  h->heap.Delete(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * kReleaseDelayMs));
  h->heap.ReleaseExpired();
  EXPECT_EQ(h->heap.Stats().free_backed_bytes, 1024 * kPageSize)
      << "given back again although the program had just taken it back";
}

TEST(PageHeap, FreeMemoryNobodyReusesGoesBackAfterTheDelay) {
  auto h = NewHeap();
  Span* s = h->heap.New(1024, SpanState::kLarge);  // 8 MiB: under the slack, kept at first
  ASSERT_NE(s, nullptr);
  h->heap.Delete(s);
  EXPECT_EQ(h->heap.Stats().free_backed_bytes, 1024 * kPageSize);
  std::this_thread::sleep_for(std::chrono::milliseconds(kReleaseDelayMs + 300));
  h->heap.ReleaseExpired();
  EXPECT_EQ(h->heap.Stats().free_backed_bytes, 0u);
}

}  // namespace
