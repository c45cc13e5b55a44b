#include "central_cache.h"

#include "memory_tools.h"
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

// [snippet:remove-range]
int CentralFreeList::RemoveRange(void** first, void** second, int n, bool whole_batch) {
  lock_.Lock();
  // Objects of a class come back only after some were taken: the set-up is needed here alone.
  if (TIERPOOL_UNLIKELY(object_size_ == 0)) SetUpLocked();
  // A parked batch goes out whole even to a thread cache that asked for fewer (a list in slow
  // start): its objects are free already, so handing them over costs no memory, while taking a
  // few from the spans instead would touch each of them and leave the batch pinning its spans.
  if (used_slots_ > 0 && (n == batch_ || whole_batch)) {
    n = batch_;
    const Batch& batch = slots_[--used_slots_];
    Unpark();
    ++slot_takes_;
    *first = batch.first;
    *second = batch.second;
    free_objects_.fetch_sub(static_cast<std::size_t>(n), std::memory_order_relaxed);
    out_objects_.fetch_add(static_cast<std::size_t>(n), std::memory_order_relaxed);
    lock_.Unlock();
    return n;
  }
  // [/snippet]
  int got = FetchFromSpansLocked(first, second, n);
  while (got == 0) {
    // No span has objects left: get one from the page heap without holding our lock (the page
    // heap may map memory), then try again (another thread may have refilled us meanwhile).
    lock_.Unlock();
    Span* span = NewSpan();
    lock_.Lock();
    if (span == nullptr) break;
    spans_.PushFront(span);
    span->in_central_list = true;
    free_objects_.fetch_add(kClasses[size_class_].objects, std::memory_order_relaxed);
    got = FetchFromSpansLocked(first, second, n);
  }
  lock_.Unlock();
  return got;
}

void CentralFreeList::InsertRange(void* first, void* second, int n) {
  lock_.Lock();
  free_objects_.fetch_add(static_cast<std::size_t>(n), std::memory_order_relaxed);
  out_objects_.fetch_sub(static_cast<std::size_t>(n), std::memory_order_relaxed);
  if (n == batch_ && used_slots_ < max_slots_ && Park()) {
    slots_[used_slots_++] = Batch{first, second};
    lock_.Unlock();
    return;
  }
  Span* emptied = nullptr;
  void* strays = nullptr;
  ReleaseToSpansLocked(first, second, n, &emptied, &strays);
  lock_.Unlock();
  ReturnSpans(emptied, false);
  ReturnStrays(strays);
}

bool CentralFreeList::DrainIfIdle(bool all) {
  lock_.Lock();
  const bool idle = used_slots_ > 0 && (all || slot_takes_ == slot_takes_seen_);
  slot_takes_seen_ = slot_takes_;
  Span* emptied = nullptr;
  void* strays = nullptr;
  if (idle) {
    while (used_slots_ > 0) {
      const Batch& batch = slots_[--used_slots_];
      Unpark();
      ReleaseToSpansLocked(batch.first, batch.second, batch_, &emptied, &strays);
    }
  }
  lock_.Unlock();
  ReturnSpans(emptied, true);
  ReturnStrays(strays);
  return idle;
}

// Builds a chain of up to n objects from the spans: each object appended at position k becomes
// the link of the object at position k - 2. Objects carved from fresh memory are taken up to the
// end of a cache line, even past n: the next thread to ask starts on a line of its own, so two
// threads never write one line from their first objects on (Hoard's "active false sharing").
int CentralFreeList::FetchFromSpansLocked(void** first, void** second, int n) {
  void* chain[2] = {nullptr, nullptr};  // the first two objects
  void* before_last = nullptr;
  void* last = nullptr;
  int got = 0;
  while (got < n) {
    Span* span = spans_.first();
    if (span == nullptr) break;
    while (got < n || InsideCarvedLine(span)) {
      void* object;
      if (span->free_list != nullptr && got < n) {
        object = span->free_list;
        span->free_list = LoadLinkOfClass(object, *page_map_, size_class_, /*cap=*/0);
      } else if (span->carve_next < span->carve_end) {
        object = span->carve_next;
        span->carve_next += object_size_;
        FillFreePattern(object, object_size_);
      } else {
        break;
      }
      if (before_last != nullptr) StoreNext(before_last, object);
      if (got < 2) chain[got] = object;
      before_last = last;
      last = object;
      ++span->allocated;
      ++got;
    }
    if (span->free_list == nullptr && span->carve_next >= span->carve_end) {
      spans_.Remove(span);
      span->in_central_list = false;
    }
  }
  if (got > 0) {
    void* const end = ListEnd(ItemsPerNode(object_size_));
    if (before_last != nullptr) StoreNext(before_last, end);
    StoreNext(last, end);
    free_objects_.fetch_sub(static_cast<std::size_t>(got), std::memory_order_relaxed);
    out_objects_.fetch_add(static_cast<std::size_t>(got), std::memory_order_relaxed);
  }
  *first = chain[0];
  *second = chain[1];
  return got;
}

// Pushes each object of the batch (an unrolled list, thread_cache.h: tagged nodes, each with its
// items) on its span's list; spans whose objects are all back are unlinked and chained through
// `next` into *emptied, for the page heap (after our lock is dropped).
void CentralFreeList::ReleaseToSpansLocked(void* first, void* second, int n, Span** emptied,
                                           void** strays) {
  const std::uintptr_t cap = ItemsPerNode(object_size_);
  void* cursor[2] = {first, second};  // nodes at even and odd positions, tagged
  int left = n;
  for (int k = 0; left > 0; ++k) {
    void* tagged = cursor[k & 1];
    void* node = NodeOf(tagged);
    const std::uintptr_t items = ItemsOf(tagged);
    // The node's link and items are read before the node goes on a span's list (its first word).
    if (left > static_cast<int>(items) + 1) {
      cursor[k & 1] = LoadLinkOfClass(node, *page_map_, size_class_, cap);
    }
    for (std::uintptr_t i = items; i >= 1; --i)
      ReleaseObjectLocked(TakeItemOfClass(node, i, *page_map_, size_class_), emptied, strays);
    ReleaseObjectLocked(node, emptied, strays);
    left -= static_cast<int>(items) + 1;
  }
}

void CentralFreeList::ReleaseObjectLocked(void* object, Span** emptied, void** strays) {
  Span* span = page_map_->Get(reinterpret_cast<std::uintptr_t>(object) >> kPageShift);
  if (TIERPOOL_UNLIKELY(span->size_class != size_class_)) {
    // A sized free with a wrong size (undefined behaviour the hardened build reports) put it
    // on this class's lists. Its span is another class's: it goes back there, so no span ever
    // holds objects of two classes, and its class's counts, not ours, take it back.
    StoreNext(object, *strays);
    *strays = object;
    free_objects_.fetch_sub(1, std::memory_order_relaxed);
    out_objects_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  StoreNext(object, span->free_list);
  span->free_list = object;
  if (--span->allocated == 0) {
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

Span* CentralFreeList::NewSpan() {
  const SizeClassInfo& info = kClasses[size_class_];
  Span* span = page_heap_->New(info.pages, SpanState::kSmall);
  if (span == nullptr) return nullptr;
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
    StoreNext(object, nullptr);
    all_[cl].InsertRange(object, nullptr, 1);
  }
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
