// The allocator's entry points as inline functions: the fast paths live here so that api.cpp
// compiles each public function into a handful of instructions, with every slow path out of
// line. Nothing here allocates with malloc, and nothing here takes a lock.
//
//   Allocate(size):  size -> class (one table load) -> pop the thread's list of that class
//   FreeSized(p, n): size -> class -> push on the thread's list           (no page-map lookup)
//   Free(p):         page map -> class -> push on the thread's list
//
// The slow paths are declared below, each group under the file that defines it (the design page,
// docs/step06-design.md, maps every file to its concern).
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.h"
#include "memory_tools.h"
#include "page_map.h"
#include "size_class.h"
#include "startup.h"
#include "thread_cache.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

// --- Thread registration and thread exit (thread_registry.cpp) ---------------------------------

// The calling thread's cache: a trivially destructible pointer with the initial-exec model, so
// reading it is one %fs-relative load. It starts at &empty_cache (never null: no check on the
// fast path); the pthread key destructor returns the real cache at thread exit.
extern __thread ThreadCache* tls_cache TIERPOOL_INITIAL_EXEC;
// The calling thread's cache, made and registered on its first call; nullptr when it cannot
// have one (exiting, making one right now, no memory, no pthread key).
ThreadCache* GetOrCreateCache();
// The thread-exit key's destructor (InitSlow creates the key): `cache` kept for the next thread,
// or back to the central lists and out of the registry.
void DestroyThreadCache(void* cache);
// In a fork child, registry lock held: the registry keeps only the forking thread's cache (and
// the caches kept for the next threads).
void KeepOnlyCallingThreadLocked();
// The caches exited threads left for the next ones (kMaxKeptCaches): those a previous call saw
// waiting already go back to the central lists (`all`: every one). Whether any went.
bool ReleaseKeptCaches(bool all);

// --- The thread cache's slow paths (thread_cache.cpp) ------------------------------------------

void* AllocateRefill(ThreadCache* tc, std::uint32_t cl);
void PushFull(ThreadCache* tc, void* ptr, std::uint32_t cl);

// --- Large blocks, aligned blocks, calloc, realloc (large_blocks.cpp) --------------------------

void* AllocateSlow(std::size_t size);
void FreeSlow(void* ptr);
void FreeSizedSlow(void* ptr, std::size_t size);
void* AllocateLarge(std::size_t size, std::size_t alignment);
void* AlignedAllocate(std::size_t size, std::size_t alignment);
void* Calloc(std::size_t n, std::size_t size);
void* Realloc(void* ptr, std::size_t size);
std::size_t UsableSize(const void* ptr);

// --- Memory back to the OS: the clock and the release thread (release.cpp) ---------------------

// Gives back memory nobody used for a while: central batches untouched since the last look,
// and page-heap spans free for longer than the release delay.
void ReleaseIdleMemory();
// The allocator's clock, from the slow paths (no allocator lock held): at most a few times per
// release delay, ReleaseIdleMemory; and the release thread woken (or started) while free memory
// waits for its delay.
void Tick();
// Everything free goes back now: the calling thread's cache, every central batch, every free
// page (madvise) and every whole free region (munmap). The bytes given back.
std::size_t ReleaseFreeMemory();
// The calling thread's cache back to the central lists (tierpool_thread_flush).
void FlushThreadCache();
// Asks the release thread for the looks of the clock that give back what waits for them (batches
// parked in the central lists, caches of exited threads), if that is enough to matter: they come
// then even if the program stops calling.
void LookLater();
// At start-up: TIERPOOL_RELEASE_THREAD=0 in the environment turns the release thread off.
void ReadReleaseThreadSetting();
// Whether the release thread runs (fork reads it before forking).
bool ReleaseThreadRunning();
// In a fork child: the release thread did not come along (`with_threads`: the parent had other
// threads, so the child may not start one).
void ReleaseThreadAfterForkChild(bool with_threads);

// --- Fork (fork.cpp) ----------------------------------------------------------------------------

void ForkPrepare();
void ForkParent();
void ForkChild();

// --- Bad pointers, and the hardened checks (checks.cpp) ----------------------------------------

// Aborts with a message: `ptr` is not ours, or not the start of a live block.
[[noreturn]] void ReportBadFree(const void* ptr);
// Empty in other builds than the hardened ones.
void HardenedOnAllocate(void* ptr, std::uint32_t cl);
void HardenedOnFree(void* ptr, std::uint32_t cl_from_size);

