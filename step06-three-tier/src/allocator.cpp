// The allocator's slow paths: start-up, thread caches coming and going, large and aligned
// blocks, realloc/calloc, hardened checks and fork.
#include "allocator.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <type_traits>

#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

PageMap page_map;  // no constructor: all zeros from the loader (see page_map.h)
static_assert(std::is_trivially_default_constructible_v<PageMap>);
std::atomic<int> init_state{0};
__thread ThreadCache* tls_cache TIERPOOL_INITIAL_EXEC = &empty_cache;
tierpool_common::LinkKey free_list_key;
char valgrind_pool_anchor = 0;
char valgrind_leak_search_anchor[16] = {};
// The pointer that keeps the anchor reachable (so it is never reported itself).
char* valgrind_leak_search_anchor_ref = valgrind_leak_search_anchor;

namespace {

constinit Globals globals;
static_assert(std::is_trivially_destructible_v<Globals>);  // never torn down at exit

// Why the calling thread has no cache: never made one, making one right now (a nested call from
// pthread_setspecific), or already gave it back at exit (a later thread-exit destructor frees).
// Registry lock held: the share of the overall budget for `count` threads.
void UpdateThreadBudgetLocked(Globals& g) {
  const std::size_t count = g.thread_caches > 0 ? g.thread_caches : 1;
  std::size_t share = kOverallThreadCacheBudget / count;
  if (share < kMinThreadCacheBudget) share = kMinThreadCacheBudget;
  if (share > kMaxThreadCacheBudget) share = kMaxThreadCacheBudget;
  g.thread_budget.store(static_cast<std::int64_t>(share), std::memory_order_relaxed);
}

enum ThreadState : unsigned char { kNoCache = 0, kCreatingCache = 1, kExited = 2 };
__thread unsigned char tls_state TIERPOOL_INITIAL_EXEC = kNoCache;

void DestroyThreadCache(void* arg) {
  auto* tc = static_cast<ThreadCache*>(arg);
  tls_cache = &empty_cache;
  tls_state = kExited;
  tc->ReleaseAll();
  Globals& g = G();
  {
    SpinLockHolder hold(g.registry_lock);
    if (tc->registry_prev != nullptr) {
      tc->registry_prev->registry_next = tc->registry_next;
    } else {
      g.registry_head = tc->registry_next;
    }
    if (tc->registry_next != nullptr) tc->registry_next->registry_prev = tc->registry_prev;
    --g.thread_caches;
    UpdateThreadBudgetLocked(g);
  }
  ThreadCacheMemory* memory = tc->memory;
  tc->~ThreadCache();
  g.cache_pool.Delete(memory);
  // A thread's exit is a moment to look at once: what it gave back may be all there is.
  ReleaseIdleMemory();
  Tick();
}

[[noreturn]] void ReportBadFree(const void* ptr) {
  if (!page_map.Owns(ptr)) Fatal("free of a pointer this allocator never returned", ptr);
  Fatal("double free, or free of a pointer that is not the start of a block", ptr);
}

// The large span whose block starts at ptr, or nullptr.
Span* LargeSpanOf(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if ((address & (kPageSize - 1)) != 0) return nullptr;
  Span* span = page_map.Get(address >> kPageShift);
  if (span == nullptr || span->state != SpanState::kLarge ||
      span->first_page != address >> kPageShift)
    return nullptr;
  return span;
}

void FreeLarge(Span* span, FreedPages pages = FreedPages::kRecent) {
  ToolsOnFree(span->start(), span->bytes());
  Globals& g = G();
  g.page_heap.AccountLarge(-static_cast<std::ptrdiff_t>(span->bytes()));
  g.page_heap.Delete(span, pages);
  Tick();
}

// A whole span of at least `size` bytes for the user, `room` pages left free after it where
// possible (see PageHeap::New); nullptr + ENOMEM when it cannot be had.
Span* NewLargeSpan(std::size_t size, std::size_t alignment, std::size_t room = 0) {
  if (size > kMaxRequest || alignment > kMaxRequest) {
    errno = ENOMEM;
    return nullptr;
  }
  EnsureInit();
  Globals& g = G();
  std::size_t pages = (size + kPageSize - 1) >> kPageShift;
  if (pages == 0) pages = 1;
  Span* span = alignment > kPageSize
                   ? g.page_heap.NewAligned(pages, alignment >> kPageShift, SpanState::kLarge)
                   : g.page_heap.New(pages, SpanState::kLarge, room);
  if (span == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  g.page_heap.AccountLarge(static_cast<std::ptrdiff_t>(span->bytes()));
  ToolsOnAllocate(span->start(), span->bytes());
  Tick();
  return span;
}

// --- The release thread -------------------------------------------------------------------------
// Started by Tick on first need, after the process's constructors began (never from the loader's
// own early calls), with every signal blocked (signals are for the program's threads). It sleeps
// on a futex until there is free memory waiting for its delay, then looks at the clock until the
// page heap has no backed free span left, and sleeps again. A fork child starts without it.

// How often the central lists are looked at for batches nobody takes.
constexpr std::uint64_t kDrainLookMs = 4 * kReleaseDelayMs;

enum ReleaseThreadState : int { kThreadNone = 0, kThreadRunning = 1, kThreadOff = 2 };
std::atomic<int> release_thread_state{kThreadNone};
std::atomic<std::uint32_t> release_work{0};  // the futex word: 1 when there is work
std::atomic<bool> process_started{false};
// Whether the process had other threads when it last forked (see ForkChild).
bool forked_with_threads = false;

__attribute__((constructor)) void MarkProcessStarted() {
  process_started.store(true, std::memory_order_release);
}

// Sleeps until Tick says there is work, or `ms` milliseconds (0: no limit) have passed.
void WaitForWork(std::uint64_t ms) {
  timespec timeout{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000};
  const int saved_errno = errno;
  syscall(SYS_futex, &release_work, FUTEX_WAIT_PRIVATE, 0, ms != 0 ? &timeout : nullptr, nullptr,
          0);
  errno = saved_errno;
}

void* ReleaseThreadMain(void*) {
  Globals& g = G();
  for (;;) {
    while (release_work.exchange(0, std::memory_order_acq_rel) == 0)
      WaitForWork(0);
    // Until the page heap has no backed free span left, and two looks at the central lists in
    // a row found nothing new for it (the first look notes which batches were taken, the second
    // drains those nobody took since). New frees meanwhile wake the thread at once.
    for (int quiet_looks = 0; quiet_looks < 2;) {
      const std::uint64_t expiry = g.page_heap.NextExpiryMs();
      const std::uint64_t now = NowMs();
      if (expiry == 0) {
        WaitForWork(kDrainLookMs);
        ++quiet_looks;
      } else {
        // The coarse clock ticks every few milliseconds: a span that is not due yet when the
        // thread wakes costs one more short wait.
        WaitForWork(expiry > now ? expiry - now : 1);
        quiet_looks = 0;
      }
      if (release_work.exchange(0, std::memory_order_acq_rel) != 0) quiet_looks = 0;
      ReleaseIdleMemory();
    }
  }
  return nullptr;
}

void StartReleaseThread() {
  int expected = kThreadNone;
  if (!release_thread_state.compare_exchange_strong(expected, kThreadRunning,
                                                    std::memory_order_acq_rel))
    return;
  const int saved_errno = errno;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t thread;
  if (pthread_create(&thread, &attr, ReleaseThreadMain, nullptr) != 0) {
    release_thread_state.store(kThreadOff, std::memory_order_release);  // clock: slow paths only
  }
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = saved_errno;
}

// Without a thread cache (thread exiting, or the OS refused memory for one): go to the central
// cache one object at a time.
void* AllocateUncached(std::uint32_t cl) {
  void* first;
  void* second;
  if (G().central[cl].RemoveRange(&first, &second, 1) == 0) {
    errno = ENOMEM;
    return nullptr;
  }
  return HandOut(first, cl);
}

// `ptr` is already checked and marked free.
void FreeUncached(void* ptr, std::uint32_t cl) {
  StoreNext(ptr, nullptr);
  G().central[cl].InsertRange(ptr, nullptr, 1);
}

}  // namespace

Globals& G() {
  return globals;
}

void InitSlow() {
  int expected = 0;
  if (init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    if constexpr (kHardened) free_list_key = tierpool_common::RandomLinkKey();
    ToolsCreatePool();
    Globals* g = &globals;
    g->page_heap.Attach(&page_map, &g->span_pool);
    CentralFreeList::Attach(&g->page_heap, &page_map, g->central, g->transfer_slots);
    g->thread_budget.store(static_cast<std::int64_t>(kMaxThreadCacheBudget),
                           std::memory_order_relaxed);
    g->thread_exit_key_ok = pthread_key_create(&g->thread_exit_key, DestroyThreadCache) == 0;
    const char* thread = getenv("TIERPOOL_RELEASE_THREAD");
    if (thread != nullptr && thread[0] == '0' && thread[1] == '\0')
      release_thread_state.store(kThreadOff, std::memory_order_relaxed);
    init_state.store(2, std::memory_order_release);
    return;
  }
  while (init_state.load(std::memory_order_acquire) != 2)
    sched_yield();
}

// Every fast path begins with the load of tls_cache, moments after the previous call stored
// into the cache's arrays. The CPU matches a load with the stores still in flight by the low 12
// bits of their addresses first (4K aliasing): a load that matches a store there waits for it
// as if it read the same bytes. Where the thread's TLS slot lands on the list of a class in use,
// every call of that class pays (W1 through libtierpool.so, the slot on the 8-byte class's
// second pointer: 4.33-4.54 ns a pair, against 3.61-3.65 placed; see the chapter). The slot's
// page offset is the program's (its TLS layout), so the cache moves instead: it starts where the
// slot falls on its quiet offset.
ThreadCache* PlaceThreadCache(ThreadCacheMemory* memory, const void* tls_slot) {
  const auto base = reinterpret_cast<std::uintptr_t>(memory->bytes);
  const auto slot = reinterpret_cast<std::uintptr_t>(tls_slot);
  const std::uintptr_t start =
      base + ((slot - ThreadCache::kQuietOffset - base) & (kAliasingPeriod - 1));
  auto* tc = ::new (reinterpret_cast<void*>(start)) ThreadCache();
  tc->memory = memory;
  return tc;
}

ThreadCache* GetOrCreateCache() {
  if (tls_cache != &empty_cache) return tls_cache;
  if (tls_state != kNoCache) return nullptr;
  EnsureInit();
  Globals& g = G();
  if (!g.thread_exit_key_ok) return nullptr;
  tls_state = kCreatingCache;
  ThreadCacheMemory* memory = g.cache_pool.New();
  ThreadCache* tc = memory != nullptr ? PlaceThreadCache(memory, &tls_cache) : nullptr;
  if (tc != nullptr) {
    tc->Init(ThreadBudget());
    {
      SpinLockHolder hold(g.registry_lock);
      tc->registry_next = g.registry_head;
      if (g.registry_head != nullptr) g.registry_head->registry_prev = tc;
      g.registry_head = tc;
      ++g.thread_caches;
      UpdateThreadBudgetLocked(g);
    }
    // May allocate (glibc keeps keys >= 32 in a calloc'ed block): that nested call sees
    // kCreatingCache and is served without a cache.
    pthread_setspecific(g.thread_exit_key, tc);
    tls_cache = tc;
  }
  tls_state = kNoCache;
  return tc;
}

void* AllocateRefill(ThreadCache* tc, std::uint32_t cl) {
  if (tc == &empty_cache) {  // the thread's first allocation of all
    tc = GetOrCreateCache();
    if (tc == nullptr) return AllocateUncached(cl);
    return AllocateClass(tc, cl);
  }
  void* ptr = tc->FetchFromCentral(cl);
  Tick();
  if (TIERPOOL_UNLIKELY(ptr == nullptr)) {
    errno = ENOMEM;
    return nullptr;
  }
  return HandOut(ptr, cl);
}

void* AllocateSlow(std::size_t size) {
  return AllocateLarge(size, kPageSize);
}

void PushFull(ThreadCache* tc, void* ptr, std::uint32_t cl) {
  if (tc == &empty_cache) {  // the thread's first free of all
    tc = GetOrCreateCache();
    if (tc == nullptr) return FreeUncached(ptr, cl);
    return PushChecked(tc, ptr, cl);
  }
  tc->MakeRoom(cl);
  Tick();
  if (tc->room(cl) > 0) return PushChecked(tc, ptr, cl);
  FreeUncached(ptr, cl);  // the budget is spent and this list has a limit of 0
}

void* AllocateLarge(std::size_t size, std::size_t alignment) {
  Span* span = NewLargeSpan(size, alignment);
  return span != nullptr ? span->start() : nullptr;
}

void FreeSlow(void* ptr) {
  if (ptr == nullptr) return;
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (cl == 0) {
    Span* span = LargeSpanOf(ptr);
    if (span == nullptr) ReportBadFree(ptr);
    FreeLarge(span);
    return;
  }
  PushFree(tls_cache, ptr, cl);
}

void* AlignedAllocate(std::size_t size, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (alignment <= alignof(std::max_align_t) / 2)
    return Allocate(size);  // every class is 8-aligned
  if (size <= kMaxSmallSize && alignment <= kPageSize) {
    // Spans start on a page boundary, so a class whose size is a multiple of the alignment
    // has every object aligned. The first such class at or above the size:
    for (std::uint32_t cl = SizeToClass(size); cl < kNumClasses; ++cl) {
      if (ClassSize(cl) % alignment == 0) return AllocateClass(tls_cache, cl);
    }
  }
  return AllocateLarge(size, alignment > kPageSize ? alignment : kPageSize);
}

void* Calloc(std::size_t n, std::size_t size) {
  std::size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (total > kMaxSmallSize) {
    // Pages fresh from the OS, or given back to it, read as zero: clearing them would only make
    // every page of a big sparse table resident.
    Span* span = NewLargeSpan(total, kPageSize);
    if (span == nullptr) return nullptr;
    if (!span->zeroed || kToolsWatchMemory) std::memset(span->start(), 0, total);
    return span->start();
  }
  void* ptr = Allocate(total);
  if (ptr != nullptr) std::memset(ptr, 0, total);
  return ptr;
}

std::size_t UsableSize(const void* ptr) {
  if (ptr == nullptr) return 0;
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (cl != 0) return ClassSize(cl);
  const Span* span = LargeSpanOf(ptr);
  if (span == nullptr) {
    if constexpr (kHardened) Fatal("usable size of a pointer that is not a live block", ptr);
    return 0;
  }
  return span->bytes();
}

namespace {

// The block at `ptr` (`old_usable` bytes) to a fresh one of `size` bytes, by copying.
void* ReallocByCopy(void* ptr, std::size_t old_usable, std::size_t size) {
  void* fresh = Allocate(size);
  if (fresh == nullptr) return nullptr;  // errno is ENOMEM, ptr untouched
  std::memcpy(fresh, ptr, size < old_usable ? size : old_usable);
  Free(ptr);
  return fresh;
}

// A large block that needs more pages than follow it: to a new span with as much room again
// after it (so a buffer grown step by step moves O(log n) times, not once per step), its pages
// moved there by the kernel rather than copied when it is big.
void* MoveLarge(Span* span, std::size_t size) {
  const std::size_t old_bytes = span->bytes();
  const std::size_t pages = (size + kPageSize - 1) >> kPageShift;
  Span* fresh = NewLargeSpan(size, kPageSize, pages);
  if (fresh == nullptr) return nullptr;
  if (!kToolsWatchMemory && old_bytes >= kMovePagesMinBytes &&
      OsMovePages(span->start(), fresh->start(), old_bytes)) {
    FreeLarge(span, FreedPages::kZero);
  } else {
    std::memcpy(fresh->start(), span->start(), old_bytes);
    FreeLarge(span);
  }
  return fresh->start();
}

}  // namespace

void* Realloc(void* ptr, std::size_t size) {
  if (ptr == nullptr) return Allocate(size);
  if (size > kMaxRequest) {
    errno = ENOMEM;
    return nullptr;
  }
  const std::uint32_t cl = page_map.ClassOf(ptr);
  if (cl != 0) {
    // Stay in place only within the same class: a later sized free with the new size must find
    // the class the block really lives in.
    if (size <= kMaxSmallSize && SizeToClass(size) == cl) return ptr;
    return ReallocByCopy(ptr, ClassSize(cl), size);
  }
  Span* span = LargeSpanOf(ptr);
  if (span == nullptr) ReportBadFree(ptr);
  if (size <= kMaxSmallSize) return ReallocByCopy(ptr, span->bytes(), size);
  // In place when the pages after it are free (growing) or always (shrinking: the tail goes
  // back to the page heap, and to the OS after the release delay).
  const std::size_t old_bytes = span->bytes();
  if (G().page_heap.Resize(span, (size + kPageSize - 1) >> kPageShift)) {
    G().page_heap.AccountLarge(static_cast<std::ptrdiff_t>(span->bytes()) -
                               static_cast<std::ptrdiff_t>(old_bytes));
    ToolsOnResize(ptr, old_bytes, span->bytes());
    Tick();
    return ptr;
  }
  return MoveLarge(span, size);
}

void FlushThreadCache() {
  if (tls_cache != &empty_cache) tls_cache->ReleaseAll();
  if (init_state.load(std::memory_order_acquire) == 2) ReleaseIdleMemory();
}

void ReleaseIdleMemory() {
  Globals& g = G();
  // Every few release delays: a class whose batches nobody took since the previous look has them
  // drained to its spans (which may then go back to the page heap, as long idle).
  static std::atomic<std::uint64_t> last_look_ms{0};
  const std::uint64_t now = NowMs();
  std::uint64_t last = last_look_ms.load(std::memory_order_relaxed);
  if (now - last >= kDrainLookMs &&
      last_look_ms.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
      if (CentralFreeList::InUse(cl)) g.central[cl].DrainIfIdle();
    }
  }
  g.page_heap.ReleaseExpired();
}

