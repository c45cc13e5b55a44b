#include "page_heap.h"

#include <sched.h>

#include <new>

#include "memory_tools.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {
// The age list of backed free spans threads through Span::lru_next (towards the oldest) and
// lru_prev (towards the newest).
void PageHeap::LruUnlink(Span* span) {
  (span->lru_prev != nullptr ? span->lru_prev->lru_next : lru_newest_) = span->lru_next;
  (span->lru_next != nullptr ? span->lru_next->lru_prev : lru_oldest_) = span->lru_prev;
  span->lru_next = span->lru_prev = nullptr;
}
void PageHeap::LruInsert(Span* span, bool as_oldest) {
  Span*& end = as_oldest ? lru_oldest_ : lru_newest_;
  Span*& other_end = as_oldest ? lru_newest_ : lru_oldest_;
  (as_oldest ? span->lru_prev : span->lru_next) = end;
  (as_oldest ? span->lru_next : span->lru_prev) = nullptr;
  if (end != nullptr) {
    (as_oldest ? end->lru_next : end->lru_prev) = span;
  } else {
    other_end = span;
  }
  end = span;
}

PageHeap::PageHeap(PageMap& page_map, FixedPool<Span>& span_pool) {
  Attach(&page_map, &span_pool);
}

void PageHeap::Attach(PageMap* page_map, FixedPool<Span>* span_pool) {
  page_map_ = page_map;
  span_pool_ = span_pool;
}

Span* PageHeap::New(std::size_t pages, SpanState state, std::size_t room) {
  if (pages + room < pages) room = 0;
  SpinLockHolder hold(lock_);
  Span* span = NewLocked(pages, state, room);
  // The room is a wish: where it costs more than address space the OS may refuse, the block
  // itself may not.
  if (span == nullptr && room > 0) span = NewLocked(pages, state, 0);
  return span;
}

Span* PageHeap::NewLocked(std::size_t pages, SpanState state, std::size_t room) {
  bool unmapped = false;
  for (;;) {
    if (Span* span = TakeBestFitLocked(pages + room)) return HandOutLocked(span, pages, state);
    if (Span* span = TakeMixedRunLocked(pages + room)) return HandOutLocked(span, pages, state);
    lock_.Unlock();
    bool grew = Grow(pages + room);
    // Refused: maybe an address-space limit that free regions of ours are using up.
    if (!grew && !unmapped) {
      unmapped = true;
      grew = UnmapFreeRegions() > 0 && Grow(pages + room);
    }
    lock_.Lock();
    if (!grew) return nullptr;
  }
}