// A block of class `cl` leaves the allocator for the user.
TIERPOOL_ALWAYS_INLINE void* HandOut(void* ptr, std::size_t cl) {
  if constexpr (kHardened) HardenedOnAllocate(ptr, cl);
  ToolsOnAllocate(ptr, ClassSize(cl));
  return ptr;
}

// The list operations alone, for the ladder's rungs whose thread caches keep lists (the library's
// keeps arrays: PopTop and PushChecked below): the fast paths below and the slow paths that move
// objects between a list and the central cache (thread_cache.cpp) share them. The list is
// unrolled (thread_cache.h): a node is a free object holding the addresses of up to cap(cl)
// others.
//
// Takes one object off the list of class `cl`, whose first node is `first` (tagged: named by
// its last item's word, its item count in the low bits; not the list's end). kRoom: the list's
// room grows by one (the fast path); each branch counts it itself, so that neither jumps to a
// shared tail.
// [snippet:list-pop]
template <bool kRoom>
TIERPOOL_ALWAYS_INLINE void* ListPop(ThreadCache* tc, std::size_t cl, void* first) {
  if (TIERPOOL_LIKELY(ItemsOf(first) != 0)) {
    // The node's last item: a word of a line in cache; the item itself is not touched.
    tc->set_head(cl, static_cast<char*>(first) - kItemStep);  // one item fewer
    if constexpr (kRoom) tc->set_room(cl, tc->room(cl) + 1);
    return TakeItemOfClass(LastWordOf(first), 0, page_map, static_cast<std::uint32_t>(cl));
  }
  // The node itself (no items left): the second moves up, the node's link names the new
  // second, which is asked for now (it is needed a node's worth of pops from now). A plain
  // chain (kAhead 1): the link names the new first.
  void* next = LoadLinkOfClass(first, page_map, static_cast<std::uint32_t>(cl),
                               static_cast<std::uintptr_t>(tc->cap(cl)));
  if constexpr (kAhead == 2) {
    tc->set_head(cl, tc->second(cl));
    tc->set_second(cl, next);
    __builtin_prefetch(next);  // the tag does not leave the node's first line
  } else {
    tc->set_head(cl, next);
  }
  if constexpr (kRoom) tc->set_room(cl, tc->room(cl) + 1);
  return first;
}
// [/snippet]

// Puts `ptr`, a free object of class `cl`, on its list.
// [snippet:list-push]
TIERPOOL_ALWAYS_INLINE void ListPush(ThreadCache* tc, std::size_t cl, void* ptr) {
  void* first = tc->head(cl);
  if (TIERPOOL_LIKELY(static_cast<std::int64_t>(ItemsOf(first)) < tc->cap(cl))) {
    if constexpr (kHardened) StoreNext(ptr, nullptr);  // checked when the item is taken
    // The freed object's address goes into the first node; the object itself is not written.
    StoreItem(LastWordOf(first), 1, ptr);
    tc->set_head(cl, static_cast<char*>(first) + kItemStep);  // one item more (items < cap <= 7)
    return;
  }
  // The first node is full (or the list empty, its end tagged as full): `ptr` becomes the new
  // first node, with no items, and the old first (tagged with its count) the second.
  if constexpr (kAhead == 2) {
    StoreNext(ptr, tc->second(cl));
    tc->set_second(cl, first);
  } else {
    StoreNext(ptr, first);
  }
  tc->set_head(cl, ptr);
}
// [/snippet]

// Takes an object off the thread's class `cl`: the top of its array, or its list's first node's
// last item (`first`, tagged).
// [snippet:pop]
TIERPOOL_ALWAYS_INLINE void* PopHead(ThreadCache* tc, std::size_t cl, void* first) {
  void* ptr = ListPop</*kRoom=*/true>(tc, cl, first);
  return HandOut(ptr, cl);
}

// An array's top object (`top` is above the array's low end). Hardened: a freed block's first
// word holds an encoded null (PushChecked, SpreadBatch); anything else is a write after free.
TIERPOOL_ALWAYS_INLINE void* PopTop(ThreadCache* tc, std::size_t cl, void** top) {
  void* ptr = top[-1];
  if constexpr (kToolsSearchLeaks) top[-1] = nullptr;
  tc->set_top(cl, top - 1);
  if constexpr (kHardened) {
    if (TIERPOOL_UNLIKELY(LoadNext(ptr) != nullptr))
      Fatal("free-list link overwritten in a freed block", ptr);
  }
  return HandOut(ptr, cl);
}

