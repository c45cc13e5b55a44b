// CentralFreeList: the middle tier, one per size class, one lock each.
//
//   transfer slots   [batch][batch][ ]...   whole batches, moved to and from thread caches in O(1)
//   spans            span <-> span <-> ...  spans of this class with objects left to hand out
//
// A thread cache asks for or returns a batch of objects as an *unrolled list* (see thread_cache.h:
// nodes that carry the addresses of other free objects, each node's first word pointing two nodes
// further, tagged with that node's item count; the batch is named by its first two nodes). A
// batch carved from spans is the case of nodes without items; a thread cache of arrays takes
// objects from the spans as addresses instead (RemoveRangeTo). A full batch goes into / comes out
// of a transfer slot: one lock, no object touched. Anything else (a partial batch, or slots full /
// empty) goes through the spans: each object returned is pushed on its span's list (a page map
// lookup for each page its objects lie on, the span's record written once for each run of its
// objects), and a span whose objects have all come back goes to the page heap. A batch a thread
// cache of arrays sends straight to the spans (its own neighbours, an idle list) comes as
// addresses (InsertArrayToSpans). Fresh spans are carved lazily, so their pages are touched only
// when used.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"
#include "size_class.h"
#include "span.h"
#include "spinlock.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

class PageHeap;
class PageMap;

class alignas(64) CentralFreeList {
 public:
  static constexpr int kMaxTransferSlots = 1024;  // storage per class, in .bss: touched as used
  struct Batch {  // batch_ objects as an unrolled list, named by its first two nodes (tagged)
    void* first;
    void* second;
  };

  constexpr CentralFreeList() = default;
  CentralFreeList(const CentralFreeList&) = delete;
  CentralFreeList& operator=(const CentralFreeList&) = delete;
  // What every central list shares, set once at start-up: `all`, the lists of every class,
  // indexed by class (where a block freed with the wrong size is sent back to); `slots`,
  // kMaxTransferSlots batches of storage per class. A list sets itself up from these on its
  // first use, so that a process writes only the lists of the classes it uses: eager set-up of
  // article 003's 208 lists cost a preloaded `ls` 7 page faults (and slots kept inside each list,
  // 63).
  // Bytes parked in the slots of every class (the release thread's clock runs while there are).
  static std::size_t ParkedBytes() { return parked_bytes_.load(std::memory_order_relaxed); }
  static void Attach(PageHeap* page_heap, PageMap* page_map, CentralFreeList* all,
                     Batch (*slots)[kMaxTransferSlots]);

  // Objects as a batch starting *first, *second (*second null for one object): up to `n`, and,
  // with `to_line_end` (a thread cache asks, and keeps what it gets), fresh ones past it up to
  // the end of their cache line (TakeFromSpansLocked); with `whole_batch`, a parked batch whole
  // when there is one (more than `n` if n < batch). Returns how many (0 only when the OS refuses
  // memory).
  int RemoveRange(void** first, void** second, int n, bool whole_batch = false,
                  bool to_line_end = true);
  // The same for a thread cache of arrays (to_line_end): a parked batch as RemoveRange gives it
  // (*first non-null), else the objects' addresses in out[0, count), out[count - 1] the first to
  // hand out, and *first null. `out` has room for kMaxRemoved.
  int RemoveRangeTo(void** out, void** first, void** second, int n, bool whole_batch);
  // The most objects RemoveRange hands out at once: a batch, and fresh objects past it up to the
  // end of their cache line.
  static constexpr int kMaxRemoved = kMaxBatch + static_cast<int>(kCacheLineSize / sizeof(void*));
  // Exactly one object, for a caller with no cache to keep the rest of a line in; nullptr when
  // the OS refuses memory.
  void* RemoveOne() {
    void* first;
    void* second;
    return RemoveRange(&first, &second, 1, /*whole_batch=*/false, /*to_line_end=*/false) == 0
               ? nullptr
               : first;
  }
  // Takes back a batch of `n` objects starting first, second. `to_back`: they go to the back of
  // their spans' lists, to be handed out after everything else there (ReleaseRunLocked).
  void InsertRange(void* first, void* second, int n, bool to_back = false);
  // Takes back a batch straight to its spans, never parked: a thread cache that gives back what
  // it does not use wants its spans emptied, for the page heap (ThreadCache::ReleaseIdleLists).
  void InsertToSpans(void* first, void* second, int n);
  // The same for a thread cache of arrays: the objects' addresses, each span's objects handed
  // out again in the array's order (as from a batch built from them). No object is read, and
  // each is written once, with its link on its span's list. n <= kMaxBatch.
  void InsertArrayToSpans(void* const* objects, int n);
  // Bytes of the spans this thread's refills took from pages with no memory behind them (never
  // touched, or given back to the OS): what the resident set grew by for this thread. The
  // thread cache reads it and sets it back to 0 (ThreadCache::FetchFromCentral).
  static std::size_t& ThreadGrowth();
  // Whether the list of class `cl` was ever used: the drains skip the others, which nothing
  // has written (their pages never touched).
  static bool InUse(std::uint32_t cl) {
    return (in_use_[cl / 64].load(std::memory_order_acquire) >> (cl % 64)) & 1;
  }
  // Batches that stayed parked since the previous call (`all`: every batch) go back to their
  // spans: free objects parked here pin their spans' memory. True if it drained any.
  bool DrainIfIdle(bool all = false);
  // Calls giving emptied spans to the page heap, after their list's lock: in no list of either
  // tier meanwhile. tierpool_release_free_memory waits for them, so that what it promises gone is
  // gone, and so does a fork once it holds every list's lock (ForkPrepare), or the child would
  // count their spans in use for good; they need no list's lock to finish. A child has none.
  static int Returning() { return returning_.load(std::memory_order_acquire); }
  // Lists asking the page heap for a span right now, their lock let go meanwhile (RemoveRange):
  // counted under the list's lock, so with every list's lock held (ForkPrepare) it is exact, and
  // a fork that finds one lets the locks go for it to finish.
  static int Growing() { return growing_.load(std::memory_order_relaxed); }
  static void AfterForkChild() { returning_.store(0, std::memory_order_relaxed); }

