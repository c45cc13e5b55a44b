// ThreadCache: the top tier, one per thread, no locks, no atomic read-modify-writes.
//
//   heads[class]:    head -> obj -> obj -> ... (linked through the objects' first words)
//   lengths[class], max_lengths[class]
//
// Allocation pops a list, free pushes one; only an empty list (FetchFromCentral) or a full one
// (MakeRoom) leaves the thread. The three arrays are kept apart (not an array of structs) so
// that the fast path addresses each with one scaled-index instruction.
//
// max_length starts at 0 and grows with use: by one object per refill until it reaches the
// class's batch (slow start: a thread that allocates three objects of a class never hoards a
// batch), then by a batch per refill. A list that keeps overflowing past a batch shrinks again.
// Besides the per-list limits, the whole cache has a byte budget (its share of
// kOverallThreadCacheBudget): the fast paths keep `budget_left` exact (one add or subtract of
// the class size), and a free that takes it below zero gives a batch back (OverBudget).
//
// A thread that has no cache yet points at a shared, read-only empty cache (EmptyCache): every
// list empty and full at once, so both fast paths fall into the slow path without a null check.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.h"
#include "size_class.h"

namespace tierpool::TIERPOOL_INTERNAL_NS {

class ThreadCache {
 public:
  constexpr ThreadCache() = default;
  // A real cache (not the empty one): the class sizes and a budget of `budget` bytes.
  void Init(std::int64_t budget);
  // The thread's share of the overall budget changed (threads came or went): take it up.
  void AdoptBudget(std::int64_t budget);
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  TIERPOOL_ALWAYS_INLINE void* head(std::size_t cl) const { return heads_[cl]; }
  TIERPOOL_ALWAYS_INLINE void set_head(std::size_t cl, void* object) { heads_[cl] = object; }
  TIERPOOL_ALWAYS_INLINE std::uint32_t length(std::size_t cl) const { return lengths_[cl]; }
  TIERPOOL_ALWAYS_INLINE std::uint32_t max_length(std::size_t cl) const { return max_lengths_[cl]; }
  // The class sizes, copied into the cache so the fast path reads them at a fixed offset from
  // the cache pointer (no global table, so no GOT load in position-independent code).
  TIERPOOL_ALWAYS_INLINE std::int64_t object_size(std::size_t cl) const { return sizes_[cl]; }
  // Bytes the cache may still take in; negative when over budget. Only the owner writes it.
  TIERPOOL_ALWAYS_INLINE std::int64_t budget_left() const { return budget_left_; }
  TIERPOOL_ALWAYS_INLINE void set_budget_left(std::int64_t n) {
#if defined(TIERPOOL_TSAN)
    __atomic_store_n(&budget_left_, n, __ATOMIC_RELAXED);
#else
    budget_left_ = n;
#endif
  }
  // Only the owning thread writes a length; GetStats reads them from other threads. Under TSan
  // the store is a relaxed atomic (the same mov, but TSan must be told); elsewhere it is plain,
  // so the compiler can fold it into one add to memory.
  TIERPOOL_ALWAYS_INLINE void set_length(std::size_t cl, std::uint32_t n) {
#if defined(TIERPOOL_TSAN)
    __atomic_store_n(&lengths_[cl], n, __ATOMIC_RELAXED);
#else
    lengths_[cl] = n;
#endif
  }

  // The list of `cl` is empty: refill it from the central cache and return one object
  // (nullptr when the OS refuses memory).
  void* FetchFromCentral(std::uint32_t cl);
  // The list of `cl` is full (length == max_length): raise the limit or give a batch back.
  // Afterwards there may still be no room (a list of limit 0).
  void MakeRoom(std::uint32_t cl);
  // A free of class `cl` took budget_left below zero: give objects back until it is not.
  void OverBudget(std::uint32_t cl);
  // Everything back to the central cache (thread exit, tierpool_thread_flush).
  void ReleaseAll();

  std::size_t CachedBytes() const;  // for stats, callable from any thread

 private:
  void ReleaseToCentral(std::uint32_t cl, std::uint32_t n);

  void* heads_[kNumClasses] = {};
  std::uint32_t lengths_[kNumClasses] = {};
  std::uint32_t max_lengths_[kNumClasses] = {};
  std::uint32_t sizes_[kNumClasses] = {};
  std::int64_t budget_left_ = 0;
  std::int64_t budget_ = 0;  // budget_ - budget_left_ = bytes cached
  std::uint8_t overages_[kNumClasses] = {};

 public:
  // Registry of live caches (stats, fork), guarded by the registry lock. Last, so that the hot
  // arrays start at the object's first byte.
  ThreadCache* registry_next = nullptr;
  ThreadCache* registry_prev = nullptr;
};

// The shared empty cache of threads without one (never written).
extern constinit ThreadCache empty_cache;

}  // namespace tierpool::TIERPOOL_INTERNAL_NS
