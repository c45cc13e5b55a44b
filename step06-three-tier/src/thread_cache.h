// ThreadCache: the top tier, one per thread, no locks, no atomic read-modify-writes. It keeps a
// list of free objects per size class; allocation pops one, free pushes one, and only an empty
// list (FetchFromCentral) or a full one (MakeRoom) leaves the thread.
//
// The library's lists are *arrays* (TIERPOOL_SLOT_ARRAYS, the ladder's last rung):
//
//   lows[class] .. tops[class] .. ends[class]   the free objects' addresses, the last freed on top
//
// A pop is `*--tops[cl]`, a push `*tops[cl]++ = p`, each after one compare that is almost always
// passed (top above low; top below end, ends[cl] - lows[cl] being the list's limit). The freed
// objects themselves are neither read nor written, and no branch depends on how the objects
// arrived: when a program's sizes jump from class to class at every call, the unrolled list's
// "items left in this node?" was a guess, and this has none. Each array is a chunk of 2^k slots
// from the cache's SlotArena, moved to a bigger chunk when the limit outgrows it (a slow path).
// Between the tiers a parked batch still travels as an unrolled list (CentralFreeList): a refill
// spreads its nodes into the array (FetchFromCentral), a release makes the array's top objects
// nodes again for a transfer slot (ReleaseToCentral). From and to the spans objects travel as
// addresses (RemoveRangeTo, InsertArrayToSpans).
//
// The rungs below the last keep each class's free objects as a list threaded through them:
//
//   heads[class], seconds[class]:  the first two nodes of the list, tagged with their item counts
//   rooms[class]:                   how many more objects the list may take (limit - length)
//
// The list is *unrolled*: a free object used as a node holds, besides its link (word 0), the
// addresses of up to `cap` other free objects, its items (words 1..cap; cap = size / 8 - 1, at
// most 7: a 64-byte node is one cache line and carries eight free objects, an 8-byte one only
// its link). A pop hands out the first node's last item, read from a node that is already in
// cache, without touching the item; only when the node has no items left does the node itself
// go, and the next node becomes first. A push of a freed object stores its address in the first
// node while that has room (the freed object is not written), and makes it the new first node
// otherwise.
//
// A node's item count travels in the pointer that names it (heads_, seconds_, and the links):
// a node with k items is named by the address of its word k plus k, so the low 3 bits are k
// (objects are 8-byte aligned) and the word a pop takes is the name with those bits cleared
// (TagNode, memory_tools.h). Nodes need not be full: a batch carved from spans is a list of
// nodes without items, and a batch is handed between the tiers whole, as a list of its own
// (CentralFreeList, central_cache.h). An item pop or push is a subtract or an add of 9 on
// heads_[cl].
//
// The nodes form a *chain*: each node's link points not to the next node but to the one after
// it, and the cache keeps the first two. Popping a node moves the second up and takes the new
// second from the popped node's word (a line just read); the new second is prefetched then, a
// node's worth of pops before it is needed. (TIERPOOL_TWO_AHEAD=0, a rung of the chapter's
// ladder: a plain chain, each link the next node, seconds_ unused.)
//
//     heads --> A|2 [link=C|7, i1, i2]   seconds --> B|7 [link=D|7, i1..i7]   C ...
//
// The list's end is the null node tagged with the cap (ListEnd, memory_tools.h): an empty
// list's heads_ looks like a full first node, so the first push makes a node without testing for
// null, and popping the last node makes heads_ the end again.
//
// The per-class fields are kept apart (not an array of structs) so that the
// fast path addresses each with one scaled-index instruction.
//
// max_length starts at 0 and grows with use: by one object per refill until it reaches the
// class's batch (slow start: a thread that allocates three objects of a class never hoards a
// batch), then by a batch per refill; a refill of objects smaller than a cache line takes a
// line's worth at least, so that two threads do not start on neighbours (FetchFromCentral). A
// list that keeps overflowing past a batch shrinks again.
//
// A list's limit follows the class's past demand, not its present one: a thread that allocated
// five thousand 1 KiB objects and freed them keeps them all, and if it now allocates 4 KiB
// objects instead, those take new pages while the 1 KiB objects' spans stay pinned by the list.
// So when the thread's refills have made the resident set grow by kIdleLookGrowth, it looks at
// its lists (ReleaseIdleLists): a list that no refill took from since the previous look is idle,
// keeps one batch, and sends the rest past the transfer slots onto the spans, which empty and go
// to the page heap, where the growing class's next span comes from. A list that ran dry since
// was refilled and stays whole; one in steady use that never runs dry, or one that only takes
// frees (a consumer's), counts as idle and is cut to a batch, at the price of a refill or a
// release later. A growth served from free pages of the heap costs the resident set nothing and
// starts no look.
// The limits together are bounded by the cache's byte budget (its share of
// kOverallThreadCacheBudget): the sum of max_length * (size + 8 bytes of address in the array)
// never exceeds it, so neither can the bytes the lists hold, and the fast paths count objects
// against their list's limit only, never bytes. A list that needs a higher limit than the budget
// has left takes it from the other lists (Steal: first limits they do not use, then objects, sent
// to the central cache).
//
// A thread that has no cache yet points at a shared, read-only empty cache (EmptyCache): every
// list empty and full at once, so both fast paths fall into the slow path without a null check.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.h"
#include "size_class.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

