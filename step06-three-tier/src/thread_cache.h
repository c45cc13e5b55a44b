// ThreadCache: the top tier, one per thread, no locks, no atomic read-modify-writes.
//
//   lists_[class]:  head -> obj -> obj -> ... (linked through the objects' first words)
//                   length, max_length
//
// Allocation pops a list, free pushes one; only an empty list (FetchFromCentral) or a list
// longer than its max_length (ListTooLong) leaves the thread.
//
// max_length starts at 0 and grows with use: by one object per refill until it reaches the
// class's batch (slow start: a thread that allocates three objects of a class never hoards a
// batch), then by a batch per refill. A list that keeps overflowing past a batch shrinks again.
// The byte budget is enforced on the limits, not the contents: the sum of max_length x object
// size over all lists stays under kThreadCacheBudget, so the fast path checks only the length.
// When a list must grow and the budget is spent, every list's limit is halved (Scavenge) and the
// surplus goes back to the central cache.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"
#include "size_class.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

struct FreeList {
  void* head = nullptr;
  // Written only by the owning thread, read by GetStats from others: relaxed atomic stores,
  // which compile to the same plain move as a non-atomic store.
  std::uint32_t length = 0;
  std::uint32_t max_length = 0;

  TIERPOOL_ALWAYS_INLINE void SetLength(std::uint32_t n) {
    __atomic_store_n(&length, n, __ATOMIC_RELAXED);
  }
  std::uint32_t LengthForStats() const { return __atomic_load_n(&length, __ATOMIC_RELAXED); }
};
static_assert(sizeof(FreeList) == 16, "the fast path indexes lists with a shift");

class ThreadCache {
 public:
  ThreadCache() = default;
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  FreeList& list(std::uint32_t cl) { return lists_[cl]; }

  // The list of `cl` is empty: refill it from the central cache and return one object
  // (nullptr when the OS refuses memory).
  void* FetchFromCentral(std::uint32_t cl);
  // The list of `cl` just grew past max_length.
  void ListTooLong(std::uint32_t cl);
  // Everything back to the central cache (thread exit, tierpool_thread_flush).
  void ReleaseAll();

  std::size_t CachedBytes() const;  // for stats, callable from any thread
  std::size_t Allowance() const { return allowance_; }

  // Registry of live caches (stats, fork), guarded by the registry lock.
  ThreadCache* registry_next = nullptr;
  ThreadCache* registry_prev = nullptr;

 private:
  bool TryGrow(std::uint32_t cl, std::uint32_t new_max);
  void Scavenge();
  void ReleaseToCentral(std::uint32_t cl, std::uint32_t n);

  FreeList lists_[kNumClasses];
  std::size_t allowance_ = 0;  // sum of max_length x object size
  std::uint8_t overages_[kNumClasses] = {};
};

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
