// Step 05, rung 5: the array of recent frees (WithRecentFrees in object_pool.h).
//
// Free() does not push onto the free list: it drops the slot into a plain array, and Allocate()
// takes from the array first. When the array is full, its older half goes into the list at once
// (MoveRecentToList() in object_pool.h).
//
//   recent_ (kSize = 8):  [s1 s2 s3 s4 s5 s6 s7 s8]  full: the next Free moves s1..s4
//                          \_________/
//                           into the list, in order; s5..s8 slide down, the free lands after
//
// Why it pays: a slot that becomes a node of the list is written to, and its line is one the
// thread has not touched since it allocated it, often long ago. Written at Free(), that is a
// cache miss that holds up every later store of the thread (stores leave the core in order). In
// the array, the slots that will become nodes at the next move are known one move ahead, so they
// are prefetched then and have arrived when they are written, kSize / 2 frees later. And a thread
// that frees and allocates in turn never touches the list at all.
#pragma once

#include <cstddef>
#include <cstring>

namespace step05 {

template <class Slot, std::size_t kSize>
struct RecentFrees {
  static_assert(kSize >= 2);
  static constexpr std::size_t kCapacity = kSize;

  std::size_t count_ = 0;
  Slot* slots_[kSize];

  bool Empty() const noexcept { return count_ == 0; }
  bool Full() const noexcept { return count_ == kSize; }
  Slot* Take() noexcept { return slots_[--count_]; }  // the newest
  void Put(Slot* slot) noexcept { slots_[count_++] = slot; }

  // The oldest `count` have gone into the list: the rest slide down.
  void DropOldest(std::size_t count) noexcept {
    count_ -= count;
    std::memmove(slots_, slots_ + count, count_ * sizeof(Slot*));
  }
};

// The plain pool has no array: Free() pushes onto the list.
struct NoRecentFrees {
  static constexpr std::size_t kCapacity = 0;
};

}  // namespace step05
