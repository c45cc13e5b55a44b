// The allocator's only lock: test-and-test-and-set with a pause, then sched_yield.
//
// Why not std::mutex: the allocator may run before main, inside pthread_atfork handlers and after
// static destructors, and a futex-free lock has no state beyond one word, so the fork hooks can
// take every lock and the child can simply reset them. Why yield: with more threads than cores a
// lock holder may be descheduled, and spinning for a whole time slice would waste it.
#pragma once

#include <sched.h>

#include <atomic>

#include "config.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

class SpinLock {
 public:
  constexpr SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void Lock() {
    if (TIERPOOL_LIKELY(!locked_.exchange(true, std::memory_order_acquire))) return;
    LockSlow();
  }
  void Unlock() { locked_.store(false, std::memory_order_release); }
  // Only for the fork child, where the thread that held the lock no longer exists.
  void ResetAfterFork() { locked_.store(false, std::memory_order_relaxed); }

 private:
  TIERPOOL_NOINLINE void LockSlow() {
    for (int spins = 0;; ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (spins < 64) {
          __builtin_ia32_pause();
          ++spins;
        } else {
          sched_yield();
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  std::atomic<bool> locked_{false};
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
