// Step 05, rungs 2 to 4: the free list that carries the pool's speed.
//
// The plain pool's free list (PlainFreeSlots, object_pool.h) links one free object to the next.
// Objects freed in random order make it a random pointer chase: every Allocate misses the cache
// once, and nothing can overlap the misses, because the next address is inside the line being
// loaded. This list replaces it, chosen by the Traits (WithUnrolledList, WithInterleavedChains,
// WithItemPrefetch in ladder.h), in three rungs:
//
//   unrolled     every node is a free slot that holds, besides its link, the addresses of up to
//                kItemsPerNode other free slots; every node but the top one is full. A 64-byte
//                slot carries eight free objects, and Allocate hands the seven items out without
//                touching them. (An 8-byte slot has room for the link only: no items.)
//   chains       the nodes are dealt round-robin onto kChains chains, and a node links to the next
//                node of its own chain, kChains nodes further down. The node needed kChains nodes
//                from now is known as soon as the current one is, so Pop asks for it at once (a
//                prefetch), kObjectsPerNode x kChains allocations ahead of its use.
//   items-ahead  when Pop starts a full node, it also asks for the items of the node kItemsAhead
//                nodes down: the caller will write to the objects it is handed.
//
// heads_ and length_ are all a list exchange needs, so lists still move between pools in O(1).
//
//   one chain (kChains = 1), 64-byte slots: a node and its 7 items
//     heads_[0] -> [link|i1|i2|..|i7] -> [link|i1|..|i7] -> ... -> null
//   kChains = 4: node n (numbered from the bottom) is on chain n % 4
//     heads_[0] -> node 8 -> node 4 -> node 0
//     heads_[1] -> node 9 -> node 5 -> node 1
//     heads_[2] -> node 6 -> node 2             length_ = 10 nodes' worth: node 9 is the top,
//     heads_[3] -> node 7 -> node 3             popped first; node 5 is then prefetched
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>

#include "memory_tools.h"

namespace step05 {

// Slot is the pool's union of a T and kSlotSize / sizeof(Slot*) links. Every address written into
// a free slot goes through pool.EncodeLink(), and every one read back through pool.FollowLink()
// (hardened mode: encoded and checked; otherwise plain).
template <class Slot, std::size_t kChains, std::size_t kItemsAhead>
struct UnrolledFreeSlots {
  static_assert(kChains > 0);
  static constexpr std::size_t kSlotSize = sizeof(Slot);
  static constexpr std::size_t kPerNode = kSlotSize / sizeof(Slot*);
  static constexpr std::size_t kItemsPerNode = kPerNode - 1;         // links_[1..kPerNode)
  static constexpr std::size_t kObjectsPerNode = kItemsPerNode + 1;  // the node itself too

  Slot* heads_[kChains] = {};  // the top node of each chain
  std::size_t length_ = 0;

  // The nodes are numbered from the bottom of the list; node n is on chain n % kChains.
  static std::size_t ChainOf(std::size_t node) { return node % kChains; }

  template <class Pool>
  void Push(Slot* slot, const Pool& pool) noexcept {
    const std::size_t used = length_ % kObjectsPerNode;
    if (used == 0) {  // empty list or full top node: the freed slot becomes the new top node
      Slot*& head = heads_[ChainOf(length_ / kObjectsPerNode)];
      tools::OpenSlot(slot, sizeof(Slot*));
      slot->links_[0] = pool.EncodeLink(head);
      tools::CloseSlot(slot, kSlotSize);
      head = slot;
    } else {
      Slot* top = heads_[ChainOf((length_ - 1) / kObjectsPerNode)];
      tools::OpenSlot(top, kSlotSize);
      top->links_[used] = pool.EncodeLink(slot);
      tools::CloseSlot(top, kSlotSize);
      // An item slot holds nothing of the list, but it is free all the same: closed, so a use
      // after free of it is reported like one of a node.
      tools::CloseSlot(slot, kSlotSize);
    }
    ++length_;
  }

  // Push() of slots[0..count), in that order: items go into the top node in one run.
  template <class Pool>
  void PushRange(Slot* const* slots, std::size_t count, const Pool& pool) noexcept {
    for (std::size_t i = 0; i < count;) {
      const std::size_t used = length_ % kObjectsPerNode;
      if (used == 0) {
        Push(slots[i++], pool);
        continue;
      }
      Slot* top = heads_[ChainOf((length_ - 1) / kObjectsPerNode)];
      const std::size_t run = std::min(count - i, kObjectsPerNode - used);
      tools::OpenSlot(top, kSlotSize);
      for (std::size_t k = 0; k < run; ++k) {
        top->links_[used + k] = pool.EncodeLink(slots[i + k]);
        tools::CloseSlot(slots[i + k], kSlotSize);
      }
      tools::CloseSlot(top, kSlotSize);
      length_ += run;
      i += run;
    }
  }

  // Pops one slot, left closed (poisoned); second: whether it was a node (its bytes hold links).
  template <class Pool>
  std::pair<Slot*, bool> Pop(const Pool& pool) noexcept {
    --length_;
    const std::size_t node = length_ / kObjectsPerNode;
    const std::size_t items = length_ % kObjectsPerNode;
    Slot*& head = heads_[ChainOf(node)];
    Slot* top = head;
    tools::OpenSlot(top, kSlotSize);
    if constexpr (kItemsAhead > 0 && kItemsPerNode > 0) {
      if (items == kItemsPerNode && node >= kItemsAhead) {
        // First use of a full node: ask for the items of the node kItemsAhead down now (that
        // node was prefetched long ago). Unchecked: a prefetch of a bad address does nothing;
        // links are checked when followed.
        Slot* ahead = heads_[ChainOf(node - kItemsAhead)];
        tools::OpenSlot(ahead, kSlotSize);
        for (std::size_t i = 1; i <= kItemsPerNode; ++i)
          __builtin_prefetch(pool.DecodeLink(ahead->links_[i]), 1);
        tools::CloseSlot(ahead, kSlotSize);
      }
    }
    if (items > 0) {
      Slot* slot = pool.FollowLink(top, top->links_[items]);
      tools::CloseSlot(top, kSlotSize);
      return {slot, false};
    }
    head = pool.FollowLink(top, top->links_[0]);
    if constexpr (kChains > 1) __builtin_prefetch(head, 1);  // needed kChains nodes from now
    tools::CloseSlot(top, kSlotSize);
    return {top, true};
  }

  // A list that comes from a GlobalPool: its top nodes are cold.
  void PrefetchHeads() const noexcept {
    if constexpr (kChains > 1) {
      for (Slot* head : heads_)
        __builtin_prefetch(head, 1);
    }
  }
};

}  // namespace step05
