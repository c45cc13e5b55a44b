// PageHeap: the bottom tier. Owns every page the allocator mapped and hands out runs of pages
// (spans) to the central cache (for small objects) and to the user (for blocks over 256 KiB).
//
//   free lists by length:  [1] [2] [3] ... [128]    exact lengths, found with a bitmap
//                          [129..255] [256..511] ... one bin per power of two, found with a bitmap
//   each twice: spans still backed by memory, and spans whose pages went back to the OS
//   backed free spans also in one list by age:  newest <-> ... <-> oldest
//
// A request takes the smallest exact length that fits; past the exact lengths, the best of the
// first few spans of its own bin, or else any span of the next bin that has one (every span there
// fits). So no lookup is linear in the number of free spans, but for an aligned request that
// none of these fits, before the heap grows for it (TakeAlignedFitLocked).
//
// Freed spans coalesce with free neighbours of the same kind, found through the page map (a free
// span records itself at its first and last page). Backed free spans go back to the OS (madvise),
// oldest first, once nobody reused them for kReleaseDelayMs, and at once while backed memory
// exceeds the recent peak of in-use memory by more than kMaxBackedFreeSlack. Address space goes
// back too (munmap), whole 2 MiB regions of free spans, when the OS refuses to map more (an
// address-space limit) and on Trim.
//
// A large block can grow in place into a free span that follows it, and shrink in place (its tail
// freed). One lock; it is never held across the heap's own mmap, munmap or madvise (only across
// the mmap of a new metadata chunk, when a split needs a Span and the arena has run out).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"
#include "metadata.h"
#include "page_map.h"
#include "span.h"
#include "spinlock.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

struct PageHeapStats {
  std::size_t mapped_bytes;
  std::size_t free_backed_bytes;
  std::size_t free_released_bytes;  // mapped and never touched, or given back with madvise
  std::size_t in_use_bytes;         // spans handed out (small-object spans and large blocks)
  std::size_t large_in_use_bytes;
  std::size_t spans_in_use;
};

// What the pages of a span given back hold.
enum class FreedPages {
  kRecent,  // the program's data, just freed: kept warm for the release delay
  kIdle,    // the program's data, unused for a release delay already: goes back at the next look
  kZero,    // nothing: their contents moved elsewhere (OsMovePages), they cost no memory
};

class PageHeap {
 public:
  static constexpr std::size_t kMaxExactPages = 128;  // 1 MiB

  // The allocator's own page heap is a static object that no constructor writes (its lists are
  // all zero bytes, see SpanList), attached to the page map and the span pool at start-up.
  constexpr PageHeap() = default;
  PageHeap(PageMap& page_map, FixedPool<Span>& span_pool);
  void Attach(PageMap* page_map, FixedPool<Span>* span_pool);
  PageHeap(const PageHeap&) = delete;
  PageHeap& operator=(const PageHeap&) = delete;

  // A span of exactly `pages` pages in `state` (kSmall or kLarge), its first and last page
  // recorded in the page map (the central cache records the rest). nullptr when the OS refuses.
  // `room`: pages to leave free right after it where that costs only address space, so that the
  // span can grow in place later (a buffer grown by realloc).
  Span* New(std::size_t pages, SpanState state, std::size_t room = 0);
  // Same, with the first page a multiple of `align_pages` (a power of two).
  Span* NewAligned(std::size_t pages, std::size_t align_pages, SpanState state);
  // Gives a span back: coalesces, and may release memory to the OS.
  void Delete(Span* span, FreedPages pages = FreedPages::kRecent);
  // A kLarge span to `pages` pages, in place: grows into the free span that follows it (if it is
  // big enough), or frees its tail. false (span unchanged) when it cannot.
  bool Resize(Span* span, std::size_t pages);

  // Releases what has been free for longer than the delay (the clock: slow paths and the
  // release thread call it).
  void ReleaseExpired();
  // Releases every free page now, and unmaps every whole free region (malloc_trim).
  void Trim();
  // In a fork's child, with the lock reset: the spans that were being released come back.
  void AfterForkChild();
  // Free memory still backed, and when its oldest span's delay runs out (0: none).
  std::size_t FreeBackedBytes() const {
    return free_backed_pages_.load(std::memory_order_relaxed) << kPageShift;
  }
  std::uint64_t NextExpiryMs();

  // Small-object spans are counted apart from large blocks (stats only).
  void AccountLarge(std::ptrdiff_t bytes) {
    large_in_use_bytes_.fetch_add(static_cast<std::size_t>(bytes), std::memory_order_relaxed);
  }

  PageHeapStats Stats() const;
  SpinLock& lock() { return lock_; }

  // Free spans of a given length right now (tests of split and coalesce).
  std::size_t FreeSpansOfLength(std::size_t pages, bool released);

 private:
  static constexpr int kFirstBinShift = 7;  // bin 0: 128..255 pages (only 129.. are there)
  static constexpr int kBins = kPageNumberBits - kFirstBinShift + 1;
  static constexpr int kBinScan = 8;  // spans of a request's own bin looked at for a best fit

  static int BinOf(std::size_t pages) { return 63 - __builtin_clzll(pages) - kFirstBinShift; }

