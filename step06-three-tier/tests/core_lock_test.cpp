// The allocator's lock: mutual exclusion under many more threads than cores, no lost wake-up,
// and a waiter that sleeps rather than burning the processor its holder needs.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "spinlock.h"

namespace {

using namespace tierpool::internal;

double ThreadCpuMs() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_utime.tv_sec * 1e3 + usage.ru_utime.tv_usec / 1e3 + usage.ru_stime.tv_sec * 1e3 +
         usage.ru_stime.tv_usec / 1e3;
}

// 32 threads on a machine of a few cores take the lock 20 000 times each around a
// read-modify-write that is not atomic: a lost update means two holders at once, a hang means a
// sleeper nobody woke.
TEST(Lock, ExcludesAndWakesUnderOversubscription) {
  SpinLock lock;
  std::uint64_t counter = 0;
  constexpr int kThreads = 32;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        SpinLockHolder hold(lock);
        const std::uint64_t seen = counter;
        if (i % 1000 == 0) std::this_thread::yield();  // a holder that loses its processor
        counter = seen + 1;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kRounds);
}

// A waiter that sleeps makes system calls, and a futex wait fails with EAGAIN whenever the word
// changed before the kernel looked: errno must come out of Lock and Unlock as it went in, or a
// malloc that merely waited for a lock changes the program's errno.
TEST(Lock, WaitingAndWakingLeaveErrnoAlone) {
  SpinLock lock;
  constexpr int kThreads = 16;
  constexpr int kRounds = 20000;
  std::atomic<int> changed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        errno = 4242;
        {
          SpinLockHolder hold(lock);
          if (errno != 4242) changed.fetch_add(1, std::memory_order_relaxed);
          if (i % 1000 == 0) std::this_thread::yield();  // a holder that loses its processor
          errno = 4242;
        }
        if (errno != 4242) changed.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(changed.load(), 0);
}

// While the holder keeps the lock for 300 ms, a waiter costs next to no processor time: it is
// asleep in the kernel, not spinning or yielding (a yielding waiter burns most of the 300 ms
// whenever a core is free).
TEST(Lock, WaiterSleepsWhileTheHolderKeepsIt) {
  SpinLock lock;
  lock.Lock();
  std::atomic<bool> waiting{false};
  double waiter_cpu_ms = 0;
  std::thread waiter([&] {
    const double before = ThreadCpuMs();
    waiting.store(true);
    lock.Lock();
    waiter_cpu_ms = ThreadCpuMs() - before;
    lock.Unlock();
  });
  while (!waiting.load())
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  lock.Unlock();
  waiter.join();
  EXPECT_LT(waiter_cpu_ms, 60.0);
}

}  // namespace
