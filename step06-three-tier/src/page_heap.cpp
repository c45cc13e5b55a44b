#include "page_heap.h"

#include <new>

#include "memory_tools.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

PageHeap::PageHeap(PageMap& page_map, FixedPool<Span>& span_pool)
    : page_map_(page_map), span_pool_(span_pool) {}

Span* PageHeap::New(std::size_t pages, SpanState state) {
  for (;;) {
    SpinLockHolder hold(lock_);
    if (Span* span = TakeBestFitLocked(pages)) return HandOutLocked(span, pages, state);
    lock_.Unlock();
    const bool grew = Grow(pages);
    lock_.Lock();
    if (!grew) return nullptr;
  }
}

Span* PageHeap::NewAligned(std::size_t pages, std::size_t align_pages, SpanState state) {
  if (align_pages <= 1) return New(pages, state);
  const std::size_t needed = pages + align_pages - 1;
  if (needed < pages) return nullptr;
  for (;;) {
    SpinLockHolder hold(lock_);
    if (Span* span = TakeBestFitLocked(needed)) {
      const std::uintptr_t aligned = (span->first_page + align_pages - 1) & ~(align_pages - 1);
      if (aligned > span->first_page) {
        Span* rest = SplitTailLocked(span, aligned - span->first_page);
        InsertLocked(span);  // the unaligned front goes back, split off or not
        if (rest == nullptr) return nullptr;
        span = rest;
      }
      return HandOutLocked(span, pages, state);
    }
    lock_.Unlock();
    const bool grew = Grow(needed);
    lock_.Lock();
    if (!grew) return nullptr;
  }
}

// Trims `span` (taken out of the lists) to `pages`, the rest going back to the lists, and marks
// it in use. nullptr (and the span back in the lists) when there is no metadata for the rest.
Span* PageHeap::HandOutLocked(Span* span, std::size_t pages, SpanState state) {
  if (span->num_pages > pages) {
    Span* tail = SplitTailLocked(span, pages);
    if (tail == nullptr) {
      InsertLocked(span);
      return nullptr;
    }
    InsertLocked(tail);
  }
  // Set before the lock drops: a neighbour's Delete must never see this span as free.
  span->state = state;
  span->released = false;
  const std::size_t in_use =
      in_use_pages_.fetch_add(span->num_pages, std::memory_order_relaxed) + span->num_pages;
  if (in_use > window_peak_pages_) window_peak_pages_ = in_use;
  spans_in_use_.fetch_add(1, std::memory_order_relaxed);
  return span;
}

void PageHeap::Delete(Span* span, bool long_idle) {
  lock_.Lock();
  in_use_pages_.fetch_sub(span->num_pages, std::memory_order_relaxed);
  spans_in_use_.fetch_sub(1, std::memory_order_relaxed);
  span->state = SpanState::kFree;
  span->released = false;
  span->free_since_ms = long_idle ? 0 : NowMs();
  span = CoalesceLocked(span);
  InsertLocked(span);
  ReleaseLocked();
  lock_.Unlock();
}

void PageHeap::ReleaseExpired(bool look_now) {
  SpinLockHolder hold(lock_);
  if (look_now) last_expiry_scan_ms_ = 0;
  ReleaseLocked();
}

// Smallest span that fits; among exact lengths, backed memory before released memory.
Span* PageHeap::TakeBestFitLocked(std::size_t pages) {
  if (pages <= kMaxExactPages) {
    for (std::size_t word = pages / 64; word < std::size(nonempty_[0]); ++word) {
      std::uint64_t bits = nonempty_[0][word] | nonempty_[1][word];
      if (word == pages / 64) bits &= ~std::uint64_t{0} << (pages % 64);
      if (bits == 0) continue;
      const std::size_t length = word * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
      Span* span = exact_[0][length].first();
      if (span == nullptr) span = exact_[1][length].first();
      RemoveLocked(span);
      return span;
    }
  }
  Span* best = nullptr;
  for (SpanList& list : large_) {
    for (Span* s = list.begin(); s != list.end(); s = s->next) {
      if (s->num_pages >= pages && (best == nullptr || s->num_pages < best->num_pages)) best = s;
    }
  }
  if (best != nullptr) RemoveLocked(best);
  return best;
}