class SpinLock;

// Objects above kMaxCachedSize skip the thread cache: each comes from its class's central list
// and goes back to it (AllocateRefill, PushFull), the thread keeping none. A list of them would
// hold two to six objects of 40 to 256 KiB (a batch, or 256 KiB) in every class the thread freed
// one of, and a program whose buffers grow by realloc passes through a dozen such classes: `git
// log -p` peaked with about 4.5 MiB of them in its thread's cache and the central lists. The end
// is the fine size table's, so the fast paths' one compare sends both kinds of size to the slow
// path; an unsized free gets there because such a list's limit stays 0 (no room).
// jemalloc's thread cache ends at 32 KiB too.
inline constexpr std::size_t kMaxCachedSize = kMaxIndexedSize;
inline bool Cached(std::uint32_t cl) {
  return kClasses[cl].size <= kMaxCachedSize;
}

// The memory of a thread cache's arrays: chunks of 2^k addresses, cut from regions mapped from
// the OS and reused through a free list per k. A thread that exits leaves its first region to
// the next thread (a thread per request would otherwise map and unmap one each time).
class SlotArena {
 public:
  static constexpr unsigned kMinLog = 4;  // the smallest chunk: 16 addresses, two cache lines
  // A chunk of 2^k addresses; nullptr when the OS refuses memory.
  void** Get(unsigned k);
  // A chunk back for reuse; the pages of a big one go back to the OS.
  void Put(void** chunk, unsigned k);
  // The thread exits (nothing in the arena is in use): its first region is kept for another
  // thread's arena, the others unmapped.
  void Recycle();
  // A new thread: a region an exited thread left, if there is one.
  void Adopt();
  // Bytes mapped for the arrays of every thread (stats: metadata).
  static std::size_t MappedBytes();
  // Guards the spare regions of exited threads; nothing else is taken while it is held (fork).
  static SpinLock& SpareLock();

 private:
  void** free_[32] = {};
  char* next_ = nullptr;  // the current region's uncut rest: [next_, limit_)
  char* limit_ = nullptr;
  void** regions_ = nullptr;  // the first region; each region's header: RegionHeader
  std::size_t last_bytes_ = 0;
};

