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
struct Globals {
  Globals();
  FixedPool<Span> span_pool;
  FixedPool<ThreadCache> cache_pool;
  PageHeap page_heap;
  CentralFreeList central[kNumClasses];
  SpinLock registry_lock;
  ThreadCache* registry_head = nullptr;
  std::size_t thread_caches = 0;  // guarded by registry_lock
  pthread_key_t thread_exit_key{};
};

// Zero-initialized .bss: valid before any code runs, and only touched pages cost memory.
extern constinit PageMap page_map;

extern std::atomic<int> init_state;  // 0 none, 1 running, 2 done
void InitSlow();
TIERPOOL_ALWAYS_INLINE void EnsureInit() {
  if (TIERPOOL_UNLIKELY(init_state.load(std::memory_order_acquire) != 2)) InitSlow();
}
Globals& G();

// The calling thread's cache: a trivially destructible pointer with the initial-exec model, so
// reading it is one %fs-relative load. The pthread key destructor returns the cache at exit.
extern __thread ThreadCache* tls_cache TIERPOOL_INITIAL_EXEC;

// Slow paths (allocator.cpp).
void* AllocateSlow(std::size_t size);
void* AllocateRefill(ThreadCache* tc, std::uint32_t cl);
void FreeSlow(void* ptr);
void* AllocateLarge(std::size_t size, std::size_t alignment);
void* AlignedAllocate(std::size_t size, std::size_t alignment);
void* Calloc(std::size_t n, std::size_t size);
void* Realloc(void* ptr, std::size_t size);
std::size_t UsableSize(const void* ptr);
ThreadCache* GetOrCreateCache();
void FlushThreadCache();
void ForkPrepare();
void ForkParent();
void ForkChild();

// Hardened checks (allocator.cpp); empty in other builds.
void HardenedOnAllocate(void* ptr, std::uint32_t cl);
void HardenedOnFree(void* ptr, std::uint32_t cl_from_size);

// A block of class `cl` leaves the allocator for the user.
TIERPOOL_ALWAYS_INLINE void* HandOut(void* ptr, std::uint32_t cl) {
  if constexpr (kHardened) HardenedOnAllocate(ptr, cl);
  ToolsOnAllocate(ptr, ClassSize(cl));
  return ptr;
}

TIERPOOL_ALWAYS_INLINE void* AllocateClass(ThreadCache* tc, std::uint32_t cl) {
  FreeList& list = tc->list(cl);
  void* ptr = list.head;
  if (TIERPOOL_LIKELY(ptr != nullptr)) {
    list.head = LoadNext(ptr);
    list.SetLength(list.length - 1);
    return HandOut(ptr, cl);
  }
  return AllocateRefill(tc, cl);
}

TIERPOOL_ALWAYS_INLINE void* Allocate(std::size_t size) {
  ThreadCache* tc = tls_cache;
  if (TIERPOOL_LIKELY(size <= kMaxSmallSize && tc != nullptr)) {
    return AllocateClass(tc, SizeToClass(size));
  }
  return AllocateSlow(size);
}

// A block of class `cl` comes back from the user into the thread's cache.
TIERPOOL_ALWAYS_INLINE void PushFree(ThreadCache* tc, void* ptr, std::uint32_t cl) {
  if constexpr (kHardened) HardenedOnFree(ptr, cl);
  ToolsOnFree(ptr, ClassSize(cl));
  FillFreePattern(ptr, ClassSize(cl));
  FreeList& list = tc->list(cl);
  StoreNext(ptr, list.head);
  list.head = ptr;
  const std::uint32_t length = list.length + 1;
  list.SetLength(length);
  if (TIERPOOL_UNLIKELY(length > list.max_length)) tc->ListTooLong(cl);
}

TIERPOOL_ALWAYS_INLINE void Free(void* ptr) {
  const std::uint32_t cl = page_map.ClassOf(ptr);
  ThreadCache* tc = tls_cache;
  if (TIERPOOL_LIKELY(cl != 0 && tc != nullptr)) {
    PushFree(tc, ptr, cl);
    return;
  }
  FreeSlow(ptr);
}

// `size` must be what the block was allocated with (not for blocks of AlignedAllocate, whose
// class may be larger than the size's own).
TIERPOOL_ALWAYS_INLINE void FreeSized(void* ptr, std::size_t size) {
  ThreadCache* tc = tls_cache;
  if (TIERPOOL_LIKELY(size <= kMaxSmallSize && tc != nullptr && ptr != nullptr)) {
    PushFree(tc, ptr, SizeToClass(size));
    return;
  }
  FreeSlow(ptr);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
