// Step 04's lock policies: what MTMemoryPool<POOLTYPE, LOCK> locks with. Each has lock()/unlock()
// (and try_lock()), so std::lock_guard and std::unique_lock take any of them: locking is RAII and
// an exception leaves no lock held.
//
//   MutexLock   std::mutex: a waiter sleeps in the kernel (futex) and costs a context switch
//   SpinLock    test-and-test-and-set with `pause` and bounded exponential backoff: a waiter burns
//               its core, but wakes within nanoseconds of the unlock; right for short sections
//   NullLock    nothing: the pool is used by one thread only and pays no lock at all
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>

namespace step04 {

inline constexpr std::size_t kCacheLine = 64;

inline void CpuRelax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();  // says "spin-wait" to the core: less power, less memory-order flushing
#endif
}

class MutexLock {
 public:
  void lock() { mutex_.lock(); }
  bool try_lock() { return mutex_.try_lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  std::mutex mutex_;
};

// A cache line of its own (alignas), so the lock word never shares a line with the data of the
// pool it guards or with another lock: every waiter reads this line in a loop.
class alignas(kCacheLine) SpinLock {
 public:
  // [snippet:spin-lock]
  void lock() noexcept {
    // Test-and-set only when a plain load saw the lock free: waiters spin on their cached copy of
    // the line and do not steal it from the holder with writes.
    while (locked_.exchange(true, std::memory_order_acquire)) {
      unsigned backoff = 1;
      while (locked_.load(std::memory_order_relaxed)) {
        if (backoff <= kMaxBackoff) {
          // Exponential backoff: waiters that retry at different times do not all hit the line
          // together when it is released.
          for (unsigned i = 0; i < backoff; ++i)
            CpuRelax();
          backoff *= 2;
        } else {
          // Bounded: past the cap the holder is probably descheduled (more threads than cores),
          // and only giving the CPU away lets it finish.
          std::this_thread::yield();
        }
      }
    }
  }
  // [/snippet]
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr unsigned kMaxBackoff = 64;  // pauses; ~64 x 40 cycles on recent x86
  std::atomic<bool> locked_{false};
};

class NullLock {
 public:
  void lock() noexcept {}
  bool try_lock() noexcept { return true; }
  void unlock() noexcept {}
};

}  // namespace step04
