// Step 05's ladder: the optimisations of the plain design (PlainPoolTraits, object_pool.h), each
// a Traits on top of the one below, switched on one at a time. The chapter measures each rung,
// and one that was tried and removed:
//   NoRungs                the bottom: every rung off, the plain design's list
//   WithUnrolledList       a free slot holds the addresses of other free slots (unrolled_list.h)
//   WithInterleavedChains  the list's nodes dealt onto 8 chains, each next node prefetched
//   WithItemPrefetch       the items of the node two down prefetched when a node is started
//   WithRecentFrees        frees go into an array first, half of it moved at a time
//                          (recent_frees.h)
// DefaultPoolTraits, ObjectPool<T>'s default, stacks every rung that pays (object_pool.h). The
// pool takes its list and its array from FreeSlotsFor and RecentFreesFor below; the rest of a
// rung's code is its hooks in the pool: the `if constexpr` branches of object_pool.h.
#pragma once

#include <cstddef>
#include <type_traits>

#include "recent_frees.h"
#include "unrolled_list.h"

namespace step05 {

struct PlainPoolTraits;  // object_pool.h
template <class Slot>
struct PlainFreeSlots;  // object_pool.h

// [snippet:ladder]
// The bottom, every rung off (PlainPoolTraits derives from it): one linked free list, pushed at
// every Free.
struct NoRungs {
  static constexpr bool kUnrolledList = false;
  static constexpr std::size_t kChains = 1;
  static constexpr std::size_t kItemsAhead = 0;
  static constexpr std::size_t kRecentSize = 0;
};
// One free slot carries the addresses of up to seven others (64-byte slots).
template <class Base = PlainPoolTraits>
struct WithUnrolledList : Base {
  static constexpr bool kUnrolledList = true;
};
// The list's nodes dealt round-robin onto 8 chains: the node 8 down is prefetched.
template <class Base>
struct WithInterleavedChains : Base {
  static constexpr std::size_t kChains = 8;
};
// Starting a node, the items of the node 2 down are prefetched.
template <class Base>
struct WithItemPrefetch : Base {
  static constexpr std::size_t kItemsAhead = 2;
};
// Frees go into an array of 128 first; its older half is moved into the list at a time.
template <class Base>
struct WithRecentFrees : Base {
  static constexpr std::size_t kRecentSize = 128;
};
// [/snippet]

// What the rungs a Traits switches on make of the pool's LocalPool (object_pool.h): its list, the
// unit it exchanges with a GlobalPool, the plain one or the unrolled one of unrolled_list.h...
template <class Slot, class Traits>
using FreeSlotsFor =
    std::conditional_t<Traits::kUnrolledList,
                       UnrolledFreeSlots<Slot, Traits::kChains, Traits::kItemsAhead>,
                       PlainFreeSlots<Slot>>;
// ...and the free objects it keeps in front of that list (recent_frees.h; none in the plain
// design).
template <class Slot, class Traits>
using RecentFreesFor = std::conditional_t<
    (Traits::kRecentSize > 0),
    RecentFrees<Slot, (Traits::kRecentSize > 0 ? Traits::kRecentSize : 2), Traits::kFreeSlotsSize>,
    NoRecentFrees>;

}  // namespace step05
