// Step 05, rung 5: the array of recent frees (WithRecentFrees in ladder.h).
//
// Free() does not push onto the free list: it drops the slot into a plain array (Put()), and
// Allocate() takes from the array first. When the array is full, its older half goes into the list
// at once (MoveRecentToList()); a list that fills up meanwhile goes to the GlobalPool whole (the
// pool's RetireFullList()).
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

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "memory_tools.h"

namespace step05 {

// kSize slots in the array; kFull: the length of a full list (the Traits' kFreeSlotsSize).
template <class Slot, std::size_t kSize, std::size_t kFull>
struct RecentFrees {
  static_assert(kSize >= 2);
  static constexpr std::size_t kCapacity = kSize;

  std::size_t count_ = 0;
  Slot* slots_[kSize];

  bool Empty() const noexcept { return count_ == 0; }
  bool Full() const noexcept { return count_ == kSize; }
  Slot* Take() noexcept { return slots_[--count_]; }  // the newest

  // The pool's Free() of `slot` on `local` (the pool's LocalPool: its recent_ is this array, its
  // freeslots_ the list): a full array first moves its older half into the list, then the slot
  // goes in, closed (poisoned) as the list's Push() closes it.
  template <class Pool, class Local>
  static void Put(Slot* slot, Pool& pool, Local& local) noexcept {
    if (__builtin_expect(local.recent_.Full(), 0)) MoveRecentToList(pool, local);
    tools::CloseSlot(slot, sizeof(Slot));
    local.recent_.slots_[local.recent_.count_++] = slot;
  }

  // The oldest `count` have gone into the list: the rest slide down.
  void DropOldest(std::size_t count) noexcept {
    count_ -= count;
    std::memmove(slots_, slots_ + count, count_ * sizeof(Slot*));
  }

  // list.Push() of slots[0..count), in that order: in one run where the list can (PushRange of
  // the unrolled list, which writes the items into the top node at once).
  template <class List, class Pool>
  static void PushRun(List& list, Slot* const* slots, std::size_t count,
                      const Pool& pool) noexcept {
    if constexpr (requires { list.PushRange(slots, count, pool); }) {
      list.PushRange(slots, count, pool);
    } else {
      for (std::size_t i = 0; i < count; ++i)
        list.Push(slots[i], pool);
    }
  }

  // The oldest `count` frees of `local` go into its list, in the order they were freed; each list
  // that fills up (kFull long) is retired: pool.RetireFullList(local).
  template <class Pool, class Local>
  static void MoveOldest(std::size_t count, Pool& pool, Local& local) noexcept {
    for (std::size_t i = 0; i < count;) {
      const std::size_t length = local.freeslots_.length_;
      // (Longer than full only when retiring failed for want of memory: one at a time then.)
      const std::size_t room = length < kFull ? kFull - length : 1;
      const std::size_t run = std::min(count - i, room);
      PushRun(local.freeslots_, local.recent_.slots_ + i, run, pool);
      i += run;
      if (__builtin_expect(local.freeslots_.length_ >= kFull, 0)) pool.RetireFullList(local);
    }
    local.recent_.DropOldest(count);
  }

  // The array of `local` is full: its older half goes into the list, and the slots that will
  // become nodes at the next move are prefetched now (see above). Out of line: it runs once per
  // kSize / 2 frees, and Put() stays short.
  template <class Pool, class Local>
  __attribute__((noinline)) static void MoveRecentToList(Pool& pool, Local& local) noexcept {
    constexpr std::size_t kMove = kSize / 2;
    constexpr std::size_t kPerNode = decltype(local.freeslots_)::kObjectsPerNode;
    MoveOldest(kMove, pool, local);
    // recent_[i] will be pushed at position length + i: a node where that is a multiple of
    // kPerNode (a hint only: a list handed on in between changes the count).
    const std::size_t used = local.freeslots_.length_ % kPerNode;
    for (std::size_t i = used == 0 ? 0 : kPerNode - used; i < kMove; i += kPerNode)
      __builtin_prefetch(local.recent_.slots_[i], 1);
  }
};

// The plain pool has no array: Free() pushes onto the list.
struct NoRecentFrees {
  static constexpr std::size_t kCapacity = 0;
};

}  // namespace step05
