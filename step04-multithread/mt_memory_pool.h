// Step 04: a pool behind a lock. The book's MTMemoryPool<POOLTYPE, LOCK> ("Efficient C++", ch. 7):
// any single-threaded pool with the book's interface (`void* alloc(size_t)`, `void free(void*)`:
// step02's MemoryPool<T>, step03's pools) made thread-safe by a lock policy (lock_policies.h).
//
// One difference from the published code: the lock is held by a std::lock_guard, so when the
// wrapped pool throws (std::bad_alloc from alloc) the lock is released on the way out. The code
// behind the book's listing calls theLock.lock(), then stPool.alloc(), then theLock.unlock(): an
// exception in between leaves the lock held and the next caller waits forever.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>

#include "lock_policies.h"

namespace step04 {

// [snippet:wrapper]
template <class POOLTYPE, class LOCK>
class MTMemoryPool {
 public:
  template <class... Args>
  explicit MTMemoryPool(Args&&... args) : stPool(std::forward<Args>(args)...) {}
  MTMemoryPool(const MTMemoryPool&) = delete;
  MTMemoryPool& operator=(const MTMemoryPool&) = delete;

  // Every thread comes through here: the lock serializes them all, which is the point of the
  // chapter (and what step05 removes).
  void* alloc(std::size_t size) {
    std::lock_guard<LOCK> guard(theLock);
    return stPool.alloc(size);
  }
  void free(void* doomed) {
    if (doomed == nullptr) return;  // no lock for a no-op
    std::lock_guard<LOCK> guard(theLock);
    stPool.free(doomed);
  }

  // The wrapped pool, for what its own interface offers (statistics, release). Not locked:
  // call it only while no other thread uses the pool.
  POOLTYPE& unlocked_pool() noexcept { return stPool; }

 private:
  // The lock first, on its own cache line when the policy asks for one (SpinLock): the pool's
  // free-list head, which the holder writes, does not share the line the waiters read.
  LOCK theLock;
  POOLTYPE stPool;
};
// [/snippet]

}  // namespace step04
