// Thread registration and thread exit: a thread's cache made on its first call (or taken over
// from a thread that exited), entered in the registry (which stats and fork walk), its share of
// the overall byte budget set; and at thread exit, the cache kept for the next thread if it holds
// little, or everything it holds given back to the central lists.
#include "allocator.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

__thread ThreadCache* tls_cache TIERPOOL_INITIAL_EXEC = EmptyCache();

namespace {

// Registry lock held: the share of the overall budget for `count` threads.
void UpdateThreadBudgetLocked(Globals& g) {
  const std::size_t count = g.thread_caches > 0 ? g.thread_caches : 1;
  std::size_t share = kOverallThreadCacheBudget / count;
  if (share < kMinThreadCacheBudget) share = kMinThreadCacheBudget;
  if (share > kMaxThreadCacheBudget) share = kMaxThreadCacheBudget;
  // Without the budget rung (a benchmark variant) the lists' limits never reach this.
  if constexpr (!kByteBudget) share = std::size_t{1} << 60;
  g.thread_budget.store(static_cast<std::int64_t>(share), std::memory_order_relaxed);
}

// Why the calling thread has no cache: never made one, making one right now (a nested call from
// pthread_setspecific), or already gave it back at exit (a later thread-exit destructor frees).
enum ThreadState : unsigned char { kNoCache = 0, kCreatingCache = 1, kExited = 2 };
__thread unsigned char tls_state TIERPOOL_INITIAL_EXEC = kNoCache;

// A cache out of the registry and gone: its objects back to the central lists, its arrays to the
// arena's spares. Its caller counted it in caches_deleting, under the registry lock.
void DeleteCache(ThreadCache* tc) {
  BetweenTiers(Move::kCacheApart);
  tc->ReleaseAll();
  tc->RetireArrays();
  Globals& g = G();
  {
    SpinLockHolder hold(g.registry_lock);
    --g.caches_deleting;
    if (tc->registry_prev != nullptr) {
      tc->registry_prev->registry_next = tc->registry_next;
    } else {
      g.registry_head = tc->registry_next;
    }
    if (tc->registry_next != nullptr) tc->registry_next->registry_prev = tc->registry_prev;
  }
  g.cache_pool.Delete(tc);
}

// Registry lock held, the exiting thread no longer counted: the budget the kept caches may fill,
// what the live caches' shares leave of the overall budget.
std::size_t KeptRoomLocked(const Globals& g) {
  const auto share = static_cast<std::size_t>(g.thread_budget.load(std::memory_order_relaxed));
  if (g.thread_caches != 0 && share >= kOverallThreadCacheBudget / g.thread_caches) return 0;
  return kOverallThreadCacheBudget - g.thread_caches * share;
}

// Registry lock held: `tc` waits for the next thread if there is room.
bool KeepForNextThreadLocked(Globals& g, ThreadCache* tc) {
  const std::size_t bytes = tc->CachedBytes();
  if (g.kept_caches.load(std::memory_order_relaxed) >= kMaxKeptCaches ||
      g.kept_bytes.load(std::memory_order_relaxed) + bytes > KeptRoomLocked(g))
    return false;
  tc->kept_next = g.kept_head;
  tc->kept_seen = false;
  tc->kept_bytes = bytes;
  g.kept_head = tc;
  g.kept_caches.fetch_add(1, std::memory_order_relaxed);
  g.kept_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

// Registry lock held: `tc`, the cache `*link` names, is no longer kept.
void UnkeepLocked(Globals& g, ThreadCache** link, ThreadCache* tc) {
  *link = tc->kept_next;
  tc->kept_next = nullptr;
  g.kept_caches.fetch_sub(1, std::memory_order_relaxed);
  g.kept_bytes.fetch_sub(tc->kept_bytes, std::memory_order_relaxed);
}

// Registry lock held: the cache the last thread to exit left, or nullptr.
ThreadCache* TakeKeptCacheLocked(Globals& g) {
  ThreadCache* tc = g.kept_head;
  if (tc != nullptr) UnkeepLocked(g, &g.kept_head, tc);
  return tc;
}

}  // namespace

// [snippet:thread-exit]
void DestroyThreadCache(void* cache) {
  ThisThreadMoving moving;  // the cache, if not kept, is taken apart (DeleteCache)
  auto* tc = static_cast<ThreadCache*>(cache);
  tls_cache = EmptyCache();
  tls_state = kExited;
  Globals& g = G();
  bool kept;
  {
    SpinLockHolder hold(g.registry_lock);
    --g.thread_caches;
    UpdateThreadBudgetLocked(g);
    kept = KeepForNextThreadLocked(g, tc);
    if (!kept) ++g.caches_deleting;
  }
  if (!kept) DeleteCache(tc);
  // A thread's exit is a moment to look at once: what it gave back may be all there is.
  ReleaseIdleMemory();
  Tick();
  if (kept && g.kept_bytes.load(std::memory_order_relaxed) >= kReleaseThreadMinBytes) LookLater();
}
// [/snippet]

// At each look of the clock: the kept caches that waited through the previous look too go back
// whole (`all`: every kept cache, now).
bool ReleaseKeptCaches(bool all) {
  ThisThreadMoving moving;  // the caches unclaimed are taken apart (DeleteCache)
  Globals& g = G();
  ThreadCache* unclaimed = nullptr;
  {
    SpinLockHolder hold(g.registry_lock);
    ThreadCache** link = &g.kept_head;
    while (*link != nullptr) {
      ThreadCache* tc = *link;
      if (all || tc->kept_seen) {
        UnkeepLocked(g, link, tc);
        ++g.caches_deleting;
        tc->kept_next = unclaimed;
        unclaimed = tc;
      } else {
        tc->kept_seen = true;
        link = &tc->kept_next;
      }
    }
  }
  const bool any = unclaimed != nullptr;
  while (unclaimed != nullptr) {
    ThreadCache* tc = unclaimed;
    unclaimed = tc->kept_next;
    DeleteCache(tc);
  }
  return any;
}

ThreadCache* GetOrCreateCache() {
  if (tls_cache != &empty_cache) return tls_cache;
  if (tls_state != kNoCache) return nullptr;
  EnsureInit();
  Globals& g = G();
  if (!g.thread_exit_key_ok) return nullptr;
  tls_state = kCreatingCache;
  ThreadCache* tc;
  {
    SpinLockHolder hold(g.registry_lock);
    tc = TakeKeptCacheLocked(g);
    if (tc != nullptr) {
      ++g.thread_caches;
      UpdateThreadBudgetLocked(g);
    }
  }
  if (tc != nullptr) {
    tc->TakeOver();
  } else {
    tc = g.cache_pool.New();
    if (tc != nullptr) {
      tc->Init(ThreadBudget());
      SpinLockHolder hold(g.registry_lock);
      tc->registry_next = g.registry_head;
      if (g.registry_head != nullptr) g.registry_head->registry_prev = tc;
      g.registry_head = tc;
      ++g.thread_caches;
      UpdateThreadBudgetLocked(g);
    }
  }
  if (tc != nullptr) {
    // May allocate (glibc keeps keys >= 32 in a calloc'ed block): that nested call sees
    // kCreatingCache and is served without a cache.
    pthread_setspecific(g.thread_exit_key, tc);
    tls_cache = tc;
  }
  tls_state = kNoCache;
  return tc;
}

// Only the forking thread lives on in the child. The other threads' caches may have been
// mid-update when fork happened, so their objects are abandoned, not reused; the registry keeps
// just this thread's cache.
void KeepOnlyCallingThreadLocked() {
  Globals& g = G();
  ThreadCache* mine = tls_cache != &empty_cache ? tls_cache : nullptr;
  g.registry_head = mine;
  g.thread_caches = mine != nullptr ? 1 : 0;
  if (mine != nullptr) mine->registry_next = mine->registry_prev = nullptr;
  // The kept caches were not being changed (their lock was held): they stay, for the child's
  // threads.
  for (ThreadCache* tc = g.kept_head; tc != nullptr; tc = tc->kept_next) {
    tc->registry_prev = nullptr;
    tc->registry_next = g.registry_head;
    if (g.registry_head != nullptr) g.registry_head->registry_prev = tc;
    g.registry_head = tc;
  }
  UpdateThreadBudgetLocked(g);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