void Tick() {
  if (init_state.load(std::memory_order_acquire) != 2) return;
  Globals& g = G();
  if (g.page_heap.FreeBackedBytes() >= kReleaseThreadMinBytes &&
      release_work.load(std::memory_order_relaxed) == 0) {
    const int state = release_thread_state.load(std::memory_order_acquire);
    if (state == kThreadRunning) {
      release_work.store(1, std::memory_order_release);
      syscall(SYS_futex, &release_work, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    } else if (state == kThreadNone && process_started.load(std::memory_order_acquire)) {
      release_work.store(1, std::memory_order_release);
      StartReleaseThread();
    }
  }
  // The clock itself is read on one slow path in 16 of each thread: reading it costs more than
  // the rest of a slow path's bookkeeping.
  static __thread std::uint32_t slow_paths TIERPOOL_INITIAL_EXEC = 0;
  if ((++slow_paths & 15) != 0) return;
  static std::atomic<std::uint64_t> last_tick_ms{0};
  const std::uint64_t now = NowMs();
  std::uint64_t last = last_tick_ms.load(std::memory_order_relaxed);
  if (now - last >= kReleaseDelayMs / 4 &&
      last_tick_ms.compare_exchange_strong(last, now, std::memory_order_relaxed))
    ReleaseIdleMemory();
}

std::size_t ReleaseFreeMemory() {
  EnsureInit();
  Globals& g = G();
  if (tls_cache != &empty_cache) tls_cache->ReleaseAll();
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    if (CentralFreeList::InUse(cl)) g.central[cl].DrainIfIdle(/*all=*/true);
  }
  const PageHeapStats before = g.page_heap.Stats();
  g.page_heap.Trim();
  const PageHeapStats after = g.page_heap.Stats();
  // Other threads may free meanwhile: a counter that grew counts as nothing given back.
  const auto given_back = [](std::size_t was, std::size_t is) { return was > is ? was - is : 0; };
  return given_back(before.free_backed_bytes, after.free_backed_bytes) +
         given_back(before.mapped_bytes, after.mapped_bytes);
}

