// Step 05's ladder: the optimisations of the plain design (PlainPoolTraits, object_pool.h), each
// a Traits on top of the one below, switched on one at a time. The chapter measures each rung,
// and one that was tried and removed:
//   WithUnrolledList       a free slot holds the addresses of other free slots (unrolled_list.h)
//   WithInterleavedChains  the list's nodes dealt onto 8 chains, each next node prefetched
//   WithItemPrefetch       the items of the node two down prefetched when a node is started
//   WithRecentFrees        frees go into an array first, half of it moved at a time
//                          (recent_frees.h)
// DefaultPoolTraits, ObjectPool<T>'s default, stacks every rung that pays (object_pool.h).
#pragma once

#include <cstddef>

namespace step05 {

struct PlainPoolTraits;  // object_pool.h

// [snippet:ladder]
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

}  // namespace step05
