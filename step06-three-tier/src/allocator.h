// The allocator's entry points as inline functions: the fast paths live here so that api.cpp
// compiles each public function into a handful of instructions, with every slow path out of
// line. Nothing here allocates with malloc, and nothing here takes a lock.
//
//   Allocate(size):  size -> class (one table load) -> pop the thread's list of that class
//   FreeSized(p, n): size -> class -> push on the thread's list           (no page-map lookup)
//   Free(p):         page map -> class -> push on the thread's list
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "central_cache.h"
#include "config.h"
#include "memory_tools.h"
#include "metadata.h"
#include "page_heap.h"
#include "page_map.h"
#include "size_class.h"
#include "span.h"
#include "spinlock.h"
#include "thread_cache.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

// Everything global except the page map, built on first use (no static constructor runs it:
// the allocator may be called before main).
// One static object, constant-initialized to zero bytes: no constructor runs and nothing is
// written until InitSlow attaches the tiers to each other, so a process pays page faults only for
// the parts it uses.
struct Globals {
  constexpr Globals() = default;
  FixedPool<Span> span_pool;
  FixedPool<ThreadCacheMemory> cache_pool;
  PageHeap page_heap;
  CentralFreeList central[kNumClasses];
  // The central lists' transfer slots: only the pages of the slots in use are ever touched.
  CentralFreeList::Batch transfer_slots[kNumClasses][CentralFreeList::kMaxTransferSlots] = {};
  SpinLock registry_lock;
  ThreadCache* registry_head = nullptr;
  std::size_t thread_caches = 0;  // guarded by registry_lock
  // Each thread cache's share of kOverallThreadCacheBudget (set by InitSlow); caches read it in
  // their slow paths.
  std::atomic<std::int64_t> thread_budget{0};
  pthread_key_t thread_exit_key{};
  // false when pthread_key_create failed (the process used up its keys): then no thread gets a
  // cache, since nothing would give it back at exit, and every call goes to the central lists.
  bool thread_exit_key_ok = false;
};

// Zero-initialized .bss: valid before any code runs, and only touched pages cost memory.
extern PageMap page_map;

extern std::atomic<int> init_state;  // 0 none, 1 running, 2 done
void InitSlow();
TIERPOOL_ALWAYS_INLINE void EnsureInit() {
  if (TIERPOOL_UNLIKELY(init_state.load(std::memory_order_acquire) != 2)) InitSlow();
}
Globals& G();
TIERPOOL_ALWAYS_INLINE std::int64_t ThreadBudget() {
  return G().thread_budget.load(std::memory_order_relaxed);
}
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

// The calling thread's cache: a trivially destructible pointer with the initial-exec model, so
// reading it is one %fs-relative load. It starts at &empty_cache (never null: no check on the
// fast path); the pthread key destructor returns the real cache at thread exit.
extern __thread ThreadCache* tls_cache TIERPOOL_INITIAL_EXEC;

// Slow paths (allocator.cpp).
void* AllocateSlow(std::size_t size);
void* AllocateRefill(ThreadCache* tc, std::uint32_t cl);
void PushFull(ThreadCache* tc, void* ptr, std::uint32_t cl);
void FreeSlow(void* ptr);
void* AllocateLarge(std::size_t size, std::size_t alignment);
void* AlignedAllocate(std::size_t size, std::size_t alignment);
void* Calloc(std::size_t n, std::size_t size);
void* Realloc(void* ptr, std::size_t size);
std::size_t UsableSize(const void* ptr);
ThreadCache* GetOrCreateCache();
// A new cache in `memory`, placed for the thread whose TLS slot (tls_cache) is at `tls_slot`.
ThreadCache* PlaceThreadCache(ThreadCacheMemory* memory, const void* tls_slot);
void FlushThreadCache();
void ForkPrepare();
void ForkParent();
void ForkChild();

// Hardened checks (allocator.cpp); empty in other builds.
void HardenedOnAllocate(void* ptr, std::uint32_t cl);
void HardenedOnFree(void* ptr, std::uint32_t cl_from_size);

