// The allocator's only lock: one word, taken with a compare-and-swap; a waiter spins briefly,
// then sleeps in the kernel (futex) until the holder unlocks.
//
// Why not std::mutex: the allocator may run before main, inside pthread_atfork handlers and after
// static destructors, and this lock has no state beyond one word, so the fork hooks can take
// every lock and the child can simply reset them. Why sleep: with more threads than cores a lock
// holder may be descheduled; a waiter that spins or yields burns the time slices the holder
// needs to finish (16 threads on 2 cores queued behind one preempted holder of a central list).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "config.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

class SpinLock {
 public:
  constexpr SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void Lock() {
    int expected = kFree;
    if (TIERPOOL_LIKELY(state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                                       std::memory_order_relaxed)))
      return;
    LockSlow();
  }
  void Unlock() {
    if (TIERPOOL_UNLIKELY(state_.exchange(kFree, std::memory_order_release) == kSleepers)) Wake();
  }
  // Only for the fork child, where the thread that held the lock no longer exists.
  void ResetAfterFork() { state_.store(kFree, std::memory_order_relaxed); }

 private:
  enum : int { kFree = 0, kLocked = 1, kSleepers = 2 };  // kSleepers: locked, someone may sleep

  TIERPOOL_NOINLINE void LockSlow() {
    // A holder that is running lets go within a few hundred cycles: spin that long.
    for (int spins = 0; spins < 100; ++spins) {
      __builtin_ia32_pause();
      int expected = kFree;
      if (state_.load(std::memory_order_relaxed) == kFree &&
          state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
    }
    // Then the holder is probably not running (more threads than cores): sleep in the kernel
    // until it unlocks, instead of spinning or yielding through its time slice. Whoever takes
    // the lock from here on marks it kSleepers, so its unlock wakes the next sleeper. The wait
    // fails with EAGAIN when the word changed first: errno is the program's, so it is kept.
    const int saved_errno = errno;
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree)
      syscall(SYS_futex, &state_, FUTEX_WAIT_PRIVATE, kSleepers, nullptr, nullptr, 0);
    errno = saved_errno;
  }
  TIERPOOL_NOINLINE void Wake() {
    const int saved_errno = errno;
    syscall(SYS_futex, &state_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    errno = saved_errno;
  }

  std::atomic<int> state_{kFree};
};

class SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock& lock) : lock_(lock) { lock_.Lock(); }
  ~SpinLockHolder() { lock_.Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock& lock_;
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
