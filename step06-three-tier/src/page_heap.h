// PageHeap: the bottom tier. Owns every page the allocator mapped and hands out runs of pages
// (spans) to the central cache (for small objects) and to the user (for blocks over 256 KiB).
//
//   free lists by length:  [1] [2] [3] ... [128]   exact lengths, found with a bitmap
//                          [>128]                   best fit by scanning (few, after coalescing)
//   each twice: spans still backed by memory, and spans whose pages went back to the OS
//
// Freed spans coalesce with free neighbours of the same kind, found through the page map (a
// free span records itself at its first and last page). Backed free spans go back to the OS
// (madvise) when nobody reused them for kReleaseDelayMs, and at once, largest first, while
// backed memory exceeds the recent peak of in-use memory by more than kMaxBackedFreeSlack.
// One lock; it is never held across mmap (Grow) or madvise (ReleaseLocked).
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

class PageHeap {
 public:
  static constexpr std::size_t kMaxExactPages = 128;  // 1 MiB

  PageHeap(PageMap& page_map, FixedPool<Span>& span_pool);
  PageHeap(const PageHeap&) = delete;
  PageHeap& operator=(const PageHeap&) = delete;

  // A span of exactly `pages` pages in `state` (kSmall or kLarge), its first and last page
  // recorded in the page map (the central cache records the rest). nullptr when the OS refuses.
  Span* New(std::size_t pages, SpanState state);
  // Same, with the first page a multiple of `align_pages` (a power of two).
  Span* NewAligned(std::size_t pages, std::size_t align_pages, SpanState state);
  // Gives a span back: coalesces, and may release memory to the OS. `long_idle`: its memory
  // has not been used for a release delay already (it may go back to the OS at the next look).
  void Delete(Span* span, bool long_idle = false);
  // Releases what has been free for longer than the delay (no clock thread: called on thread
  // exit and tierpool_thread_flush, besides every Delete). `look_now`: even if the last look
  // was less than a quarter of the delay ago.
  void ReleaseExpired(bool look_now = false);

  // Small-object spans are counted apart from large blocks (stats only).
  void AccountLarge(std::ptrdiff_t bytes) {
    large_in_use_bytes_.fetch_add(static_cast<std::size_t>(bytes), std::memory_order_relaxed);
  }

  PageHeapStats Stats() const;
  SpinLock& lock() { return lock_; }

  // Free spans of a given length right now (tests of split and coalesce).
  std::size_t FreeSpansOfLength(std::size_t pages, bool released);

 private:
  Span* TakeBestFitLocked(std::size_t pages);
  Span* HandOutLocked(Span* span, std::size_t pages, SpanState state);
  void InsertLocked(Span* span);
  void RemoveLocked(Span* span);
  Span* SplitTailLocked(Span* span, std::size_t keep_pages);
  Span* CoalesceLocked(Span* span);
  void ReleaseLocked();
  void ReleaseSpanLocked(Span* victim);
  bool Grow(std::size_t pages);
  void CountFree(const Span* span, std::ptrdiff_t sign);

  SpanList& ListFor(std::size_t pages, bool released) {
    return pages <= kMaxExactPages ? exact_[released][pages] : large_[released];
  }

  PageMap& page_map_;
  FixedPool<Span>& span_pool_;
  SpinLock lock_;
  SpanList exact_[2][kMaxExactPages + 1];
  SpanList large_[2];
  // Bit n of nonempty_[released]: exact_[released][n] has a span.
  std::uint64_t nonempty_[2][(kMaxExactPages + 1 + 63) / 64] = {};

  // Written under lock_, read by Stats() without it.
  std::atomic<std::size_t> mapped_bytes_{0};
  std::atomic<std::size_t> free_backed_pages_{0};
  std::atomic<std::size_t> free_released_pages_{0};
  std::atomic<std::size_t> in_use_pages_{0};
  std::atomic<std::size_t> spans_in_use_{0};
  std::atomic<std::size_t> large_in_use_bytes_{0};
  std::uint64_t last_expiry_scan_ms_ = 0;
  // Peak of in-use pages in the current window of kReleaseDelayMs and in the one before.
  std::size_t window_peak_pages_ = 0;
  std::size_t previous_window_peak_pages_ = 0;
  std::uint64_t window_start_ms_ = 0;
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