void PageHeap::InsertLocked(Span* span) {
  span->state = SpanState::kFree;
  ListFor(span->num_pages, span->released).PushFront(span);
  if (span->num_pages <= kMaxExactPages) {
    nonempty_[span->released][span->num_pages / 64] |= std::uint64_t{1} << (span->num_pages % 64);
  }
  page_map_.Set(span->first_page, span);
  page_map_.Set(span->last_page(), span);
  CountFree(span, +1);
}

void PageHeap::RemoveLocked(Span* span) {
  SpanList::Remove(span);
  if (span->num_pages <= kMaxExactPages && exact_[span->released][span->num_pages].empty()) {
    nonempty_[span->released][span->num_pages / 64] &=
        ~(std::uint64_t{1} << (span->num_pages % 64));
  }
  CountFree(span, -1);
}

// Cuts `span` (taken out of the lists) after `keep_pages`; returns the tail, not in any list,
// with its first and last page recorded. nullptr when no metadata is left (span unchanged).
Span* PageHeap::SplitTailLocked(Span* span, std::size_t keep_pages) {
  Span* tail = span_pool_.New();
  if (tail == nullptr) return nullptr;
  tail->first_page = span->first_page + keep_pages;
  tail->num_pages = span->num_pages - keep_pages;
  tail->released = span->released;
  tail->free_since_ms = span->free_since_ms;
  tail->state = SpanState::kFree;
  span->num_pages = keep_pages;
  page_map_.Set(span->first_page, span);
  page_map_.Set(span->last_page(), span);
  page_map_.Set(tail->first_page, tail);
  page_map_.Set(tail->last_page(), tail);
  return tail;
}

// Merges `span` (not in a list) with free neighbours of the same kind. Backed and released
// spans stay apart, so the counters stay exact and a released range never looks backed.
Span* PageHeap::CoalesceLocked(Span* span) {
  if (span->first_page > 0) {
    Span* prev = page_map_.Get(span->first_page - 1);
    if (prev != nullptr && prev->state == SpanState::kFree && prev->released == span->released) {
      RemoveLocked(prev);
      span->first_page = prev->first_page;
      span->num_pages += prev->num_pages;
      if (prev->free_since_ms > span->free_since_ms) span->free_since_ms = prev->free_since_ms;
      span_pool_.Delete(prev);
    }
  }
  Span* next = page_map_.Get(span->first_page + span->num_pages);
  if (next != nullptr && next->state == SpanState::kFree && next->released == span->released) {
    RemoveLocked(next);
    span->num_pages += next->num_pages;
    if (next->free_since_ms > span->free_since_ms) span->free_since_ms = next->free_since_ms;
    span_pool_.Delete(next);
  }
  return span;
}

// Gives memory back to the OS: first, largest spans first, while backed memory (in use and
// free) exceeds the recent peak in use by more than the slack; then every span free for longer
// than the delay (looked for at most four times per delay). The lock is dropped around each
// madvise.
void PageHeap::ReleaseLocked() {
  const std::uint64_t now = NowMs();
  const std::size_t in_use_now = in_use_pages_.load(std::memory_order_relaxed);
  if (now - window_start_ms_ >= kReleaseDelayMs) {
    previous_window_peak_pages_ = window_peak_pages_;
    window_peak_pages_ = in_use_now;
    window_start_ms_ = now;
  }
  for (;;) {
    const std::size_t backed = free_backed_pages_.load(std::memory_order_relaxed);
    const std::size_t in_use = in_use_pages_.load(std::memory_order_relaxed);
    const std::size_t peak = window_peak_pages_ > previous_window_peak_pages_
                                 ? window_peak_pages_
                                 : previous_window_peak_pages_;
    if (in_use + backed <= peak + (kMaxBackedFreeSlack >> kPageShift)) break;
    Span* victim = nullptr;
    for (Span* s = large_[0].begin(); s != large_[0].end(); s = s->next) {
      if (victim == nullptr || s->num_pages > victim->num_pages) victim = s;
    }
    for (std::size_t word = std::size(nonempty_[0]); victim == nullptr && word-- > 0;) {
      if (nonempty_[0][word] != 0) {
        const std::size_t length =
            word * 64 + 63 - static_cast<std::size_t>(__builtin_clzll(nonempty_[0][word]));
        victim = exact_[0][length].first();
      }
    }
    if (victim == nullptr) break;
    ReleaseSpanLocked(victim);
  }
  if (now - last_expiry_scan_ms_ < kReleaseDelayMs / 4) return;
  last_expiry_scan_ms_ = now;
  for (;;) {
    Span* victim = nullptr;
    for (SpanList& list : exact_[0]) {
      for (Span* s = list.begin(); s != list.end() && victim == nullptr; s = s->next) {
        if (now - s->free_since_ms >= kReleaseDelayMs) victim = s;
      }
    }
    for (Span* s = large_[0].begin(); s != large_[0].end() && victim == nullptr; s = s->next) {
      if (now - s->free_since_ms >= kReleaseDelayMs) victim = s;
    }
    if (victim == nullptr) return;
    ReleaseSpanLocked(victim);
  }
}

