// Fork: the handlers installed with pthread_atfork (malloc_shim.cpp) or called by a program that
// forks its own way (tierpool_fork_prepare/parent/child). Prepare takes every lock of the
// allocator, so that no other thread is mid-update when the address space is copied; the parent
// lets them go, and the child, where only the forking thread lives on, resets them.
#include <sched.h>

#include "allocator.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

namespace {

// Whether the process had other threads when it last forked (see ForkChild).
bool forked_with_threads = false;

// `op` on every lock ForkPrepare takes after the registry's, in the reverse order.
void AfterRegistryInReverse(void (SpinLock::*op)()) {
  Globals& g = G();
  (SlotArena::SpareLock().*op)();
  (Metadata().lock().*op)();
  (g.cache_pool.lock().*op)();
  (g.span_pool.lock().*op)();
  (g.page_heap.lock().*op)();
  for (std::uint32_t cl = kNumClasses; cl-- > 1;)
    (g.central[cl].lock().*op)();
}

}  // namespace

// Every lock, always in this order: registry, central lists by class, page heap, span pool,
// cache pool, metadata arena, spare array regions. No code path takes them in another order.
// What moves between two tiers with no lock held is waited for where it can finish: a cache
// being taken apart (it needs the central lists and, at its end, the registry), a span on its way
// from the page heap to a central list (it needs its list's lock back), and spans on their way
// from a central list to the page heap (they need the page heap's and span pool's locks). In the
// child they would be in no list, counted in use for good.
// [snippet:fork-prepare]
void ForkPrepare() {
  EnsureInit();
  Globals& g = G();
  // Not for a move this thread is in (a signal handler that forks): it would never end.
  const bool wait = !ThisThreadMoving::Now();
  g.registry_lock.Lock();
  while (wait && g.caches_deleting != 0) {
    g.registry_lock.Unlock();
    sched_yield();
    g.registry_lock.Lock();
  }
  forked_with_threads = g.thread_caches > 1 || ReleaseThreadRunning();
  for (;;) {
    for (std::uint32_t cl = 1; cl < kNumClasses; ++cl)
      g.central[cl].lock().Lock();
    if (!wait || CentralFreeList::Growing() == 0) break;
    for (std::uint32_t cl = kNumClasses; cl-- > 1;)
      g.central[cl].lock().Unlock();
    sched_yield();
  }
  while (wait && CentralFreeList::Returning() != 0)
    sched_yield();
  g.page_heap.lock().Lock();
  g.span_pool.lock().Lock();
  g.cache_pool.lock().Lock();
  Metadata().lock().Lock();
  SlotArena::SpareLock().Lock();
}
// [/snippet]

void ForkParent() {
  AfterRegistryInReverse(&SpinLock::Unlock);
  G().registry_lock.Unlock();
}

// The child: its locks may have been held by threads that do not exist here, so they are reset,
// not unlocked; the registry keeps the forking thread's cache alone, and the release thread is
// left behind.
// [snippet:fork-child]
void ForkChild() {
  AfterRegistryInReverse(&SpinLock::ResetAfterFork);
  G().page_heap.AfterForkChild();
  CentralFreeList::AfterForkChild();
  KeepOnlyCallingThreadLocked();
  G().registry_lock.ResetAfterFork();
  ReleaseThreadAfterForkChild(forked_with_threads);
}
// [/snippet]

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