  Span* NewLocked(std::size_t pages, SpanState state, std::size_t room);
  Span* TakeBestFitLocked(std::size_t pages);
  Span* TakeFitLocked(std::size_t pages, bool released);
  Span* TakeAlignedFitLocked(std::size_t pages, std::size_t align_pages);
  Span* TakeMixedRunLocked(std::size_t pages);
  Span* TakeRunLocked(Span* first, std::size_t pages);
  // The free span just before / after `span` in the address space, if there is one.
  Span* FreeBefore(const Span* span) const;
  Span* FreeAfter(const Span* span) const;
  Span* HandOutLocked(Span* span, std::size_t pages, SpanState state);
  void InsertLocked(Span* span);
  void RemoveLocked(Span* span);
  Span* SplitTailLocked(Span* span, std::size_t keep_pages);
  Span* CoalesceLocked(Span* span);
  void FreeLocked(Span* span, FreedPages pages);
  void ReleaseLocked(std::uint64_t now);
  bool ReleaseSpanLocked(Span* victim);
  bool Grow(std::size_t pages);
  // Unmaps the whole 2 MiB regions inside free spans; the bytes unmapped.
  std::size_t UnmapFreeRegions();
  void CountFree(const Span* span, std::ptrdiff_t sign);
  void LruUnlink(Span* span);
  void LruInsert(Span* span, bool as_oldest);
  void CountInUse(std::size_t pages);

  SpanList& ListFor(std::size_t pages, bool released) {
    return pages <= kMaxExactPages ? exact_[released][pages] : bins_[released][BinOf(pages)];
  }
  void MarkNonEmpty(std::size_t pages, bool released);
  void MarkIfEmpty(std::size_t pages, bool released);

  PageMap* page_map_ = nullptr;
  FixedPool<Span>* span_pool_ = nullptr;
  SpinLock lock_;
  SpanList exact_[2][kMaxExactPages + 1];
  SpanList bins_[2][kBins];
  // Bit n of nonempty_[released]: exact_[released][n] has a span; of bins_nonempty_: bins_.
  std::uint64_t nonempty_[2][(kMaxExactPages + 1 + 63) / 64] = {};
  std::uint64_t bins_nonempty_[2] = {};
  // Backed free spans by age, newest to oldest through lru_next.
  Span* lru_newest_ = nullptr;
  Span* lru_oldest_ = nullptr;

  // Written under lock_, read by Stats() without it.
  std::atomic<std::size_t> mapped_bytes_{0};
  std::atomic<std::size_t> free_backed_pages_{0};
  std::atomic<std::size_t> free_released_pages_{0};
  std::atomic<std::size_t> in_use_pages_{0};
  std::atomic<std::size_t> spans_in_use_{0};
  std::atomic<std::size_t> large_in_use_bytes_{0};
  // Peak of in-use pages in the current window of kReleaseDelayMs and in the one before.
  std::size_t window_peak_pages_ = 0;
  std::size_t previous_window_peak_pages_ = 0;
  std::uint64_t window_start_ms_ = 0;
  SpanList releasing_;  // spans in kReleasing: being given back, with the lock dropped
  // Reuse: pages handed out from backed free spans in the current reuse window and in the one
  // before. Free memory up to the larger of the two stays backed past the release delay: a
  // program that frees and reallocates big blocks (buffers, a request's arena) keeps them warm
  // even when it is slowed down (a loaded machine stretches its steps over several delays),
  // while one that stopped reusing has the estimate fall to zero within two windows.
  static constexpr std::uint64_t kReuseWindowMs = 10 * kReleaseDelayMs;
  std::size_t reused_pages_ = 0;
  std::size_t previous_reused_pages_ = 0;
  std::uint64_t reuse_window_start_ms_ = 0;
  // Releases the program undid: pages given back to the OS in the current reuse window and in
  // the one before that it has not taken again yet. A hand-out of released pages counts as reuse
  // up to these: the program wanted back memory the heap had just given away (a madvise and the
  // page faults for nothing), so the next wave of the same size stays backed. Beyond them,
  // released pages are new memory (a region just mapped): growth, not reuse.
  std::size_t released_pages_ = 0;
  std::size_t previous_released_pages_ = 0;
  std::size_t UndoReleaseLocked(std::size_t pages);
  std::size_t ReuseEstimateLocked() const {
    return reused_pages_ > previous_reused_pages_ ? reused_pages_ : previous_reused_pages_;
  }
  // The program is past its peak: more memory is free than in use, beyond what it reused lately
  // and kMaxBackedFreeSlack. Such memory goes back at once, not a delay later, by whichever thread
  // looks first (as glibc gives its big blocks back inside free).
  bool PastPeakLocked() const {
    return free_backed_pages_.load(std::memory_order_relaxed) >
           in_use_pages_.load(std::memory_order_relaxed) + MarginLocked();
  }
  // Free pages allowed beyond the peak (or beyond what is in use): the slack, or what the program
  // reused lately where that is more.
  std::size_t MarginLocked() const {
    const std::size_t keep = ReuseEstimateLocked();
    const std::size_t slack = kMaxBackedFreeSlack >> kPageShift;
    return keep > slack ? keep : slack;
  }
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
