// Start-up: the allocator's global state and the one-time set-up that attaches the tiers to each
// other (startup.cpp). Nothing here runs before the first call: the allocator may be called
// before main, by the loader and libc, so it initializes itself on first use.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "central_cache.h"
#include "config.h"
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
// [snippet:globals]
struct Globals {
  constexpr Globals() = default;
  FixedPool<Span> span_pool;
  FixedPool<ThreadCache> cache_pool;
  PageHeap page_heap;
  CentralFreeList central[kNumClasses];
  // The central lists' transfer slots: only the pages of the slots in use are ever touched.
  CentralFreeList::Batch transfer_slots[kNumClasses][CentralFreeList::kMaxTransferSlots] = {};
  SpinLock registry_lock;
  ThreadCache* registry_head = nullptr;
  std::size_t thread_caches = 0;  // guarded by registry_lock
  // Caches of exited threads kept for the next ones (thread_registry.cpp), guarded by
  // registry_lock; in the registry, not counted in thread_caches.
  ThreadCache* kept_head = nullptr;
  std::atomic<int> kept_caches{0};         // written under registry_lock, read without it
  std::atomic<std::size_t> kept_bytes{0};  // what they hold; the same
  // Caches being taken apart (DeleteCache: an exiting thread's, a kept one the clock gave back),
  // guarded by registry_lock: in no list a fork's child could take them back from, so a fork
  // waits for them (ForkPrepare).
  int caches_deleting = 0;
  // Each thread cache's share of kOverallThreadCacheBudget (set by InitSlow); caches read it in
  // their slow paths.
  std::atomic<std::int64_t> thread_budget{0};
  pthread_key_t thread_exit_key{};
  // false when pthread_key_create failed (the process used up its keys): then no thread gets a
  // cache, since nothing would give it back at exit, and every call goes to the central lists.
  bool thread_exit_key_ok = false;
};
// [/snippet]

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

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