// --- Hardened checks ------------------------------------------------------------------------

#if TIERPOOL_HARDENED
namespace {
struct ObjectSlot {
  Span* span;
  std::size_t index;
};

ObjectSlot SlotOf(void* ptr, std::uint32_t cl, bool freeing) {
  if (!page_map.Owns(ptr)) Fatal("free of a pointer this allocator never returned", ptr);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  Span* span = page_map.Get(address >> kPageShift);
  if (span == nullptr || span->state != SpanState::kSmall) ReportBadFree(ptr);
  if (span->size_class != cl) {
    if (freeing) Fatal("sized free with a size that does not match the allocation", ptr);
    Fatal("heap corrupted: a free list leads into a span of another class", ptr);
  }
  const std::size_t offset = address - reinterpret_cast<std::uintptr_t>(span->start());
  const std::size_t size = ClassSize(cl);
  if (offset % size != 0 || offset / size >= kClasses[cl].objects) {
    Fatal("free of a pointer inside a block, not at its start", ptr);
  }
  return ObjectSlot{span, offset / size};
}
}  // namespace

void HardenedOnAllocate(void* ptr, std::uint32_t cl) {
  if (!FreePatternIntact(ptr, ClassSize(cl))) Fatal("block was written after it was freed", ptr);
  const ObjectSlot slot = SlotOf(ptr, cl, false);
  const std::uint64_t bit = std::uint64_t{1} << (slot.index % 64);
  if (slot.span->live[slot.index / 64].fetch_or(bit, std::memory_order_relaxed) & bit) {
    Fatal("heap corrupted: a free list holds a block that is in use", ptr);
  }
}