class ThreadCache {
 public:
  constexpr ThreadCache() = default;
  // A real cache (not the empty one): a budget of `budget` bytes.
  void Init(std::int64_t budget);
  // The thread's share of the overall budget changed (threads came or went): take it up.
  void AdoptBudget(std::int64_t budget);
  // A new thread takes over the cache an exited thread left (kMaxKeptCaches): the objects stay,
  // to be handed out, but each list's limit falls to its length, and the new thread's first free
  // of a class into a full list goes to the central cache as a fresh cache's first free of a
  // class does (PushFull): the object freed may be another thread's, on a line that one writes.
  void TakeOver();
  // Whether this is the first free of `cl` to find the list full since TakeOver (once only).
  bool TakeFirstFree(std::uint32_t cl) {
    const std::uint64_t bit = std::uint64_t{1} << (cl % 64);
    const bool first = (first_frees_[cl / 64] & bit) != 0;
    first_frees_[cl / 64] &= ~bit;
    return first;
  }
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  // --- The arrays (kSlotArrays) ---
  TIERPOOL_ALWAYS_INLINE void** top(std::size_t cl) const { return tops_[cl]; }
  TIERPOOL_ALWAYS_INLINE void set_top(std::size_t cl, void** top) {
#if defined(TIERPOOL_TSAN)
    __atomic_store_n(&tops_[cl], top, __ATOMIC_RELAXED);  // CachedBytes reads it from afar
#else
    tops_[cl] = top;
#endif
  }
  TIERPOOL_ALWAYS_INLINE void** low(std::size_t cl) const {
    return lows_[cl];
  }
  TIERPOOL_ALWAYS_INLINE void** end(std::size_t cl) const {
    return ends_[cl];
  }

  // --- The lists (the ladder's lower rungs) ---
  TIERPOOL_ALWAYS_INLINE void* head(std::size_t cl) const {
    return heads_[cl];
  }
  TIERPOOL_ALWAYS_INLINE void set_head(std::size_t cl, void* object) {
    heads_[cl] = object;
  }
  TIERPOOL_ALWAYS_INLINE void* second(std::size_t cl) const {
    return seconds_[cl];
  }
  TIERPOOL_ALWAYS_INLINE void set_second(std::size_t cl, void* object) {
    seconds_[cl] = object;
  }
  // Room left in the list: max_length - length. Kept instead of the length so that a push is
  // a decrement and a sign test (the shared empty cache has none, and is never written).
  TIERPOOL_ALWAYS_INLINE std::int64_t room(std::size_t cl) const {
    if constexpr (kSlotArrays) return ends_[cl] - tops_[cl];
    return rooms_[cl];
  }
  TIERPOOL_ALWAYS_INLINE void set_room(std::size_t cl, std::int64_t n) {
#if defined(TIERPOOL_TSAN)
    __atomic_store_n(&rooms_[cl], n, __ATOMIC_RELAXED);  // CachedBytes reads it from afar
#else
    rooms_[cl] = n;
#endif
  }
  // How many items a node of `cl` holds.
  TIERPOOL_ALWAYS_INLINE std::int64_t cap(std::size_t cl) const {
    return caps_[cl];
  }

  std::uint32_t length(std::size_t cl) const {
    if constexpr (kSlotArrays) return static_cast<std::uint32_t>(tops_[cl] - lows_[cl]);
    return max_lengths_[cl] - static_cast<std::uint32_t>(rooms_[cl]);
  }
  std::uint32_t max_length(std::size_t cl) const {
    return max_lengths_[cl];
  }
  // The list of `cl` is empty: refill it from the central cache and return one object
  // (nullptr when the OS refuses memory).
  void* FetchFromCentral(std::uint32_t cl);
  // The list of `cl` is full (length == max_length): raise the limit or give objects back,
  // so that there is room for one more.
  void MakeRoom(std::uint32_t cl);
  // Everything back to the central cache (thread exit, tierpool_thread_flush).
  void ReleaseAll();
  // The thread exits, after ReleaseAll: the arrays' memory is left for another thread.
  void RetireArrays() {
    arena_.Recycle();
  }

  std::size_t CachedBytes() const;  // for stats, callable from any thread

 private:
  // What one more object in the list of `cl` costs the budget: its bytes, and with the arrays
  // its slot too (8 bytes a 64-byte object, an eighth more: a list of a hundred thousand of them
  // holds 800 KB of addresses beside its 6.4 MB of objects).
  static std::int64_t BudgetCost(std::uint32_t cl) {
    return static_cast<std::int64_t>(ClassSize(cl) + (kSlotArrays ? sizeof(void*) : 0));
  }

