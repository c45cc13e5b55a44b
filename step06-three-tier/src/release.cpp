// Memory back to the OS: the clock the slow paths tick, the release thread that gives memory back
// while the program is quiet, and the calls that give everything back now (malloc_trim,
// tierpool_thread_flush).
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "allocator.h"
#include "os.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

namespace {

// --- The release thread -------------------------------------------------------------------------
// Started by Tick on first need, after the process's constructors began (never from the loader's
// own early calls), with every signal blocked (signals are for the program's threads). It sleeps
// on a futex until there is free memory waiting for its delay, then looks at the clock until the
// page heap has no backed free span left, and sleeps again. A fork child starts without it.

// How often the central lists are looked at for batches nobody takes.
constexpr std::uint64_t kDrainLookMs = 4 * kReleaseDelayMs;
// How often, at most, parked batches alone wake the release thread for such looks.
constexpr std::uint64_t kParkedLookMs = 1000;

enum ReleaseThreadState : int { kThreadNone = 0, kThreadRunning = 1, kThreadOff = 2 };
std::atomic<int> release_thread_state{kThreadNone};
std::atomic<std::uint32_t> release_work{0};  // the futex word: 1 when there is work
// The thread sleeps until the oldest backed free span is due. Memory freed meanwhile is due later
// (and memory past the peak goes back inside free itself), so nothing needs to wake it early:
// waking it anyway cost a futex call and two context switches on every slow path of a program
// that keeps a few MiB free (large blocks in churn spent a fifth of their time there).
std::atomic<bool> release_waiting_for_expiry{false};
std::atomic<bool> process_started{false};
// Looks at the central lists in a row, by any thread, that drained nothing while less than
// kReleaseThreadMinBytes stayed parked: after two, the release thread may sleep.
std::atomic<std::uint32_t> quiet_looks{0};

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
    // Until the page heap has no backed free span left, and two looks in a row at the central
    // lists, the thread's own or a slow path's, found nothing to do (quiet_looks). New work
    // (frees, a flush) wakes the thread at once and starts the count again.
    quiet_looks.store(0, std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t expiry = g.page_heap.NextExpiryMs();
      const std::uint64_t now = NowMs();
      if (expiry == 0) {
        if (quiet_looks.load(std::memory_order_relaxed) >= 2) break;
        WaitForWork(kDrainLookMs);
      } else {
        // The coarse clock ticks every few milliseconds: a span that is not due yet when the
        // thread wakes costs one more short wait.
        release_waiting_for_expiry.store(true, std::memory_order_seq_cst);
        WaitForWork(expiry > now ? expiry - now : 1);
        release_waiting_for_expiry.store(false, std::memory_order_seq_cst);
      }
      if (release_work.exchange(0, std::memory_order_seq_cst) != 0)  // after the flag's store
        quiet_looks.store(0, std::memory_order_relaxed);
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

// Asks the release thread to look (starting it on first need), unless it was asked already. A
// thread that sleeps until a span is due is not woken (no futex call): the work is left for it
// to find when it wakes, so that it keeps looking after the span instead of going back to sleep
// on looks counted quiet before the work came (batches parked meanwhile stayed parked while the
// program called only its fast paths). If it stopped waiting meanwhile, it is woken as usual:
// the flag and the work are stored and read in one order (seq_cst), so one of the two sees the
// other.
void WakeReleaseThread() {
  if (release_work.load(std::memory_order_relaxed) != 0) return;
  if (release_waiting_for_expiry.load(std::memory_order_seq_cst)) {
    release_work.store(1, std::memory_order_seq_cst);
    if (release_waiting_for_expiry.load(std::memory_order_seq_cst)) return;
  }
  const int state = release_thread_state.load(std::memory_order_acquire);
  if (state == kThreadRunning) {
    release_work.store(1, std::memory_order_release);
    syscall(SYS_futex, &release_work, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  } else if (state == kThreadNone && process_started.load(std::memory_order_acquire)) {
    release_work.store(1, std::memory_order_release);
    StartReleaseThread();
  }
}

}  // namespace

void ReadReleaseThreadSetting() {
  const char* thread = getenv("TIERPOOL_RELEASE_THREAD");
  if (thread != nullptr && thread[0] == '0' && thread[1] == '\0')
    release_thread_state.store(kThreadOff, std::memory_order_relaxed);
}

bool ReleaseThreadRunning() {
  return release_thread_state.load(std::memory_order_relaxed) == kThreadRunning;
}

// The release thread did not come along. The child of a single-threaded process starts its own
// when it needs one (a server's pre-forked workers); the child of a multi-threaded one may only
// call async-signal-safe functions until it execs (POSIX), and pthread_create is not one: it
// gives memory back from its own slow paths only.
void ReleaseThreadAfterForkChild(bool with_threads) {
  if (release_thread_state.load(std::memory_order_relaxed) != kThreadOff) {
    release_thread_state.store(with_threads ? kThreadOff : kThreadNone, std::memory_order_relaxed);
  }
  release_work.store(0, std::memory_order_relaxed);
  release_waiting_for_expiry.store(false, std::memory_order_relaxed);  // no thread sleeps here
}

void FlushThreadCache() {
  if (tls_cache != &empty_cache) tls_cache->ReleaseAll();
  if (init_state.load(std::memory_order_acquire) != 2) return;
  ReleaseIdleMemory();
  LookLater();  // what was parked goes back later, even if no thread calls again
}

namespace {
// Enough waits for the looks of the clock to call for more of them.
bool WaitingForLooks() {
  return CentralFreeList::ParkedBytes() >= kReleaseThreadMinBytes ||
         G().kept_bytes.load(std::memory_order_relaxed) >= kReleaseThreadMinBytes;
}
}  // namespace

void LookLater() {
  if (WaitingForLooks()) WakeReleaseThread();
}

void ReleaseIdleMemory() {
  Globals& g = G();
  // Every few release delays: the batches that stayed parked since the previous look are
  // drained to their spans (which may then go back to the page heap, as long idle).
  static std::atomic<std::uint64_t> last_look_ms{0};
  const std::uint64_t now = NowMs();
  std::uint64_t last = last_look_ms.load(std::memory_order_relaxed);
  if (now - last >= kDrainLookMs &&
      last_look_ms.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    // The caches of exited threads that no thread took since the previous look first: what they
    // give back may make batches to drain. (Kept caches that merely wait do not keep the release
    // thread looking: its looks drain parked batches too, and a program that starts threads all
    // the time would have its batches drained from under it, as below.)
    bool drained = ReleaseKeptCaches(/*all=*/false);
    for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
      if (CentralFreeList::InUse(cl) && g.central[cl].DrainIfIdle()) drained = true;
    }
    // Quiet: nothing drained, and too little waiting to call for another look (the batches and
    // caches it noted as waiting go at the next look only if that many are; fewer may stay).
    if (drained || WaitingForLooks()) {
      quiet_looks.store(0, std::memory_order_relaxed);
    } else {
      quiet_looks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  g.page_heap.ReleaseExpired();
}

void Tick() {
  if (init_state.load(std::memory_order_acquire) != 2) return;
  Globals& g = G();
  if (g.page_heap.FreeBackedBytes() >= kReleaseThreadMinBytes) WakeReleaseThread();
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
  // Batches parked in the central lists go back to their spans when nobody takes them
  // (DrainIfIdle), which takes a look of the release thread's once the program stops calling.
  // Asked for once per kParkedLookMs at most: a program that trades its batches between threads
  // all the time (producers and consumers) would otherwise have them drained from under it, 25
  // times a second (prodcons at 8 threads took twice the time).
  static std::atomic<std::uint64_t> last_parked_look_ms{0};
  std::uint64_t last_look = last_parked_look_ms.load(std::memory_order_relaxed);
  if (CentralFreeList::ParkedBytes() >= kReleaseThreadMinBytes &&
      now - last_look >= kParkedLookMs &&
      last_parked_look_ms.compare_exchange_strong(last_look, now, std::memory_order_relaxed))
    WakeReleaseThread();
}

std::size_t ReleaseFreeMemory() {
  EnsureInit();
  Globals& g = G();
  if (tls_cache != &empty_cache) tls_cache->ReleaseAll();
  ReleaseKeptCaches(/*all=*/true);
  for (std::uint32_t cl = 1; cl < kNumClasses; ++cl) {
    if (CentralFreeList::InUse(cl)) g.central[cl].DrainIfIdle(/*all=*/true);
  }
  // A look of the clock's (the release thread's) may have taken batches apart before this call
  // did, and still be giving their spans to the page heap.
  while (CentralFreeList::Returning() != 0)
    sched_yield();
  const PageHeapStats before = g.page_heap.Stats();
  g.page_heap.Trim();
  const PageHeapStats after = g.page_heap.Stats();
  // Other threads may free meanwhile: a counter that grew counts as nothing given back.
  const auto given_back = [](std::size_t was, std::size_t is) { return was > is ? was - is : 0; };
  return given_back(before.free_backed_bytes, after.free_backed_bytes) +
         given_back(before.mapped_bytes, after.mapped_bytes);
}

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