// A block of class `cl` leaves the allocator for the user.
TIERPOOL_ALWAYS_INLINE void* HandOut(void* ptr, std::size_t cl) {
  if constexpr (kHardened) HardenedOnAllocate(ptr, cl);
  ToolsOnAllocate(ptr, ClassSize(cl));
  return ptr;
}

// Takes `ptr`, the head of the thread's list of class `cl`, off that list.
// [snippet:pop]
TIERPOOL_ALWAYS_INLINE void* PopHead(ThreadCache* tc, std::size_t cl, void* ptr) {
  // The second moves up; the head's link names the new second, which is handed out two
  // allocations from now: ask for its line now, so its own link is there when it is read.
  void* third = LoadNextOfClass(ptr, page_map, static_cast<std::uint32_t>(cl));
  tc->set_head(cl, tc->second(cl));
  tc->set_second(cl, third);
  __builtin_prefetch(third);
  tc->set_room(cl, tc->room(cl) + 1);
  tc->set_budget_left(tc->budget_left() + tc->object_size(cl));
  return HandOut(ptr, cl);
}

TIERPOOL_ALWAYS_INLINE void* AllocateClass(ThreadCache* tc, std::size_t cl) {
  void* ptr = tc->head(cl);
  if (TIERPOOL_LIKELY(ptr != nullptr)) return PopHead(tc, cl, ptr);
  return AllocateRefill(tc, cl);
}
// [/snippet]

// How a small size finds its class: SizeToClass (the C++ API, operator new) or
// MallocSizeToClass (malloc, and the operator new[] forms, which align as malloc does).
using ClassOfSize = std::size_t (*)(std::size_t);

template <ClassOfSize kClassOf = SizeToClass>
TIERPOOL_ALWAYS_INLINE void* Allocate(std::size_t size) {
  ThreadCache* tc = tls_cache;
  if (TIERPOOL_LIKELY(size <= kMaxSmallSize)) return AllocateClass(tc, kClassOf(size));
  return AllocateSlow(size);
}

// The fast path alone: a block from the thread's cache, or nullptr where Allocate would take a
// slow path (an empty list, a large size). Never fails for lack of memory, so a caller whose own
// slow path does more than the allocator's (operator new's new-handler loop) keeps that out of
// line, and its fast path stays a leaf function with no stack frame.
template <ClassOfSize kClassOf = SizeToClass>
TIERPOOL_ALWAYS_INLINE void* TryAllocateCached(std::size_t size) {
  if (TIERPOOL_UNLIKELY(size > kMaxSmallSize)) return nullptr;
  ThreadCache* tc = tls_cache;
  const std::size_t cl = kClassOf(size);
  void* ptr = tc->head(cl);
  if (TIERPOOL_UNLIKELY(ptr == nullptr)) return nullptr;
  return PopHead(tc, cl, ptr);
}

// A block of class `cl`, already checked and marked free, goes on the thread's list. The room
// is checked before the push, so the shared empty cache (limit 0) is never written.
// [snippet:push]
TIERPOOL_ALWAYS_INLINE void PushChecked(ThreadCache* tc, void* ptr, std::size_t cl) {
  const std::int64_t room = tc->room(cl) - 1;
  if (TIERPOOL_LIKELY(room >= 0)) {
    tc->set_room(cl, room);
    StoreNext(ptr, tc->second(cl));
    tc->set_second(cl, tc->head(cl));
    tc->set_head(cl, ptr);
    const std::int64_t left = tc->budget_left() - tc->object_size(cl);
    tc->set_budget_left(left);
    if (TIERPOOL_UNLIKELY(left < 0)) tc->OverBudget(cl);
    return;
  }
  PushFull(tc, ptr, cl);
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
  if (TIERPOOL_LIKELY(size <= kMaxSmallSize && ptr != nullptr)) {
    PushFree(tls_cache, ptr, kClassOf(size));
    return;
  }
  FreeSlow(ptr);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