  // Objects free in this tier (slots, span lists, never-carved tails) and handed out of it.
  std::size_t FreeObjects() const { return free_objects_.load(std::memory_order_relaxed); }
  std::size_t OutObjects() const { return out_objects_.load(std::memory_order_relaxed); }
  int ParkedBatches() const { return used_slots_.load(std::memory_order_relaxed); }
  SpinLock& lock() { return lock_; }

 private:
  // Objects taken from the spans under the lock, made a batch after it (RemoveRange): runs of
  // objects, each a span's list taken whole, the head of a list cut (its objects read under the
  // lock, so kept in `cut`), or objects never carved, side by side.
  enum class RunKind : std::uint8_t { kList, kCut, kCarved };
  struct Run {
    void* first;
    std::uint32_t count;
    RunKind kind;
  };
  struct Runs {
    // At most two runs a span (its list, then its fresh objects), at least one object a span;
    // a batch of kMaxBatch may run up to a cache line past its end (InsideCarvedLine). Only the
    // last list taken is ever cut.
    Run run[2 * (kMaxBatch + kCacheLineSize / 8)];
    int count;
    void* cut[kMaxBatch];
  };
  int TakeFromSpansLocked(Runs& runs, int n, bool to_line_end);
  int Take(Runs& runs, void** first, void** second, int n, bool whole_batch, bool to_line_end);
  void ChainRuns(const Runs& runs, void** first, void** second);
  void ListRuns(const Runs& runs, void** end) const;
  template <typename Visit>
  void VisitRuns(const Runs& runs, Visit&& visit) const;
  // True while the next object to carve starts in the cache line the previous one ends in.
  static bool InsideCarvedLine(const Span* span) {
    return span->carve_next < span->carve_end &&
           reinterpret_cast<std::uintptr_t>(span->carve_next) % kCacheLineSize != 0;
  }
  // A batch's objects on their way back to their spans, in the order they are to be handed out
  // again: each object and its span, the ones of this class first (`kept` of them; the rest,
  // freed with a wrong size, are chained as strays).
  struct ReadObjects {
    void* objects[kMaxBatch];
    Span* spans[kMaxBatch];
    int count;
    int kept;
  };
  void ReadBatch(void* first, void* second, int n, ReadObjects& out, void** strays) const;
  void FindSpans(ReadObjects& out, void** strays) const;
  void ReleaseReadLocked(const ReadObjects& read, bool parked, Span** emptied,
                         bool to_back = false);
  // A batch's objects back to their spans: read before the lock, pushed under it.
  void ReleaseToSpans(void* first, void* second, int n, bool to_back);
  void ReleaseReadToSpans(const ReadObjects& read, void* strays, bool to_back);
  // Objects of one span on its list, at its head (or its back); a span that has all its objects
  // back is chained on *emptied, for the page heap after the lock.
  void ReleaseRunLocked(void* const* objects, int count, Span* span, Span** emptied, bool to_back);
  void ReturnStrays(void* strays);
  void ReturnLargeStray(void* object);
  void SetUpLocked();
  void SetUpIfUnused();
  // A batch into / out of the slots: counted against kMaxParkedBytes. Park is false (and counts
  // nothing) when the batch would take the slots of all classes past it.
  bool Park();
  void Unpark();
  Span* NewSpan();
  void UnlockAndReturnSpans(Span* emptied, bool long_idle);
  void ReturnSpans(Span* emptied, bool long_idle);  // long_idle: FreedPages::kIdle

  SpinLock lock_;
  std::uint32_t size_class_ = 0;
  std::uint32_t object_size_ = 0;
  int batch_ = 0;
  int max_slots_ = 0;
  std::atomic<int> used_slots_{0};  // written under the lock; InsertRange peeks before it
  Batch* slots_ = nullptr;          // kMaxTransferSlots of them, kept apart (see Attach)
  int slots_low_ = 0;               // the fewest slots in use since the previous DrainIfIdle
  SpanList spans_;                  // spans with objects to hand out
  static inline PageHeap* page_heap_ = nullptr;
  static inline PageMap* page_map_ = nullptr;
  static inline CentralFreeList* all_ = nullptr;
  static inline Batch (*all_slots_)[kMaxTransferSlots] = nullptr;
  static inline std::atomic<std::uint64_t> in_use_[(kNumClasses + 63) / 64] = {};
  static inline std::atomic<std::size_t> parked_bytes_{0};  // in the slots of every class
  static inline std::atomic<int> returning_{0};
  static inline std::atomic<int> growing_{0};
  std::atomic<std::size_t> free_objects_{0};
  std::atomic<std::size_t> out_objects_{0};
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