void HardenedOnFree(void* ptr, std::uint32_t cl_from_size) {
  const ObjectSlot slot = SlotOf(ptr, cl_from_size, true);
  const std::uint64_t bit = std::uint64_t{1} << (slot.index % 64);
  if (!(slot.span->live[slot.index / 64].fetch_and(~bit, std::memory_order_relaxed) & bit)) {
    Fatal("double free", ptr);
  }
}
#else
void HardenedOnAllocate(void*, std::uint32_t) {}
void HardenedOnFree(void*, std::uint32_t) {}
#endif

// --- Fork -----------------------------------------------------------------------------------
// Every lock, always in this order: registry, central lists by class, page heap, span pool,
// cache pool, metadata arena. No code path takes them in another order.

void ForkPrepare() {
  EnsureInit();
  Globals& g = G();
  g.registry_lock.Lock();
  forked_with_threads =
      g.thread_caches > 1 || release_thread_state.load(std::memory_order_relaxed) == kThreadRunning;
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl)
    g.central[cl].lock().Lock();
  g.page_heap.lock().Lock();
  g.span_pool.lock().Lock();
  g.cache_pool.lock().Lock();
  Metadata().lock().Lock();
}

void ForkParent() {
  Globals& g = G();
  Metadata().lock().Unlock();
  g.cache_pool.lock().Unlock();
  g.span_pool.lock().Unlock();
  g.page_heap.lock().Unlock();
  for (std::uint32_t cl = kNumClasses; cl-- > 1;)
    g.central[cl].lock().Unlock();
  g.registry_lock.Unlock();
}