// madvise without the lock; meanwhile the span is kReleasing, so no one merges with it or hands
// it out. Afterwards it joins the released spans (and merges with released neighbours).
void PageHeap::ReleaseSpanLocked(Span* victim) {
  RemoveLocked(victim);
  victim->state = SpanState::kReleasing;
  lock_.Unlock();
  OsRelease(victim->start(), victim->bytes());
  lock_.Lock();
  victim->released = true;
  victim->state = SpanState::kFree;
  InsertLocked(CoalesceLocked(victim));
}

bool PageHeap::Grow(std::size_t pages) {
  const std::size_t wanted = ((pages << kPageShift) + kRegionSize - 1) & ~(kRegionSize - 1);
  if (wanted < (pages << kPageShift) || wanted > kMaxRequest + kRegionSize) return false;
  Span* span = span_pool_.New();
  if (span == nullptr) return false;
  std::size_t bytes = wanted > kMinGrowBytes ? wanted : kMinGrowBytes;
  void* memory = OsMap(bytes, kRegionSize);
  if (memory == nullptr && bytes > wanted) {  // near a limit: ask for no more than needed
    bytes = wanted;
    memory = OsMap(bytes, kRegionSize);
  }
  const auto first = reinterpret_cast<std::uintptr_t>(memory) >> kPageShift;
  if (memory == nullptr || !page_map_.Ensure(first, bytes >> kPageShift)) {
    if (memory != nullptr) OsUnmap(memory, bytes);
    span_pool_.Delete(span);
    return false;
  }
  page_map_.MarkMapped(reinterpret_cast<std::uintptr_t>(memory), bytes);
  MarkUnusable(memory, bytes);
  SpinLockHolder hold(lock_);
  mapped_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  span->first_page = first;
  span->num_pages = bytes >> kPageShift;
  span->released = true;  // never touched: costs no memory yet
  span->state = SpanState::kFree;
  InsertLocked(CoalesceLocked(span));
  return true;
}

void PageHeap::CountFree(const Span* span, std::ptrdiff_t sign) {
  auto& counter = span->released ? free_released_pages_ : free_backed_pages_;
  counter.fetch_add(static_cast<std::size_t>(sign) * span->num_pages, std::memory_order_relaxed);
}

PageHeapStats PageHeap::Stats() const {
  PageHeapStats stats{};
  stats.mapped_bytes = mapped_bytes_.load(std::memory_order_relaxed);
  stats.free_backed_bytes = free_backed_pages_.load(std::memory_order_relaxed) << kPageShift;
  stats.free_released_bytes = free_released_pages_.load(std::memory_order_relaxed) << kPageShift;
  stats.in_use_bytes = in_use_pages_.load(std::memory_order_relaxed) << kPageShift;
  stats.large_in_use_bytes = large_in_use_bytes_.load(std::memory_order_relaxed);
  stats.spans_in_use = spans_in_use_.load(std::memory_order_relaxed);
  return stats;
}

std::size_t PageHeap::FreeSpansOfLength(std::size_t pages, bool released) {
  SpinLockHolder hold(lock_);
  std::size_t count = 0;
  SpanList& list = ListFor(pages, released);
  for (Span* s = list.begin(); s != list.end(); s = s->next)
    count += s->num_pages == pages;
  return count;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