Span* PageHeap::NewAligned(std::size_t pages, std::size_t align_pages, SpanState state) {
  if (align_pages <= 1) return New(pages, state);
  const std::size_t needed = pages + align_pages - 1;
  if (needed < pages) return nullptr;
  bool unmapped = false;
  for (;;) {
    SpinLockHolder hold(lock_);
    // Any span of `needed` pages holds an aligned run of `pages`; a shorter one may too, where
    // its first page lies on the boundary or just before it (the block freed a moment ago that
    // asked for the same alignment): looked for before the heap grows, so that memory a program
    // freed serves it again when the OS has none left.
    Span* span = TakeBestFitLocked(needed);
    if (span == nullptr) span = TakeAlignedFitLocked(pages, align_pages);
    if (span != nullptr) {
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
    // The OS's regions start on a 2 MiB boundary: up to that alignment, the pages alone do (the
    // grown span starts aligned), which matters when memory is short.
    const std::size_t grow = align_pages <= (kRegionSize >> kPageShift) ? pages : needed;
    bool grew = Grow(grow);
    if (!grew && !unmapped) {  // as New: free regions of ours may be what the limit counts
      unmapped = true;
      grew = UnmapFreeRegions() > 0 && Grow(grow);
    }
    lock_.Lock();
    if (!grew) return nullptr;
  }
}

// Any free span that holds `pages` from an aligned first page (TakeBestFitLocked, which looks for
// pages + align_pages - 1, found none): backed ones first. Every free span of `pages` pages or
// more may be looked at, a scan linear in the free spans, so only where the heap would grow.
Span* PageHeap::TakeAlignedFitLocked(std::size_t pages, std::size_t align_pages) {
  for (const bool released : {false, true}) {
    for (std::size_t i = 0; i <= kMaxExactPages + kBins; ++i) {
      if (i <= kMaxExactPages && i < pages) continue;
      SpanList& list =
          i <= kMaxExactPages ? exact_[released][i] : bins_[released][i - kMaxExactPages - 1];
      for (Span* s = list.first(); s != nullptr; s = s->next) {
        const std::uintptr_t aligned = (s->first_page + align_pages - 1) & ~(align_pages - 1);
        if (aligned + pages <= s->first_page + s->num_pages) {
          RemoveLocked(s);
          return s;
        }
      }
    }
  }
  return nullptr;
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
  reused_pages_ += span->released ? UndoReleaseLocked(span->num_pages) : span->num_pages;
  span->zeroed = span->released;
  span->released = false;
  CountInUse(span->num_pages);
  spans_in_use_.fetch_add(1, std::memory_order_relaxed);
  return span;
}

void PageHeap::CountInUse(std::size_t pages) {
  const std::size_t in_use = in_use_pages_.fetch_add(pages, std::memory_order_relaxed) + pages;
  if (in_use > window_peak_pages_) window_peak_pages_ = in_use;
}

void PageHeap::Delete(Span* span, FreedPages pages) {
  SpinLockHolder hold(lock_);
  in_use_pages_.fetch_sub(span->num_pages, std::memory_order_relaxed);
  spans_in_use_.fetch_sub(1, std::memory_order_relaxed);
  FreeLocked(span, pages);
}

// `span` (in no list, not counted in use) becomes free.
void PageHeap::FreeLocked(Span* span, FreedPages pages) {
  const std::uint64_t now = NowMs();
  span->state = SpanState::kFree;
  span->released = pages == FreedPages::kZero;
  span->free_since_ms = pages == FreedPages::kRecent ? now : 0;
  InsertLocked(CoalesceLocked(span));
  ReleaseLocked(now);
}

bool PageHeap::Resize(Span* span, std::size_t pages) {
  SpinLockHolder hold(lock_);
  if (pages > span->num_pages) {
    Span* next = FreeAfter(span);
    if (next == nullptr || span->num_pages + next->num_pages < pages) return false;
    RemoveLocked(next);
    const std::size_t extra = pages - span->num_pages;
    if (next->num_pages > extra) {  // the rest of the neighbour stays free, a little shorter
      next->first_page += extra;
      next->num_pages -= extra;
      page_map_->Set(next->first_page, next);
      InsertLocked(next);
    } else {
      span_pool_->Delete(next);
    }
    span->num_pages = pages;
    page_map_->Set(span->last_page(), span);
    CountInUse(extra);
    return true;
  }
  if (pages == span->num_pages) return true;
  Span* tail = SplitTailLocked(span, pages);
  if (tail == nullptr) return false;
  in_use_pages_.fetch_sub(tail->num_pages, std::memory_order_relaxed);
  FreeLocked(tail, FreedPages::kRecent);
  return true;
}

void PageHeap::ReleaseExpired() {
  SpinLockHolder hold(lock_);
  ReleaseLocked(NowMs());
}

// A span another thread was giving back when the process forked is in no list here, and that
// thread does not exist: it comes back as a free span, backed (whether or not the kernel had
// dropped its pages, it is free), or Trim would wait for it for ever and its pages be lost.
void PageHeap::AfterForkChild() {
  SpinLockHolder hold(lock_);
  while (Span* span = releasing_.first()) {
    releasing_.Remove(span);
    span->released = false;
    span->state = SpanState::kFree;
    span->free_since_ms = NowMs();
    InsertLocked(CoalesceLocked(span));
  }
}

std::uint64_t PageHeap::NextExpiryMs() {
  SpinLockHolder hold(lock_);
  if (lru_oldest_ == nullptr) return 0;
  if (PastPeakLocked()) return 1;  // due now
  const std::uint64_t expiry = lru_oldest_->free_since_ms + kReleaseDelayMs;
  // Kept for reuse: nothing is due before the reuse window ends.
  if (free_backed_pages_.load(std::memory_order_relaxed) <= ReuseEstimateLocked()) {
    const std::uint64_t end = reuse_window_start_ms_ + kReuseWindowMs;
    return end > expiry ? end : expiry;
  }
  return expiry;
}

void PageHeap::Trim() {
  {
    SpinLockHolder hold(lock_);
    while (lru_oldest_ != nullptr && ReleaseSpanLocked(lru_oldest_)) {
    }
    // The program says it is done with its memory: what it reused or took back lately is no
    // estimate of what it will want.
    previous_reused_pages_ = reused_pages_ = 0;
    previous_released_pages_ = released_pages_ = 0;
    // Spans another thread (the release thread) is giving back right now are out of the lists:
    // the caller is promised they are gone when this returns, so wait for them.
    while (!releasing_.empty()) {
      lock_.Unlock();
      sched_yield();
      lock_.Lock();
    }
  }
  UnmapFreeRegions();
}

// Backed memory first, released memory only when no backed span fits: a backed span costs no
// page fault, and the part of it left over stays backed for the next request. (Smallest fit
// over both kinds at once handed a 20 MiB request the released 20 MiB span beside a backed
// 30 MiB one: 5000 page faults instead of none, for every block of a program that churns
// blocks of several MiB.)
Span* PageHeap::TakeBestFitLocked(std::size_t pages) {
  if (Span* span = TakeFitLocked(pages, false)) return span;
  return TakeFitLocked(pages, true);
}

// The smallest exact length that fits; past the exact lengths, the best fit among the first
// kBinScan spans of the request's own bin, else the first span of the next bin that has one
// (all of them fit).
Span* PageHeap::TakeFitLocked(std::size_t pages, bool released) {
  Span* best = nullptr;
  if (pages <= kMaxExactPages) {
    for (std::size_t word = pages / 64; word < std::size(nonempty_[released]); ++word) {
      std::uint64_t bits = nonempty_[released][word];
      if (word == pages / 64) bits &= ~std::uint64_t{0} << (pages % 64);
      if (bits == 0) continue;
      best = exact_[released][word * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))].first();
      break;
    }
  }
  const int own = pages > kMaxExactPages ? BinOf(pages) : -1;
  if (best == nullptr && own >= 0) {
    int looked = 0;
    for (Span* s = bins_[released][own].first(); s != nullptr && looked < kBinScan;
         s = s->next, ++looked) {
      if (s->num_pages >= pages && (best == nullptr || s->num_pages < best->num_pages)) best = s;
    }
  }
  if (best == nullptr) {
    const std::uint64_t above = own + 1 >= 64 ? 0 : ~std::uint64_t{0} << (own + 1);
    const std::uint64_t bins = bins_nonempty_[released] & above;
    if (bins == 0) return nullptr;
    best = bins_[released][__builtin_ctzll(bins)].first();
  }
  RemoveLocked(best);
  return best;
}