void ForkChild() {
  Globals& g = G();
  Metadata().lock().ResetAfterFork();
  g.cache_pool.lock().ResetAfterFork();
  g.span_pool.lock().ResetAfterFork();
  g.page_heap.lock().ResetAfterFork();
  for (std::uint32_t cl = kNumClasses; cl-- > 1;)
    g.central[cl].lock().ResetAfterFork();
  // Only the forking thread lives on in the child. The other threads' caches may have been
  // mid-update when fork happened, so their objects are abandoned, not reused; the registry
  // keeps just this thread's cache.
  ThreadCache* mine = tls_cache != &empty_cache ? tls_cache : nullptr;
  g.registry_head = mine;
  g.thread_caches = mine != nullptr ? 1 : 0;
  if (mine != nullptr) mine->registry_next = mine->registry_prev = nullptr;
  UpdateThreadBudgetLocked(g);
  g.registry_lock.ResetAfterFork();
  // The release thread did not come along. The child of a single-threaded process starts its
  // own when it needs one (a server's pre-forked workers); the child of a multi-threaded one may
  // only call async-signal-safe functions until it execs (POSIX), and pthread_create is not one:
  // it gives memory back from its own slow paths only.
  if (release_thread_state.load(std::memory_order_relaxed) != kThreadOff) {
    release_thread_state.store(forked_with_threads ? kThreadOff : kThreadNone,
                               std::memory_order_relaxed);
  }
  release_work.store(0, std::memory_order_relaxed);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
