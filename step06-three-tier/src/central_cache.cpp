#include "central_cache.h"

#include <algorithm>
#include <cstring>

#include "memory_tools.h"
#include "os.h"
#include "page_heap.h"
#include "page_map.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

void CentralFreeList::Attach(PageHeap* page_heap, PageMap* page_map, CentralFreeList* all,
                             Batch (*slots)[kMaxTransferSlots]) {
  page_heap_ = page_heap;
  page_map_ = page_map;
  all_ = all;
  all_slots_ = slots;
}

bool CentralFreeList::Park() {
  const std::size_t bytes = std::size_t{object_size_} * static_cast<std::size_t>(batch_);
  if (parked_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes <= kMaxParkedBytes)
    return true;
  parked_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return false;
}

void CentralFreeList::Unpark() {
  parked_bytes_.fetch_sub(std::size_t{object_size_} * static_cast<std::size_t>(batch_),
                          std::memory_order_relaxed);
}

void CentralFreeList::SetUpLocked() {
  size_class_ = static_cast<std::uint32_t>(this - all_);
  slots_ = all_slots_[size_class_];
  object_size_ = kClasses[size_class_].size;
  batch_ = kClasses[size_class_].batch;
  max_slots_ = kTransferSlots ? kClasses[size_class_].transfer_slots : 0;
  in_use_[size_class_ / 64].fetch_or(std::uint64_t{1} << (size_class_ % 64),
                                     std::memory_order_release);
}

int CentralFreeList::RemoveRange(void** first, void** second, int n, bool whole_batch,
                                 bool to_line_end) {
  Runs runs;
  const int got = Take(runs, first, second, n, whole_batch, to_line_end);
  if (*first == nullptr) ChainRuns(runs, first, second);
  return got;
}

// For a thread cache of arrays: the objects' addresses, not a chain through them. A fresh
// object is not touched at all (RemoveRange writes a link into each, which the thread cache
// reads back at once to fill its array), and a span's list is read once.
int CentralFreeList::RemoveRangeTo(void** out, void** first, void** second, int n,
                                   bool whole_batch) {
  Runs runs;
  const int got = Take(runs, first, second, n, whole_batch, /*to_line_end=*/true);
  if (*first == nullptr) ListRuns(runs, out + got);
  return got;
}