Span* PageHeap::FreeBefore(const Span* span) const {
  if (span->first_page == 0) return nullptr;
  Span* prev = page_map_->Get(span->first_page - 1);
  return prev != nullptr && prev->state == SpanState::kFree &&
                 prev->first_page + prev->num_pages == span->first_page
             ? prev
             : nullptr;
}

Span* PageHeap::FreeAfter(const Span* span) const {
  const std::uintptr_t after = span->first_page + span->num_pages;
  Span* next = page_map_->Get(after);
  return next != nullptr && next->state == SpanState::kFree && next->first_page == after ? next
                                                                                         : nullptr;
}

// No free span is long enough, but backed and released spans lying side by side may be: they
// never merge (a released range must never look backed), and without this the heap grew beside
// them (two threads replacing blocks of up to 32 MiB mapped 1.7 GB for 256 MiB in use). Every
// such run holds a released span, so the search starts from those, once per growth, and reads
// each run once: from its first released piece (a run met from a later one is skipped).
Span* PageHeap::TakeMixedRunLocked(std::size_t pages) {
  for (std::size_t i = 0; i <= kMaxExactPages + kBins; ++i) {
    SpanList& list = i <= kMaxExactPages ? exact_[1][i] : bins_[1][i - kMaxExactPages - 1];
    for (Span* s = list.first(); s != nullptr; s = s->next) {
      Span* first = s;
      Span* prev = FreeBefore(first);
      for (; prev != nullptr && !prev->released; prev = FreeBefore(first))
        first = prev;
      if (prev != nullptr) continue;  // a released piece before this one starts the run
      std::size_t run = 0;
      for (const Span* piece = first; piece != nullptr && run < pages; piece = FreeAfter(piece))
        run += piece->num_pages;
      if (run >= pages) return TakeRunLocked(first, pages);
    }
  }
  return nullptr;
}