  // `to_spans`: past the transfer slots, onto the objects' spans (ReleaseIdleLists).
  void ReleaseToCentral(std::uint32_t cl, std::uint32_t n, bool to_spans = false);
  void ReleaseArrayTop(std::uint32_t cl, std::uint32_t n, bool to_spans);
  void ReleasedTop(std::uint32_t cl, void** group);
  bool Allocates(std::uint32_t cl) const {
    return ((allocates_[cl / 64] >> (cl % 64)) & 1) != 0;
  }
  // The resident set grew for this thread (kIdleLookGrowth): every list but `growing` that no
  // refill took from since the previous look keeps one batch, and the rest goes to its spans.
  void ReleaseIdleLists(std::uint32_t growing);
  // Array `cl` has room for n objects, moved to a chunk of the next power of two if it had not.
  // False when the OS refuses memory.
  bool Reserve(std::uint32_t cl, std::size_t n);
  void SetArray(std::uint32_t cl, void** chunk, std::uint8_t log, std::size_t length);
  // The objects of a batch from the central cache onto array `cl`, its first object on top.
  void SpreadBatch(std::uint32_t cl, void* first, void* second, int n);
  // The same into bottom[0..n), bottom[n - 1] the first (a refill its chunk cannot hold).
  void SpreadBatchTo(void** bottom, std::uint32_t cl, void* first, void* second, int n) const;
  // Raises the limit of `cl` towards `max` as far as the budget allows, lowering other lists'
  // limits for it if need be (Steal). The limit it got.
  std::uint32_t Grow(std::uint32_t cl, std::uint32_t max);
  // Frees `bytes` of the budget for `cl` by lowering other lists' limits; objects above a
  // lowered limit go back to the central cache.
  void Steal(std::uint32_t cl, std::int64_t bytes);
  void SetMaxLength(std::uint32_t cl, std::uint32_t max);

  // The arrays first, so that they start at the object's first byte (only one set is used).
  void** tops_[kNumClasses] = {};
  void** lows_[kNumClasses] = {};
  void** ends_[kNumClasses] = {};  // lows_ + max_length
  void* heads_[kNumClasses] = {};
  void* seconds_[kNumClasses] = {};
  std::int64_t rooms_[kNumClasses] = {};
  // Items a node holds, per class (only read; 8-byte elements like the arrays above, so that one
  // scaled index serves them all).
  std::int64_t caps_[kNumClasses] = {};
  // The rest is for the slow paths only.
  std::uint32_t max_lengths_[kNumClasses] = {};
  std::uint8_t logs_[kNumClasses] = {};  // array `cl` is a chunk of 2^logs_[cl] (0: none)
  std::int64_t capacity_ = 0;      // the limits' bytes: sum of max_lengths_[cl] * BudgetCost(cl)
  std::int64_t budget_ = 0;        // what capacity_ may reach
  std::uint32_t next_victim_ = 1;  // where Steal looks first
  std::uint8_t overages_[kNumClasses] = {};
  std::uint64_t first_frees_[(kNumClasses + 63) / 64] = {};  // a bit per class, set by TakeOver
  std::uint64_t refilled_[(kNumClasses + 63) / 64] = {};  // a bit per class refilled since a look
  // A bit per class this thread refilled since it took the cache: it allocates the class, so a
  // batch of neighbours it gives back is most likely a structure it built being torn down.
  std::uint64_t allocates_[(kNumClasses + 63) / 64] = {};
  SlotArena arena_;

 public:
  // Registry of live caches (stats, fork), guarded by the registry lock.
  ThreadCache* registry_next = nullptr;
  ThreadCache* registry_prev = nullptr;
  // Kept for the next thread (an exited thread's cache): the next one kept, whether a look of
  // the clock saw it waiting already, and the bytes it held when kept (Globals::kept_bytes).
  // Guarded by the registry lock.
  ThreadCache* kept_next = nullptr;
  bool kept_seen = false;
  std::size_t kept_bytes = 0;
};

// The shared empty cache of threads without one. Const, so it lies in read-only memory: a write
// to it by mistake is a crash at once, not a change seen by every thread, and reading it first
// costs no page of its own (a zeroed writable page is mapped once for the read, again when
// anything beside it is written).
extern constinit const ThreadCache empty_cache;
// What tls_cache holds until the thread has a cache of its own; never written through.
constexpr ThreadCache* EmptyCache() {
  return const_cast<ThreadCache*>(&empty_cache);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