// [snippet:remove-range]
// Under the lock: a parked batch (*first, *second; a batch's whole count) or runs of objects
// from the spans (*first null).
int CentralFreeList::Take(Runs& runs, void** first, void** second, int n, bool whole_batch,
                          bool to_line_end) {
  *first = nullptr;
  lock_.Lock();
  // Objects of a class come back only after some were taken: the set-up is needed here alone.
  if (TIERPOOL_UNLIKELY(object_size_ == 0)) SetUpLocked();
  // A parked batch goes out whole even to a thread cache that asked for fewer (a list in slow
  // start): its objects are free already, so handing them over costs no memory, while taking a
  // few from the spans instead would touch each of them and leave the batch pinning its spans.
  const int used = used_slots_.load(std::memory_order_relaxed);
  if (used > 0 && (n == batch_ || whole_batch)) {
    n = batch_;
    const Batch& batch = slots_[used - 1];
    used_slots_.store(used - 1, std::memory_order_relaxed);
    Unpark();
    if (used - 1 < slots_low_) slots_low_ = used - 1;
    *first = batch.first;
    *second = batch.second;
    free_objects_.fetch_sub(static_cast<std::size_t>(n), std::memory_order_relaxed);
    out_objects_.fetch_add(static_cast<std::size_t>(n), std::memory_order_relaxed);
    lock_.Unlock();
    return n;
  }
  // [/snippet]
  int got = TakeFromSpansLocked(runs, n, to_line_end);
  while (got == 0) {
    // No span has objects left: get one from the page heap without holding our lock (the page
    // heap may map memory), then try again (another thread may have refilled us meanwhile).
    // Meanwhile the span is in neither tier: counted in `growing_`, for a fork to wait for.
    Span* span;
    {
      ThisThreadMoving moving;
      growing_.fetch_add(1, std::memory_order_relaxed);
      lock_.Unlock();
      BetweenTiers(Move::kSpanToCentral);
      span = NewSpan();
      lock_.Lock();
      growing_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (span == nullptr) break;
    spans_.PushFront(span);
    span->in_central_list = true;
    free_objects_.fetch_add(kClasses[size_class_].objects, std::memory_order_relaxed);
    got = TakeFromSpansLocked(runs, n, to_line_end);
  }
  lock_.Unlock();
  return got;
}

// The class's fields are read without the lock: set once, before the in-use bit (release), so
// an object of a class that was never set up (freed with a wrong size) sets it up first.
void CentralFreeList::SetUpIfUnused() {
  const auto cl = static_cast<std::uint32_t>(this - all_);
  if (TIERPOOL_UNLIKELY(!InUse(cl))) {
    lock_.Lock();
    if (object_size_ == 0) SetUpLocked();
    lock_.Unlock();
  }
}

void CentralFreeList::InsertToSpans(void* first, void* second, int n) {
  SetUpIfUnused();
  ReleaseToSpans(first, second, n, /*to_back=*/false);
}

void CentralFreeList::InsertRange(void* first, void* second, int n, bool to_back) {
  SetUpIfUnused();
  // A full batch is parked in a slot if there is one free and the slots of all classes have room.
  // Both are looked at before the lock too: when the batch cannot be parked, the lock is taken
  // once, for the spans, not twice.
  const std::size_t bytes = std::size_t{object_size_} * static_cast<std::size_t>(batch_);
  if (n == batch_ && used_slots_.load(std::memory_order_relaxed) < max_slots_ &&
      parked_bytes_.load(std::memory_order_relaxed) + bytes <= kMaxParkedBytes) {
    lock_.Lock();
    const int used = used_slots_.load(std::memory_order_relaxed);
    if (used < max_slots_ && Park()) {
      slots_[used] = Batch{first, second};
      used_slots_.store(used + 1, std::memory_order_relaxed);
      free_objects_.fetch_add(static_cast<std::size_t>(n), std::memory_order_relaxed);
      out_objects_.fetch_sub(static_cast<std::size_t>(n), std::memory_order_relaxed);
      lock_.Unlock();
      return;
    }
    lock_.Unlock();
  }
  ReleaseToSpans(first, second, n, to_back);
}

// The parked batches are taken apart under the lock, as a rare path may: a caller that drains
// every class (tierpool_release_free_memory) must find no batch between the slots and the spans,
// in another thread's hands, when it goes on to the page heap.
bool CentralFreeList::DrainIfIdle(bool all) {
  Span* emptied = nullptr;
  void* strays = nullptr;
  lock_.Lock();
  // The slots are a stack: the batches nobody touched since the previous look are the bottom
  // ones, as many as the fewest slots in use since then (tcmalloc's low-water mark). Those go; a
  // batch parked since, even a moment before this look, stays until the next one.
  const int used = used_slots_.load(std::memory_order_relaxed);
  const int idle = all ? used : std::min(slots_low_, used);
  if (idle > 0) {
    ReadObjects read;
    for (int i = 0; i < idle; ++i) {
      Unpark();
      ReadBatch(slots_[i].first, slots_[i].second, batch_, read, &strays);
      ReleaseReadLocked(read, /*parked=*/true, &emptied);
    }
    for (int i = idle; i < used; ++i)
      slots_[i - idle] = slots_[i];
    used_slots_.store(used - idle, std::memory_order_relaxed);
  }
  slots_low_ = used - idle;
  UnlockAndReturnSpans(emptied, true);
  ReturnStrays(strays);
  return idle > 0;
}

// Takes up to n objects from the spans, as runs, touching as few of them as it can under the
// lock: a span whose list holds no more than what is still wanted gives it whole, in O(1) (its
// length is what the span has neither handed out nor carved); only a longer list is walked, to
// cut it. With `to_line_end` (a thread cache asks, and keeps what it gets), objects carved from
// fresh memory are taken up to the end of a cache line, even past n: the next thread to ask
// starts on a line of its own, so two threads never write one line from their first objects on
// (Hoard's "active false sharing").
int CentralFreeList::TakeFromSpansLocked(Runs& runs, int n, bool to_line_end) {
  const std::uint32_t per_span = kClasses[size_class_].objects;
  int got = 0;
  runs.count = 0;
  while (got < n) {
    Span* span = spans_.first();
    if (span == nullptr) break;
    if (span->free_list != nullptr) {
      const auto uncarved =
          static_cast<std::uint32_t>((span->carve_end - span->carve_next) / object_size_);
      const std::uint32_t listed = per_span - span->allocated - uncarved;
      const auto wanted = static_cast<std::uint32_t>(n - got);
      if (listed <= wanted) {
        runs.run[runs.count++] = Run{span->free_list, listed, RunKind::kList};
        span->free_list = nullptr;
      } else {
        void* object = span->free_list;
        for (std::uint32_t i = 0; i < wanted; ++i) {
          runs.cut[i] = object;
          object = LoadLinkOfClass(object, *page_map_, size_class_, /*cap=*/0);
        }
        span->free_list = object;
        runs.run[runs.count++] = Run{runs.cut, wanted, RunKind::kCut};
      }
      const std::uint32_t taken = runs.run[runs.count - 1].count;
      span->allocated += taken;
      got += static_cast<int>(taken);
    }
    if (span->free_list == nullptr && (got < n || (to_line_end && InsideCarvedLine(span)))) {
      char* const start = span->carve_next;
      std::uint32_t carved = 0;
      while (span->carve_next < span->carve_end &&
             (got < n || (to_line_end && InsideCarvedLine(span)))) {
        span->carve_next += object_size_;
        ++carved;
        ++got;
      }
      if (carved > 0) runs.run[runs.count++] = Run{start, carved, RunKind::kCarved};
      span->allocated += carved;
    }
    if (span->free_list == nullptr && span->carve_next >= span->carve_end) {
      spans_.Remove(span);
      span->in_central_list = false;
    }
  }
  if (got > 0) {
    free_objects_.fetch_sub(static_cast<std::size_t>(got), std::memory_order_relaxed);
    out_objects_.fetch_add(static_cast<std::size_t>(got), std::memory_order_relaxed);
  }
  return got;
}

// Every object of the runs, fresh ones first, then the ones that came back: fresh ones lie on
// lines no other thread has had (TakeFromSpansLocked carves to a line's end), where one that came
// back may share its line with objects another thread still writes, and a thread reuses its first
// objects most. A list is read link by link, each link before `visit` may write its object;
// fresh objects get the free pattern first.
template <typename Visit>
void CentralFreeList::VisitRuns(const Runs& runs, Visit&& visit) const {
  for (const bool carved : {true, false}) {
    for (int r = 0; r < runs.count; ++r) {
      const Run& run = runs.run[r];
      if ((run.kind == RunKind::kCarved) != carved) continue;
      switch (run.kind) {
        case RunKind::kList: {
          void* object = run.first;
          for (std::uint32_t i = 0; i < run.count; ++i) {
            void* next = i + 1 < run.count  // (the list's last: its link, null, is not read)
                             ? LoadLinkOfClass(object, *page_map_, size_class_, /*cap=*/0)
                             : nullptr;
            visit(object);
            object = next;
          }
          break;
        }
        case RunKind::kCut:
          for (std::uint32_t i = 0; i < run.count; ++i)
            visit(runs.cut[i]);
          break;
        case RunKind::kCarved:
          for (std::uint32_t i = 0; i < run.count; ++i) {
            char* object = static_cast<char*>(run.first) + std::size_t{i} * object_size_;
            FillFreePattern(object, object_size_);
            visit(object);
          }
          break;
      }
    }
  }
}

// After the lock: the runs become one batch, a chain in which the object at position k links to
// the one at k + 2 (thread_cache.h: nodes without items). A list taken whole is read link by link
// before any of its objects is written; carved objects get the free pattern first.
void CentralFreeList::ChainRuns(const Runs& runs, void** first, void** second) {
  void* chain[2] = {nullptr, nullptr};  // the first two objects
  void* before_last = nullptr;          // (kAhead 2 only)
  void* last = nullptr;
  int got = 0;
  auto append = [&](void* object) {
    void* const links_here = kAhead == 2 ? before_last : last;  // the object kAhead back
    if (links_here != nullptr) StoreNext(links_here, object);
    if (got < 2) chain[got] = object;
    if constexpr (kAhead == 2) before_last = last;
    last = object;
    ++got;
  };
  VisitRuns(runs, append);
  if (got > 0) {
    void* const end = ListEnd(ItemsPerNode(object_size_));
    if (before_last != nullptr) StoreNext(before_last, end);
    StoreNext(last, end);
  }
  *first = chain[0];
  *second = chain[1];
}

// After the lock, for an array: the runs' objects written downwards from `end`, in ChainRuns'
// order (fresh objects first, the first handed out at end[-1]). A fresh object is not written
// (its pages are touched first by the program that gets it); hardened, every object gets the
// array's mark, an encoded null in its first word (PopTop checks it).
void CentralFreeList::ListRuns(const Runs& runs, void** end) const {
  void** slot = end;
  VisitRuns(runs, [&](void* object) {
    if constexpr (kHardened) StoreNext(object, nullptr);
    *--slot = object;
  });
}

// Reads a batch (an unrolled list, thread_cache.h: tagged nodes, each with its items) into
// `out`, then finds the objects' spans (FindSpans). Nothing is written but the links of objects
// freed with a wrong size. It needs no lock: the objects are the caller's.
void CentralFreeList::ReadBatch(void* first, void* second, int n, ReadObjects& out,
                                void** strays) const {
  const std::uintptr_t cap = ItemsPerNode(object_size_);
  void* cursor[2] = {first, second};  // nodes k and k + 1 (kAhead 2), or node k; tagged
  // Written from the back, so that the array is in the order the objects are to be handed out
  // again (ReleaseReadLocked): the batch's first object last.
  int left = n;
  for (std::size_t k = 0; left > 0; ++k) {
    void* tagged = cursor[k % kAhead];
    void* node = NodeOf(tagged);
    const std::uintptr_t items = ItemsOf(tagged);
    if (left > static_cast<int>(items) + 1) {
      cursor[k % kAhead] = LoadLinkOfClass(node, *page_map_, size_class_, cap);
    }
    for (std::uintptr_t i = items; i >= 1; --i)
      out.objects[--left] = TakeItemOfClass(node, i, *page_map_, size_class_);
    out.objects[--left] = node;
  }
  out.count = n;
  FindSpans(out, strays);
}

// Every object's span, found in the page map and prefetched, the ones of this class first
// (`kept` of them); the rest are chained on *strays. A batch's objects mostly come in runs from
// one page (a structure freed in the order it was built): an object on the page of the object
// before it is of that object's span, and costs no lookup, nor a read of the span's record.
void CentralFreeList::FindSpans(ReadObjects& out, void** strays) const {
  int kept = 0;
  Span* span = nullptr;
  std::uintptr_t last_page = 0;  // no object lies on page 0
  for (int i = 0; i < out.count; ++i) {
    void* object = out.objects[i];
    const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(object) >> kPageShift;
    if (page != last_page) {
      if (TIERPOOL_UNLIKELY(page_map_->ClassOf(object) != size_class_)) {
        // A sized free with a wrong size (undefined behaviour the hardened build reports) put
        // it on this class's lists. It goes back to its own class, so that no span ever holds
        // objects of two classes, and that class's counts, not ours, take it back. The page
        // map's class decides, not the span's record: a large block's record may still name
        // the class its pages had in a span before (the page heap reuses records), its pages
        // none.
        StoreNext(object, *strays);
        *strays = object;
        continue;
      }
      span = page_map_->Get(page);
      __builtin_prefetch(span, 1);
      last_page = page;
    }
    out.objects[kept] = object;
    out.spans[kept++] = span;
  }
  out.kept = kept;
}

// Pushes each object read on its span's list, a run of objects of one span at a time, the last
// run first: each span's list then starts with its objects in the array's order (read.objects[0]
// handed out first), the span of read.objects[0] is the first of the class's spans, and spans whose
// objects have all come back are chained on *emptied, for the page heap after the lock: all as
// if each object had been pushed alone, from the last to the first. `parked`: the objects were
// counted free here when their batch was parked (strays included, their own class's now).
void CentralFreeList::ReleaseReadLocked(const ReadObjects& read, bool parked, Span** emptied,
                                        bool to_back) {
  if (!parked) {
    free_objects_.fetch_add(static_cast<std::size_t>(read.kept), std::memory_order_relaxed);
    out_objects_.fetch_sub(static_cast<std::size_t>(read.kept), std::memory_order_relaxed);
  } else if (read.kept < read.count) {
    const auto strays = static_cast<std::size_t>(read.count - read.kept);
    free_objects_.fetch_sub(strays, std::memory_order_relaxed);
    out_objects_.fetch_add(strays, std::memory_order_relaxed);
  }
  for (int end = read.kept, begin; end > 0; end = begin) {
    for (begin = end - 1; begin > 0 && read.spans[begin - 1] == read.spans[end - 1];)
      --begin;
    ReleaseRunLocked(read.objects + begin, end - begin, read.spans[begin], emptied, to_back);
  }
}

// A batch's objects back to their spans. Everything that needs no lock is done before it is
// taken, as tcmalloc does (ReadBatch): under the lock there is only the push of each object on its
// span's list.
void CentralFreeList::ReleaseToSpans(void* first, void* second, int n, bool to_back) {
  ReadObjects read;
  void* strays = nullptr;
  ReadBatch(first, second, n, read, &strays);
  ReleaseReadToSpans(read, strays, to_back);
}

void CentralFreeList::InsertArrayToSpans(void* const* objects, int n) {
  SetUpIfUnused();
  ReadObjects read;
  void* strays = nullptr;
  std::memcpy(read.objects, objects, sizeof(void*) * static_cast<std::size_t>(n));
  read.count = n;
  FindSpans(read, &strays);
  ReleaseReadToSpans(read, strays, /*to_back=*/false);
}

void CentralFreeList::ReleaseReadToSpans(const ReadObjects& read, void* strays, bool to_back) {
  Span* emptied = nullptr;
  lock_.Lock();
  ReleaseReadLocked(read, /*parked=*/false, &emptied, to_back);
  UnlockAndReturnSpans(emptied, false);
  ReturnStrays(strays);
}

// `count` objects of `span` onto its list: at its head, objects[0] handed out first, or, with
// `to_back`, at its back, after everything else there, objects[count - 1] first (the order
// pushing them one at a time from the last gives). Each object is written once, and the span's
// fields once for the run.
void CentralFreeList::ReleaseRunLocked(void* const* objects, int count, Span* span, Span** emptied,
                                       bool to_back) {
  if (to_back) {
    int i = count - 1;
    if (span->free_list == nullptr) {
      StoreNext(objects[i], nullptr);
      span->free_list = span->free_tail = objects[i--];
    }
    void* tail = span->free_tail;
    for (; i >= 0; --i) {
      StoreNext(tail, objects[i]);
      tail = objects[i];
    }
    StoreNext(tail, nullptr);
    span->free_tail = tail;
  } else {
    for (int i = 0; i + 1 < count; ++i)
      StoreNext(objects[i], objects[i + 1]);
    if (span->free_list == nullptr) span->free_tail = objects[count - 1];
    StoreNext(objects[count - 1], span->free_list);
    span->free_list = objects[0];
  }
  span->allocated -= static_cast<std::uint32_t>(count);
  if (span->allocated == 0) {
    if (span->in_central_list) spans_.Remove(span);
    span->in_central_list = false;
    free_objects_.fetch_sub(kClasses[size_class_].objects, std::memory_order_relaxed);
    span->next = *emptied;
    *emptied = span;
  } else if (!span->in_central_list) {
    spans_.PushFront(span);
    span->in_central_list = true;
  }
}

std::size_t& CentralFreeList::ThreadGrowth() {
  static __thread std::size_t bytes TIERPOOL_INITIAL_EXEC = 0;
  return bytes;
}

Span* CentralFreeList::NewSpan() {
  const SizeClassInfo& info = kClasses[size_class_];
  Span* span = page_heap_->New(info.pages, SpanState::kSmall);
  if (span == nullptr) return nullptr;
  if (span->zeroed) ThreadGrowth() += span->bytes();  // released pages: the resident set grows
  span->size_class = static_cast<std::uint8_t>(size_class_);
  span->free_list = nullptr;
  span->carve_next = span->start();
  span->carve_end = span->start() + std::size_t{info.objects} * info.size;
  span->allocated = 0;
  span->in_central_list = false;
#if TIERPOOL_HARDENED
  for (auto& word : span->live)
    word.store(0, std::memory_order_relaxed);
#endif
  // Every page knows its span and class: free(ptr) of any object finds them in O(1).
  for (std::uintptr_t page = span->first_page; page <= span->last_page(); ++page) {
    page_map_->Set(page, span);
    page_map_->SetClass(page, size_class_);
  }
  MarkUnusable(span->start(), span->bytes());
  return span;
}

void CentralFreeList::ReturnStrays(void* strays) {
  while (strays != nullptr) {
    void* object = strays;
    strays = LoadNext(object);
    const std::uint32_t cl = page_map_->ClassOf(object);
    if (TIERPOOL_UNLIKELY(cl == 0)) {
      ReturnLargeStray(object);
      continue;
    }
    StoreNext(object, nullptr);
    all_[cl].InsertRange(object, nullptr, 1);
  }
}

// A stray of no class: a large block freed with a small size. It goes back to the page heap as
// its free would have sent it. Anything else (not the start of a large block: no block of ours)
// is dropped, never handed out again.
void CentralFreeList::ReturnLargeStray(void* object) {
  Span* span = page_map_->Get(reinterpret_cast<std::uintptr_t>(object) >> kPageShift);
  if (span == nullptr || span->state != SpanState::kLarge || span->start() != object) return;
  page_heap_->AccountLarge(-static_cast<std::ptrdiff_t>(span->bytes()));
  page_heap_->Delete(span);
}

// Lock held: drops it and gives the emptied spans to the page heap, counted in `returning_` from
// before the lock drops to after the page heap has them all.
void CentralFreeList::UnlockAndReturnSpans(Span* emptied, bool long_idle) {
  if (emptied == nullptr) {
    lock_.Unlock();
    return;
  }
  ThisThreadMoving moving;
  returning_.fetch_add(1, std::memory_order_relaxed);
  lock_.Unlock();
  BetweenTiers(Move::kSpansToPageHeap);
  ReturnSpans(emptied, long_idle);
  returning_.fetch_sub(1, std::memory_order_release);
}

void CentralFreeList::ReturnSpans(Span* emptied, bool long_idle) {
  while (emptied != nullptr) {
    Span* span = emptied;
    emptied = span->next;
    for (std::uintptr_t page = span->first_page; page <= span->last_page(); ++page)
      page_map_->SetClass(page, 0);
    MarkUnusable(span->start(), span->bytes());
    page_heap_->Delete(span, long_idle ? FreedPages::kIdle : FreedPages::kRecent);
  }
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