// Takes the free spans from `first` on until they hold `pages`, the last one cut to fit (its rest
// stays free, of its own kind), and joins them into one span, backed in part.
Span* PageHeap::TakeRunLocked(Span* first, std::size_t pages) {
  Span* run = nullptr;
  for (Span* piece = first; run == nullptr || run->num_pages < pages;) {
    Span* next = FreeAfter(piece);
    RemoveLocked(piece);
    const std::size_t want = pages - (run == nullptr ? 0 : run->num_pages);
    if (piece->num_pages > want) {
      if (Span* rest = SplitTailLocked(piece, want)) InsertLocked(rest);
    }
    if (run == nullptr) {
      run = piece;
    } else {
      run->num_pages += piece->num_pages;
      span_pool_->Delete(piece);
    }
    piece = next;
  }
  run->released = false;  // so calloc clears it all
  page_map_->Set(run->first_page, run);
  page_map_->Set(run->last_page(), run);
  return run;
}

void PageHeap::MarkNonEmpty(std::size_t pages, bool released) {
  if (pages <= kMaxExactPages) {
    nonempty_[released][pages / 64] |= std::uint64_t{1} << (pages % 64);
  } else {
    bins_nonempty_[released] |= std::uint64_t{1} << BinOf(pages);
  }
}

void PageHeap::MarkIfEmpty(std::size_t pages, bool released) {
  if (!ListFor(pages, released).empty()) return;
  if (pages <= kMaxExactPages) {
    nonempty_[released][pages / 64] &= ~(std::uint64_t{1} << (pages % 64));
  } else {
    bins_nonempty_[released] &= ~(std::uint64_t{1} << BinOf(pages));
  }
}

void PageHeap::InsertLocked(Span* span) {
  span->state = SpanState::kFree;
  ListFor(span->num_pages, span->released).PushFront(span);
  MarkNonEmpty(span->num_pages, span->released);
  if (!span->released) {
    // Newest first; a span that has been free longer than the newest (the rest of a split, an
    // idle span) goes to the back, where the next look finds it.
    LruInsert(span, lru_newest_ != nullptr && span->free_since_ms < lru_newest_->free_since_ms);
  }
  page_map_->Set(span->first_page, span);
  page_map_->Set(span->last_page(), span);
  CountFree(span, +1);
}

void PageHeap::RemoveLocked(Span* span) {
  ListFor(span->num_pages, span->released).Remove(span);
  MarkIfEmpty(span->num_pages, span->released);
  if (!span->released) LruUnlink(span);
  CountFree(span, -1);
}

// Cuts `span` (taken out of the lists) after `keep_pages`; returns the tail, not in any list,
// with its first and last page recorded. nullptr when no metadata is left (span unchanged).
Span* PageHeap::SplitTailLocked(Span* span, std::size_t keep_pages) {
  Span* tail = span_pool_->New();
  if (tail == nullptr) return nullptr;
  tail->first_page = span->first_page + keep_pages;
  tail->num_pages = span->num_pages - keep_pages;
  tail->released = span->released;
  tail->free_since_ms = span->free_since_ms;
  tail->state = SpanState::kFree;
  span->num_pages = keep_pages;
  page_map_->Set(span->first_page, span);
  page_map_->Set(span->last_page(), span);
  page_map_->Set(tail->first_page, tail);
  page_map_->Set(tail->last_page(), tail);
  return tail;
}