TIERPOOL_ALWAYS_INLINE void* AllocateClass(ThreadCache* tc, std::size_t cl) {
  if constexpr (kSlotArrays) {
    void** top = tc->top(cl);
    if (TIERPOOL_LIKELY(top != tc->low(cl))) return PopTop(tc, cl, top);
  } else {
    void* first = tc->head(cl);
    if (TIERPOOL_LIKELY(!IsListEnd(first))) return PopHead(tc, cl, first);
  }
  return AllocateRefill(tc, static_cast<std::uint32_t>(cl));
}
// [/snippet]

// How a small size finds its class: SizeToClass (the C++ API) or MallocSizeToClass (malloc and
// every form of operator new, which align every block above 8 bytes to 16; dropin.h).
using ClassOfSize = std::size_t (*)(std::size_t);

template <ClassOfSize kClassOf = SizeToClass>
TIERPOOL_ALWAYS_INLINE void* Allocate(std::size_t size) {
  ThreadCache* tc = tls_cache;
  if (TIERPOOL_LIKELY(size <= kMaxIndexedSize)) return AllocateClass(tc, kClassOf(size));
  return AllocateSlow(size);  // above the fine table: a coarse class, or a large block
}

// The fast path alone: a block from the thread's cache, or nullptr where Allocate would take a
// slow path (an empty list, a size above the fine table's). Never fails for lack of memory, so a
// caller whose own slow path does more than the allocator's (operator new's new-handler loop)
// keeps that out of line, and its fast path stays a leaf function with no stack frame.
template <ClassOfSize kClassOf>
TIERPOOL_ALWAYS_INLINE void* TryAllocateCached(std::size_t size) {
  if (TIERPOOL_UNLIKELY(size > kMaxIndexedSize)) return nullptr;
  ThreadCache* tc = tls_cache;
  const std::size_t cl = kClassOf(size);
  if constexpr (kSlotArrays) {
    void** top = tc->top(cl);
    if (TIERPOOL_UNLIKELY(top == tc->low(cl))) return nullptr;
    return PopTop(tc, cl, top);
  } else {
    void* first = tc->head(cl);
    if (TIERPOOL_UNLIKELY(IsListEnd(first))) return nullptr;
    return PopHead(tc, cl, first);
  }
}

// A block of class `cl`, already checked and marked free, goes on the thread's list. The room
// is checked before the push, so the shared empty cache (limit 0) is never written.
// [snippet:push]
TIERPOOL_ALWAYS_INLINE void PushChecked(ThreadCache* tc, void* ptr, std::size_t cl) {
  if constexpr (kSlotArrays) {
    void** top = tc->top(cl);
    if (TIERPOOL_LIKELY(top < tc->end(cl))) {  // (the empty cache's arrays: top == end, null)
      if constexpr (kHardened) StoreNext(ptr, nullptr);  // checked when it is popped
      *top = ptr;
      tc->set_top(cl, top + 1);
      return;
    }
    return PushFull(tc, ptr, static_cast<std::uint32_t>(cl));
  }
  const std::int64_t room = tc->room(cl) - 1;
  if (TIERPOOL_LIKELY(room >= 0)) {
    tc->set_room(cl, room);
    ListPush(tc, cl, ptr);
    return;
  }
  PushFull(tc, ptr, static_cast<std::uint32_t>(cl));
}
// [/snippet]

// A block of class `cl` comes back from the user.
TIERPOOL_ALWAYS_INLINE void PushFree(ThreadCache* tc, void* ptr, std::size_t cl) {
  if constexpr (kHardened) HardenedOnFree(ptr, cl);
  ToolsOnFree(ptr, ClassSize(cl));
  FillFreePattern(ptr, ClassSize(cl));
  PushChecked(tc, ptr, cl);
}

TIERPOOL_ALWAYS_INLINE void Free(void* ptr) {
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (TIERPOOL_LIKELY(cl != 0)) {
    PushFree(tls_cache, ptr, cl);
    return;
  }
  FreeSlow(ptr);
}

// `size` must be what the block was allocated with, and kClassOf the lookup that allocated it
// (not for blocks of AlignedAllocate, whose class may be larger than the size's own).
template <ClassOfSize kClassOf = SizeToClass>
TIERPOOL_ALWAYS_INLINE void FreeSized(void* ptr, std::size_t size) {
  if (TIERPOOL_LIKELY(size <= kMaxIndexedSize && ptr != nullptr)) {
    PushFree(tls_cache, ptr, kClassOf(size));
    return;
  }
  FreeSizedSlow(ptr, size);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