// Merges `span` (not in a list) with free neighbours of the same kind. Backed and released
// spans stay apart, so the counters stay exact and a released range never looks backed.
Span* PageHeap::CoalesceLocked(Span* span) {
  Span* prev = FreeBefore(span);
  if (prev != nullptr && prev->released == span->released) {
    RemoveLocked(prev);
    span->first_page = prev->first_page;
    span->num_pages += prev->num_pages;
    if (prev->free_since_ms > span->free_since_ms) span->free_since_ms = prev->free_since_ms;
    span_pool_->Delete(prev);
  }
  Span* next = FreeAfter(span);
  if (next != nullptr && next->released == span->released) {
    RemoveLocked(next);
    span->num_pages += next->num_pages;
    if (next->free_since_ms > span->free_since_ms) span->free_since_ms = next->free_since_ms;
    span_pool_->Delete(next);
  }
  return span;
}

// Gives memory back to the OS, oldest spans first: while backed memory (in use and free) exceeds
// the recent peak in use by more than the slack, and then every span free for longer than the
// delay. Each look is O(1) per span released: the oldest span is at the back of the age list.
void PageHeap::ReleaseLocked(std::uint64_t now) {
  const std::size_t in_use_now = in_use_pages_.load(std::memory_order_relaxed);
  if (now - window_start_ms_ >= kReleaseDelayMs) {
    previous_window_peak_pages_ = window_peak_pages_;
    window_peak_pages_ = in_use_now;
    window_start_ms_ = now;
  }
  if (now - reuse_window_start_ms_ >= kReuseWindowMs) {
    // A program that stopped reusing its free memory has it back within two reuse windows.
    const bool adjacent = now - reuse_window_start_ms_ < 2 * kReuseWindowMs;
    previous_reused_pages_ = adjacent ? reused_pages_ : 0;
    previous_released_pages_ = adjacent ? released_pages_ : 0;
    reused_pages_ = released_pages_ = 0;
    reuse_window_start_ms_ = now;
  }
  for (Span* oldest = lru_oldest_; oldest != nullptr; oldest = lru_oldest_) {
    const std::size_t backed = free_backed_pages_.load(std::memory_order_relaxed);
    const std::size_t in_use = in_use_pages_.load(std::memory_order_relaxed);
    const std::size_t peak = window_peak_pages_ > previous_window_peak_pages_
                                 ? window_peak_pages_
                                 : previous_window_peak_pages_;
    const std::size_t keep = ReuseEstimateLocked();
    const std::size_t margin = MarginLocked();
    const bool over_slack = in_use + backed > peak + margin;
    const bool past_peak = backed > in_use + margin;  // PastPeakLocked
    const bool expired = now - oldest->free_since_ms >= kReleaseDelayMs && backed > keep;
    if (!over_slack && !past_peak && !expired) break;
    if (!ReleaseSpanLocked(oldest)) break;
  }
}

// Of `pages` released pages handed out, those that take back a recent release (oldest first).
std::size_t PageHeap::UndoReleaseLocked(std::size_t pages) {
  std::size_t undone = 0;
  for (std::size_t* released : {&previous_released_pages_, &released_pages_}) {
    const std::size_t n = pages - undone < *released ? pages - undone : *released;
    *released -= n;
    undone += n;
  }
  return undone;
}

// madvise without the lock; meanwhile the span is kReleasing, so no one merges with it or hands
// it out. Afterwards it joins the released spans (and merges with released neighbours). When the
// kernel refuses (the program locked its memory), the span is backed still, and stays so: it
// goes back as the newest backed span, and false stops this round of releasing.
bool PageHeap::ReleaseSpanLocked(Span* victim) {
  RemoveLocked(victim);
  victim->state = SpanState::kReleasing;
  releasing_.PushFront(victim);
  lock_.Unlock();
  const bool released = OsRelease(victim->start(), victim->bytes());
  lock_.Lock();
  if (released) released_pages_ += victim->num_pages;
  releasing_.Remove(victim);
  victim->released = released;
  victim->state = SpanState::kFree;
  if (!released) victim->free_since_ms = NowMs();
  InsertLocked(CoalesceLocked(victim));
  return released;
}

bool PageHeap::Grow(std::size_t pages) {
  const std::size_t wanted = ((pages << kPageShift) + kRegionSize - 1) & ~(kRegionSize - 1);
  if (wanted < (pages << kPageShift) || wanted > kMaxRequest + kRegionSize) return false;
  Span* span = span_pool_->New();
  if (span == nullptr) return false;
  std::size_t bytes = wanted > kMinGrowBytes ? wanted : kMinGrowBytes;
  void* memory = OsMap(bytes, kRegionSize);
  if (memory == nullptr && bytes > wanted) {  // near a limit: ask for no more than needed
    bytes = wanted;
    memory = OsMap(bytes, kRegionSize);
  }
  const auto first = reinterpret_cast<std::uintptr_t>(memory) >> kPageShift;
  if (memory == nullptr || !page_map_->Ensure(first, bytes >> kPageShift)) {
    if (memory != nullptr) OsUnmap(memory, bytes);
    span_pool_->Delete(span);
    return false;
  }
  page_map_->MarkMapped(reinterpret_cast<std::uintptr_t>(memory), bytes);
  MarkUnusable(memory, bytes);
  SpinLockHolder hold(lock_);
  mapped_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  span->first_page = first;
  span->num_pages = bytes >> kPageShift;
  span->released = true;  // never touched: costs no memory yet
  span->free_since_ms = 0;
  span->state = SpanState::kFree;
  InsertLocked(CoalesceLocked(span));
  return true;
}

// Each free span that covers whole regions (2 MiB, the unit of the page map's `mapped`
// bits) loses them: the regions are cut out, forgotten by the page map and unmapped, and the
// ends of the span (less than a region each) stay free. The spans are found by walking the
// free lists: this runs only when the OS refused memory, or on Trim.
std::size_t PageHeap::UnmapFreeRegions() {
  constexpr std::size_t kRegionPages = kRegionSize >> kPageShift;
  Span* doomed = nullptr;  // the cut-out regions, chained through `next`
  std::size_t unmapped = 0;
  {
    SpinLockHolder hold(lock_);
    auto visit = [&](SpanList& list) {
      for (Span* s = list.first(); s != nullptr;) {
        Span* following = s->next;
        const std::uintptr_t start = (s->first_page + kRegionPages - 1) & ~(kRegionPages - 1);
        const std::uintptr_t end = (s->first_page + s->num_pages) & ~(kRegionPages - 1);
        if (end > start) {
          RemoveLocked(s);
          Span* middle = s;
          if (start > s->first_page) {  // the front stays free
            middle = SplitTailLocked(s, start - s->first_page);
            InsertLocked(s);
          }
          if (middle != nullptr && middle->first_page + middle->num_pages > end) {
            Span* back = SplitTailLocked(middle, end - middle->first_page);
            if (back == nullptr) {
              InsertLocked(middle);
              middle = nullptr;
            } else {
              InsertLocked(back);
            }
          }
          if (middle != nullptr) {
            // Forgotten before the lock drops: once unmapped, the range may become anyone's.
            middle->state = SpanState::kReleasing;
            page_map_->Set(middle->first_page, nullptr);
            page_map_->Set(middle->last_page(), nullptr);
            page_map_->MarkUnmapped(reinterpret_cast<std::uintptr_t>(middle->start()),
                                    middle->bytes());
            mapped_bytes_.fetch_sub(middle->bytes(), std::memory_order_relaxed);
            unmapped += middle->bytes();
            middle->next = doomed;
            doomed = middle;
          }
        }
        s = following;
      }
    };
    // Backed free spans too: under an address-space limit their pages are worth less than the
    // address space they hold (on Trim they were all released just before).
    for (int released = 1; released >= 0; --released) {
      for (SpanList& list : exact_[released])
        visit(list);
      for (SpanList& list : bins_[released])
        visit(list);
    }
  }
  while (doomed != nullptr) {
    Span* span = doomed;
    doomed = span->next;
    MarkUnmapped(span->start(), span->bytes());
    OsUnmap(span->start(), span->bytes());
    span_pool_->Delete(span);
  }
  return unmapped;
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
  for (Span* s = list.first(); s != nullptr; s = s->next)
    count += s->num_pages == pages;
  return count;
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
